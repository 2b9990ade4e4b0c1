package report

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// TextWriter prints samples the way `perf script -F
// comm,tid,time,event,ip,sym,symoff,dso` does, so that tools reading perf
// script output (FlameGraph's stackcollapse-perf.pl, speedscope, the
// Firefox Profiler, hotspot) read it too.
type TextWriter struct {
	// Srcline adds each frame's source file and line on a line of its
	// own, like perf script -F +srcline.
	Srcline bool

	w          *bufio.Writer
	eventWidth int
	buf        []byte
	names      *names
}

// NewTextWriter returns a writer for samples whose event names are at most
// eventWidth characters long (perf pads event names to the longest one in
// the recording). Names are demangled as perf does unless raw is set.
func NewTextWriter(w io.Writer, eventWidth int, raw bool) *TextWriter {
	return &TextWriter{w: bufio.NewWriterSize(w, 1<<16), eventWidth: eventWidth, names: newNames(raw)}
}

// Write prints one sample.
func (t *TextWriter) Write(s *Sample) error {
	b := t.buf[:0]
	comm := s.Comm
	if len(comm) > 15 {
		comm = comm[:15]
	}
	b = append(b, comm...)
	b = append(b, ' ')
	b = appendUintPadded(b, uint64(s.Tid), 10, 5, ' ')
	b = append(b, ' ')
	b = appendUintPadded(b, s.Time/1e9, 10, 5, ' ')
	b = append(b, '.')
	b = appendUintPadded(b, s.Time%1e9/1e3, 10, 6, '0')
	b = append(b, ": "...)
	for i := len(s.Event); i < t.eventWidth; i++ {
		b = append(b, ' ')
	}
	b = append(b, s.Event...)
	b = append(b, ": \n"...)
	// perf cannot start an unwind at a PC outside every known mapping,
	// nor without stack bytes (the kernel could not copy them), and
	// prints no user frames then; JSON keeps what ustack found. A call
	// chain or sampled IP (no unwind, no Stop) is printed as recorded.
	noUser := s.Stop != "" && s.StackSize == 0
	for i := range s.Frames {
		f := &s.Frames[i]
		if !f.Kernel && s.Stop != "" && (noUser || f.Module == "" && (i == 0 || s.Frames[i-1].Kernel)) {
			noUser = true
			continue
		}
		b = t.appendFrame(b, f)
	}
	b = append(b, '\n')
	t.buf = b
	_, err := t.w.Write(b)
	return err
}

// Flush writes buffered output.
func (t *TextWriter) Flush() error { return t.w.Flush() }

// appendUintPadded appends v in base, right-aligned to width with pad,
// without allocating.
func appendUintPadded(b []byte, v uint64, base, width int, pad byte) []byte {
	var digits [24]byte
	field := strconv.AppendUint(digits[:0], v, base)
	for i := len(field); i < width; i++ {
		b = append(b, pad)
	}
	return append(b, field...)
}

// appendFrame prints one frame line as perf does: the address (map-relative
// for user code), symbol+offset, and the object in parentheses, or
// "(inlined)" for a function inlined at that address. Every physical frame
// names its object, also where perf labels it "(inlined)" because its
// debug-info name differs from its symbol-table name.
func (t *TextWriter) appendFrame(b []byte, f *Frame) []byte {
	b = append(b, '\t')
	addr := f.Offset
	if f.Module == "" {
		addr = f.Addr
	}
	b = appendUintPadded(b, addr, 16, 16, ' ')
	b = append(b, ' ')
	name, inlined := t.names.Short(f.Symbol), f.Inlined
	if name == "" {
		b = append(b, "[unknown]"...)
	} else {
		b = append(b, name...)
		b = append(b, "+0x"...)
		b = strconv.AppendUint(b, f.SymOff, 16)
	}
	switch {
	case inlined && t.Srcline:
		// perf moves "(inlined)" to the source line.
	case inlined:
		b = append(b, " (inlined)"...)
	case f.Module == "":
		b = append(b, " ([unknown])"...)
	default:
		b = append(b, " ("...)
		b = append(b, f.Module...)
		b = append(b, ')')
	}
	b = append(b, '\n')
	if t.Srcline {
		b = appendSrcline(b, f, inlined)
	}
	return b
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
