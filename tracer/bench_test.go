package tracer_test

import (
	"testing"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/resolve"
	"github.com/ustack/ustack/tracer"
	"github.com/ustack/ustack/unwinder"
)

// BenchmarkFrontDoor is the warm cost per stack through Walker.Unwind
// (unwind, symbolize with inline frames) of a live process's captured
// stack; BenchmarkLowLevel the same work with unwinder and resolve
// directly, the loop a library user would write without the front door.
func BenchmarkFrontDoor(b *testing.B) {
	tr, p, regs, stack := benchCapture(b)
	w := tr.NewWalker()
	w.Unwind(p, regs, stack)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w.Unwind(p, regs, stack)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "stacks/s")
}

func BenchmarkLowLevel(b *testing.B) {
	_, p, regs, stack := benchCapture(b)
	s := p.Space()
	u := unwinder.New(arch.AMD64, unwinder.Options{})
	var cache unwinder.Cache
	sym := resolve.NewSymbolizer()
	frames := make([]unwinder.Frame, 127)
	var out []resolve.Frame
	var st unwinder.Stack
	sp, _ := regs.Get(arch.AMD64.SP())
	one := func() {
		st = unwinder.Stack{Addr: sp, Data: stack}
		res := u.Unwind(&cache, s.AddressSpace(), regs, &st, frames)
		out = out[:0]
		sym.Reset()
		for i := 0; i < res.Frames; i++ {
			out = sym.Append(out, s, &frames[i], resolve.HowOf(frames[i].Method))
		}
	}
	one()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		one()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "stacks/s")
}

func benchCapture(b *testing.B) (*tracer.Tracer, *tracer.Process, *arch.Regs, []byte) {
	_, tr, p, regs, stack := liveCapture(b)
	return tr, p, regs, stack
}
