package report

import (
	"encoding/hex"
	"io"
	"path/filepath"
	"sort"

	"github.com/google/pprof/profile"
	"github.com/ustack/ustack/perfdata"
)

// PprofBuilder collects samples into a pprof profile (profile.proto) with
// the processes' real mappings (addresses, file offset, build-id; the main
// binary first), functions and source lines, which `go tool pprof` and
// other pprof readers open. Inlined frames become extra lines of one
// location, as pprof represents inlining.
//
// Every sample counts 1 in "samples" (count); samples of cpu-clock and
// task-clock, whose period is time, add their period to "cpu"
// (nanoseconds), the default sample type when they are the only events.
type PprofBuilder struct {
	p         *profile.Profile
	locations map[locKey]*profile.Location
	functions map[funcKey]*profile.Function
	mappings  map[mapKey]*profile.Mapping
	// mainVotes counts, per mapping, the samples whose main binary it is.
	mainVotes map[*profile.Mapping]int
	kernel    map[string]*profile.Mapping
	pending   []profile.Line
	names     *names
	// clock holds the names of events whose period is nanoseconds;
	// timed is set when the profile has a cpu sample type.
	clock map[string]bool
	timed bool
}

type locKey struct {
	m    *profile.Mapping
	addr uint64
}

type funcKey struct {
	name, file string
}

type mapKey struct {
	file          string
	start, offset uint64
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
		mappings:  map[mapKey]*profile.Mapping{},
		mainVotes: map[*profile.Mapping]int{},
		kernel:    map[string]*profile.Mapping{},
		names:     newNames(raw),
		clock:     map[string]bool{},
	}
}

// isClock reports whether an event counts time: cpu-clock or task-clock,
// whose period is in nanoseconds.
func isClock(a *perfdata.Attr) bool {
	return a.Type == perfdata.TypeSoftware && (a.Config == 0 || a.Config == 1)
}

// SetEvents gives the builder the recording's events, from which it
// chooses the sample types: samples/count for every event and cpu/
// nanoseconds when some are cpu-clock or task-clock (the default type when
// all are).
func (b *PprofBuilder) SetEvents(attrs []*perfdata.Attr) {
	allClock, anyClock := len(attrs) > 0, false
	var period int64
	for _, a := range attrs {
		if isClock(a) {
			b.clock[a.Name] = true
			anyClock = true
			if a.Flags&perfdata.AttrFreq == 0 {
				period = int64(a.SamplePeriod)
			}
		} else {
			allClock = false
		}
	}
	b.p.SampleType = []*profile.ValueType{{Type: "samples", Unit: "count"}}
	b.p.DefaultSampleType = "samples"
	b.timed = anyClock
	if anyClock {
		b.p.SampleType = append(b.p.SampleType, &profile.ValueType{Type: "cpu", Unit: "nanoseconds"})
		b.p.PeriodType = &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}
		b.p.Period = period
		if allClock {
			b.p.DefaultSampleType = "cpu"
		}
	}
}

// Add adds one sample. Its frames become locations, innermost first.
func (b *PprofBuilder) Add(s *Sample) {
	var locs []*profile.Location
	b.pending = b.pending[:0]
	if m, ok := s.MainMapping(); ok {
		b.mainVotes[b.mapping(m)]++
	}
	for i := range s.Frames {
		f := &s.Frames[i]
		name := b.names.Short(f.Symbol)
		if name == "" {
			name = "[unknown]"
		}
		b.pending = append(b.pending, profile.Line{Function: b.function(name, f.File), Line: int64(f.Line)})
		if f.Inlined {
			continue // its caller's frame at the same address follows
		}
		var pm *profile.Mapping
		if m, ok := s.MappingOf(f); ok {
			pm = b.mapping(m)
		} else if f.Kernel {
			pm = b.kernelMapping(f)
		}
		key := locKey{pm, f.Addr}
		loc := b.locations[key]
		if loc == nil {
			loc = &profile.Location{ID: uint64(len(b.p.Location) + 1), Address: f.Addr,
				Mapping: pm, Line: append([]profile.Line(nil), b.pending...)}
			b.locations[key] = loc
			b.p.Location = append(b.p.Location, loc)
		}
		b.pending = b.pending[:0]
		locs = append(locs, loc)
	}
	value := []int64{1, int64(s.Period)}
	if b.timed && !b.clock[s.Event] {
		value[1] = 0 // not time
	}
	if len(b.p.SampleType) == 1 {
		value = value[:1]
	}
	ps := &profile.Sample{
		Location: locs,
		Value:    value,
		Label:    map[string][]string{"comm": {s.Comm}, "event": {s.Event}},
		NumLabel: map[string][]int64{"pid": {printedID(s.Pid)}, "tid": {printedID(s.Tid)}},
	}
	if g := s.Goroutine; g != nil {
		// As Go's own goroutine profile labels nothing, these are
		// ustack's: pprof -tagfocus=status=chan.receive selects them.
		ps.NumLabel["goroutine"] = []int64{int64(g.ID)}
		ps.Label["status"] = []string{g.bracket()}
	}
	b.p.Sample = append(b.p.Sample, ps)
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

// mapping returns the profile mapping of a process mapping.
func (b *PprofBuilder) mapping(m Mapping) *profile.Mapping {
	k := mapKey{m.File, m.Start, m.Offset}
	if pm := b.mappings[k]; pm != nil {
		return pm
	}
	pm := &profile.Mapping{ID: uint64(len(b.p.Mapping) + 1), Start: m.Start, Limit: m.Limit, Offset: m.Offset,
		File: m.File, BuildID: hex.EncodeToString(m.BuildID), HasFunctions: true}
	b.mappings[k] = pm
	b.p.Mapping = append(b.p.Mapping, pm)
	return pm
}

// kernelMapping returns the mapping of the kernel (or a module), spanning
// the kernel addresses seen.
func (b *PprofBuilder) kernelMapping(f *Frame) *profile.Mapping {
	pm := b.kernel[f.Module]
	if pm == nil {
		pm = &profile.Mapping{ID: uint64(len(b.p.Mapping) + 1), Start: f.Addr, Limit: f.Addr + 1, File: f.Module, HasFunctions: true}
		b.kernel[f.Module] = pm
		b.p.Mapping = append(b.p.Mapping, pm)
	}
	pm.Start = min(pm.Start, f.Addr)
	pm.Limit = max(pm.Limit, f.Addr+1)
	return pm
}

// Write writes the gzipped profile, the main binary's mapping first: pprof
// takes the first mapping for the profile's "File:".
func (b *PprofBuilder) Write(w io.Writer) error {
	var main *profile.Mapping
	for m, n := range b.mainVotes {
		if main == nil || n > b.mainVotes[main] || n == b.mainVotes[main] && m.ID < main.ID {
			main = m
		}
	}
	ms := b.p.Mapping
	sort.SliceStable(ms, func(i, j int) bool { return ms[i] == main && ms[j] != main })
	for i, m := range ms {
		m.ID = uint64(i + 1)
	}
	if main != nil {
		b.p.Comments = []string{"main binary: " + filepath.Base(main.File)}
	}
	return b.p.Write(w)
}
