package report

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"path/filepath"
	"sort"

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
//
// The profile is encoded here (pprofenc.go) rather than by
// github.com/google/pprof/profile, whose package initialization (some
// thirty regular expressions compiled for legacy formats) cost every run
// of ustack 1.8 ms; the tests check that the bytes are the ones that
// package writes for the same profile.
type PprofBuilder struct {
	p         pprofProfile
	locations map[locKey]*pprofLocation
	functions map[funcKey]*pprofFunction
	mappings  map[mapKey]*pprofMapping
	// mainVotes counts, per mapping, the samples whose main binary it is.
	mainVotes map[*pprofMapping]int
	kernel    map[string]*pprofMapping
	pending   []pprofLine
	names     *names
	// clock holds the names of events whose period is nanoseconds;
	// timed is set when the profile has a cpu sample type.
	clock map[string]bool
	timed bool
}

type locKey struct {
	m    *pprofMapping
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
		p: pprofProfile{
			sampleTypes: []pprofValueType{{"samples", "count"}, {"events", "count"}},
		},
		locations: map[locKey]*pprofLocation{},
		functions: map[funcKey]*pprofFunction{},
		mappings:  map[mapKey]*pprofMapping{},
		mainVotes: map[*pprofMapping]int{},
		kernel:    map[string]*pprofMapping{},
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
	b.p.sampleTypes = []pprofValueType{{"samples", "count"}}
	b.p.defaultSampleType = "samples"
	b.timed = anyClock
	if anyClock {
		b.p.sampleTypes = append(b.p.sampleTypes, pprofValueType{"cpu", "nanoseconds"})
		b.p.periodType = &pprofValueType{"cpu", "nanoseconds"}
		b.p.period = period
		if allClock {
			b.p.defaultSampleType = "cpu"
		}
	}
}

// Add adds one sample. Its frames become locations, innermost first.
func (b *PprofBuilder) Add(s *Sample) {
	var locs []*pprofLocation
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
		b.pending = append(b.pending, pprofLine{function: b.function(name, f.File), line: int64(f.Line)})
		if f.Inlined {
			continue // its caller's frame at the same address follows
		}
		var pm *pprofMapping
		if m, ok := s.MappingOf(f); ok {
			pm = b.mapping(m)
		} else if f.Kernel {
			pm = b.kernelMapping(f)
		}
		key := locKey{pm, f.Addr}
		loc := b.locations[key]
		if loc == nil {
			loc = &pprofLocation{id: uint64(len(b.p.locations) + 1), address: f.Addr,
				mapping: pm, lines: append([]pprofLine(nil), b.pending...)}
			b.locations[key] = loc
			b.p.locations = append(b.p.locations, loc)
		}
		b.pending = b.pending[:0]
		locs = append(locs, loc)
	}
	value := []int64{1, int64(s.Period)}
	if b.timed && !b.clock[s.Event] {
		value[1] = 0 // not time
	}
	if len(b.p.sampleTypes) == 1 {
		value = value[:1]
	}
	ps := &pprofSample{
		locations: locs,
		values:    value,
		comm:      s.Comm,
		event:     s.Event,
		pid:       printedID(s.Pid),
		tid:       printedID(s.Tid),
	}
	if g := s.Goroutine; g != nil {
		// As Go's own goroutine profile labels nothing, these are
		// ustack's: pprof -tagfocus=status=chan.receive selects them.
		ps.goroutine = &pprofGoroutine{id: int64(g.ID), status: g.bracket()}
	}
	b.p.samples = append(b.p.samples, ps)
}

func (b *PprofBuilder) function(name, file string) *pprofFunction {
	k := funcKey{name, file}
	if f := b.functions[k]; f != nil {
		return f
	}
	f := &pprofFunction{id: uint64(len(b.p.functions) + 1), name: name, file: file}
	b.functions[k] = f
	b.p.functions = append(b.p.functions, f)
	return f
}

// mapping returns the profile mapping of a process mapping.
func (b *PprofBuilder) mapping(m Mapping) *pprofMapping {
	k := mapKey{m.File, m.Start, m.Offset}
	if pm := b.mappings[k]; pm != nil {
		return pm
	}
	pm := &pprofMapping{id: uint64(len(b.p.mappings) + 1), start: m.Start, limit: m.Limit, offset: m.Offset,
		file: m.File, buildID: hex.EncodeToString(m.BuildID)}
	b.mappings[k] = pm
	b.p.mappings = append(b.p.mappings, pm)
	return pm
}

// kernelMapping returns the mapping of the kernel (or a module), spanning
// the kernel addresses seen.
func (b *PprofBuilder) kernelMapping(f *Frame) *pprofMapping {
	pm := b.kernel[f.Module]
	if pm == nil {
		pm = &pprofMapping{id: uint64(len(b.p.mappings) + 1), start: f.Addr, limit: f.Addr + 1, file: f.Module}
		b.kernel[f.Module] = pm
		b.p.mappings = append(b.p.mappings, pm)
	}
	pm.start = min(pm.start, f.Addr)
	pm.limit = max(pm.limit, f.Addr+1)
	return pm
}

// Write writes the gzipped profile, the main binary's mapping first: pprof
// takes the first mapping for the profile's "File:".
func (b *PprofBuilder) Write(w io.Writer) error {
	var main *pprofMapping
	for m, n := range b.mainVotes {
		if main == nil || n > b.mainVotes[main] || n == b.mainVotes[main] && m.id < main.id {
			main = m
		}
	}
	ms := b.p.mappings
	sort.SliceStable(ms, func(i, j int) bool { return ms[i] == main && ms[j] != main })
	for i, m := range ms {
		m.id = uint64(i + 1)
	}
	if main != nil {
		b.p.comments = []string{"main binary: " + filepath.Base(main.file)}
	}
	zw := gzip.NewWriter(w)
	if _, err := zw.Write(b.p.marshal()); err != nil {
		zw.Close()
		return err
	}
	return zw.Close()
}
