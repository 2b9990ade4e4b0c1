package report

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testfiles"
	"github.com/ustack/ustack/perfdata"
)

// libraryProfile is the profile of pprofenc.go's types as
// github.com/google/pprof/profile represents it: what PprofBuilder built
// with that package before it encoded profiles itself.
func libraryProfile(pr *pprofProfile) *profile.Profile {
	p := &profile.Profile{Period: pr.period, Comments: pr.comments, DefaultSampleType: pr.defaultSampleType}
	for _, t := range pr.sampleTypes {
		p.SampleType = append(p.SampleType, &profile.ValueType{Type: t.typ, Unit: t.unit})
	}
	if pt := pr.periodType; pt != nil {
		p.PeriodType = &profile.ValueType{Type: pt.typ, Unit: pt.unit}
	}
	mappings := map[*pprofMapping]*profile.Mapping{}
	for _, m := range pr.mappings {
		pm := &profile.Mapping{ID: m.id, Start: m.start, Limit: m.limit, Offset: m.offset, File: m.file, BuildID: m.buildID, HasFunctions: true}
		mappings[m] = pm
		p.Mapping = append(p.Mapping, pm)
	}
	functions := map[*pprofFunction]*profile.Function{}
	for _, f := range pr.functions {
		pf := &profile.Function{ID: f.id, Name: f.name, SystemName: f.name, Filename: f.file}
		functions[f] = pf
		p.Function = append(p.Function, pf)
	}
	locations := map[*pprofLocation]*profile.Location{}
	for _, l := range pr.locations {
		pl := &profile.Location{ID: l.id, Address: l.address, Mapping: mappings[l.mapping]}
		for _, ln := range l.lines {
			pl.Line = append(pl.Line, profile.Line{Function: functions[ln.function], Line: ln.line})
		}
		locations[l] = pl
		p.Location = append(p.Location, pl)
	}
	for _, s := range pr.samples {
		ps := &profile.Sample{
			Value:    s.values,
			Label:    map[string][]string{"comm": {s.comm}, "event": {s.event}},
			NumLabel: map[string][]int64{"pid": {s.pid}, "tid": {s.tid}},
		}
		if g := s.goroutine; g != nil {
			ps.NumLabel["goroutine"] = []int64{g.id}
			ps.Label["status"] = []string{g.status}
		}
		for _, l := range s.locations {
			ps.Location = append(ps.Location, locations[l])
		}
		p.Sample = append(p.Sample, ps)
	}
	return p
}

// requireLibraryBytes writes b's profile and checks that the bytes are
// those github.com/google/pprof/profile writes for the same profile.
func requireLibraryBytes(t *testing.T, b *PprofBuilder) []byte {
	t.Helper()
	var got, want bytes.Buffer
	require.NoError(t, b.Write(&got))
	require.NoError(t, libraryProfile(&b.p).Write(&want))
	require.Equal(t, want.Bytes(), got.Bytes(), "the profile's bytes differ from github.com/google/pprof/profile's")
	return got.Bytes()
}

// TestPprofEncodingMatchesLibrary: the pprof output is, byte for byte,
// what github.com/google/pprof/profile writes for the same profile (the
// encoder ustack used before pprofenc.go): for the committed recordings
// (mappings with build-ids, the main binary's first, inlined lines,
// tracepoint events) and for samples made here for what those
// lack (kernel frames, a goroutine's labels, time events with a period, the ids of
// samples no task owns, frames with no mapping or name, stacks of one and
// two locations, whose ids pprof does not pack).
func TestPprofEncodingMatchesLibrary(t *testing.T) {
	testfiles.MustUnpack(t, testfiles.Dir())
	for _, rec := range []string{"hello", "static_close"} {
		t.Run(rec, func(t *testing.T) {
			data := filepath.Join(testfiles.Dir(), "recordings", rec, "perf.data")
			r, _ := openRecording(t, data)
			b := NewPprofBuilder(false)
			b.SetEvents(r.Session().Attrs)
			n := 0
			_, err := Run(r, Options{Warn: func(string) {}}, func(s *Sample) error {
				b.Add(s)
				n++
				return nil
			})
			require.NoError(t, err)
			require.NotZero(t, n)
			require.NotEmpty(t, b.p.mappings)
			out := requireLibraryBytes(t, b)
			p, err := profile.Parse(bytes.NewReader(out))
			require.NoError(t, err)
			require.Len(t, p.Sample, n)
		})
	}

	t.Run("made", func(t *testing.T) {
		for _, events := range [][]*perfdata.Attr{
			nil, // no SetEvents: samples and events
			{{Name: "cpu-clock", Type: perfdata.TypeSoftware, Config: 0, SamplePeriod: 250000}},
			{{Name: "task-clock", Type: perfdata.TypeSoftware, Config: 1, SamplePeriod: 4000, Flags: perfdata.AttrFreq},
				{Name: "syscalls:sys_enter_close", Type: perfdata.TypeTracepoint}},
		} {
			b := NewPprofBuilder(false)
			if events != nil {
				b.SetEvents(events)
			}
			kernel := Frame{Addr: 0xffffffff81000010, Kernel: true, Module: "[kernel.kallsyms]", Symbol: "do_syscall_64"}
			leaf := Frame{Addr: 0x401020, Symbol: "_ZN1a4leafEv", File: "/src/a.cc", Line: 12, Inlined: true}
			mid := Frame{Addr: 0x401020, Symbol: "mid", File: "/src/a.cc", Line: 30}
			top := Frame{Addr: 0x401100, Symbol: "main", File: "/src/a.cc", Line: -1}
			anon := Frame{Addr: 0x7f0000001000}
			for i, s := range []Sample{
				{Pid: 10, Tid: 11, Comm: "a", Event: "cpu-clock", Period: 250000, Frames: []Frame{kernel, leaf, mid, top}},
				{Pid: ^uint32(0), Tid: ^uint32(0), Event: "syscalls:sys_enter_close", Frames: []Frame{anon}},
				{Pid: 0, Tid: 0, Comm: "swapper", Event: "task-clock", Period: 1 << 40, Frames: []Frame{kernel, anon}},
				{Pid: 12, Tid: 12, Comm: "go", Event: GoroutineEvent, Frames: []Frame{mid, top},
					Goroutine: &Goroutine{ID: 7, Status: "waiting", WaitReason: "chan receive"}},
				{Pid: 12, Tid: 12, Comm: "go", Event: GoroutineEvent, Frames: nil, Goroutine: &Goroutine{ID: 1, Status: "running"}},
			} {
				s.Index = i
				b.Add(&s)
			}
			requireLibraryBytes(t, b)
		}
	})
}
