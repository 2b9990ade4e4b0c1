package tracer

import (
	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/resolve"
	"github.com/ustack/ustack/unwinder"
)

// Stack is one unwound and symbolized stack. Its Frames are the Walker's:
// valid until its next call.
type Stack struct {
	// Frames are the stack's frames, innermost first, each physical
	// frame preceded by the functions inlined at its address.
	Frames []Frame
	// Stop says why the walk ended: unwinder.StopOutermost for a
	// complete stack (docs/GLOSSARY.md).
	Stop unwinder.StopReason
	// Err, when set, says more about an early stop.
	Err error
}

// Walker unwinds and symbolizes stacks. It keeps buffers and caches, so
// each goroutine needs its own; they share their Tracer's objects.
type Walker struct {
	t      *Tracer
	unw    *unwinder.Unwinder
	cache  unwinder.Cache
	sym    *resolve.Symbolizer
	frames []unwinder.Frame
	stack  unwinder.Stack
	out    []Frame
	// forgets is the Tracer's count of Forget calls when the Walker
	// last let go of what it remembered (forgetStale).
	forgets uint64
}

// forgetStale, when processes were forgotten since it last ran (with a
// budget), empties the Symbolizer's memo and the last frames returned:
// their names keep the string tables of objects the budget may have
// closed alive (resolve.Symbolizer.Forget).
func (w *Walker) forgetStale() {
	if n := w.t.forgets.Load(); n != w.forgets {
		w.sym.Forget()
		clear(w.out[:cap(w.out)])
		w.out = w.out[:0]
		w.forgets = n
	}
}

// NewWalker returns a Walker for one goroutine.
func (t *Tracer) NewWalker() *Walker {
	return &Walker{t: t, unw: unwinder.New(t.opts.Arch, unwinder.Options{}), sym: resolve.NewSymbolizer(),
		frames: make([]unwinder.Frame, t.opts.MaxFrames)}
}

// Unwind walks the stack of a thread of p from the registers the tracer
// captured (regs: at least the PC and the stack pointer; the frame
// pointer and, on arm64, the link register help where code has no CFI)
// and the stack bytes it copied, stack[0] being the byte at the stack
// pointer. It returns the symbolized frames. When the PC or a return
// address lies outside p's maps, it reads them again and walks once more.
func (w *Walker) Unwind(p *Process, regs *arch.Regs, stack []byte) Stack {
	a := w.t.opts.Arch
	sp, ok := regs.Get(a.SP())
	if !ok {
		return Stack{Stop: unwinder.StopBadMemory, Err: errNoStack}
	}
	w.forgetStale()
	s := p.pinned()
	if s == nil {
		return Stack{Stop: unwinder.StopBadMemory, Err: ErrForgotten}
	}
	if pc, ok := regs.Get(a.PC()); ok && s.AddressSpace().Find(pc) < 0 && p.refresh(pc) {
		if s = p.repin(s); s == nil {
			return Stack{Stop: unwinder.StopBadMemory, Err: ErrForgotten}
		}
	}
	w.stack = unwinder.Stack{Addr: sp, Data: stack}
	res := w.unw.Unwind(&w.cache, s.AddressSpace(), regs, &w.stack, w.frames)
	if nm, ok := res.Err.(*unwinder.NoMappingError); ok && !nm.Mapped && p.refresh(nm.PC) {
		if s = p.repin(s); s == nil {
			w.stack.Data = nil
			return Stack{Stop: unwinder.StopBadMemory, Err: ErrForgotten}
		}
		res = w.unw.Unwind(&w.cache, s.AddressSpace(), regs, &w.stack, w.frames)
	}
	w.stack.Data = nil
	w.out = w.out[:0]
	w.sym.Reset()
	for i := 0; i < res.Frames; i++ {
		w.out = w.sym.Append(w.out, s, &w.frames[i], resolve.HowOf(w.frames[i].Method))
	}
	s.Unpin()
	return Stack{Frames: w.out, Stop: res.Stop, Err: res.Err}
}

// Symbolize returns the frames of the code at addr in p (a sampled PC
// with no stack): the functions inlined there, then the function itself.
// addr is an instruction's address; for a return address pass the address
// minus one. The frames are valid until the Walker's next call.
func (w *Walker) Symbolize(p *Process, addr uint64) []Frame {
	w.forgetStale()
	s := p.pinned()
	if s == nil {
		return w.out[:0]
	}
	if s.AddressSpace().Find(addr) < 0 && p.refresh(addr) {
		if s = p.repin(s); s == nil {
			return w.out[:0]
		}
	}
	w.out = w.sym.AppendAddr(w.out[:0], s, addr)
	s.Unpin()
	return w.out
}
