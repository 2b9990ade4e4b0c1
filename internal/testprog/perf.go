package testprog

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// NeedPerfEvents skips t when this process cannot open a perf event on
// itself (no root or CAP_PERFMON at a strict perf_event_paranoid, or a
// kernel or container without perf events): ustack's own recorder needs
// what perf record needs.
func NeedPerfEvents(t testing.TB) {
	t.Helper()
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK, Sample: 1000}
	attr.Size = unix.PERF_ATTR_SIZE_VER7
	attr.Bits = unix.PerfBitDisabled
	fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		t.Skipf("perf_event_open is unavailable here (%v): live recording tests need root or CAP_PERFMON", err)
	}
	unix.Close(fd)
}

// Perf returns the path of the perf tool, skipping t when it is not
// installed (Debian package linux-perf).
func Perf(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("perf")
	if err != nil {
		t.Skip("perf not installed (Debian: linux-perf): this test compares with perf")
	}
	return p
}

// PerfCommand returns perf with args as a command bounded by Timeout
// (killed when it runs longer, or when the test ends), for a caller to
// adjust (Env, Dir, Stdout) and run. It skips t when perf is not
// installed.
func PerfCommand(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	perf := Perf(t)
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	t.Cleanup(cancel)
	return exec.CommandContext(ctx, perf, args...)
}

// Output runs cmd and returns its standard output, failing t with its
// standard error when it fails.
func Output(t testing.TB, cmd *exec.Cmd) string {
	t.Helper()
	var stderr strings.Builder
	if cmd.Stderr == nil {
		cmd.Stderr = &stderr
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, stderr.String())
	}
	return string(out)
}

// Record runs perf record -q -o out with args (events, options, then "--"
// and the workload) and returns out. It skips t, with perf's message, when
// perf cannot record here (no permission, no such event, no PMU).
func Record(t testing.TB, out string, args ...string) string {
	t.Helper()
	return record(t, PerfCommand(t, append([]string{"record", "-q", "-o", out}, args...)...), out, args)
}

// RecordPipe is Record in perf's pipe mode (perf record -o -): the stream
// perf writes to its standard output is saved in out.
func RecordPipe(t testing.TB, out string, args ...string) string {
	t.Helper()
	cmd := PerfCommand(t, append([]string{"record", "-q", "-o", "-"}, args...)...)
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd.Stdout = f
	return record(t, cmd, out, args)
}

func record(t testing.TB, cmd *exec.Cmd, out string, args []string) string {
	t.Helper()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Skipf("perf record %v cannot record here (no permission or no support?): %v: %s", args, err, stderr.String())
	}
	return out
}

// Script runs perf script -i path with args and returns its output,
// skipping t when perf is not installed and failing it, with perf's
// message, when perf cannot read the file.
func Script(t testing.TB, path string, args ...string) string {
	t.Helper()
	return Output(t, PerfCommand(t, append([]string{"script", "-i", path}, args...)...))
}

// NeedTracefs skips t unless tracefs, at /sys/kernel/tracing, holds the
// tracepoint event ("syscalls/sys_enter_close"). Where tracefs is not
// mounted it tries to mount it first (which root may).
func NeedTracefs(t testing.TB, event string) {
	t.Helper()
	dir := "/sys/kernel/tracing/events/" + event
	if _, err := os.Stat(dir); err == nil {
		return
	}
	exec.Command("mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing").Run()
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("tracefs with the %s tracepoint is not available here: %v", event, err)
	}
}
