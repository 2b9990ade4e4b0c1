package report

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/ustack/ustack/perfdata"
)

// Attribute keys and values of the OpenTelemetry profiles signal, spelled
// out as the OpenTelemetry eBPF profiler writes them: they are the keys a
// Collector or backend joins on.
const (
	OTLPBuildIDKey   = "process.executable.build_id.gnu"
	OTLPFrameTypeKey = "profile.frame.type"
	OTLPPidKey       = "process.pid"
	OTLPTidKey       = "thread.id"
	OTLPThreadKey    = "thread.name"

	// Frame types (profile.frame.type): native code, the kernel, and the
	// runtimes whose JIT code ustack names from a perf map or jitdump.
	FrameNative  = "native"
	FrameKernel  = "kernel"
	FrameV8      = "v8js"
	FrameJVM     = "jvm"
	FrameDotnet  = "dotnet"
	FrameCPython = "cpython"
	FrameUnknown = "unknown"
)

// OTLPBuilder collects samples into an OpenTelemetry profiles request
// (opentelemetry.proto.profiles.v1development, built with pdata's
// pprofile): one dictionary for the whole report (strings, functions,
// mappings with their GNU build-id, locations, stacks, attributes) and one
// profile per event.
//
// A location is one physical frame: its address, its mapping, and its
// lines innermost first, the functions inlined at the address before the
// function they were inlined into, as the proto orders them. A frame with
// no name has no lines, as the OpenTelemetry eBPF profiler sends native
// frames, so that a symbolizer downstream can name it by its mapping's
// build-id. Each location carries profile.frame.type. A stack lists its
// locations leaf first.
//
// Samples of one stack and one thread (process.pid, thread.id,
// thread.name) are one OTLP sample with a value and a timestamp per
// recorded sample: the period in nanoseconds for cpu-clock and
// task-clock (sample type cpu/nanoseconds), the period for other events
// (sample type EVENT/count; 1 for tracepoints and probes).
type OTLPBuilder struct {
	req      pprofile.Profiles
	dict     pprofile.ProfilesDictionary
	scope    pprofile.ScopeProfiles
	strings  map[string]int32
	funcs    map[otlpFunc]int32
	mappings map[mapKey]int32
	kernel   map[string]int32
	locs     map[string]int32
	stacks   map[string]int32
	attrs    map[otlpAttr]int32
	profiles map[string]*otlpProfile
	names    *names
	clock    map[string]bool
	periods  map[string]int64
	order    []string // events, in first-sample order

	// LastSample is the wall-clock time of the last sample, where the
	// timestamps are moved to (the zero value: when Profiles is called).
	LastSample time.Time
	// WallClock, when set, turns a sample's time into Unix nanoseconds
	// (a live recording knows its clock's offset), instead of LastSample.
	WallClock func(t uint64) uint64
	// latest is the latest sample time seen, in the recording's clock.
	latest uint64
	// profileAttrs are set on every profile (SetProfileAttribute).
	profileAttrs []int32

	key   []byte
	lines []otlpLine
	stack []int32
}

type otlpFunc struct{ name, system, file string }

type otlpAttr struct {
	key string
	str string
	num int64
	isN bool
}

type otlpProfile struct {
	p        pprofile.Profile
	samples  map[otlpSampleKey]int
	min, max uint64
	n        int // samples added
}

type otlpSampleKey struct {
	stack            int32
	pid, tid, thread int32
}

// NewOTLPBuilder returns an empty builder. Names are demangled (short
// form, as folded stacks print them; the mangled name is the function's
// system name) unless raw is set.
func NewOTLPBuilder(raw bool) *OTLPBuilder {
	b := &OTLPBuilder{
		req:      pprofile.NewProfiles(),
		strings:  map[string]int32{},
		funcs:    map[otlpFunc]int32{},
		mappings: map[mapKey]int32{},
		kernel:   map[string]int32{},
		locs:     map[string]int32{},
		stacks:   map[string]int32{},
		attrs:    map[otlpAttr]int32{},
		profiles: map[string]*otlpProfile{},
		names:    newNames(raw),
		clock:    map[string]bool{},
		periods:  map[string]int64{},
	}
	b.dict = b.req.Dictionary()
	// Index 0 of every table is the zero value, as the proto asks.
	b.str("")
	b.dict.MappingTable().AppendEmpty()
	b.dict.LocationTable().AppendEmpty()
	b.dict.FunctionTable().AppendEmpty()
	b.dict.StackTable().AppendEmpty()
	b.dict.AttributeTable().AppendEmpty()
	b.dict.LinkTable().AppendEmpty()
	rp := b.req.ResourceProfiles().AppendEmpty()
	b.scope = rp.ScopeProfiles().AppendEmpty()
	b.scope.Scope().SetName("ustack")
	return b
}

// SetEvents tells the builder which events count time (cpu-clock and
// task-clock: cpu/nanoseconds) and their fixed period, if any.
func (b *OTLPBuilder) SetEvents(attrs []*perfdata.Attr) {
	for _, a := range attrs {
		if isClock(a) {
			b.clock[a.Name] = true
			if a.Flags&perfdata.AttrFreq == 0 {
				b.periods[a.Name] = int64(a.SamplePeriod)
			} else if a.SamplePeriod > 0 { // a frequency
				b.periods[a.Name] = int64(1e9 / a.SamplePeriod)
			}
		}
	}
}

// Profiles returns what the builder holds: the request to marshal or
// send. The builder must not be used after.
func (b *OTLPBuilder) Profiles() pprofile.Profiles {
	end := b.LastSample
	if end.IsZero() {
		end = time.Now()
	}
	// Unix time = the recording's clock + offset.
	offset := uint64(end.UnixNano()) - b.latest
	unix := func(t uint64) uint64 { return t + offset }
	if b.WallClock != nil {
		unix = b.WallClock
	}
	for _, name := range b.order {
		op := b.profiles[name]
		op.p.SetTime(pcommon.Timestamp(unix(op.min)))
		op.p.SetDurationNano(op.max - op.min)
		op.p.AttributeIndices().Append(b.profileAttrs...)
		ss := op.p.Samples()
		for i := 0; i < ss.Len(); i++ {
			ts := ss.At(i).TimestampsUnixNano()
			for j := 0; j < ts.Len(); j++ {
				ts.SetAt(j, unix(ts.At(j)))
			}
		}
	}
	return b.req
}

// SetClockEvent says that event counts time in nanoseconds (cpu-clock,
// task-clock: cpu/nanoseconds), every period nanoseconds; for a builder
// given no recording's events (SetEvents).
func (b *OTLPBuilder) SetClockEvent(event string, period int64) {
	b.clock[event] = true
	b.periods[event] = period
}

// SetProfileAttribute sets an integer attribute on every profile.
func (b *OTLPBuilder) SetProfileAttribute(key string, value int64) {
	b.profileAttrs = append(b.profileAttrs, b.attr(otlpAttr{key: key, num: value, isN: true}))
}

// Add adds one sample.
func (b *OTLPBuilder) Add(s *Sample) {
	op := b.profile(s.Event)
	b.stack = b.stack[:0]
	b.lines = b.lines[:0]
	for i := range s.Frames {
		f := &s.Frames[i]
		b.lines = append(b.lines, b.line(f))
		if f.Inlined {
			continue // its caller's frame at the same address follows
		}
		b.stack = append(b.stack, b.location(s, f))
		b.lines = b.lines[:0]
	}
	st := b.stackIndex()
	k := otlpSampleKey{stack: st,
		pid:    b.attr(otlpAttr{key: OTLPPidKey, num: printedID(s.Pid), isN: true}),
		tid:    b.attr(otlpAttr{key: OTLPTidKey, num: printedID(s.Tid), isN: true}),
		thread: b.attr(otlpAttr{key: OTLPThreadKey, str: s.Comm}),
	}
	i, ok := op.samples[k]
	if !ok {
		i = op.p.Samples().Len()
		op.samples[k] = i
		ps := op.p.Samples().AppendEmpty()
		ps.SetStackIndex(st)
		ps.AttributeIndices().Append(k.pid, k.tid, k.thread)
	}
	ps := op.p.Samples().At(i)
	ps.Values().Append(int64(s.Period))
	t := s.Time
	ps.TimestampsUnixNano().Append(t)
	if op.n == 0 || t < op.min {
		op.min = t
	}
	op.n++
	op.max = max(op.max, t)
	b.latest = max(b.latest, t)
}

// profile returns the profile of an event, made at its first sample.
func (b *OTLPBuilder) profile(event string) *otlpProfile {
	if op := b.profiles[event]; op != nil {
		return op
	}
	p := b.scope.Profiles().AppendEmpty()
	var id pprofile.ProfileID
	rand.Read(id[:])
	p.SetProfileID(id)
	typ, unit := event, "count"
	if b.clock[event] {
		typ, unit = "cpu", "nanoseconds"
		p.PeriodType().SetTypeStrindex(b.str(typ))
		p.PeriodType().SetUnitStrindex(b.str(unit))
		p.SetPeriod(b.periods[event])
	}
	p.SampleType().SetTypeStrindex(b.str(typ))
	p.SampleType().SetUnitStrindex(b.str(unit))
	op := &otlpProfile{p: p, samples: map[otlpSampleKey]int{}}
	b.profiles[event] = op
	b.order = append(b.order, event)
	return op
}

// intern returns k's index in its table, which m keeps: the first time,
// add appends k's entry and returns its index.
func intern[K comparable](m map[K]int32, k K, add func() int32) int32 {
	if i, ok := m[k]; ok {
		return i
	}
	i := add()
	m[k] = i
	return i
}

func (b *OTLPBuilder) str(s string) int32 {
	return intern(b.strings, s, func() int32 {
		t := b.dict.StringTable()
		t.Append(s)
		return int32(t.Len() - 1)
	})
}

func (b *OTLPBuilder) attr(a otlpAttr) int32 {
	return intern(b.attrs, a, func() int32 {
		t := b.dict.AttributeTable()
		kv := t.AppendEmpty()
		kv.SetKeyStrindex(b.str(a.key))
		if a.isN {
			kv.Value().SetInt(a.num)
		} else {
			kv.Value().SetStr(a.str)
		}
		return int32(t.Len() - 1)
	})
}

// otlpLine is a location's line before it is stored: a function (0 for a
// frame without a name) and a source line.
type otlpLine struct {
	fn   int32
	line int64
}

func (b *OTLPBuilder) line(f *Frame) otlpLine {
	if f.Symbol == "" {
		return otlpLine{}
	}
	k := otlpFunc{name: b.names.Short(f.Symbol), system: f.Symbol, file: f.File}
	fn := intern(b.funcs, k, func() int32 {
		t := b.dict.FunctionTable()
		fn := t.AppendEmpty()
		fn.SetNameStrindex(b.str(k.name))
		fn.SetSystemNameStrindex(b.str(k.system))
		fn.SetFilenameStrindex(b.str(k.file))
		return int32(t.Len() - 1)
	})
	return otlpLine{fn: fn, line: int64(f.Line)}
}

// location returns the location of a physical frame whose lines are in
// b.lines.
func (b *OTLPBuilder) location(s *Sample, f *Frame) int32 {
	var mi int32
	if m, ok := s.MappingOf(f); ok {
		mi = b.mapping(m)
	} else if f.Kernel {
		mi = b.kernelMapping(f)
	}
	typ := b.attr(otlpAttr{key: OTLPFrameTypeKey, str: frameType(s, f)})
	// Named lines only: a frame without a name has none.
	named := b.lines[:0]
	for _, l := range b.lines {
		if l.fn != 0 {
			named = append(named, l)
		}
	}
	b.lines = named
	b.key = strconv.AppendInt(b.key[:0], int64(mi), 16)
	b.key = append(b.key, ' ')
	b.key = strconv.AppendUint(b.key, f.Addr, 16)
	b.key = append(b.key, ' ')
	b.key = strconv.AppendInt(b.key, int64(typ), 16)
	for _, l := range named {
		b.key = append(b.key, ' ')
		b.key = strconv.AppendInt(b.key, int64(l.fn), 16)
		b.key = append(b.key, ':')
		b.key = strconv.AppendInt(b.key, l.line, 10)
	}
	return intern(b.locs, string(b.key), func() int32 {
		t := b.dict.LocationTable()
		loc := t.AppendEmpty()
		loc.SetMappingIndex(mi)
		loc.SetAddress(f.Addr)
		for _, l := range named {
			pl := loc.Lines().AppendEmpty()
			pl.SetFunctionIndex(l.fn)
			pl.SetLine(l.line)
		}
		loc.AttributeIndices().Append(typ)
		return int32(t.Len() - 1)
	})
}

func (b *OTLPBuilder) stackIndex() int32 {
	b.key = b.key[:0]
	for _, l := range b.stack {
		b.key = strconv.AppendInt(b.key, int64(l), 16)
		b.key = append(b.key, ' ')
	}
	return intern(b.stacks, string(b.key), func() int32 {
		t := b.dict.StackTable()
		t.AppendEmpty().LocationIndices().Append(b.stack...)
		return int32(t.Len() - 1)
	})
}

func (b *OTLPBuilder) mapping(m Mapping) int32 {
	return intern(b.mappings, mapKey{m.File, m.Start, m.Offset}, func() int32 {
		t := b.dict.MappingTable()
		pm := t.AppendEmpty()
		pm.SetMemoryStart(m.Start)
		pm.SetMemoryLimit(m.Limit)
		pm.SetFileOffset(m.Offset)
		pm.SetFilenameStrindex(b.str(m.File))
		if len(m.BuildID) > 0 {
			pm.AttributeIndices().Append(b.attr(otlpAttr{key: OTLPBuildIDKey, str: hex.EncodeToString(m.BuildID)}))
		}
		return int32(t.Len() - 1)
	})
}

// kernelMapping returns the mapping of the kernel (or a module), spanning
// the kernel addresses seen.
func (b *OTLPBuilder) kernelMapping(f *Frame) int32 {
	t := b.dict.MappingTable()
	i, ok := b.kernel[f.Module]
	if !ok {
		i = int32(t.Len())
		pm := t.AppendEmpty()
		pm.SetMemoryStart(f.Addr)
		pm.SetMemoryLimit(f.Addr + 1)
		pm.SetFilenameStrindex(b.str(f.Module))
		b.kernel[f.Module] = i
	}
	pm := t.At(int(i))
	pm.SetMemoryStart(min(pm.MemoryStart(), f.Addr))
	pm.SetMemoryLimit(max(pm.MemoryLimit(), f.Addr+1))
	return i
}

// frameType is a frame's profile.frame.type: kernel, native, or for code
// a JIT described in a perf map or jitdump, the runtime's as the
// OpenTelemetry eBPF profiler names it where the process tells which
// (unknown otherwise).
func frameType(s *Sample, f *Frame) string {
	switch {
	case f.Kernel:
		return FrameKernel
	case !isJIT(f.Module):
		return FrameNative
	case strings.HasPrefix(f.Symbol, "py::"):
		return FrameCPython // python -X perf's trampolines
	}
	comm := s.Comm
	switch {
	case comm == "node" || comm == "nodejs" || strings.HasPrefix(comm, "node-"):
		return FrameV8
	case comm == "java" || strings.HasPrefix(f.Symbol, "L") && strings.Contains(f.Symbol, ";"):
		return FrameJVM
	case comm == "dotnet":
		return FrameDotnet
	}
	return FrameUnknown
}

// isJIT tells a JIT's perf map (/tmp/perf-PID.map) or jitdump
// (jit-PID.dump) from an object.
func isJIT(module string) bool {
	base := baseName(module)
	return strings.HasPrefix(base, "perf-") && strings.HasSuffix(base, ".map") ||
		strings.HasPrefix(base, "jit-") && strings.HasSuffix(base, ".dump")
}

// otlpWriter is the Writer of the otlp and otlp-json formats.
type otlpWriter struct {
	b       *OTLPBuilder
	w       io.Writer
	json    bool
	session *perfdata.Session // events to take at the first sample
}

func newOTLPWriter(w io.Writer, o WriterOptions, json bool) *otlpWriter {
	b := NewOTLPBuilder(o.Raw)
	b.LastSample = o.LastSample
	if o.Attrs != nil {
		b.SetEvents(o.Attrs)
	}
	return &otlpWriter{b: b, w: w, json: json, session: o.Session}
}

func (o *otlpWriter) Write(s *Sample) error {
	if o.session != nil {
		o.b.SetEvents(o.session.Attrs)
		o.session = nil
	}
	o.b.Add(s)
	return nil
}

func (o *otlpWriter) Close() error {
	data, err := MarshalOTLP(o.b.Profiles(), o.json)
	if err != nil {
		return err
	}
	_, err = o.w.Write(data)
	return err
}

// MarshalOTLP encodes profiles as an ExportProfilesServiceRequest:
// protobuf, or with json set the OTLP/JSON form (one request on one line,
// as the Collector's otlpjsonfile receiver reads it).
func MarshalOTLP(p pprofile.Profiles, json bool) ([]byte, error) {
	if json {
		var m pprofile.JSONMarshaler
		data, err := m.MarshalProfiles(p)
		if err != nil {
			return nil, err
		}
		return append(data, '\n'), nil
	}
	var m pprofile.ProtoMarshaler
	return m.MarshalProfiles(p)
}
