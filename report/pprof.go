package report

import (
	"io"

	"github.com/google/pprof/profile"
)

// PprofBuilder collects samples into a pprof profile (profile.proto) with
// mappings, functions and source lines, which `go tool pprof` and other
// pprof readers open. Inlined frames become extra lines of one location, as
// pprof represents inlining.
type PprofBuilder struct {
	p         *profile.Profile
	locations map[locKey]*profile.Location
	functions map[funcKey]*profile.Function
	mappings  map[string]*profile.Mapping
	pending   []profile.Line
	names     *names
}

type locKey struct {
	module string
	addr   uint64
}

type funcKey struct {
	name, file string
}

// NewPprofBuilder returns a builder whose samples count events and their
// periods. Names are demangled in full unless raw is set.
func NewPprofBuilder(raw bool) *PprofBuilder {
	return &PprofBuilder{
		p: &profile.Profile{
			SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "events", Unit: "count"}},
		},
		locations: map[locKey]*profile.Location{},
		functions: map[funcKey]*profile.Function{},
		mappings:  map[string]*profile.Mapping{},
		names:     newNames(raw),
	}
}

// Add adds one sample. Its frames become locations, innermost first.
func (b *PprofBuilder) Add(s *Sample) {
	var locs []*profile.Location
	b.pending = b.pending[:0]
	for i := range s.Frames {
		f := &s.Frames[i]
		name := b.names.Full(f.Symbol)
		if name == "" {
			name = "[unknown]"
		}
		b.pending = append(b.pending, profile.Line{Function: b.function(name, f.File), Line: int64(f.Line)})
		if f.Inlined {
			continue // its caller's frame at the same address follows
		}
		key := locKey{f.Module, f.Addr}
		loc := b.locations[key]
		if loc == nil {
			loc = &profile.Location{ID: uint64(len(b.p.Location) + 1), Address: f.Addr,
				Mapping: b.mapping(f.Module), Line: append([]profile.Line(nil), b.pending...)}
			b.locations[key] = loc
			b.p.Location = append(b.p.Location, loc)
		}
		b.pending = b.pending[:0]
		locs = append(locs, loc)
	}
	b.p.Sample = append(b.p.Sample, &profile.Sample{
		Location: locs,
		Value:    []int64{1, int64(s.Period)},
		Label:    map[string][]string{"comm": {s.Comm}, "event": {s.Event}},
		NumLabel: map[string][]int64{"pid": {int64(s.Pid)}, "tid": {int64(s.Tid)}},
	})
}

func (b *PprofBuilder) function(name, file string) *profile.Function {
	k := funcKey{name, file}
	if f := b.functions[k]; f != nil {
		return f
	}
	f := &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: name, SystemName: name, Filename: file}
	b.functions[k] = f
	b.p.Function = append(b.p.Function, f)
	return f
}

func (b *PprofBuilder) mapping(module string) *profile.Mapping {
	if module == "" {
		return nil
	}
	if m := b.mappings[module]; m != nil {
		return m
	}
	m := &profile.Mapping{ID: uint64(len(b.p.Mapping) + 1), File: module, HasFunctions: true}
	b.mappings[module] = m
	b.p.Mapping = append(b.p.Mapping, m)
	return m
}

// Write writes the gzipped profile.
func (b *PprofBuilder) Write(w io.Writer) error {
	return b.p.Write(w)
}
