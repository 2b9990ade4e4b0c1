package report

import (
	"bufio"
	"io"
	"strconv"
	"strings"

	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/resolve"
)

// TextWriter prints samples the way `perf script` does: with the fields
// perf script prints by default for each event of the recording
// (NewTextWriterFor), or those of `perf script -F
// comm,tid,time,event,ip,sym,symoff,dso` (NewTextWriter), so that tools
// reading perf script output (FlameGraph's stackcollapse-perf.pl,
// speedscope, the Firefox Profiler, hotspot) read it too.
type TextWriter struct {
	// Srcline adds each frame's source file and line on a line of its
	// own, like perf script -F +srcline.
	Srcline bool
	// PerfMapNames prints the module of a frame in anonymous memory
	// ("//anon", where JITs put their code) as perf script does: the
	// JIT's symbol map, /tmp/perf-PID.map, whether or not that file
	// exists. NewTextWriterFor sets it, for recordings; a core dump's
	// text keeps the mapping's name, as there is no perf map to name.
	PerfMapNames bool

	w          *bufio.Writer
	eventWidth int
	buf        []byte
	names      *names
	// layouts holds each event's fields by name; nil prints every event
	// with legacy.
	layouts   map[string]eventLayout
	lastEvent string
	last      eventLayout
}

// legacy is the layout of NewTextWriter.
var legacy = eventLayout{fields: legacyFields, callchain: true}

// coreLayout is the layout of a core dump's threads: comm, pid/tid, the
// event and the signal, then the stack.
var coreLayout = eventLayout{fields: FieldComm | FieldPid | FieldTid | FieldEvent | FieldIP | FieldSym | FieldSymOff | FieldDSO, callchain: true}

// NewTextWriter returns a writer for samples whose event names are at most
// eventWidth characters long (perf pads event names to the longest one in
// the recording), printing the fields of perf script -F
// comm,tid,time,event,ip,sym,symoff,dso. Names are demangled as perf does
// unless raw is set.
func NewTextWriter(w io.Writer, eventWidth int, raw bool) *TextWriter {
	return &TextWriter{w: bufio.NewWriterSize(w, 1<<16), eventWidth: eventWidth, names: newNames(raw), last: legacy}
}

// NewTextWriterFor returns a writer printing the samples of a recording
// with the events attrs as perf script does with the -F argument spec (the
// zero FieldSpec: perf script's defaults for each event). It fails, as perf
// script does, when spec asks for a field the samples do not carry.
func NewTextWriterFor(w io.Writer, attrs []*perfdata.Attr, spec FieldSpec, raw bool) (*TextWriter, error) {
	return newTextWriterFor(w, attrs, spec, raw, false)
}

// newTextWriterFor is NewTextWriterFor, for the events of a pipe when pipe
// is set.
func newTextWriterFor(w io.Writer, attrs []*perfdata.Attr, spec FieldSpec, raw, pipe bool) (*TextWriter, error) {
	layouts, err := eventLayouts(attrs, spec, pipe)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(attrs))
	for i, a := range attrs {
		names[i] = a.Name
	}
	t := NewTextWriter(w, EventWidth(names), raw)
	t.PerfMapNames = true
	t.layouts = layouts
	return t, nil
}

// layout returns the layout of an event's samples.
func (t *TextWriter) layout(event string) eventLayout {
	if (event == CoreEvent || event == GoroutineEvent) && (t.layouts == nil || t.layouts[event].fields == 0) {
		return coreLayout
	}
	if t.layouts == nil || event == t.lastEvent && t.lastEvent != "" {
		return t.last
	}
	l, ok := t.layouts[event]
	if !ok {
		l = eventLayout{fields: defaultSampleFields &^ FieldPeriod, callchain: true}
	}
	t.lastEvent, t.last = event, l
	return l
}

// Write prints one sample.
func (t *TextWriter) Write(s *Sample) error {
	lay := t.layout(s.Event)
	f := lay.fields
	if t.Srcline && f&FieldIP != 0 {
		f |= FieldSrcline
	}
	b := t.appendHeader(t.buf[:0], s, f, lay.callchain)
	if f&FieldIP != 0 {
		if lay.callchain {
			b = append(b, '\n')
			b = t.appendCallchain(b, s, f)
		} else {
			b = append(b, ' ')
			b = t.appendIP(b, s, f)
		}
	}
	b = append(b, '\n')
	t.buf = b
	_, err := t.w.Write(b)
	return err
}

// appendHeader prints the fields before the stack as perf script's
// perf_sample__fprintf_start and process_event do.
func (t *TextWriter) appendHeader(b []byte, s *Sample, f Fields, callchain bool) []byte {
	if f&FieldComm != 0 {
		comm := s.Comm
		if len(comm) > 15 {
			comm = comm[:15]
		}
		if f&FieldIP == 0 || !callchain {
			for i := len(comm); i < 16; i++ {
				b = append(b, ' ')
			}
		}
		b = append(b, comm...)
		b = append(b, ' ')
	}
	switch {
	case f&FieldPid != 0 && f&FieldTid != 0:
		b = appendIDPadded(b, s.Pid, 5)
		b = append(b, '/')
		n := len(b)
		b = strconv.AppendInt(b, printedID(s.Tid), 10)
		for i := len(b) - n; i < 5; i++ {
			b = append(b, ' ')
		}
		b = append(b, ' ')
	case f&FieldPid != 0:
		b = appendIDPadded(b, s.Pid, 5)
		b = append(b, ' ')
	case f&FieldTid != 0:
		b = appendIDPadded(b, s.Tid, 5)
		b = append(b, ' ')
	}
	if f&FieldCPU != 0 {
		b = append(b, '[')
		b = appendUintPadded(b, uint64(s.CPU), 10, 3, '0')
		b = append(b, "] "...)
	}
	if f&FieldTime != 0 {
		// "%12s: " of seconds.microseconds.
		var tb [32]byte
		ts := strconv.AppendUint(tb[:0], s.Time/1e9, 10)
		ts = append(ts, '.')
		ts = appendUintPadded(ts, s.Time%1e9/1e3, 10, 6, '0')
		for i := len(ts); i < 12; i++ {
			b = append(b, ' ')
		}
		b = append(b, ts...)
		b = append(b, ": "...)
	}
	if f&FieldPeriod != 0 {
		b = appendUintPadded(b, s.Period, 10, 10, ' ')
		b = append(b, ' ')
	}
	if f&FieldEvent != 0 {
		for i := len(s.Event); i < t.eventWidth; i++ {
			b = append(b, ' ')
		}
		b = append(b, s.Event...)
		// A core's thread: "core: SIGSEGV" on the signalled one, "core"
		// on the others.
		if s.Event != CoreEvent || s.Signal != "" || f&FieldTrace != 0 {
			b = append(b, ": "...)
		}
		if g := s.Goroutine; g != nil {
			b = appendGoroutine(b, g)
			if s.Signal != "" {
				b = append(b, ' ')
			}
		}
		b = append(b, s.Signal...)
	}
	if f&FieldTrace != 0 {
		b = append(b, s.TraceFields.Text...)
	}
	return b
}

// appendCallchain prints the stack one frame a line.
func (t *TextWriter) appendCallchain(b []byte, s *Sample, f Fields) []byte {
	// perf cannot start an unwind in a process it holds no maps of, nor
	// without stack bytes (the kernel could not copy them), and prints
	// no user frames then; JSON keeps what ustack found. (A PC outside
	// the maps it holds, perf prints, [unknown], and so does ustack.) A
	// call chain or sampled IP (no unwind, no Stop) is printed as
	// recorded, and so is a stack the kernel's call chain carried
	// (StopCallchain: perf prints the chain when it cannot unwind).
	// A core dump's threads are printed whole, as gdb does.
	noUser := s.Stop != "" && s.Stop != StopCallchain && s.StackSize == 0
	for i := range s.Frames {
		fr := &s.Frames[i]
		if !fr.Kernel && s.Stop != "" && s.Event != CoreEvent && (noUser || s.noMaps && fr.Module == "" && (i == 0 || s.Frames[i-1].Kernel)) {
			noUser = true
			continue
		}
		b = t.appendFrame(b, fr, f, s.Pid)
	}
	return b
}

// appendIP prints the sampled ip on the header line, as perf script does
// for events without a call chain: the absolute address, the symbol the
// symbol table gives it and its object.
func (t *TextWriter) appendIP(b []byte, s *Sample, f Fields) []byte {
	var fr *Frame
	for i := range s.Frames {
		if !s.Frames[i].Inlined {
			fr = &s.Frames[i]
			break
		}
	}
	if fr != nil && fr.PC != s.IP {
		fr = nil
	}
	b = appendUintPadded(b, s.IP, 16, 16, ' ')
	if f&FieldSym != 0 {
		b = append(b, ' ')
		if fr == nil || fr.Symbol == "" {
			b = append(b, "[unknown]"...)
		} else {
			b = append(b, t.names.Short(fr.Symbol)...)
			if f&FieldSymOff != 0 {
				b = append(b, "+0x"...)
				b = strconv.AppendUint(b, fr.SymOff, 16)
			}
		}
	}
	if f&FieldDSO != 0 {
		b = append(b, " ("...)
		if fr == nil || fr.Module == "" {
			b = append(b, "[unknown]"...)
		} else {
			b = t.appendModule(b, fr.Module, s.Pid)
		}
		b = append(b, ')')
	}
	if f&FieldSrcline != 0 && fr != nil {
		b = append(b, '\n')
		b = appendSrcline(b, fr, false)
		b = b[:len(b)-1]
	}
	return b
}

// Flush writes buffered output.
func (t *TextWriter) Flush() error { return t.w.Flush() }

// appendIDPadded appends a pid or tid right-aligned to width as perf prints
// them: as a signed int, so that the -1 of a sample no task owns reads -1.
func appendIDPadded(b []byte, id uint32, width int) []byte {
	var digits [12]byte
	field := strconv.AppendInt(digits[:0], printedID(id), 10)
	for i := len(field); i < width; i++ {
		b = append(b, ' ')
	}
	return append(b, field...)
}

// appendUintPadded appends v in base, right-aligned to width with pad,
// without allocating.
func appendUintPadded(b []byte, v uint64, base, width int, pad byte) []byte {
	if base == 16 && width == 16 {
		return appendHex16(b, v, pad)
	}
	var digits [24]byte
	field := strconv.AppendUint(digits[:0], v, base)
	for i := len(field); i < width; i++ {
		b = append(b, pad)
	}
	return append(b, field...)
}

// appendHex16 is appendUintPadded for base 16 and width 16 (every frame's
// address): the 16 bytes written in place from the last digit back, where
// strconv's general conversion and the copy after it were 2.7% of a large
// report's CPU.
func appendHex16(b []byte, v uint64, pad byte) []byte {
	const hex = "0123456789abcdef"
	n := len(b)
	b = append(b, "                "...) // 16 bytes, overwritten below
	d := b[n : n+16]
	i := 15
	for {
		d[i] = hex[v&15]
		v >>= 4
		if v == 0 {
			break
		}
		i--
	}
	for i--; i >= 0; i-- {
		d[i] = pad
	}
	return b
}

// appendFrame prints one frame line as perf does: the address (map-relative
// for user code), symbol+offset, and the object in parentheses, or
// "(inlined)" for a function inlined at that address. Every physical frame
// names its object, also where perf labels it "(inlined)" because its
// debug-info name differs from its symbol-table name.
func (t *TextWriter) appendFrame(b []byte, f *Frame, fields Fields, pid uint32) []byte {
	b = append(b, '\t')
	addr := f.Offset
	if f.Module == "" {
		addr = f.Addr
	}
	b = appendUintPadded(b, addr, 16, 16, ' ')
	name, inlined := t.names.Short(f.Symbol), f.Inlined
	srcline := fields&FieldSrcline != 0
	switch {
	case fields&FieldSym == 0:
	case name == "":
		b = append(b, " [unknown]"...)
	default:
		b = append(b, ' ')
		b = append(b, name...)
		if fields&FieldSymOff != 0 {
			b = append(b, "+0x"...)
			b = strconv.AppendUint(b, f.SymOff, 16)
		}
	}
	switch {
	case inlined && srcline:
		// perf moves "(inlined)" to the source line.
	case inlined:
		b = append(b, " (inlined)"...)
	case f.How == resolve.HowTailCall && !srcline:
		// A frame with no stack of its own, like an inlined one.
		b = append(b, " (tailcall)"...)
	case fields&FieldDSO == 0:
	case f.Module == "":
		b = append(b, " ([unknown])"...)
	default:
		b = append(b, " ("...)
		b = t.appendModule(b, f.Module, pid)
		b = append(b, ')')
	}
	b = append(b, '\n')
	if srcline {
		b = appendSrcline(b, f, inlined)
		if f.How == resolve.HowTailCall {
			b = append(b[:len(b)-1], " (tailcall)\n"...)
		}
	}
	return b
}

// appendModule prints a frame's module as perf script does: perf names
// anonymous memory ("//anon", "/dev/zero", "/anon_hugepage", where JITs
// put their code) after the JIT's symbol map, /tmp/perf-PID.map, whether
// or not that file exists or names the address (map__new). A frame the
// perf map named has the map's path as its module already; JSON keeps the
// mapping's name for the others (docs/PERF_DIFFERENCES.md).
func (t *TextWriter) appendModule(b []byte, module string, pid uint32) []byte {
	if !t.PerfMapNames || !perfAnonymous(module) {
		return append(b, module...)
	}
	b = append(b, "/tmp/perf-"...)
	b = strconv.AppendInt(b, int64(int32(pid)), 10)
	return append(b, ".map"...)
}

// perfAnonymous reports whether perf renames a mapping of this name to
// the JIT's perf map (is_anon_memory in perf's util/map.c).
func perfAnonymous(module string) bool {
	return module == "//anon" || strings.HasPrefix(module, "/dev/zero") || strings.HasPrefix(module, "/anon_hugepage")
}

// appendSrcline prints a frame's source location as perf does: the file's
// base name and the line, "??:0" for user code without line information,
// and the object and address for the kernel. (Where perf's addr2line
// misreads DWARF 5 file numbers, as in glibc, the file differs; ustack's
// agrees with gdb and llvm-addr2line.)
func appendSrcline(b []byte, f *Frame, inlined bool) []byte {
	b = append(b, "  "...)
	switch {
	case f.HasSource:
		file := f.File
		if i := strings.LastIndexByte(file, '/'); i >= 0 {
			file = file[i+1:]
		}
		b = append(b, file...)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(f.Line), 10)
		if inlined {
			b = append(b, " (inlined)"...)
		}
	case !f.Kernel:
		b = append(b, "??:0"...)
	default:
		b = append(b, f.Module...)
		b = append(b, '[')
		b = strconv.AppendUint(b, f.Offset, 16)
		b = append(b, ']')
	}
	return append(b, '\n')
}

// EventWidth returns the width perf pads event names to: the longest name.
func EventWidth(names []string) int {
	w := 0
	for _, n := range names {
		if len(n) > w {
			w = len(n)
		}
	}
	return w
}

// appendGoroutine prints a goroutine's header as the runtime's traceback
// begins it, with its creator and thread: "7 [chan receive] created by
// main.main in goroutine 1 at /src/main.go:71".
func appendGoroutine(b []byte, g *Goroutine) []byte {
	b = strconv.AppendUint(b, g.ID, 10)
	b = append(b, " ["...)
	b = append(b, g.bracket()...)
	b = append(b, ']')
	if g.Thread != 0 {
		b = append(b, " on thread "...)
		b = strconv.AppendUint(b, uint64(g.Thread), 10)
	}
	if g.CreatedBy != "" {
		b = append(b, " created by "...)
		b = append(b, g.CreatedBy...)
		if g.CreatorID != 0 {
			b = append(b, " in goroutine "...)
			b = strconv.AppendUint(b, g.CreatorID, 10)
		}
		if g.CreatedFile != "" {
			b = append(b, " at "...)
			b = append(b, g.CreatedFile...)
			b = append(b, ':')
			b = strconv.AppendInt(b, int64(g.CreatedLine), 10)
		}
	}
	return b
}
