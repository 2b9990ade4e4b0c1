package report

import (
	"bufio"
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/perfdata"
)

// tpRecording is tracefmt's perf recording of six tracepoints, with perf
// script's own output for it in tpScript.
const (
	tpRecording = "../tracefmt/testdata/tp.data"
	tpScript    = "../tracefmt/testdata/tp.script"
)

// traceRun reports tpRecording with its tracing data replaced by edit's
// result, and returns every sample's event and trace text, the JSON values
// of the first one of each event, and the warnings.
func traceRun(t *testing.T, edit func([]byte) []byte) (lines []string, values map[string][]TraceField, warnings []string) {
	t.Helper()
	r, err := perfdata.Open(tpRecording)
	require.NoError(t, err)
	defer r.Close()
	s := r.Session()
	s.Features.TracingData = edit(bytes.Clone(s.Features.TracingData))
	values = map[string][]TraceField{}
	opts := Options{Kallsyms: "-", TraceValues: true, Warn: func(m string) { warnings = append(warnings, m) }}
	_, err = Run(r, opts, func(s *Sample) error {
		lines = append(lines, s.Event+": "+string(s.TraceFields.Text))
		if _, ok := values[s.Event]; !ok {
			values[s.Event] = append([]TraceField(nil), s.TraceFields.List...)
		}
		return nil
	})
	require.NoError(t, err)
	return lines, values, warnings
}

// perfTraceLines returns perf script's lines for tpRecording cut to
// "event: fields".
func perfTraceLines(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(tpScript)
	require.NoError(t, err)
	defer f.Close()
	re := regexp.MustCompile(` ([a-z_]+:[a-z_]+: .*)$`)
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := re.FindStringSubmatch(sc.Text())
		require.NotNil(t, m, "%q", sc.Text())
		out = append(out, m[1])
	}
	return out
}

// TestTraceFieldsRun checks, through Run, the tracepoint fields of every
// sample of tpRecording against perf script's lines for it, and the
// values given for JSON against the same lines.
func TestTraceFieldsRun(t *testing.T) {
	lines, values, warnings := traceRun(t, func(b []byte) []byte { return b })
	assert.Empty(t, warnings)
	require.Equal(t, perfTraceLines(t), lines)
	// perf: "dfd: 0xffffff9c, filename: 0x7f22c78fa0b1, flags:
	// 0x00080000, mode: 0x00000000" for the first openat.
	assert.Equal(t, []TraceField{{"__syscall_nr", int64(257)}, {"dfd", uint64(0xffffff9c)}, {"filename", uint64(0x7f22c78fa0b1)},
		{"flags", uint64(0x80000)}, {"mode", uint64(0)}}, values["syscalls:sys_enter_openat"])
	// perf: "filename=/usr/bin/sh pid=4302 old_pid=4302".
	assert.Equal(t, []TraceField{{"filename", "/usr/bin/sh"}, {"pid", int64(4302)}, {"old_pid", int64(4302)}}, values["sched:sched_process_exec"])
}

// TestTraceFieldsWarnings checks that every gap in the tracing data is
// warned about once, naming what is missing, and costs only the events it
// concerns.
func TestTraceFieldsWarnings(t *testing.T) {
	perf := perfTraceLines(t)
	count := func(warnings []string, sub string) int {
		n := 0
		for _, w := range warnings {
			if strings.Contains(w, sub) {
				n++
			}
		}
		return n
	}
	t.Run("missing", func(t *testing.T) {
		lines, _, warnings := traceRun(t, func([]byte) []byte { return nil })
		require.Equal(t, 1, count(warnings, "no tracing data"), "%q", warnings)
		for _, l := range lines {
			require.True(t, strings.HasSuffix(l, ": "), "%q has fields", l)
		}
	})
	t.Run("damaged", func(t *testing.T) {
		_, _, warnings := traceRun(t, func(b []byte) []byte { return b[:20] })
		require.Equal(t, 1, count(warnings, "tracing data: "), "%q", warnings)
	})
	t.Run("no format", func(t *testing.T) {
		// sched_process_fork's format gets another ID.
		lines, _, warnings := traceRun(t, func(b []byte) []byte {
			require.Equal(t, 1, bytes.Count(b, []byte("ID: 366\n")))
			return bytes.Replace(b, []byte("ID: 366\n"), []byte("ID: 999\n"), 1)
		})
		require.Len(t, warnings, 1)
		require.Contains(t, warnings[0], "tracepoint sched:sched_process_fork (id 366)")
		require.Equal(t, len(perf), len(lines))
		for i, l := range lines {
			if strings.HasPrefix(l, "sched:sched_process_fork: ") {
				require.Equal(t, "sched:sched_process_fork: ", l)
			} else {
				require.Equal(t, perf[i], l)
			}
		}
	})
	t.Run("print fmt", func(t *testing.T) {
		// sched_wakeup's print fmt names a field the format lacks.
		const pf = "REC->prio, REC->target_cpu"
		lines, values, warnings := traceRun(t, func(b []byte) []byte {
			require.Equal(t, 1, bytes.Count(b, []byte(pf)))
			return bytes.Replace(b, []byte(pf), []byte("REC->xrio, REC->target_cpu"), 1)
		})
		require.Len(t, warnings, 1)
		require.Contains(t, warnings[0], "tracepoint sched:sched_wakeup: its print fmt could not be evaluated")
		re := regexp.MustCompile(`^sched:sched_wakeup: comm=\S+ pid=\d+ prio=\d+ target_cpu=\d+$`)
		n := 0
		for i, l := range lines {
			if strings.HasPrefix(l, "sched:sched_wakeup: ") {
				require.Regexp(t, re, l)
				require.NotEqual(t, perf[i], l, "perf prints target_cpu with %%03d")
				n++
			} else {
				require.Equal(t, perf[i], l)
			}
		}
		require.NotZero(t, n)
		require.Len(t, values["sched:sched_wakeup"], 4, "the values do not depend on the print fmt")
	})
}

// BenchmarkTraceFields measures formatting one tracepoint sample's fields
// on the worker (text only, as for the text output): no allocation.
func BenchmarkTraceFields(b *testing.B) {
	r, err := perfdata.Open(tpRecording)
	require.NoError(b, err)
	defer r.Close()
	p, err := newProcessor(r.Session(), Options{Kallsyms: "-"})
	require.NoError(b, err)
	var jobs []*job
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		if s, ok := rec.(*perfdata.Sample); ok {
			j := &job{trace: p.traces.format(s), raw: bytes.Clone(s.Raw)}
			require.NotNil(b, j.trace)
			jobs = append(jobs, j)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		jobs[i%len(jobs)].setTraceFields(false)
	}
}
