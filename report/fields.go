package report

import (
	"fmt"
	"strings"

	"github.com/ustack/ustack/perfdata"
)

// Fields is a set of the columns `perf script -F` prints, by perf's field
// names (FieldNames).
type Fields uint32

// The fields ustack's text format prints, in perf script's order.
const (
	FieldComm Fields = 1 << iota
	FieldPid
	FieldTid
	FieldCPU
	FieldTime
	FieldPeriod
	FieldEvent
	FieldTrace
	FieldIP
	FieldSym
	FieldSymOff
	FieldDSO
	FieldSrcline
)

// fieldNames are perf script's names for the fields, in its order.
var fieldNames = [...]struct {
	name string
	f    Fields
	// sample is the sample_type bit the field needs (0: none).
	sample uint64
	// what is perf's name for that bit in its error message.
	what string
}{
	{"comm", FieldComm, 0, ""},
	{"pid", FieldPid, perfdata.SampleTID, "TID"},
	{"tid", FieldTid, perfdata.SampleTID, "TID"},
	{"cpu", FieldCPU, perfdata.SampleCPU, "CPU"},
	{"time", FieldTime, perfdata.SampleTime, "TIME"},
	// perf 6.1 prints the period of events without PERF_SAMPLE_PERIOD
	// (perf record -c N): attr.sample_period.
	{"period", FieldPeriod, 0, ""},
	{"event", FieldEvent, 0, ""},
	{"trace", FieldTrace, perfdata.SampleRaw, "RAW"},
	{"ip", FieldIP, perfdata.SampleIP, "IP"},
	{"sym", FieldSym, 0, ""},
	{"symoff", FieldSymOff, 0, ""},
	{"dso", FieldDSO, 0, ""},
	{"srcline", FieldSrcline, 0, ""},
}

// FieldNames returns the -F field names ustack understands, in perf's order.
func FieldNames() []string {
	out := make([]string, len(fieldNames))
	for i, f := range fieldNames {
		out[i] = f.name
	}
	return out
}

// String returns the fields as a -F list.
func (f Fields) String() string {
	var parts []string
	for _, n := range fieldNames {
		if f&n.f != 0 {
			parts = append(parts, n.name)
		}
	}
	return strings.Join(parts, ",")
}

// Default fields of perf script 6.1 (builtin-script.c, output[]): every
// event type prints comm, tid, cpu, time and the event name; tracepoints
// add their fields, the others the sampled ip as sym+off (dso) and the
// period. Columns whose sample_type bit the recording lacks are dropped.
const (
	defaultSampleFields     = FieldComm | FieldTid | FieldCPU | FieldTime | FieldEvent | FieldIP | FieldSym | FieldSymOff | FieldDSO | FieldPeriod
	defaultTracepointFields = FieldComm | FieldTid | FieldCPU | FieldTime | FieldEvent | FieldTrace
	// legacyFields are the fields NewTextWriter prints: those of
	// `perf script -F comm,tid,time,event,ip,sym,symoff,dso`.
	legacyFields = FieldComm | FieldTid | FieldTime | FieldEvent | FieldIP | FieldSym | FieldSymOff | FieldDSO
)

// FieldSpec is a parsed perf script -F argument: either a list that
// replaces the defaults ("comm,tid,ip") or changes to them ("+srcline,-cpu").
// The zero value keeps perf's defaults.
type FieldSpec struct {
	// Set replaces the defaults when Replace is true.
	Set     Fields
	Replace bool
	// Add and Remove change the defaults.
	Add, Remove Fields
}

// ParseFields parses a -F argument as perf script does: comma-separated
// field names, all of them plain (the fields to print) or all prefixed with
// + or - (added to or removed from the defaults).
func ParseFields(spec string) (FieldSpec, error) {
	var fs FieldSpec
	if strings.TrimSpace(spec) == "" {
		return fs, fmt.Errorf("-F: empty field list (fields: %s)", strings.Join(FieldNames(), ","))
	}
	if i := strings.IndexByte(spec, ':'); i >= 0 {
		return fs, fmt.Errorf("-F %s: per-event-type field lists (TYPE:FIELDS) are not supported; give the fields for every event", spec)
	}
	mode := byte(0)
	for _, tok := range strings.Split(spec, ",") {
		tok = strings.TrimSpace(tok)
		m := byte('=')
		if tok != "" && (tok[0] == '+' || tok[0] == '-') {
			m, tok = tok[0], tok[1:]
		}
		if mode != 0 && (mode == '=') != (m == '=') {
			return fs, fmt.Errorf("-F %s: cannot mix +-field with overridden fields", spec)
		}
		mode = m
		f, ok := lookupField(tok)
		if !ok {
			return fs, fmt.Errorf("-F: unknown field %q (fields: %s)", tok, strings.Join(FieldNames(), ","))
		}
		switch m {
		case '+':
			fs.Add |= f
			fs.Remove &^= f
		case '-':
			fs.Remove |= f
			fs.Add &^= f
		default:
			fs.Set |= f
			fs.Replace = true
		}
	}
	return fs, nil
}

func lookupField(name string) (Fields, bool) {
	for _, n := range fieldNames {
		if n.name == name {
			return n.f, true
		}
	}
	return 0, false
}

// userSet reports whether the spec changes perf's defaults at all (perf
// then no longer adds the call chain columns to tracepoints).
func (fs FieldSpec) userSet() bool { return fs.Replace || fs.Add != 0 || fs.Remove != 0 }

// explicit returns the fields the user named to be printed.
func (fs FieldSpec) explicit() Fields {
	if fs.Replace {
		return fs.Set
	}
	return fs.Add
}

// eventLayout is how the text format prints the samples of one event.
type eventLayout struct {
	fields Fields
	// callchain: the stack prints as one line per frame after the
	// header; otherwise the sampled ip ends the header line.
	callchain bool
}

// hasStack reports whether an event's samples carry a stack: a kernel call
// chain or the user registers and stack to unwind.
func hasStack(a *perfdata.Attr) bool {
	return a.SampleType&perfdata.SampleCallchain != 0 ||
		a.SampleType&(perfdata.SampleRegsUser|perfdata.SampleStackUser) == perfdata.SampleRegsUser|perfdata.SampleStackUser
}

// eventLayouts computes, for every event of a recording, the fields perf
// script prints for it with the given -F, following builtin-script.c:
// defaults by event type, tracepoints gaining ip,sym,symoff,dso when the
// recording has call chains (unless -F was given), default columns dropped
// where the samples lack their data, and an error for a column asked for
// whose data the samples do not carry.
//
// A pipe's events arrive after -F was taken (perf script's process_attr):
// there every event of a recording with call chains gains ip and sym, not
// symoff and dso, with -F or without, unless -F removed them.
func eventLayouts(attrs []*perfdata.Attr, spec FieldSpec, pipe bool) (map[string]eventLayout, error) {
	useCallchain := false
	tracepointChain := false
	for _, a := range attrs {
		if hasStack(a) {
			useCallchain = true
			if a.Type == perfdata.TypeTracepoint {
				tracepointChain = true
			}
		}
	}
	out := make(map[string]eventLayout, len(attrs))
	for _, a := range attrs {
		f := defaultSampleFields
		if a.Type == perfdata.TypeTracepoint {
			f = defaultTracepointFields
			if tracepointChain && !spec.userSet() && !pipe {
				f |= FieldIP | FieldSym | FieldSymOff | FieldDSO
			}
		}
		if spec.Replace {
			f = spec.Set
		}
		f = (f | spec.Add) &^ spec.Remove
		if pipe && useCallchain {
			f |= (FieldIP | FieldSym) &^ spec.Remove
		}
		if a.Type != perfdata.TypeTracepoint {
			f &^= FieldTrace // perf: "'trace' not valid for software events. Ignoring."
		}
		for _, n := range fieldNames {
			if f&n.f == 0 || n.sample == 0 || a.SampleType&n.sample != 0 {
				continue
			}
			if spec.explicit()&n.f != 0 {
				return nil, fmt.Errorf("samples for '%s' event do not have %s attribute set. Cannot print '%s' field", a.Name, n.what, n.name)
			}
			f &^= n.f
		}
		if f&FieldIP == 0 {
			if spec.explicit()&(FieldSym|FieldDSO|FieldSrcline) != 0 {
				return nil, fmt.Errorf("-F: sym, dso and srcline need ip: the address to look up")
			}
			f &^= FieldSym | FieldSymOff | FieldDSO | FieldSrcline
		}
		if f&FieldSymOff != 0 && f&FieldSym == 0 {
			if spec.explicit()&FieldSymOff != 0 {
				return nil, fmt.Errorf("-F: symoff needs sym")
			}
			f &^= FieldSymOff
		}
		out[a.Name] = eventLayout{fields: f, callchain: useCallchain && hasStack(a)}
	}
	return out, nil
}

// TraceFields are a tracepoint sample's fields, decoded with the format the
// recording's tracing data gives for its event. They are empty for other
// events, and for tracepoints whose format is unknown.
type TraceFields struct {
	// Text is the fields as perf script prints them after the event
	// name ("dfd: 0xffffff9c, filename: 0x7f..., flags: 0x00080000,
	// mode: 0x00000000"). It is valid, like the Sample, only until
	// the Sample is handed on.
	Text []byte
	// List holds the same fields by name, in the format's order (filled
	// by Run only with Options.TraceValues).
	List []TraceField
}

// TraceField is one field of a tracepoint sample.
type TraceField struct {
	Name string
	// Value is an int64 or uint64 for numeric fields, a string for
	// strings, or a []int64 or []uint64 for arrays (a []byte, from a
	// hand-made Sample, is an array too).
	Value any
}
