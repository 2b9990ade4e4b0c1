package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
)

// traceEvents are the tracepoints of the trace-field recordings: a syscall
// entry (perf prints "name: 0x%08lx" pairs), a syscall exit (a bare
// "0x%lx") and sched_switch (strings, signed numbers, __print_flags).
var traceEvents = []string{"-e", "syscalls:sys_enter_openat", "-e", "syscalls:sys_exit_read", "-e", "sched:sched_switch"}

var (
	trOnce sync.Once
	trErr  string
)

// traceRecordings records threadsSrc's program (perfRecordings) with
// traceEvents, once per test binary, into perfRecordings' directory:
// tr.data and tr-ng.data (perf record, --call-graph dwarf and none),
// tr-pipe.data and tr-pipe-ng.data (the same with perf record -o -: the
// tracing data arrives in a record) and tr-ustack.data (ustack record).
func traceRecordings(t *testing.T) string {
	t.Helper()
	dir := perfRecordings(t)
	trOnce.Do(func() {
		bin := filepath.Join(dir, "prog")
		for _, r := range []struct {
			name string
			args []string
			pipe bool
		}{
			{"tr.data", []string{"--call-graph", "dwarf"}, false},
			{"tr-ng.data", nil, false},
			{"tr-pipe.data", []string{"--call-graph", "dwarf"}, true},
			{"tr-pipe-ng.data", nil, true},
		} {
			out := filepath.Join(dir, r.name)
			args := append([]string{"record", "-q"}, traceEvents...)
			args = append(args, r.args...)
			cmd := testprog.PerfCommand(t, append(append(args, "-o", "-", "--"), bin)...)
			var f *os.File
			if r.pipe {
				var err error
				if f, err = os.Create(out); err != nil {
					trErr = err.Error()
					return
				}
				cmd.Stdout = f
			} else {
				cmd = testprog.PerfCommand(t, append(append(args, "-o", out, "--"), bin)...)
			}
			var errb bytes.Buffer
			cmd.Stderr = &errb
			err := cmd.Run()
			if f != nil {
				f.Close()
			}
			if err != nil {
				trErr = "perf " + strings.Join(args, " ") + ": " + err.Error() + "\n" + errb.String()
				return
			}
		}
		var out, errb bytes.Buffer
		args := append([]string{"record", "-q", "-o", filepath.Join(dir, "tr-ustack.data")}, traceEvents...)
		if rc := run(append(append(args, "--"), bin), &out, &errb); rc != exitOK {
			trErr = "ustack " + strings.Join(args, " ") + ": " + errb.String()
		}
	})
	if trErr != "" {
		t.Skipf("cannot record tracepoints here: %s", trErr)
	}
	return dir
}

// traceRecordingNames are the recordings traceRecordings makes.
var traceRecordingNames = []string{"tr.data", "tr-ng.data", "tr-pipe.data", "tr-pipe-ng.data", "tr-ustack.data"}

// perfScriptStdin runs perf script reading the recording from its
// standard input (-i -), as a pipe-mode recording is read.
func perfScriptStdin(t *testing.T, data string, args ...string) string {
	t.Helper()
	in, err := os.Open(data)
	require.NoError(t, err)
	defer in.Close()
	cmd := testprog.PerfCommand(t, append([]string{"script", "-i", "-"}, args...)...)
	cmd.Stdin = in
	return testprog.Output(t, cmd)
}

// ustackReportStdin runs ustack report -i - on the recording as its
// standard input; it returns standard output and standard error.
func ustackReportStdin(t *testing.T, data string, args ...string) (string, string) {
	t.Helper()
	in, err := os.Open(data)
	require.NoError(t, err)
	defer in.Close()
	saved := os.Stdin
	os.Stdin = in
	defer func() { os.Stdin = saved }()
	var out, errb bytes.Buffer
	rc := run(append(append([]string{"report", "-kallsyms", "-"}, args...), "-i", "-"), &out, &errb)
	require.Equal(t, exitOK, rc, "ustack report %v -i -: %s", args, errb.String())
	return out.String(), errb.String()
}

// perfOut returns perf script's output for a recording: a pipe-mode
// recording is read from standard input (perf record -o - | perf script
// -i -), the others by name.
func perfOut(t *testing.T, data string, args ...string) string {
	t.Helper()
	if strings.Contains(data, "-pipe") {
		return perfScriptStdin(t, data, args...)
	}
	return testprog.Script(t, data, args...)
}

// ustackOut returns ustack report's standard output and standard error
// for a recording, read as perfOut reads it.
func ustackOut(t *testing.T, data string, args ...string) (string, string) {
	t.Helper()
	if strings.Contains(data, "-pipe") {
		return ustackReportStdin(t, data, args...)
	}
	var out, errb bytes.Buffer
	rc := run(append(append([]string{"report", "-kallsyms", "-"}, args...), data), &out, &errb)
	require.Equal(t, exitOK, rc, "ustack report %v: %s", args, errb.String())
	return out.String(), errb.String()
}

// TestTraceFieldsMatchPerfScript checks every header line of tracepoint
// samples, fields included, byte for byte against perf script's with no -F
// and with -F lists naming trace, on perf recordings in file and pipe mode
// with and without a call graph and on an ustack recording. The fields
// must be there: each event's lines carry what its print fmt prints.
func TestTraceFieldsMatchPerfScript(t *testing.T) {
	dir := traceRecordings(t)
	fieldsOf := map[string]*regexp.Regexp{
		"syscalls:sys_enter_openat": regexp.MustCompile(`syscalls:sys_enter_openat: dfd: 0x[0-9a-f]{8}, filename: 0x[0-9a-f]+, flags: 0x[0-9a-f]{8}, mode: 0x[0-9a-f]{8}$`),
		"syscalls:sys_exit_read":    regexp.MustCompile(`syscalls:sys_exit_read: 0x[0-9a-f]+$`),
		"sched:sched_switch":        regexp.MustCompile(`sched:sched_switch: prev_comm=\S+ prev_pid=\d+ prev_prio=\d+ prev_state=\S+ ==> next_comm=.+ next_pid=\d+ next_prio=\d+$`),
	}
	for _, name := range traceRecordingNames {
		for _, args := range [][]string{nil, {"-F", "trace"}, {"-F", "comm,tid,event,trace"}, {"-F", "+period"}, {"-F", "-time"}} {
			t.Run(name+"/"+strings.Join(args, "="), func(t *testing.T) {
				data := filepath.Join(dir, name)
				want := headers(perfOut(t, data, args...), false)
				ustack, stderr := ustackOut(t, data, args...)
				require.NotEmpty(t, want, "perf script printed no sample")
				got := headers(ustack, false)
				require.Equal(t, want, got)
				assert.NotRegexp(t, `warning: .*(tracepoint|tracing data)`, stderr, "warnings for a recording perf formats completely")
				if args != nil {
					return
				}
				seen := map[string]int{}
				for _, l := range got {
					for ev, re := range fieldsOf {
						if strings.Contains(l, ev+": ") {
							require.Regexp(t, re, l)
							seen[ev]++
						}
					}
				}
				// The program opens files and switches out; ld.so
				// reads the libraries.
				for ev := range fieldsOf {
					require.NotZero(t, seen[ev], "no %s sample", ev)
				}
			})
		}
	}
}

// perfFieldsScript is a perf script Python script printing every
// tracepoint sample's own fields (not the common_ ones) as perf's
// scripting engine hands them over: one JSON object a line.
const perfFieldsScript = `
import json
def trace_unhandled(event_name, context, fields, *rest):
    own = {k: v for k, v in fields.items() if not k.startswith("common_")}
    print(json.dumps({"event": event_name, "fields": own}))
`

// textFields parses the fields perf script prints for a sample of the
// trace-field events: "name: 0xHEX" pairs, "name=value" pairs (a value
// that is not a number stays a string) or sys_exit_read's bare "0xHEX"
// (the field ret). sched_switch's prev_state is printed as state letters,
// not as the field's value, and left out.
func textFields(t *testing.T, event, text string) map[string]any {
	t.Helper()
	out := map[string]any{}
	num := func(s string) any {
		if v, err := strconv.ParseInt(s, 0, 64); err == nil {
			return v
		}
		if v, err := strconv.ParseUint(s, 0, 64); err == nil {
			return int64(v)
		}
		return s
	}
	switch event {
	case "syscalls:sys_exit_read":
		out["ret"] = num(text)
	case "syscalls:sys_enter_openat":
		for _, kv := range strings.Split(text, ", ") {
			k, v, ok := strings.Cut(kv, ": ")
			require.True(t, ok, "%q", text)
			out[k] = num(v)
		}
	default:
		// "prev_comm=x ... ==> next_comm=y ...": a comm may hold
		// spaces, so split at " name=".
		re := regexp.MustCompile(`(?:^| )(\w+)=`)
		idx := re.FindAllStringSubmatchIndex(text, -1)
		for i, m := range idx {
			end := len(text)
			if i+1 < len(idx) {
				end = idx[i+1][0]
			}
			v := strings.TrimSuffix(text[m[1]:end], " ==>")
			out[text[m[2]:m[3]]] = num(v)
		}
		if s, ok := out["next_comm"].(int64); ok {
			out["next_comm"] = strconv.FormatInt(s, 10)
		}
		if s, ok := out["prev_comm"].(int64); ok {
			out["prev_comm"] = strconv.FormatInt(s, 10)
		}
		delete(out, "prev_state")
	}
	return out
}

// jsonNumber makes a decoded JSON value comparable with textFields and
// perf's Python values: integers as int64 (an unsigned field's high values
// as their two's complement, as perf prints hex of 64 bits).
func jsonNumber(v any) any {
	if n, ok := v.(json.Number); ok {
		if i, err := n.Int64(); err == nil {
			return i
		}
		if u, err := strconv.ParseUint(n.String(), 10, 64); err == nil {
			return int64(u)
		}
	}
	return v
}

// TestTraceFieldsJSON checks JSON's "fields" of every tracepoint sample
// against perf: against the values perf's Python scripting engine is given
// for the sample's fields (the same names, the same integers and strings)
// and against the values perf script's text prints.
func TestTraceFieldsJSON(t *testing.T) {
	dir := traceRecordings(t)
	script := filepath.Join(dir, "fields.py")
	require.NoError(t, os.WriteFile(script, []byte(perfFieldsScript), 0o644))
	if out, err := testprog.PerfCommand(t, "script", "-i", filepath.Join(dir, "tr-ng.data"), "-s", script).CombinedOutput(); err != nil {
		t.Skipf("perf's Python scripting does not run here (perf built with libpython, Python's standard library): %v\n%.500s", err, out)
	}
	for _, name := range traceRecordingNames {
		t.Run(name, func(t *testing.T) {
			data := filepath.Join(dir, name)
			ustackJSON, _ := ustackOut(t, data, "--format", "json")
			text := perfOut(t, data, "-F", "event,trace")
			pyOut := perfOut(t, data, "-s", script)
			type sample struct {
				Event  string
				Fields map[string]any
			}
			decode := func(s string) []sample {
				var out []sample
				sc := bufio.NewScanner(strings.NewReader(s))
				sc.Buffer(nil, 1<<24)
				for sc.Scan() {
					if !strings.HasPrefix(sc.Text(), "{") {
						continue
					}
					d := json.NewDecoder(strings.NewReader(sc.Text()))
					d.UseNumber()
					var v sample
					require.NoError(t, d.Decode(&v), "%s", sc.Text())
					for k, x := range v.Fields {
						v.Fields[k] = jsonNumber(x)
					}
					out = append(out, v)
				}
				return out
			}
			py := decode(pyOut)
			got := decode(ustackJSON)
			require.NotEmpty(t, py, "perf's Python engine printed no sample:\n%.500s", pyOut)
			require.Equal(t, len(py), len(got))
			lines := headers(text, false)
			require.Equal(t, len(got), len(lines))
			for i := range got {
				require.Equal(t, py[i].Fields, got[i].Fields, "sample %d (%s)", i, got[i].Event)
				ev, tr, ok := strings.Cut(strings.TrimSpace(lines[i]), ": ")
				require.True(t, ok, "%q", lines[i])
				require.Equal(t, ev, got[i].Event)
				for k, v := range textFields(t, ev, tr) {
					require.Equal(t, v, got[i].Fields[k], "sample %d (%s) field %s: perf prints %q", i, ev, k, tr)
				}
			}
		})
	}
}

// TestTraceKernelSymbolsMatchPerfScript checks a print fmt's %ps
// (timer:hrtimer_start's function) against perf script: named from the
// kernel symbol table in a file-mode recording, in hex in pipe mode, as
// perf prints them.
func TestTraceKernelSymbolsMatchPerfScript(t *testing.T) {
	dir := perfRecordings(t)
	for _, c := range []struct {
		name, want string
		pipe       bool
	}{
		{"hr.data", "function=hrtimer_wakeup ", false},
		{"hr-pipe.data", "function=0xffffffff", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			data, args := filepath.Join(dir, c.name), []string{"-e", "timer:hrtimer_start", "--", "sleep", "0.01"}
			if c.pipe {
				testprog.RecordPipe(t, data, args...)
			} else {
				testprog.Record(t, data, args...)
			}
			want := headers(perfOut(t, data), false)
			require.NotEmpty(t, want)
			got, stderr := ustackOut(t, data, "-kallsyms", "/proc/kallsyms")
			require.Equal(t, want, headers(got, false))
			require.Contains(t, got, c.want)
			assert.NotRegexp(t, `warning: .*(tracepoint|tracing data)`, stderr)
		})
	}
}

// TestTraceSignedFieldJSON checks a negative 32-bit field
// (signal:signal_generate's code, SI_TKILL for raise) in JSON: the value
// perf script's text prints (-6), where perf's Python engine is given the
// unsigned 32-bit value (docs/PERF_DIFFERENCES.md).
func TestTraceSignedFieldJSON(t *testing.T) {
	dir := perfRecordings(t)
	bin := testprog.Build(t, dir, "raise.c", "#include <signal.h>\nstatic void h(int s) {}\nint main(void) { signal(SIGUSR1, h); return raise(SIGUSR1); }\n")
	data := testprog.Record(t, filepath.Join(dir, "sig.data"), "-e", "signal:signal_generate", "--", bin)
	text := headers(perfOut(t, data, "-F", "event,trace"), false)
	require.Len(t, text, 1)
	require.Contains(t, text[0], " code=-6 ")
	got, _ := ustackOut(t, data, "--format", "json")
	var s struct{ Fields map[string]any }
	require.NoError(t, json.Unmarshal([]byte(got), &s))
	require.Equal(t, float64(-6), s.Fields["code"])
	require.Equal(t, float64(10), s.Fields["sig"])
	require.Equal(t, "raise", s.Fields["comm"])
}
