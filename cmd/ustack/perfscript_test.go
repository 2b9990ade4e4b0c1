package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
)

// A program with two threads that compute and open a file now and then:
// cpu-clock samples and syscalls:sys_enter_openat samples of both threads.
const threadsSrc = `
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>
static volatile long sink;
__attribute__((noinline)) void leaf(int n) { for (long i = 0; i < 2000000; i++) sink += i * n; close(open("/etc/hostname", O_RDONLY)); }
__attribute__((noinline)) void mid(int n) { leaf(n); sink++; }
void *worker(void *a) { for (int i = 0; i < 8; i++) mid(i); return 0; }
int main(void) { pthread_t t; pthread_create(&t, 0, worker, 0); for (int i = 0; i < 8; i++) mid(i); pthread_join(t, 0); return 0; }
`

var (
	recOnce sync.Once
	recDir  string
	recErr  string
)

// perfRecordings records threadsSrc with perf once per test binary:
// cpu.data (cpu-clock, --call-graph dwarf), tp.data (the openat
// tracepoint, --call-graph dwarf), cpu-ng.data and tp-ng.data (the same
// without a call graph), cpu-c.data (cpu-clock -c 250000, dwarf) and
// sys.data (perf record -a -e cpu-clock).
func perfRecordings(t *testing.T) string {
	t.Helper()
	requirePerfRecord(t)
	// Built once for every caller alike (skipped without gcc, failed on a
	// compiler error), then copied into dir, where the tests run it.
	shared := testprog.Shared(t, "prog.c", threadsSrc, "-O2", "-g", "-pthread")
	recOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ustack-perfscript")
		if err != nil {
			recErr = err.Error()
			return
		}
		recDir = dir
		bin := filepath.Join(dir, "prog")
		copyFile(t, shared, bin)
		for _, r := range []struct {
			name string
			args []string
		}{
			{"cpu.data", []string{"-e", "cpu-clock", "--call-graph", "dwarf"}},
			{"tp.data", []string{"-e", "syscalls:sys_enter_openat", "--call-graph", "dwarf"}},
			{"cpu-ng.data", []string{"-e", "cpu-clock"}},
			{"tp-ng.data", []string{"-e", "syscalls:sys_enter_openat"}},
			// A fixed period: no PERF_SAMPLE_PERIOD, perf prints the
			// attr's period.
			{"cpu-c.data", []string{"-e", "cpu-clock", "-c", "250000", "--call-graph", "dwarf"}},
			// System-wide: every CPU, other processes, the idle task.
			{"sys.data", []string{"-a", "-e", "cpu-clock"}},
		} {
			args := append([]string{"record", "-q", "-o", filepath.Join(dir, r.name)}, r.args...)
			if out, err := testprog.PerfCommand(t, append(args, "--", bin)...).CombinedOutput(); err != nil {
				recErr = "perf " + strings.Join(args, " ") + ": " + err.Error() + "\n" + string(out)
				return
			}
		}
	})
	if recErr != "" {
		t.Skipf("cannot record with perf here: %s", recErr)
	}
	return recDir
}

// requirePerfRecord skips the test, saying why, unless perf can record
// tracepoints here.
func requirePerfRecord(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("records with perf")
	}
	if os.Geteuid() != 0 {
		t.Skip("recording tracepoints needs root")
	}
	testprog.Perf(t)
}

// userCacheHome is XDG_CACHE_HOME as the tests were started with (and
// whether it was set), before TestMain replaced it: where the go command
// keeps its build cache.
var (
	userCacheHome    string
	userCacheHomeSet bool
)

// TestMain removes the recordings perfRecordings made, and keeps the
// reports' section cache out of the user's cache directory.
func TestMain(m *testing.M) {
	userCacheHome, userCacheHomeSet = os.LookupEnv("XDG_CACHE_HOME")
	cache, err := os.MkdirTemp("", "ustack-test-cache")
	if err == nil {
		os.Setenv("XDG_CACHE_HOME", cache)
	}
	code := m.Run()
	testprog.RemoveShared()
	if recDir != "" {
		os.RemoveAll(recDir)
	}
	if cache != "" {
		os.RemoveAll(cache)
	}
	os.Exit(code)
}

// ustackReport runs ustack report and returns its standard output.
func ustackReport(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	rc := run(append([]string{"report", "-kallsyms", "-"}, args...), &out, &errb)
	require.Equal(t, exitOK, rc, "ustack report %v: %s", args, errb.String())
	return out.String()
}

// headers returns the header line of every sample (the lines that do not
// start with a tab and are not empty), cut after the event name when cut is
// set: the sampled ip's symbol of samples without a call graph is compared
// by TestSampledIPLineMatchesPerfScript. Tracepoint fields are kept.
func headers(text string, cut bool) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if l == "" || l[0] == '\t' || strings.HasPrefix(l, "  ") && !strings.Contains(l, ": ") {
			continue
		}
		if cut {
			// "... cpu-clock: ip sym": keep through the event's ": ".
			if i := strings.Index(l, "cpu-clock: "); i >= 0 {
				l = l[:i+len("cpu-clock: ")]
			}
		}
		out = append(out, l)
	}
	return out
}

// TestDefaultFieldsMatchPerfScript checks that with no -F, ustack report
// prints every sample's header line byte for byte as perf script with no
// -F does for the same file, for cpu-clock and tracepoint recordings with
// and without a call graph: the columns (comm padded or not, tid, [cpu]
// where the recording has it, time, period where perf shows it, the event
// name, a tracepoint's fields). The no-call-graph ip is cut off.
func TestDefaultFieldsMatchPerfScript(t *testing.T) {
	dir := perfRecordings(t)
	for _, name := range []string{"cpu.data", "tp.data", "cpu-ng.data", "tp-ng.data", "cpu-c.data", "sys.data"} {
		t.Run(name, func(t *testing.T) {
			data := filepath.Join(dir, name)
			want := headers(testprog.Script(t, data), true)
			require.NotEmpty(t, want, "perf script printed no sample")
			got := headers(ustackReport(t, data), true)
			require.Equal(t, want, got)
		})
	}
	// Callchain lines follow a header ending in "event: " and the sample
	// ends with a blank line; without a call graph one line per sample.
	cpu := ustackReport(t, filepath.Join(dir, "cpu.data"))
	require.True(t, strings.HasPrefix(strings.SplitN(cpu, "\n", 3)[1], "\t"), "no callchain line after the header:\n%.300s", cpu)
	ng := ustackReport(t, filepath.Join(dir, "cpu-ng.data"))
	require.NotContains(t, ng, "\n\n")
	require.NotContains(t, ng, "\t")
}

// TestFieldSelectionMatchesPerfScript checks -F lists and +field/-field
// changes against perf script with the same -F, on the header lines.
func TestFieldSelectionMatchesPerfScript(t *testing.T) {
	dir := perfRecordings(t)
	for _, c := range []struct{ data, fields string }{
		{"cpu.data", "comm,tid,time,event"},
		{"cpu.data", "pid,tid,time"},
		{"cpu.data", "comm,pid,period,event"},
		{"cpu.data", "-period"},
		{"cpu.data", "+pid"},
		{"tp.data", "+period"},
		{"tp.data", "-cpu,-time"},
		{"tp.data", "comm,tid,cpu,event"},
		{"tp-ng.data", "tid,cpu,time,event"},
		{"tp-ng.data", "-comm"},
	} {
		t.Run(c.data+"/"+c.fields, func(t *testing.T) {
			data := filepath.Join(dir, c.data)
			want := headers(testprog.Script(t, data, "-F", c.fields), true)
			require.NotEmpty(t, want)
			got := headers(ustackReport(t, data, "-F", c.fields), true)
			require.Equal(t, want, got)
		})
	}
	// A field the samples do not carry is an error, as in perf script.
	var out, errb bytes.Buffer
	rc := run([]string{"report", "-kallsyms", "-", "-F", "cpu", filepath.Join(dir, "cpu.data")}, &out, &errb)
	require.Equal(t, exitUsage, rc)
	require.Contains(t, errb.String(), "CPU")
	require.Empty(t, out.String())
}

// TestFiltersMatchPerfScript checks --pid, --tid, --comms, --cpu and --time
// against perf script with the same filters: the same samples, in order.
func TestFiltersMatchPerfScript(t *testing.T) {
	dir := perfRecordings(t)
	tp := filepath.Join(dir, "tp.data")
	all := headers(testprog.Script(t, tp, "-F", "comm,pid,tid,cpu,time,event"), true)
	require.NotEmpty(t, all)
	// The worker thread's tid, the process's pid, a middle time window.
	var pid, workerTid string
	var times []string
	for _, l := range all {
		f := strings.Fields(l)
		ids := strings.Split(f[1], "/")
		pid = ids[0]
		if ids[1] != ids[0] {
			workerTid = ids[1]
		}
		times = append(times, strings.TrimSuffix(f[3], ":"))
	}
	require.NotEmpty(t, workerTid, "no sample of the worker thread")
	mid := times[len(times)/3]
	late := times[2*len(times)/3]
	for _, c := range [][]string{
		{"--pid", pid},
		{"--tid", workerTid},
		{"--tid", workerTid + "," + pid},
		{"--comms", "prog"},
		{"--comms", "nosuch,prog"},
		{"--cpu", "0"},
		{"--cpu", "0-1"},
		{"--time", mid + "," + late},
		{"--time", mid + ","},
		{"--time", "," + late},
	} {
		t.Run(strings.Join(c, "="), func(t *testing.T) {
			want := headers(testprog.Script(t, tp, append([]string{"-F", "comm,pid,tid,cpu,time,event"}, c...)...), true)
			got := headers(ustackReport(t, append([]string{"-F", "comm,pid,tid,cpu,time,event", tp}, c...)...), true)
			require.Equal(t, want, got)
			if c[0] == "--time" || c[0] == "--tid" && !strings.Contains(c[1], ",") {
				require.Less(t, len(got), len(all), "the filter kept every sample")
				require.NotEmpty(t, got)
			}
		})
	}
}

// TestPipeHeadersMatchPerfScript checks the default columns of a pipe-mode
// recording (perf record -o -, whose events arrive with its records)
// against perf script reading the same stream.
func TestPipeHeadersMatchPerfScript(t *testing.T) {
	testprog.Perf(t)
	pipe := filepath.Join("..", "..", "perfdata", "testdata", "pipe.data")
	want := perfScriptStdin(t, pipe)
	got, _ := ustackReportStdin(t, pipe)
	require.Equal(t, headers(string(want), true), headers(got, true))
	require.NotEmpty(t, headers(got, true))
}

// TestSampledIPLineMatchesPerfScript checks the whole line of samples
// without a call graph (perf record with no -g): the absolute ip and the
// object as perf script prints them, and the same symbol on nine lines in
// ten at least (perf and ustack may name an address by different aliases).
// Kernel addresses are named from this machine's kernel symbols, as perf
// names them: without them, the share of samples taken in the kernel (more
// on a loaded machine) decided the test.
func TestSampledIPLineMatchesPerfScript(t *testing.T) {
	dir := perfRecordings(t)
	data := filepath.Join(dir, "cpu-ng.data")
	want := strings.Split(strings.TrimSpace(testprog.Script(t, data)), "\n")
	var out, errb bytes.Buffer
	rc := run([]string{"report", "-kallsyms", "/proc/kallsyms", data}, &out, &errb)
	require.Equal(t, exitOK, rc, errb.String())
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Equal(t, len(want), len(got))
	if strings.Count(strings.Join(got, "\n"), "[unknown] ([unknown])") == len(got) {
		t.Skip("ustack resolves no sampled ip of recordings without a stack yet")
	}
	// "HEADER: IP SYM+OFF (DSO)"
	split := func(l string) (head, ip, sym, dso string) {
		i := strings.Index(l, "cpu-clock: ") + len("cpu-clock: ")
		f := strings.Fields(l[i:])
		require.GreaterOrEqual(t, len(f), 3, "line %q", l)
		return l[:i], f[0], f[1], strings.Join(f[2:], " ")
	}
	same := 0
	for i := range want {
		wh, wip, wsym, wdso := split(want[i])
		gh, gip, gsym, gdso := split(got[i])
		require.Equal(t, wh+wip+" "+wdso, gh+gip+" "+gdso, "line %d", i)
		if wsym == gsym {
			same++
		}
	}
	require.GreaterOrEqual(t, same*10, 9*len(want), "symbols differ on %d of %d lines", len(want)-same, len(want))
}
