package tracefmt

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/perfdata"
)

// traceSample is one tracepoint sample: its event name and raw data.
type traceSample struct {
	event string
	raw   []byte
}

// readRecording returns the parsed tracing data and the tracepoint
// samples of a perf.data file, in perf script's order.
func readRecording(t *testing.T, path string) (*Events, []traceSample) {
	t.Helper()
	r, err := perfdata.Open(path)
	require.NoError(t, err)
	defer r.Close()
	s := perfdata.NewSorter(r, 0)
	var out []traceSample
	for {
		rec, err := s.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if x, ok := rec.(*perfdata.Sample); ok && x.Attr != nil && x.Attr.Type == perfdata.TypeTracepoint {
			out = append(out, traceSample{x.EventName, bytes.Clone(x.Raw)})
		}
	}
	td := r.Session().Features.TracingData
	require.NotEmpty(t, td, "%s has no tracing data", path)
	ev, err := Parse(td)
	require.NoError(t, err)
	return ev, out
}

// scriptTraces splits perf script's default output into the text after
// "event: " on each line (the tracepoint fields) by event name.
func scriptTraces(t *testing.T, out string, samples []traceSample) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, len(samples), "perf script lines vs samples")
	var got []string
	for i, l := range lines {
		sep := " " + samples[i].event + ": "
		j := strings.Index(l, sep)
		require.GreaterOrEqual(t, j, 0, "line %d %q lacks %q", i, l, sep)
		got = append(got, l[j+len(sep):])
	}
	return got
}

// compareWithScript checks Append against perf script's text for every
// sample, byte for byte.
func compareWithScript(t *testing.T, ev *Events, samples []traceSample, script []string) map[string]int {
	t.Helper()
	per := map[string]int{}
	for i, s := range samples {
		f := ev.ForRaw(s.raw)
		require.NotNil(t, f, "sample %d (%s): no format for its common_type", i, s.event)
		require.Equal(t, s.event, f.FullName())
		require.NoError(t, f.PrintErr, "%s", s.event)
		got := string(f.Append(nil, s.raw))
		if !assert.Equal(t, script[i], got, "sample %d (%s)", i, s.event) {
			continue
		}
		per[s.event]++
	}
	return per
}

// TestTestdata compares the committed recording (testdata/gen.sh) with
// perf script's committed output.
func TestTestdata(t *testing.T) {
	ev, samples := readRecording(t, "testdata/tp.data")
	out, err := os.ReadFile("testdata/tp.script")
	require.NoError(t, err)
	per := compareWithScript(t, ev, samples, scriptTraces(t, string(out), samples))
	t.Logf("samples equal to perf script: %v", per)
	for _, e := range []string{"syscalls:sys_enter_openat", "syscalls:sys_exit_read", "sched:sched_switch"} {
		assert.NotZero(t, per[e], "no %s sample in the test file", e)
	}
	checkFields(t, ev, samples, scriptTraces(t, string(out), samples))
}

// liveEvents are the tracepoints the live test records: syscall entry and
// exit, sched (char arrays, __print_flags, __get_str), raw_syscalls
// (array indexing), signal, task, timer (__print_symbolic of enum names,
// %ps) and kmem (%pS, %p, %zu, gfp flags built from long cast
// expressions).
var liveEvents = []string{
	"syscalls:sys_enter_openat", "syscalls:sys_exit_read", "sched:sched_switch",
	"sched:sched_process_exec", "sched:sched_wakeup", "sched:sched_process_fork",
	"sched:sched_process_exit", "raw_syscalls:sys_enter", "signal:signal_generate",
	"task:task_newtask", "timer:hrtimer_start", "kmem:kmalloc", "kmem:kfree",
}

// TestLivePerfScript records tracepoints with perf on this machine, in
// file and pipe mode (and pipe mode with -z), and compares every sample's formatted fields with
// perf script's, byte for byte. %ps names come from /proc/kallsyms in
// file mode, as perf resolves them there (in pipe mode perf prints hex).
func TestLivePerfScript(t *testing.T) {
	testprog.Perf(t)
	testprog.NeedTracefs(t, "sched/sched_switch")
	for _, c := range []struct{ pipe, zstd bool }{{false, false}, {true, false}, {true, true}} {
		pipe := c.pipe
		t.Run(fmt.Sprintf("pipe=%v,z=%v", c.pipe, c.zstd), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "perf.data")
			var args []string
			if c.zstd {
				args = append(args, "-z")
			}
			for _, e := range liveEvents {
				args = append(args, "-e", e)
			}
			args = append(args, "--", "sh", "-c", "cat /etc/hostname; sleep 0.01; ls / >/dev/null; kill -0 $$")
			if pipe {
				testprog.RecordPipe(t, path, args...)
			} else {
				testprog.Record(t, path, args...)
			}
			ev, samples := readRecording(t, path)
			require.NotEmpty(t, samples)
			if !pipe {
				// perf script names %ps addresses from the kernel map of
				// a file-mode recording; in pipe mode it prints hex.
				ev.Resolve = kallsymsResolver(t)
			}
			script := scriptTraces(t, testprog.Script(t, path), samples)
			per := compareWithScript(t, ev, samples, script)
			t.Logf("%d samples equal to perf script: %v", len(samples), per)
			for _, e := range []string{"syscalls:sys_enter_openat", "sched:sched_switch", "sched:sched_process_exec", "raw_syscalls:sys_enter"} {
				assert.NotZero(t, per[e], "no %s sample compared", e)
			}
			checkFields(t, ev, samples, script)
		})
	}
}

// kallsymsResolver names kernel addresses from /proc/kallsyms (perf
// script resolves %ps the same way on the recording machine).
func kallsymsResolver(t *testing.T) func(uint64) (string, uint64, bool) {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return nil
	}
	defer f.Close()
	type sym struct {
		addr uint64
		name string
	}
	var syms []sym
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 || (fs[1] != "t" && fs[1] != "T") {
			continue
		}
		a, err := strconv.ParseUint(fs[0], 16, 64)
		if err == nil && a != 0 {
			syms = append(syms, sym{a, fs[2]})
		}
	}
	if len(syms) == 0 {
		t.Log("/proc/kallsyms shows no addresses: kernel symbols stay hex")
		return nil
	}
	sort.Slice(syms, func(i, j int) bool { return syms[i].addr < syms[j].addr })
	return func(a uint64) (string, uint64, bool) {
		i := sort.Search(len(syms), func(i int) bool { return syms[i].addr > a }) - 1
		if i < 0 {
			return "", 0, false
		}
		return syms[i].name, a - syms[i].addr, true
	}
}

// nameValue is a "name=" at the start of perf's text or after a space.
var nameValue = regexp.MustCompile(`(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=`)

// nameValues splits perf's text of a name=value list into its pairs; a
// value runs to the space before the next name=, so that it may hold
// spaces (comms such as "gdb worker").
func nameValues(text string) [][2]string {
	var out [][2]string
	m := nameValue.FindAllStringSubmatchIndex(text, -1)
	for i, x := range m {
		end := len(text)
		if i+1 < len(m) {
			end = m[i+1][0]
		}
		out = append(out, [2]string{text[x[2]:x[3]], text[x[1]:end]})
	}
	return out
}

// checkFields checks Fields against perf's text where the print fmt is a
// plain list of name=%d / name=%s: each value perf prints is the field's.
func checkFields(t *testing.T, ev *Events, samples []traceSample, script []string) {
	t.Helper()
	checked := 0
	for i, s := range samples {
		if s.event != "sched:sched_switch" && s.event != "sched:sched_wakeup" {
			continue
		}
		f := ev.ForRaw(s.raw)
		vals := map[string]any{}
		for k, v := range f.Fields(s.raw) {
			vals[k] = v
		}
		for _, kv := range nameValues(strings.ReplaceAll(script[i], " ==> ", " ")) {
			k, v := kv[0], kv[1]
			if k == "prev_state" {
				continue
			}
			got, ok := vals[k]
			require.True(t, ok, "%s: no field %s in %v", s.event, k, vals)
			switch g := got.(type) {
			case string:
				assert.Equal(t, v, g, "%s %s", s.event, k)
			case int64:
				n, err := strconv.ParseInt(v, 10, 64) // %03d prints 001
				require.NoError(t, err, "%s %s=%s", s.event, k, v)
				assert.Equal(t, n, g, "%s %s", s.event, k)
			default:
				t.Errorf("%s %s: %T %v", s.event, k, got, got)
			}
			checked++
		}
	}
	assert.NotZero(t, checked, "no field checked")
}

// TestNameValues: perf's sched_switch text with a comm that holds a space.
func TestNameValues(t *testing.T) {
	got := nameValues("prev_comm=gdb worker prev_pid=12 prev_prio=120 prev_state=S next_comm=swapper/1 next_pid=0 next_prio=120")
	require.Equal(t, [][2]string{{"prev_comm", "gdb worker"}, {"prev_pid", "12"}, {"prev_prio", "120"}, {"prev_state", "S"},
		{"next_comm", "swapper/1"}, {"next_pid", "0"}, {"next_prio", "120"}}, got)
}
