package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRecordNohup: nohup ustack record -- CMD survives a hang-up, as perf
// record does: the command runs to its end and the recording ends with it.
// Before, record caught SIGHUP whatever its disposition, so closing the
// terminal of a nohup'd recorder stopped it and sent the command SIGTERM.
func TestRecordNohup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("records tracepoints: needs root")
	}
	bin := buildUstack(t)
	dir := t.TempDir()
	data, mark := filepath.Join(dir, "rec.data"), filepath.Join(dir, "done")
	// The shell ignores SIGHUP, as nohup does, and the recorder inherits it.
	cmd := exec.Command("sh", "-c", `trap "" HUP; exec "$0" record -q -e syscalls:sys_enter_close -o "$1" -- sh -c "sleep 4; echo done > $2"`,
		bin, data, mark)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill() })
	// The output file is made after the recorder's signal handlers, and
	// before the command runs.
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(data); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after a minute: %s", data, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	err := waitBounded(t, cmd, 2*time.Minute)
	if err != nil && strings.Contains(stderr.String(), "perf_event") {
		t.Skipf("ustack record cannot record here: %s", stderr.String())
	}
	require.NoError(t, err, "ustack record after a SIGHUP it should ignore: %s", stderr.String())
	b, err := os.ReadFile(mark)
	require.NoError(t, err, "the recorded command did not run to its end")
	require.Equal(t, "done\n", string(b))
}
