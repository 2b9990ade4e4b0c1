package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/perfdata"
)

// noTask is the pid and tid the kernel puts in a sample no task owns (a
// system-wide sample taken as a task exits): (u32)-1.
const noTask = ^uint32(0)

// writeTaskIDRecording writes a cpu-clock recording of three samples: one
// no task owns (pid and tid noTask, in the kernel), one of thread 43 of
// process 42 ("prog"), one of the idle task (pid and tid 0).
func writeTaskIDRecording(t *testing.T, path string) {
	t.Helper()
	attr := &perfdata.Attr{Type: perfdata.TypeSoftware, Config: 0,
		SampleType:   perfdata.SampleIdentifier | perfdata.SampleIP | perfdata.SampleTID | perfdata.SampleTime | perfdata.SampleCPU | perfdata.SamplePeriod,
		SamplePeriod: 1000000, Flags: perfdata.AttrSampleIDAll, Name: "cpu-clock"}
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	w, err := perfdata.NewWriter(f, []*perfdata.Attr{attr}, &perfdata.Features{Arch: "x86_64"})
	require.NoError(t, err)
	hdr := func(pid, tid uint32, tm uint64, cpu uint32) perfdata.RecordHeader {
		return perfdata.RecordHeader{SampleIDFields: perfdata.SampleIDFields{Pid: pid, Tid: tid, Time: tm, CPU: cpu}}
	}
	require.NoError(t, w.WriteComm(&perfdata.Comm{RecordHeader: hdr(42, 43, 1, 0), Pid: 42, Tid: 43, Comm: "prog"}))
	for i, s := range []*perfdata.Sample{
		{RecordHeader: hdr(noTask, noTask, 10, 1), IP: 0xffffffff81000000, Period: 1000000},
		{RecordHeader: hdr(42, 43, 11, 0), IP: 0x401000, Period: 1000000},
		{RecordHeader: hdr(0, 0, 12, 1), IP: 0xffffffff81000010, Period: 1000000},
	} {
		s.Misc = perfdata.MiscKernel
		if i == 1 {
			s.Misc = perfdata.MiscUser
		}
		require.NoError(t, w.WriteSample(s))
	}
	require.NoError(t, w.Close())
}

// TestTaskIDsPrintAsPerf checks that every output format prints a sample's
// pid and tid as perf script does (its %d of the u32: -1 for a sample no
// task owns, never 4294967295), against perf script -F comm,pid,tid on a
// recording holding such a sample.
func TestTaskIDsPrintAsPerf(t *testing.T) {
	path := filepath.Join(t.TempDir(), "taskid.data")
	writeTaskIDRecording(t, path)

	// perf's truth: "comm pid/tid" per sample.
	script := testprog.Script(t, path, "-F", "comm,pid,tid")
	type ids struct{ comm, pid, tid string }
	var want []ids
	for _, l := range strings.Split(strings.TrimRight(script, "\n"), "\n") {
		f := strings.Fields(l)
		require.Len(t, f, 2, "perf script line %q", l)
		pid, tid, ok := strings.Cut(f[1], "/")
		require.True(t, ok, "perf script line %q", l)
		want = append(want, ids{f[0], pid, tid})
	}
	require.Len(t, want, 3, "perf script:\n%s", script)
	require.Equal(t, ids{":-1", "-1", "-1"}, want[0], "perf's own print of a sample no task owns")

	r, err := perfdata.Open(path)
	require.NoError(t, err)
	defer r.Close()
	samples := collectSamples(t, r, Options{Kallsyms: "-", BuildIDDir: t.TempDir(), Jobs: 1})
	require.Len(t, samples, len(want))
	write := func(format string, o WriterOptions) string { return string(writeFormat(t, format, samples, o)) }
	attrs := r.Session().Attrs

	t.Run("text", func(t *testing.T) {
		fields, err := ParseFields("comm,pid,tid")
		require.NoError(t, err)
		require.Equal(t, script, write("text", WriterOptions{Attrs: attrs, Fields: fields}))
	})
	t.Run("json", func(t *testing.T) {
		js := write("json", WriterOptions{})
		validateLines(t, reportSchema(t), []byte(js)) // docs/report.schema.json allows -1
		lines := strings.Split(strings.TrimRight(js, "\n"), "\n")
		require.Len(t, lines, len(want))
		for i, l := range lines {
			var got struct {
				Pid, Tid json.Number
				Comm     string
			}
			require.NoError(t, json.Unmarshal([]byte(l), &got))
			require.Equal(t, want[i], ids{got.Comm, got.Pid.String(), got.Tid.String()}, "json line %d", i)
		}
	})
	t.Run("pprof", func(t *testing.T) {
		p, err := profile.Parse(strings.NewReader(write("pprof", WriterOptions{Attrs: attrs})))
		require.NoError(t, err)
		var got []ids
		num := func(s *profile.Sample, key string) string {
			if v := s.NumLabel[key]; len(v) == 1 {
				return fmt.Sprint(v[0])
			}
			return "0" // pprof's encoding keeps no numeric label of 0
		}
		for _, s := range p.Sample {
			got = append(got, ids{s.Label["comm"][0], num(s, "pid"), num(s, "tid")})
		}
		require.ElementsMatch(t, want, got)
	})
	t.Run("flamegraph", func(t *testing.T) {
		// The group boxes under "all", as stackcollapse-perf.pl --pid and
		// --tid name them from perf's text: comm-pid, comm-pid/tid.
		groups := func(svg string) []string {
			var names []string
			for _, m := range regexp.MustCompile(`<g class="g"><title>(.*?) \(`).FindAllStringSubmatch(svg, -1) {
				if m[1] != "all" {
					names = append(names, m[1])
				}
			}
			return names
		}
		var threads, processes []string
		for _, w := range want {
			threads = append(threads, w.comm+"-"+w.pid+"/"+w.tid)
			processes = append(processes, w.comm+"-"+w.pid)
		}
		require.ElementsMatch(t, threads, groups(write("flamegraph", WriterOptions{GroupBy: GroupThread})))
		require.ElementsMatch(t, processes, groups(write("flamegraph", WriterOptions{GroupBy: GroupProcess})))
	})
	t.Run("speedscope", func(t *testing.T) {
		var file struct {
			Profiles []struct{ Name string }
		}
		require.NoError(t, json.Unmarshal([]byte(write("speedscope", WriterOptions{})), &file))
		var got []string
		for _, p := range file.Profiles {
			got = append(got, p.Name)
		}
		var names []string
		for _, w := range want {
			names = append(names, w.comm+" "+w.pid+"/"+w.tid+" cpu-clock")
		}
		// Ordered by process and thread as perf prints them: -1 first.
		require.Equal(t, []string{names[0], names[2], names[1]}, got)
	})
}
