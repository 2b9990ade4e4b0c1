//go:build linux

// Package debuginfodtest runs Debian's debuginfod for tests: inside a
// private network namespace where only loopback exists (Debian 12's
// debuginfod 0.188 cannot be told to listen on loopback alone), over a
// directory of the test's own files, on a free port of 127.0.0.1, stopped
// by the process id it started. The server's /metrics counters let a test
// count the requests on the server's side.
//
// A test calls InNetns first: outside the namespace it runs the same test
// again in a copy of the test binary under `unshare -n` and reports that
// run's outcome; inside, it brings loopback up and returns true.
package debuginfodtest

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// netnsEnv marks the copy of the test binary that runs inside the network
// namespace.
const netnsEnv = "USTACK_DEBUGINFOD_NETNS"

// InNetns returns true when the test runs inside the private network
// namespace, with loopback up. Outside, it runs the test (by its top-level
// name) again inside one and returns false once that run has passed; it
// fails or skips t as that run did. tools are the commands the test needs
// (debuginfod and ip are always needed); it skips when one is missing.
func InNetns(t *testing.T, tools ...string) bool {
	t.Helper()
	if os.Getenv(netnsEnv) == "" {
		reexec(t)
		return false
	}
	for _, tool := range append([]string{"debuginfod", "ip"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (Debian packages debuginfod, iproute2, and those of %v)", tool, tools)
		}
	}
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Skipf("cannot bring up loopback in the namespace: %v %s", err, out)
	}
	return true
}

func reexec(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare (util-linux) not installed: cannot make a private network namespace")
	}
	if out, err := exec.Command("unshare", "-n", "true").CombinedOutput(); err != nil {
		t.Skipf("unshare -n not permitted here (%v: %s): the server must not listen outside a private network namespace", err, strings.TrimSpace(string(out)))
	}
	name := strings.SplitN(t.Name(), "/", 2)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "-n", "--", os.Args[0], "-test.run=^"+name+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), netnsEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in the network namespace:\n%s", out)
	if err != nil {
		t.Fatalf("%s in the namespace: %v", name, err)
	}
	if strings.Contains(string(out), "--- SKIP: "+name) {
		t.Skip("skipped in the namespace (see the log)")
	}
}

// Server is a debuginfod process the test started.
type Server struct {
	// Base is the server's URL, http://127.0.0.1:PORT.
	Base string
	cmd  *exec.Cmd
}

// Start starts debuginfod over the files of dir (-F), with its database
// and log in work, and stops it when the test ends.
func Start(t *testing.T, dir, work string) *Server {
	t.Helper()
	port := freePort(t)
	log, err := os.Create(filepath.Join(work, "debuginfod.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("debuginfod", "-F", dir, "-p", strconv.Itoa(port), "-d", filepath.Join(work, "db.sqlite"), "-t", "0", "-g", "0")
	cmd.Stdout, cmd.Stderr = log, log
	// Should this test process die before its cleanup, so does the server.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting debuginfod: %v", err)
	}
	s := &Server{Base: "http://127.0.0.1:" + strconv.Itoa(port), cmd: cmd}
	t.Cleanup(func() {
		s.Stop()
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("debuginfod log:\n%s", b)
		}
	})
	return s
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Stop stops the server (SIGTERM, SIGKILL after 10s) and waits for it. It
// may be called more than once.
func (s *Server) Stop() {
	if s.cmd.ProcessState != nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
}

// WaitScanned waits until the server has scanned n files, for as long as
// a busy machine may take to start it and scan them (two minutes).
func (s *Server) WaitScanned(t *testing.T, n int) {
	t.Helper()
	const wait = 2 * time.Minute
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if m, err := s.Metrics(); err == nil && m[`scanned_files_total{source="file"}`] >= n &&
			m[`thread_work_pending{role="scan"}`] == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("debuginfod did not scan %d files within %v", n, wait)
}

// Metric returns one of the server's counters, such as
// `http_requests_total{type="debuginfo"}`.
func (s *Server) Metric(t *testing.T, name string) int {
	t.Helper()
	m, err := s.Metrics()
	if err != nil {
		t.Fatalf("debuginfod metrics: %v", err)
	}
	return m[name]
}

// Metrics reads the server's Prometheus counters.
func (s *Server) Metrics() (map[string]int, error) {
	resp, err := http.Get(s.Base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, errors.New(resp.Status)
	}
	m := map[string]int{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		if f, err := strconv.ParseFloat(val, 64); err == nil {
			m[name] = int(f)
		}
	}
	return m, sc.Err()
}
