package resolve

import (
	"fmt"
	"strings"

	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/unwinder"
)

// Frame is one symbolized frame: a physical frame of the stack, or a
// function inlined at a physical frame's address (Inlined).
//
// Each physical frame comes with its inline chain just before it, innermost
// first, and is itself never Inlined: its Module names the object the code
// is in. A frame has one name, Symbol, for every output format.
type Frame struct {
	// Addr is the address the frame is attributed to: for a return
	// address the call instruction (PC-1), else the PC; for kernel frames
	// the kernel's address.
	Addr uint64
	// PC is the frame's program counter as unwound.
	PC uint64
	// Module is the object's path, "[vdso]", "[kernel.kallsyms]", the JIT's
	// perf map or jitdump (jit-PID.dump), or "" when the address is in no
	// known mapping.
	Module string
	// Offset is Addr relative to the mapping's file offset (perf's
	// map-relative ip); Addr when Module is "", anonymous memory or JIT code
	// named from a jitdump.
	Offset uint64
	// Symbol is the function's name: the one debug info gives (what gdb
	// prints: the linkage name, mangled for C++ and Rust, else the
	// source name), else the symbol table's without an ELF version
	// suffix; "" when unknown. Writers demangle it.
	Symbol string
	// SymOff is Addr's offset from the start of the symbol-table symbol
	// containing it (perf's symoff), also for the frames inlined there.
	SymOff uint64
	// File and Line locate Addr in the source; for an inlined frame's
	// caller, the call site. HasSource is set when debug info covered
	// Addr at all (Line may still be 0).
	File      string
	Line      int
	HasSource bool
	// Inlined is true for a function inlined at this address; the next
	// frame is the function it was inlined into.
	Inlined bool
	// Kernel is true for frames from the kernel's call chain.
	Kernel bool
	// How says how the frame was recovered: context, cfi, fp, lr, signal
	// (the unwinder's methods), callchain (the kernel's call chain of a
	// recording without a stack copy), kernel, tailcall (a function that
	// tail-called the frame before it, found from DWARF's call sites as
	// gdb finds it: see HowTailCall).
	How How
	// Signal is true for a sigreturn trampoline frame.
	Signal bool
	// Restored is true when some of the frame's registers were taken as
	// its callee's values because the callee, in its epilogue, had
	// restored them already (unwinder.FrameRestoredRegister).
	Restored bool
}

// How says how a frame was recovered: one of the unwinder's methods
// (HowOf), the kernel's call chain, a kernel frame, or a tail call found
// from DWARF's call sites. Its values are the names reports print.
type How string

// The Hows of frames not unwound by the unwinder, and of its methods.
const (
	HowContext      How = "context"       // the sample's or thread's own registers (unwinder.MethodContext)
	HowCFI          How = "cfi"           // unwinder.MethodCFI
	HowFramePointer How = "fp"            // unwinder.MethodFramePointer
	HowLinkRegister How = "lr"            // unwinder.MethodLinkRegister
	HowSignal       How = "signal"        // unwinder.MethodSignal
	HowSignalMarker How = "signal_marker" // unwinder.MethodSignalMarker
	HowBadCall      How = "bad_call"      // unwinder.MethodBadCall
	HowFrameless    How = "frameless"     // unwinder.MethodFrameless
	HowPrologue     How = "prologue"      // unwinder.MethodPrologue
	HowScan         How = "scan"          // unwinder.MethodScan
	// HowCallchain: a user address of the kernel's call chain, in a
	// recording without a stack copy.
	HowCallchain How = "callchain"
	// HowKernel: a kernel frame.
	HowKernel How = "kernel"
)

// HowOf returns the How of a frame the unwinder recovered by method m.
func HowOf(m unwinder.Method) How { return How(m.String()) }

// Symbolizer turns unwound frames into symbolized frames. It keeps scratch
// buffers, so each goroutine needs its own; it is cheap to make.
type Symbolizer struct {
	src  []elfcache.SourceFrame
	last lastFrame  // the physical frame appended last
	tail tailSearch // scratch for the tail call chain search
	// A profile's stacks repeat the same return addresses sample after
	// sample: the answers of the last addresses looked up, direct-mapped
	// by object and address, spare the symbol table's binary search and
	// the line and inline lookups (15-20% of a large report).
	memo *[memoSize]memoEntry
	// The same for the call sites that tail call frames are looked for
	// at: nearly every return address (CallSiteAt's search, and its
	// 56-byte result copied through memory, were 4% of a large report).
	sites *[siteSize]siteEntry
}

// siteEntry is what the call site at an object's return address ret says
// of the call's target (CallSiteAt, Known).
type siteEntry struct {
	obj    *elfcache.Object
	ret    uint64
	target uint64
	name   string
	known  bool
}

const (
	siteBits = 9
	siteSize = 1 << siteBits
)

// memoEntry is what Append learnt of an object's link-time address. obj
// keeps the object alive, so its address names it for as long as the
// entry exists.
type memoEntry struct {
	obj    *elfcache.Object
	link   uint64
	name   string
	off    uint64
	symOK  bool
	src    []elfcache.SourceFrame
	filled bool
}

const (
	memoBits = 10
	memoSize = 1 << memoBits
)

// NewSymbolizer returns a Symbolizer.
func NewSymbolizer() *Symbolizer {
	return &Symbolizer{src: make([]elfcache.SourceFrame, 0, 16), memo: newTable[[memoSize]memoEntry]()}
}

// newTable returns a new T (a memo array) with every page written: read
// first, a page of fresh memory is the kernel's zero page, which the first
// entry written there must then copy (a second fault and, on a VM, a TLB
// shootdown across CPUs).
func newTable[T any]() *T {
	t := new(T)
	*t = *new(T)
	return t
}

// lookup returns the symbol and the source frames of obj's link-time
// address link, mapped at addr, from the memo or else from obj (and
// remembers them); asked says it was obj that answered. The source frames
// are in z.src.
func (z *Symbolizer) lookup(obj *elfcache.Object, link, addr uint64) (name string, off uint64, ok, asked bool) {
	if z.memo == nil {
		z.memo = newTable[[memoSize]memoEntry]()
	}
	e := &z.memo[(addr*0x9e3779b97f4a7c15)>>(64-memoBits)]
	if e.filled && e.obj == obj && e.link == link {
		z.src = append(z.src[:0], e.src...)
		return e.name, e.off, e.symOK, false
	}
	name, off, ok = obj.Symbolize(link)
	z.src = obj.SourceFrames(link, z.src[:0])
	*e = memoEntry{obj: obj, link: link, name: name, off: off, symOK: ok,
		src: append(e.src[:0], z.src...), filled: true}
	return name, off, ok, true
}

// Append appends to out the frames of fr, unwound in s: the functions
// inlined at its address (innermost first, unless the Resolver leaves them
// out: Options.NoInline) and then fr itself, and returns the extended slice. how is the
// frames' How (the unwinder's Method for unwound frames). Once out and the
// Symbolizer's buffers have grown, Append does not allocate.
//
// Frames are appended innermost first, one stack after another. When fr is
// the caller of the frame appended just before (its SP is that frame's
// CFA) and functions that tail-called on the way left no frame, their
// frames (How "tailcall", see HowTailCall) come first, unless the Resolver
// leaves them out (Options.NoTailCall). To know that, the Symbolizer
// remembers the last physical frame appended: call Reset before each
// stack, so that the first frame of a stack is never taken for the caller
// of the last frame of the one before.
func (z *Symbolizer) Append(out []Frame, s *Space, fr *unwinder.Frame, how How) []Frame {
	if z.last.space != nil {
		out = z.appendTailCalls(out, s, fr)
	}
	out = z.appendFrames(out, s, fr, how, false)
	if m := s.mapOf(int(fr.Mapping)); m != nil && m.obj != nil && fr.CFA != 0 && !s.noTailCall {
		z.remember(s, fr, fr.LookupPC()-m.bias)
	}
	return out
}

// Reset begins a new stack: the next Append looks for no tail calls
// between its frame and the frames appended before. The answers of the
// lookups, kept for speed, are kept.
func (z *Symbolizer) Reset() { z.last = lastFrame{} }

// Forget empties the memo of the last addresses named: its answers keep
// their objects' symbol and line tables alive, also after a Cache closed
// those objects over its budget (Options.CacheBudget). A long-lived
// Symbolizer calls it after objects were let go (an exited process
// forgotten). It also ends the stack in progress, as Reset does.
func (z *Symbolizer) Forget() {
	if z.memo != nil {
		clear(z.memo[:])
	}
	if z.sites != nil {
		clear(z.sites[:])
	}
	clear(z.src[:cap(z.src)])
	z.src = z.src[:0]
	z.last, z.tail = lastFrame{}, tailSearch{}
}

// AppendAddr appends the frames of the code at addr in s, a bare address
// (one a tracer sampled, or a PC it found elsewhere): the functions
// inlined there, innermost first, then the function itself, with How
// HowContext, and returns the extended slice. addr is taken as the address
// of an instruction; for a return address pass the address of the call
// (the return address minus one) or use Append with an unwinder.Frame
// flagged unwinder.FrameReturnAddress. An address in no mapping of s gets
// one frame with Module "". AppendAddr looks for no tail calls and leaves
// what Append remembers alone. Once out and the Symbolizer's buffers have
// grown, it does not allocate.
func (z *Symbolizer) AppendAddr(out []Frame, s *Space, addr uint64) []Frame {
	fr := unwinder.Frame{PC: addr, Mapping: int32(s.as.Find(addr)), Method: unwinder.MethodContext}
	return z.appendFrames(out, s, &fr, HowContext, false)
}

// appendFrames appends the inline chain and the physical frame of fr; with
// innermost, only one frame, named after the innermost function there (gdb
// names a tail call frame so, and gives it no inline chain).
func (z *Symbolizer) appendFrames(out []Frame, s *Space, fr *unwinder.Frame, how How, innermost bool) []Frame {
	addr := fr.LookupPC()
	f := Frame{Addr: addr, PC: fr.PC, Offset: addr, How: how, Signal: fr.Flags&unwinder.FrameSignalTrampoline != 0,
		Restored: fr.Flags&unwinder.FrameRestoredRegister != 0}
	m := s.mapOf(int(fr.Mapping))
	if m == nil {
		return append(out, f)
	}
	f.Module = m.path
	if !m.anonymous {
		// Anonymous memory has no file offsets: perf maps its
		// addresses to themselves, and so does Offset.
		f.Offset = addr - m.start + m.pgoff
	}
	obj := m.obj
	if obj == nil {
		if jf := m.jit; jf != nil { // named by the JIT's jitdump
			f.Symbol, f.SymOff, f.Offset = jf.name, addr-jf.start, addr
			f.File, f.Line, f.HasSource = jf.line(addr)
			return append(out, f)
		}
		if m.anonymous && s.jit != nil {
			if name, off, ok := s.jit.lookup(addr); ok {
				f.Symbol, f.SymOff, f.Module, f.Offset = name, off, s.jit.path, addr
			}
		}
		return append(out, f)
	}
	name, off, ok, asked := z.lookup(obj, addr-m.bias, addr)
	if ok {
		f.Symbol, f.SymOff = Unversioned(name), off
	}
	if asked {
		// A split DWARF unit that cannot be read is met by the lookup
		// of an address in it; an answer from the memo was checked
		// when it was asked.
		s.checkSplitDWARF(m)
	}
	if innermost && len(z.src) > 1 {
		z.src = z.src[:1]
	}
	for k := range z.src {
		sf := &z.src[k]
		g := f
		g.File, g.Line, g.HasSource = sf.File, sf.Line, true
		if name := sourceName(sf); name != "" {
			g.Symbol = name
		}
		if k < len(z.src)-1 {
			if s.noInline {
				continue
			}
			g.Inlined = true
		}
		out = append(out, g)
	}
	if len(z.src) == 0 {
		out = append(out, f)
	}
	return out
}

// checkSplitDWARF warns, once per object, when a split DWARF unit of the
// mapping's object could not be read from its .dwo or .dwp: its inlined
// functions are then missing and the names are the symbol table's.
func (s *Space) checkSplitDWARF(m *spaceMap) {
	if m.splitWarned.Load() {
		return
	}
	if err := m.obj.SplitDWARFError(); err != nil {
		m.splitWarned.Store(true)
		if s.r != nil {
			s.r.warnOnce("splitdwarf\x00"+m.obj.Path(), fmt.Sprintf("%v: inlined functions there are missing and names are the symbol table's", err))
		}
	}
}

// sourceName is a source frame's name as gdb prints it: the linkage name
// (C++ mangled, or a C function's assembler name such as __GI___close),
// else the source name.
func sourceName(sf *elfcache.SourceFrame) string {
	if sf.LinkageName != "" {
		return Unversioned(sf.LinkageName)
	}
	return Unversioned(sf.Function)
}

// Unversioned returns a symbol name without its ELF symbol version
// (__libc_start_main@@GLIBC_2.34 is __libc_start_main); a PLT stub's
// "@plt" is part of its name and stays.
func Unversioned(name string) string {
	i := strings.IndexByte(name, '@')
	if i < 0 {
		return name
	}
	if strings.HasSuffix(name, "@plt") {
		if i == len(name)-4 {
			return name
		}
		return name[:i] + "@plt"
	}
	return name[:i]
}
