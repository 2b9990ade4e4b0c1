package report

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/minidump"
)

// TestCrashpadMinidump reads a minidump Crashpad wrote: Debian's chromium,
// one of its renderers crashed (chrome://crash: SIGSEGV in chromium's own
// code), whose crash handler (chrome_crashpad_handler) writes the dump.
// Crashpad dumps no /proc/PID/maps and names libraries by soname
// ("libc.so.6"): before, every thread's stack was its first frame
// (no_mapping). Its truth is lldb 15's bt all of the same file (the
// objects found through target.exec-search-paths): thread for thread, the
// report's machine frames are lldb's in order, as deep as lldb goes, and
// frame 0 is lldb's. The libraries are named by the paths the module
// list's build-ids were found at.
func TestCrashpadMinidump(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("%s is not installed (Debian package chromium): no Crashpad minidump is written", chromiumPath)
	}
	lldb, err := exec.LookPath("lldb-15")
	if err != nil {
		t.Skip("lldb-15 is not installed (Debian package lldb-15): the Crashpad minidump's truth is lldb's")
	}
	dmp := crashpadDump(t)
	d, err := minidump.Open(dmp, nil)
	require.NoError(t, err)
	bare := 0
	for _, m := range d.Modules {
		if !strings.Contains(m.Name, "/") {
			bare++
		}
	}
	d.Close()
	require.Greater(t, bare, 10, "Crashpad names libraries without a directory; this dump's modules changed")

	opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}}
	js, sum := coreReport(t, dmp, "json", opts)
	report := testprog.JSONLines[coreSample](t, js)
	require.NotEmpty(t, report)
	assert.Zero(t, sum.Stops["no_mapping"], "stops: %v", sum.Stops)
	for path, why := range sum.Missing {
		assert.True(t, path == "[vdso]" || !strings.Contains(why, "not found"), "%s: %s", path, why)
	}

	search := []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", filepath.Dir(chromiumBinary())}
	threads, first, out := lldbBacktraces(t, lldb, search, dmp, 3*testprog.Timeout)
	assert.Contains(t, first, "signal SIGSEGV", "lldb's first thread is the signalled one")
	require.Len(t, threads, len(report), "lldb's threads: %s", out)
	// Every thread is the process's: its pid (MiscInfo's process id,
	// with no /proc/PID/status in the dump) is its main thread's id.
	// Before, each thread's pid was its own id.
	mainThread := false
	for _, s := range report {
		assert.Equal(t, report[0].Pid, s.Pid, "tid %d", s.Tid)
		mainThread = mainThread || s.Tid == s.Pid
	}
	assert.True(t, mainThread, "no thread's id is the pid %d", report[0].Pid)
	assert.Equal(t, "SIGSEGV", str(report[0].Signal))
	deeper := 0
	for i, s := range report {
		var pcs []string
		for _, f := range s.Frames {
			if !f.Inlined && f.How != "tailcall" {
				pcs = append(pcs, f.PC)
			}
		}
		ours, theirs := dedup(pcs), dedup(threads[i])
		require.NotEmpty(t, theirs, "tid %d: lldb has no frame", s.Tid)
		assert.Equal(t, theirs[0], ours[0], "tid %d: frame 0", s.Tid)
		// lldb lists an inlined function's frame at an address of its
		// own, and in chromium's code without CFI sometimes a frame at
		// an address of data (.rodata, .bss) its heuristics took for a
		// return address; the report's machine frames down to lldb's
		// last are lldb's, in order. The report may go deeper (lldb
		// stops at the first frame its unwinder cannot step out of).
		last := theirs[len(theirs)-1]
		n := 0
		for n < len(ours) && ours[n] != last {
			n++
		}
		if !assert.Less(t, n, len(ours), "tid %d: lldb's last frame %s is not in the report's %v", s.Tid, last, ours) {
			continue
		}
		assert.True(t, subsequence(ours[:n+1], theirs), "tid %d: the report's machine frames %v are not lldb's %v in order", s.Tid, ours[:n+1], theirs)
		if n+1 < len(ours) {
			deeper++
		}
		for _, f := range s.Frames {
			if m := str(f.Module); m != "" && !strings.HasPrefix(m, "[") {
				assert.True(t, filepath.IsAbs(m), "tid %d: frame %s in module %q: no file was found for it", s.Tid, f.PC, m)
			}
		}
	}
	t.Logf("%d threads, each the frames of lldb's bt all; %d go deeper than lldb", len(report), deeper)

	// ustack minidump of it reports the same: with no /proc/PID/maps to
	// keep, it writes none (before, lines made of the modules claimed
	// read-only mappings of whole objects, and every stack was one frame).
	c, err := OpenCore(dmp, opts)
	require.NoError(t, err)
	again := filepath.Join(t.TempDir(), "again.dmp")
	_, err = WriteMinidump(again, c, opts, minidump.WriteOptions{})
	c.Close()
	require.NoError(t, err)
	text, _ := coreReport(t, dmp, "text", opts)
	textAgain, _ := coreReport(t, again, "text", opts)
	assert.Equal(t, string(text), string(textAgain), "the report of ustack's minidump of the Crashpad dump")
}

// chromiumBinary is the program /usr/bin/chromium (a shell script) runs.
func chromiumBinary() string {
	if b, err := os.ReadFile(chromiumPath); err == nil && bytes.HasPrefix(b, []byte("#!")) {
		return "/usr/lib/chromium/chromium"
	}
	return chromiumPath
}

// crashpadDump runs chromium headless with its crash reporter on, crashes
// a renderer (chrome://crash), and returns the minidump Crashpad wrote of
// it. Chromium, its crash handlers (which leave its process group) and
// everything they wrote are gone when the test ends.
func crashpadDump(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	home, data := filepath.Join(dir, "home"), filepath.Join(dir, "profile")
	require.NoError(t, os.MkdirAll(home, 0o700))
	ctx, cancel := context.WithTimeout(context.Background(), 3*testprog.Timeout)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, chromiumBinary(), "--headless=new", "--no-sandbox", "--enable-crash-reporter",
		"--no-first-run", "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "--user-data-dir="+data, "about:blank")
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Its output goes to a file (the descriptor itself: no goroutine of
	// ours copies it while the test reads it).
	logPath := filepath.Join(dir, "chromium.log")
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	require.NoError(t, err)
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	chromiumLog := func() []byte {
		b, _ := os.ReadFile(logPath)
		return b
	}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		killMatching(dir) // the crash handlers
	})
	// Its DevTools server, on a free port of 127.0.0.1 that it names in
	// DevToolsActivePort, opens chrome://crash: a renderer dereferences
	// a bad pointer (SIGSEGV) in its main thread.
	port := ""
	for deadline := time.Now().Add(3 * testprog.Timeout); port == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if b, err := os.ReadFile(filepath.Join(data, "DevToolsActivePort")); err == nil {
			port, _, _ = strings.Cut(string(b), "\n")
		}
	}
	require.NotEmpty(t, port, "chromium wrote no DevToolsActivePort: %s", chromiumLog())
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://127.0.0.1:"+port+"/json/new?chrome://crash", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	pending := filepath.Join(home, ".config", "chromium", "Crash Reports", "pending")
	// A chromium that no longer crashes on chrome://crash opened this way
	// still writes a dump of a renderer killed with SIGSEGV.
	killed := false
	for deadline := time.Now().Add(3 * testprog.Timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if !killed && time.Until(deadline) < 2*testprog.Timeout {
			killed = true
			if pid := processWith(data, "--type=renderer"); pid != 0 {
				t.Logf("no dump after chrome://crash: renderer %d killed with SIGSEGV", pid)
				syscall.Kill(pid, syscall.SIGSEGV)
			}
		}
		if m, _ := filepath.Glob(filepath.Join(pending, "*.dmp")); len(m) > 0 {
			// Moved to pending/ once written; lldb's target create
			// takes no path with spaces.
			b, err := os.ReadFile(m[0])
			require.NoError(t, err)
			dmp := filepath.Join(dir, "renderer.dmp")
			require.NoError(t, os.WriteFile(dmp, b, 0o600))
			return dmp
		}
	}
	t.Fatalf("Crashpad wrote no minidump in %s: %s", pending, chromiumLog())
	return ""
}

// processWith returns a process whose command line holds both strings.
func processWith(a, b string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cl, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if bytes.Contains(cl, []byte(a)) && bytes.Contains(cl, []byte(b)) {
			return pid
		}
	}
	return 0
}

// killMatching kills every process whose command line holds s.
func killMatching(s string) {
	for range 100 {
		pid := processWith(s, s)
		if pid == 0 || syscall.Kill(pid, syscall.SIGKILL) != nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
