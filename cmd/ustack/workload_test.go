package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

const spinSrc = `
static volatile unsigned long sink;
__attribute__((noinline)) void spin(void) { for (;;) sink++; }
int main(void) { spin(); return 0; }
`

// startSpinner builds and starts a program that spins until the test ends.
func startSpinner(t *testing.T) int {
	t.Helper()
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "spin.c", spinSrc, "-O1", "-g")
	cmd := exec.Command(bin)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}

// recordBounded runs ustack record with args and fails when it has not
// returned after a minute: a recording bounded by a command must end when
// the command does.
func recordBounded(t *testing.T, args ...string) (rc int, stderr string) {
	t.Helper()
	type result struct {
		rc     int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		var out, errb bytes.Buffer
		rc := run(append([]string{"record"}, args...), &out, &errb)
		done <- result{rc, errb.String()}
	}()
	select {
	case r := <-done:
		return r.rc, r.stderr
	case <-time.After(time.Minute):
		t.Fatalf("ustack record %v still runs a minute after its command should have ended", args)
	}
	return 0, ""
}

// samplePids returns the pid of every sample of a recording, as perf
// script reads them.
func samplePids(t *testing.T, data string) map[int]int {
	t.Helper()
	out := testprog.Output(t, testprog.PerfCommand(t, "script", "-i", data, "-F", "pid"))
	pids := map[int]int{}
	for _, f := range strings.Fields(out) {
		n, err := strconv.Atoi(f)
		require.NoError(t, err, "perf script -F pid printed %q", f)
		pids[n]++
	}
	return pids
}

// TestRecordWhileCommandRuns: as perf users bound a system-wide or attached
// recording, `ustack record -a -- CMD` and `ustack record -p PID -- CMD`
// record the system or the process (not CMD) until CMD exits, and exit
// with CMD's status. Perf script says whose samples the file holds: a
// spinning program that is no child of the command, only its samples for
// -p.
func TestRecordWhileCommandRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("records with perf_event_open")
	}
	testprog.NeedPerfEvents(t)
	testprog.Perf(t)
	spinner := startSpinner(t)
	for _, target := range [][]string{{"--all-cpus"}, {"-p", strconv.Itoa(spinner)}} {
		t.Run(strings.Join(target, "_"), func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "rec.data")
			args := append([]string{"-q", "--no-archive", "-F", "499", "-o", data}, target...)
			args = append(args, "--", "sh", "-c", "sleep 1; exit 3")
			rc, stderr := recordBounded(t, args...)
			require.Equal(t, 3, rc, "ustack record %v: want the command's exit status 3; stderr:\n%s", args, stderr)
			pids := samplePids(t, data)
			assert.NotZero(t, pids[spinner], "no sample of the spinning program (pid %d) in %v", spinner, pids)
			if target[0] == "-p" || target[0] == "--pid" {
				for pid, n := range pids {
					assert.Equal(t, spinner, pid, "-p %d recorded %d samples of pid %d", spinner, n, pid)
				}
			}
		})
	}
}

// TestRecordLongOptions: perf's long options (--event, --freq, --output,
// --count) set what their short forms set, as perf evlist reads it back
// from the recording, and -F max is the kernel's
// perf_event_max_sample_rate.
func TestRecordLongOptions(t *testing.T) {
	if testing.Short() {
		t.Skip("records with perf_event_open")
	}
	testprog.NeedPerfEvents(t)
	testprog.Perf(t)
	maxRate := func() uint64 {
		b, err := os.ReadFile("/proc/sys/kernel/perf_event_max_sample_rate")
		require.NoError(t, err)
		n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		require.NoError(t, err)
		return n
	}
	dir := t.TempDir()
	evlist := func(data string) string {
		return testprog.Output(t, testprog.PerfCommand(t, "evlist", "-F", "-i", data))
	}

	// The recorded process sleeps: a running one, sampled at
	// perf_event_max_sample_rate (100 kHz) with its stack copied, can
	// need minutes of the kernel's time for the shortest command on a
	// virtual machine (perf record -F max --call-graph dwarf -- true took
	// 81 s here once), as the kernel throttles only NMI-driven events.
	sleeper := exec.Command("sleep", "600")
	require.NoError(t, sleeper.Start())
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	freqData := filepath.Join(dir, "freq.data")
	before := maxRate()
	rc, stderr := recordBounded(t, "-q", "--no-archive", "--event", "task-clock", "--freq", "max", "--output", freqData,
		"-p", strconv.Itoa(sleeper.Process.Pid), "--", "sleep", "0.1")
	require.Equal(t, 0, rc, stderr)
	after := maxRate() // the kernel lowers it when sampling interrupts take too long
	ev := evlist(freqData)
	require.Contains(t, ev, "task-clock", ev)
	_, f, ok := strings.Cut(ev, "sample_freq=")
	require.True(t, ok, "perf evlist -F: %s", ev)
	f, _, _ = strings.Cut(strings.TrimSpace(f), ",")
	freq, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
	require.NoError(t, err, ev)
	assert.True(t, freq >= after && freq <= before, "-F max recorded at %d Hz; perf_event_max_sample_rate was %d before, %d after", freq, before, after)

	countData := filepath.Join(dir, "count.data")
	rc, stderr = recordBounded(t, "-q", "--no-archive", "--count", "100000", "--output="+countData, "--", "true")
	require.Equal(t, 0, rc, stderr)
	assert.Contains(t, evlist(countData), "sample_period=100000")
}

// TestFreqValue: -F takes Hz or max, which reads the kernel's limit.
func TestFreqValue(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/kernel/perf_event_max_sample_rate")
	if err != nil {
		t.Skipf("no perf_event_max_sample_rate here: %v", err)
	}
	limit, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	require.NoError(t, err)
	var f freqValue
	require.NoError(t, f.Set("max"))
	assert.Equal(t, freqValue(limit), f)
	require.NoError(t, f.Set("999"))
	assert.Equal(t, freqValue(999), f)
	assert.Error(t, f.Set("fast"))
	assert.Error(t, f.Set("0"))
}
