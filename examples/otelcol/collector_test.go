package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/ustack/ustack/examples/otelcol/internal/coreprofile"
	"github.com/ustack/ustack/internal/otlptest"
	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/otlpexport"
)

// bounded is how long a step of the test may take on a busy machine:
// building the Collector the first time, its start, a delivery.
const bounded = 15 * time.Minute

// build builds the command pkg of the module in moduleDir into dir.
func build(t *testing.T, dir, name, moduleDir, pkg string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	ctx, cancel := context.WithTimeout(context.Background(), bounded)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = moduleDir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// collector is a running otelcol-ustack: the OTLP receiver on 127.0.0.1
// (gRPC and HTTP, free ports), the profiles feature gate on, the file
// exporter writing each request it takes as one OTLP/JSON line to out.
type collector struct {
	cmd       *exec.Cmd
	grpc      string // grpc://127.0.0.1:PORT
	http      string // http://127.0.0.1:PORT
	metrics   string // http://127.0.0.1:PORT/metrics, its own metrics
	out       string
	log       *bytes.Buffer
	exited    chan error
	stoppedOK bool
}

// With symfs, the pipeline runs ustack's symbolizer with that root first.
func startCollector(t *testing.T, bin, dir, symfs string) *collector {
	t.Helper()
	return startCollectorOn(t, bin, dir, symfs, freePort(t), freePort(t), "profiles.jsonl")
}

// startCollectorOn starts one on the ports given, writing to the file out
// in dir; its own metrics are served on a free port.
func startCollectorOn(t *testing.T, bin, dir, symfs string, gp, hp int, out string) *collector {
	t.Helper()
	mp := freePort(t)
	c := &collector{grpc: fmt.Sprintf("grpc://127.0.0.1:%d", gp), http: fmt.Sprintf("http://127.0.0.1:%d", hp),
		metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", mp),
		out:     filepath.Join(dir, out), log: &bytes.Buffer{}, exited: make(chan error, 1)}
	cfg := filepath.Join(dir, out+".yaml")
	processors, pipeline := "", ""
	if symfs != "" {
		processors = "processors:\n  ustack_symbolizer:\n    symfs: " + symfs
		pipeline = "      processors: [ustack_symbolizer]"
	}
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%d
      http:
        endpoint: 127.0.0.1:%d
exporters:
  file:
    path: %s
    format: json
    flush_interval: 100ms
%s
service:
  telemetry:
    metrics_address: 127.0.0.1:%d
  pipelines:
    profiles:
      receivers: [otlp]
%s
      exporters: [file]
`, gp, hp, c.out, processors, mp, pipeline)), 0o644))
	c.cmd = exec.Command(bin, "--config", cfg, "--feature-gates", "service.profilesSupport")
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	require.NoError(t, c.cmd.Start())
	go func() { c.exited <- c.cmd.Wait() }()
	t.Cleanup(func() { c.stop(t) })
	// Ready when its HTTP port takes connections.
	deadline := time.Now().Add(bounded)
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", hp), time.Second)
		if err == nil {
			conn.Close()
			break
		}
		select {
		case err := <-c.exited:
			t.Fatalf("the Collector exited before it listened: %v\n%s", err, c.log)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Collector did not listen on 127.0.0.1:%d in %v\n%s", hp, bounded, c.log)
		}
	}
	return c
}

// stop ends the Collector with SIGTERM (SIGKILL if it does not exit).
func (c *collector) stop(t *testing.T) {
	if c.stoppedOK || c.cmd.Process == nil {
		return
	}
	c.stoppedOK = true
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(time.Minute):
		c.cmd.Process.Kill()
		<-c.exited
		t.Errorf("the Collector did not stop on SIGTERM in a minute\n%s", c.log)
	}
}

// received waits until the file exporter has written n requests and
// returns them, in the order they arrived.
func (c *collector) received(t *testing.T, n int) []pprofile.Profiles {
	t.Helper()
	deadline := time.Now().Add(bounded)
	for {
		var got []pprofile.Profiles
		if f, err := os.Open(c.out); err == nil {
			sc := bufio.NewScanner(f)
			sc.Buffer(nil, 64<<20)
			for sc.Scan() {
				var u pprofile.JSONUnmarshaler
				p, err := u.UnmarshalProfiles(sc.Bytes())
				if err != nil {
					break // a line being written
				}
				got = append(got, p)
			}
			f.Close()
		}
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Collector wrote %d of %d requests in %v\n%s", len(got), n, bounded, c.log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func folded(t *testing.T, out string) map[string]uint64 {
	t.Helper()
	m, err := otlptest.ParseFolded(out)
	require.NoError(t, err)
	return m
}

var root = filepath.Join("..", "..")

// recordings are committed recordings: the README's hello (a uprobe
// whose stacks gdb checked), perf's cpu-clock dwarf.data, and a kprobe
// recorded in the arm64 kernel lab (kernel frames from its archive's
// kallsyms).
var recordings = []struct {
	name string
	args []string
}{
	{"hello", []string{"--kallsyms", "-", filepath.Join(root, "testdata", "recordings", "hello", "perf.data")}},
	{"dwarf", []string{"--kallsyms", "-", "--archive", "-", filepath.Join(root, "perfdata", "testdata", "dwarf.data")}},
	{"arm64 kprobe", []string{"--archive", filepath.Join(root, "testdata", "recordings", "arm64-lab", "lab.ustack"),
		filepath.Join(root, "testdata", "recordings", "arm64-lab", "kprobe.data")}},
}

// TestCollectorReceivesReports builds this module's Collector and ustack,
// starts the Collector on 127.0.0.1 and sends it each recording with
// ustack report --otlp-endpoint, over OTLP/HTTP and over OTLP/gRPC: what
// the Collector's file exporter wrote, read back with pdata's pprofile,
// has the stacks of ustack report --format folded of the same recording,
// sample for sample and frame for frame.
func TestCollectorReceivesReports(t *testing.T) {
	dir := t.TempDir()
	colBin := build(t, dir, "otelcol-ustack", ".", ".")
	ustack := build(t, dir, "ustack", root, "./cmd/ustack") // with ustack's own go.mod
	col := startCollector(t, colBin, dir, "")
	home := t.TempDir()
	env := append(os.Environ(), "HOME="+home, "XDG_CACHE_HOME="+filepath.Join(home, ".cache"), "DEBUGINFOD_URLS=")
	report := func(args ...string) (string, string) {
		t.Helper()
		cmd := exec.Command(ustack, append([]string{"report", "--no-debuginfod"}, args...)...)
		cmd.Env = env
		var out, errs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errs
		require.NoError(t, cmd.Run(), "ustack report %s\n%s", strings.Join(args, " "), errs.String())
		return out.String(), errs.String()
	}
	var want []map[string]uint64
	var names []string
	for _, rec := range recordings {
		out, _ := report(append([]string{"--format", "folded"}, rec.args...)...)
		f := folded(t, out)
		for _, endpoint := range []string{col.http, col.grpc} {
			_, errs := report(append([]string{"--otlp-endpoint", endpoint}, rec.args...)...)
			require.Contains(t, errs, "bytes of OTLP profiles to "+endpoint)
			want = append(want, f)
			names = append(names, rec.name+" to "+endpoint)
		}
	}
	got := col.received(t, len(want))
	require.Len(t, got, len(want), "one request per report")
	for i := range want {
		r, err := otlptest.Folded(got[i])
		require.NoError(t, err, names[i])
		assert.Equal(t, want[i], r.Stacks, names[i])
	}
	col.stop(t)
}

// TestCollectorSymbolizes runs ustack's symbolizer in the Collector's
// pipeline: ustack report's profile of a core dump, its native frames
// stripped of their names as the OpenTelemetry eBPF profiler sends them,
// is sent over OTLP/HTTP; what the file exporter wrote names every
// stripped location as ustack report did.
func TestCollectorSymbolizes(t *testing.T) {
	dir := t.TempDir()
	colBin := build(t, dir, "otelcol-ustack", ".", ".")
	p, symfs := coreprofile.Of(t, filepath.Join(root, "testdata"), "x86_64/threads")
	want := otlptest.StripNative(p)
	require.NotEmpty(t, want)
	var m pprofile.ProtoMarshaler
	stripped, err := m.MarshalProfiles(p)
	require.NoError(t, err)

	col := startCollector(t, colBin, dir, symfs)
	_, err = otlpexport.Send(context.Background(), otlpexport.Config{Endpoint: col.http, Timeout: time.Minute}, stripped)
	require.NoError(t, err)
	got := col.received(t, 1)[0]
	d := got.Dictionary()
	// The file exporter's request has its own dictionary: find each
	// stripped location by its address and mapping start.
	type at struct{ addr, start uint64 }
	byAddr := map[at][]string{}
	for _, loc := range d.LocationTable().All() {
		byAddr[at{loc.Address(), d.MappingTable().At(int(loc.MappingIndex())).MemoryStart()}] = otlptest.LineNames(d, loc)
	}
	pd := p.Dictionary()
	for i, names := range want {
		loc := pd.LocationTable().At(i)
		k := at{loc.Address(), pd.MappingTable().At(int(loc.MappingIndex())).MemoryStart()}
		assert.Equal(t, names, byAddr[k], "location at %#x", loc.Address())
	}
	// Its counts in the Collector's own metrics: the 24 locations of
	// the threads core named (13 in the program, 11 in libc: gdb's
	// frames in threads.json), none unnamed, the two mappings' address
	// spaces made once.
	assert.Equal(t, map[string]float64{
		"ustack_symbolizer_locations_named_total":      24,
		"ustack_symbolizer_mapping_cache_misses_total": 2,
		"ustack_symbolizer_mapping_cache_hits_total":   22,
		"ustack_symbolizer_objects_open":               2,
	}, col.scrape(t, "ustack_symbolizer_"))
	col.stop(t)
}

var reasonLabel = regexp.MustCompile(`[{,]reason="([^"]*)"`)

// scrape reads the Collector's own metrics once (Prometheus's text
// format) and returns the values of those whose name begins with
// prefix, by name, with {reason=...} when they have that label.
func (c *collector) scrape(t *testing.T, prefix string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(c.metrics)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	got := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		require.NoError(t, err, line)
		name := line[:strings.IndexAny(line, "{ ")]
		if m := reasonLabel.FindStringSubmatch(line[:sp]); m != nil {
			name += "{reason=" + m[1] + "}"
		}
		got[name] += v
	}
	require.NoError(t, sc.Err())
	return got
}

// busySrc spins for six seconds in main -> leaf (no frame pointers: the
// stacks need CFI), asking the clock between rounds; it creates the file
// its argument names, if any, once it runs.
const busySrc = `#include <stdio.h>
#include <time.h>
static volatile unsigned long sink;
__attribute__((noinline)) void leaf(void) { for (int i = 0; i < 1000; i++) sink += i; }
int main(int argc, char **argv) {
	struct timespec t0, t;
	if (argc > 1) fclose(fopen(argv[1], "w"));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do { leaf(); clock_gettime(CLOCK_MONOTONIC, &t); } while (t.tv_sec - t0.tv_sec < 6);
	return 0;
}
`

// TestCollectorAgentAcrossRestart runs ustack record --unwind as an agent
// (500ms intervals, OTLP/gRPC) against the Collector, stops the Collector
// two seconds in and starts a new one on the same ports a second and a
// half later: the intervals of the outage are kept and retried, and what
// the two Collectors wrote together has the stacks of ustack report
// --format folded of the recording the agent wrote, sample for sample
// and frame for frame; or, if some interval could not be kept, the agent
// says how many it dropped.
func TestCollectorAgentAcrossRestart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the agent records with perf_event_open as root here; not root")
	}
	dir := t.TempDir()
	colBin := build(t, dir, "otelcol-ustack", ".", ".")
	ustack := build(t, dir, "ustack", root, "./cmd/ustack")
	prog := testprog.Build(t, dir, "busy.c", busySrc, "-O2", "-g", "-fomit-frame-pointer")
	gp, hp := freePort(t), freePort(t)
	first := startCollectorOn(t, colBin, dir, "", gp, hp, "first.jsonl")

	home := t.TempDir()
	data := filepath.Join(dir, "agent.data")
	cmd := exec.Command(ustack, "record", "--unwind", "-F", "200", "--otlp-endpoint", first.grpc,
		"--otlp-interval", "500ms", "-o", data, "--", prog)
	cmd.Env = append(os.Environ(), "HOME="+home, "DEBUGINFOD_URLS=")
	var errs bytes.Buffer
	cmd.Stderr = &errs
	require.NoError(t, cmd.Start())
	time.Sleep(2 * time.Second)
	first.stop(t)
	time.Sleep(1500 * time.Millisecond)
	second := startCollectorOn(t, colBin, dir, "", gp, hp, "second.jsonl")
	if err := cmd.Wait(); err != nil {
		t.Skipf("ustack record cannot record here: %v: %s", err, errs.String())
	}
	m := regexp.MustCompile(`\[ ustack record: sent (\d+) of (\d+) profiles`).FindStringSubmatch(errs.String())
	require.NotNil(t, m, errs.String())
	sent, _ := strconv.Atoi(m[1])
	t.Logf("the agent said:\n%s", errs.String())

	rep := exec.Command(ustack, "report", "--no-debuginfod", "--format", "folded", data)
	rep.Env = cmd.Env
	out, err := rep.Output()
	require.NoError(t, err)
	want := folded(t, string(out))

	got := map[string]uint64{}
	n := 0
	for _, c := range []*collector{first, second} {
		var reqs []pprofile.Profiles
		if c == first {
			reqs = c.received(t, 0)
		} else {
			reqs = c.received(t, sent-n)
		}
		n += len(reqs)
		for _, p := range reqs {
			r, err := otlptest.Folded(p)
			require.NoError(t, err)
			for k, v := range r.Stacks {
				got[k] += v
			}
		}
	}
	assert.Equal(t, sent, n, "every profile the agent sent was written")
	if strings.Contains(errs.String(), "dropped") {
		t.Logf("the agent dropped intervals: %s", errs.String())
		return
	}
	assert.Equal(t, want, got)
	second.stop(t)
}

// TestCollectorAgentSIGINT ends an agent with SIGINT a second after the
// recorded program started, in the agent's first 10-second interval: that
// interval is sent before ustack exits,
// and the Collector wrote the stacks of ustack report --format folded of
// the recording, sample for sample.
func TestCollectorAgentSIGINT(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the agent records with perf_event_open as root here; not root")
	}
	dir := t.TempDir()
	colBin := build(t, dir, "otelcol-ustack", ".", ".")
	ustack := build(t, dir, "ustack", root, "./cmd/ustack")
	prog := testprog.Build(t, dir, "busy.c", busySrc, "-O2", "-g", "-fomit-frame-pointer")
	col := startCollector(t, colBin, dir, "")
	data := filepath.Join(dir, "agent.data")
	started := filepath.Join(dir, "started")
	cmd := exec.Command(ustack, "record", "--unwind", "-F", "200", "--otlp-endpoint", col.http,
		"--otlp-interval", "10s", "-o", data, "--", prog, started)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "DEBUGINFOD_URLS=")
	var errs bytes.Buffer
	cmd.Stderr = &errs
	require.NoError(t, cmd.Start())
	deadline := time.Now().Add(bounded)
	for {
		if _, err := os.Stat(started); err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "the recorded program did not start in %v:\n%s", bounded, errs.String())
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	err := cmd.Wait()
	if !strings.Contains(errs.String(), "sent 1 of 1 profiles") {
		t.Fatalf("the agent did not send its interval on SIGINT (%v):\n%s", err, errs.String())
	}
	rep := exec.Command(ustack, "report", "--no-debuginfod", "--format", "folded", data)
	rep.Env = cmd.Env
	out, err := rep.Output()
	require.NoError(t, err)
	r, err := otlptest.Folded(col.received(t, 1)[0])
	require.NoError(t, err)
	assert.Equal(t, folded(t, string(out)), r.Stacks)
	col.stop(t)
}
