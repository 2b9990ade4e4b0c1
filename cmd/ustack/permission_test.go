package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPermissionErrors: as an ordinary user (nobody, through setpriv),
// recording root's process fails for want of ptrace permission over it,
// and the error says so, not that perf_event_paranoid should be lowered;
// a permission error exits 1 (an error), not 2 (usage), also for a
// tracepoint in a tracefs the user may not read.
func TestPermissionErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to run ustack as nobody")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("no setpriv (util-linux)")
	}
	dir, err := os.MkdirTemp("", "ustack-nobody-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o777))
	exe := filepath.Join(dir, "ustack")
	build := exec.Command("go", "build", "-o", exe, ".")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "XDG_CACHE_HOME=") { // TestMain's: Go's cache too
			build.Env = append(build.Env, kv)
		}
	}
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NoError(t, os.Chmod(exe, 0o755))

	sleeper := exec.Command("sleep", "60")
	require.NoError(t, sleeper.Start())
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	asNobody := func(args ...string) (int, string) {
		cmd := exec.Command(setpriv, append([]string{"--reuid=nobody", "--regid=nogroup", "--clear-groups", exe}, args...)...)
		cmd.Dir = dir
		b, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(b)
		}
		require.NoError(t, err, "%s", b)
		return 0, string(b)
	}
	pid := strconv.Itoa(sleeper.Process.Pid)
	rc, msg := asNobody("record", "-p", pid, "-d", "1s", "-o", filepath.Join(dir, "p.data"))
	assert.Equal(t, 1, rc, msg)
	assert.Contains(t, msg, "process "+pid+" belongs to user 0")
	assert.Contains(t, msg, "ptrace")
	assert.NotContains(t, msg, "perf_event_paranoid", "lowering perf_event_paranoid would not help")

	if st, err := os.Stat("/sys/kernel/tracing"); err == nil && st.Mode().Perm()&0o005 != 0o005 {
		rc, msg = asNobody("record", "-e", "syscalls:sys_enter_close", "-o", filepath.Join(dir, "t.data"), "--", "true")
		assert.Equal(t, 1, rc, msg)
		assert.Contains(t, msg, "no permissions to read")
	}
}
