package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// buildUstack builds this command into a temporary directory, to run as
// a user does.
func buildUstack(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not installed: cannot build ustack")
	}
	bin := filepath.Join(t.TempDir(), "ustack")
	cmd := exec.Command(gobin, "build", "-o", bin, ".")
	// The go command's build cache where the user keeps it, not in the
	// tests' own cache directory (TestMain).
	cmd.Env = os.Environ()
	if userCacheHomeSet {
		cmd.Env = append(cmd.Env, "XDG_CACHE_HOME="+userCacheHome)
	} else {
		cmd.Env = append(cmd.Env, "XDG_CACHE_HOME=")
	}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// perfArchiveRecording lays out the bundled hello recording as perf leaves
// one with perf archive's tarball beside it: perf.data and
// perf.data.tar.gz (the objects in perf's build-id cache layout, which
// ustack unpacks into a temporary directory), no .ustack archive.
func perfArchiveRecording(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	data := filepath.Join(dir, "perf.data")
	for _, ext := range []string{"", ".ustack"} {
		b, err := os.ReadFile(helloData + ext)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(data+ext, b, 0o644))
	}
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"archive", data}, &out, &errb), errb.String())
	require.FileExists(t, data+".tar.gz")
	require.NoError(t, os.Remove(data+".ustack"))
	return data
}

// leftovers lists what is left in a private TMPDIR.
func leftovers(t *testing.T, tmp string) []string {
	t.Helper()
	ents, err := os.ReadDir(tmp)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestNoTempLeftovers runs the built ustack on a recording with a perf
// archive tarball beside it, which it unpacks into a directory under
// TMPDIR (private to the test), and ends it the ways a user does: the
// reader of its output goes away (ustack report | head), Ctrl-C, kill,
// a closed terminal. Each time the directory is gone once the process is,
// and the process ends by the signal it got, as it would without the
// directory to remove. A normal run removes it too.
func TestNoTempLeftovers(t *testing.T) {
	bin := buildUstack(t)
	data := perfArchiveRecording(t)
	start := func(t *testing.T, tmp string, stdout *os.File, args ...string) *exec.Cmd {
		cmd := exec.Command(bin, append([]string{"report", "-i", data, "--kallsyms", "-"}, args...)...)
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "HOME="+t.TempDir(), "DEBUGINFOD_URLS=")
		cmd.Stdout = stdout
		var errb bytes.Buffer
		cmd.Stderr = &errb
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { cmd.Process.Kill() })
		return cmd
	}

	t.Run("complete", func(t *testing.T) {
		tmp := t.TempDir()
		cmd := exec.Command(bin, "report", "-i", data, "--kallsyms", "-")
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "HOME="+t.TempDir(), "DEBUGINFOD_URLS=")
		out, err := cmd.Output()
		require.NoError(t, err)
		// The objects came from the tarball: the stacks are named.
		assert.Contains(t, string(out), "greet+0x")
		assert.Empty(t, leftovers(t, tmp))
	})

	t.Run("SIGPIPE", func(t *testing.T) {
		tmp := t.TempDir()
		r, w, err := os.Pipe()
		require.NoError(t, err)
		r.Close() // the reader is gone before the first line
		cmd := start(t, tmp, w)
		w.Close()
		err = cmd.Wait()
		ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
		assert.True(t, ws.Signaled() && ws.Signal() == syscall.SIGPIPE, "ended by %v (%v); want SIGPIPE", cmd.ProcessState, err)
		assert.NotContains(t, cmd.Stderr.(*bytes.Buffer).String(), "broken pipe")
		assert.Empty(t, leftovers(t, tmp))
	})

	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(unix.SignalName(sig), func(t *testing.T) {
			if ignoredHere(t, sig) {
				// nohup go test ./...: ustack inherits the ignored
				// SIGHUP and keeps it ignored, as it should.
				t.Skipf("%v is ignored in this test's environment (nohup?): ustack, which inherits that, rightly keeps it ignored", sig)
			}
			tmp := t.TempDir()
			// A pipe of one page that nobody reads: the flame graph
			// (some 10 KB) fills it, and ustack waits, its
			// temporary directory made, until the signal.
			r, w, err := os.Pipe()
			require.NoError(t, err)
			defer r.Close()
			_, err = unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, 4096)
			require.NoError(t, err)
			cmd := start(t, tmp, w, "--format", "flamegraph")
			w.Close()
			var first [1]byte
			_, err = io.ReadFull(r, first[:])
			require.NoError(t, err, "no output")
			require.Eventually(t, func() bool {
				return len(leftovers(t, tmp)) == 1 && strings.HasPrefix(leftovers(t, tmp)[0], "ustack-perf-archive-")
			}, 10*time.Second, 10*time.Millisecond, "the unpacked tarball is not in TMPDIR: %v", leftovers(t, tmp))
			time.Sleep(100 * time.Millisecond) // let it block on the full pipe
			require.NoError(t, cmd.Process.Signal(sig))
			err = waitBounded(t, cmd, 2*time.Minute)
			ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
			assert.True(t, ws.Signaled() && ws.Signal() == sig, "ended by %v (%v); want %v", cmd.ProcessState, err, sig)
			assert.Empty(t, leftovers(t, tmp))
		})
	}
}

// ignoredHere reports whether this process ignores sig, as the kernel
// has it (SigIgn in /proc/self/status): what a child inherits.
// signal.Ignored cannot say: once a test of this binary ran ustack record
// in-process (signal.NotifyContext of SIGHUP), it reports false for an
// inherited ignored SIGHUP although the disposition is back to ignored.
func ignoredHere(t *testing.T, sig syscall.Signal) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return signal.Ignored(sig)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			require.NoError(t, err, "SigIgn in /proc/self/status: %q", l)
			return mask&(1<<(uint(sig)-1)) != 0
		}
	}
	return signal.Ignored(sig)
}

// waitBounded waits for cmd, and fails the test if it is still running
// after d (a signal it did not take), killing it.
func waitBounded(t *testing.T, cmd *exec.Cmd, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		// SIGQUIT: a Go program prints its goroutines and exits.
		cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		var stderr string
		if b, ok := cmd.Stderr.(*bytes.Buffer); ok {
			stderr = b.String()
		}
		t.Fatalf("%s still running %v after the signal; its standard error (goroutines at SIGQUIT):\n%s", cmd.Path, d, stderr)
		return nil
	}
}
