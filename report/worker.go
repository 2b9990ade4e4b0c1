package report

import (
	"strings"

	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/unwinder"
)

// worker unwinds and symbolizes jobs; each has its own unwinder cache and
// buffers.
type worker struct {
	p      *processor
	cache  unwinder.Cache
	frames []unwinder.Frame
	src    []elfcache.SourceFrame
	// ksymsReady caches that the kernel symbol table has been loaded.
	ksymsReady bool
}

func newWorker(p *processor) *worker {
	return &worker{p: p, frames: make([]unwinder.Frame, p.opts.MaxFrames)}
}

func (w *worker) process(j *job) {
	for _, ip := range j.kernel {
		if ip >= perfdata.ContextMax {
			continue
		}
		j.out.Frames = append(j.out.Frames, w.kernelFrame(ip))
	}
	switch {
	case j.hasReg:
		w.unwind(j)
	case len(j.user) > 0:
		// A recording without registers (frame-pointer call chains, or
		// ustack record --unwind): the kernel or the recorder walked
		// the stack already.
		for i, ip := range j.user {
			if ip >= perfdata.ContextMax {
				continue
			}
			fr := unwinder.Frame{PC: ip, Mapping: int32(j.space.as.Find(ip)), Method: unwinder.MethodContext}
			if i > 0 {
				fr.Flags = unwinder.FrameReturnAddress
			}
			w.appendUser(j, &fr, "callchain")
		}
	}
}

// isAnon reports whether a mapping name is anonymous memory, where JITs
// put their code.
func isAnon(path string) bool {
	return path == "" || path == "//anon" || strings.HasPrefix(path, "[anon") || strings.HasPrefix(path, "/memfd:")
}

func (w *worker) kernelFrame(ip uint64) Frame {
	f := Frame{Addr: ip, PC: ip, Offset: ip, Module: "[kernel.kallsyms]", Kernel: true, How: "kernel"}
	if !w.ksymsReady {
		<-w.p.ksymsReady
		w.ksymsReady = true
	}
	if sym, off, ok := w.p.ksyms.Lookup(ip); ok {
		f.Symbol, f.SymOff = sym.Name, off
		if sym.Module != "" {
			f.Module = "[" + sym.Module + "]"
		}
	}
	return f
}

func (w *worker) unwind(j *job) {
	st := unwinder.Stack{Addr: 0, Data: j.stack}
	if sp, ok := j.regs.Get(w.p.arch.SP()); ok {
		st.Addr = sp
	}
	res := w.p.unw.Unwind(&w.cache, j.space.as, &j.regs, &st, w.frames)
	j.out.Stop = res.Stop.String()
	if res.Err != nil {
		j.out.StopErr = res.Err.Error()
	}
	for i := 0; i < res.Frames; i++ {
		w.appendUser(j, &w.frames[i], w.frames[i].Method.String())
	}
}

// appendUser symbolizes one user frame, with the frames of the functions
// inlined at its address before it (innermost first).
func (w *worker) appendUser(j *job, fr *unwinder.Frame, how string) {
	addr := fr.LookupPC()
	f := Frame{Addr: addr, PC: fr.PC, How: how, Signal: fr.Flags&unwinder.FrameSignalTrampoline != 0}
	if fr.Mapping < 0 || int(fr.Mapping) >= len(j.space.infos) {
		f.Offset = addr
		j.out.Frames = append(j.out.Frames, f)
		return
	}
	info := &j.space.infos[fr.Mapping]
	f.Module = info.path
	f.Offset = addr - info.start + info.pgoff
	obj := info.obj
	if obj == nil {
		// JIT code: named by the JIT's /tmp/perf-PID.map, if any.
		if isAnon(info.path) {
			if m := w.p.jit.get(j.out.Pid); m != nil {
				if name, off, ok := m.lookup(addr); ok {
					f.Symbol, f.SymOff, f.Module = name, off, m.path
					f.Offset = addr
				}
			}
		}
		j.out.Frames = append(j.out.Frames, f)
		return
	}
	link := addr - info.bias
	if name, off, ok := obj.Symbolize(link); ok {
		f.Symbol, f.SymOff = name, off
	}
	if w.p.opts.NoInline {
		j.out.Frames = append(j.out.Frames, f)
		return
	}
	w.src = obj.SourceFrames(link, w.src[:0])
	if len(w.src) == 0 {
		j.out.Frames = append(j.out.Frames, f)
		return
	}
	// The inline chain: every frame but the last is a function inlined
	// into the next; the last is the function the symbol table names.
	for k := range w.src {
		s := &w.src[k]
		g := f
		g.File, g.Line, g.hasSource = s.File, s.Line, true
		name := s.LinkageName // formatters demangle as they print
		if name == "" {
			name = s.Function
		}
		if k < len(w.src)-1 {
			g.Inlined = true
			g.elfSymbol = f.Symbol
			g.Symbol = name
		} else {
			g.Function = name
		}
		j.out.Frames = append(j.out.Frames, g)
	}
}
