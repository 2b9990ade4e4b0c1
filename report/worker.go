package report

import (
	"errors"

	"github.com/ustack/ustack/cfi"
	"github.com/ustack/ustack/kallsyms"
	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/resolve"
	"github.com/ustack/ustack/unwinder"
)

// worker unwinds and symbolizes jobs; each has its own unwinder cache,
// symbolizer and buffers.
type worker struct {
	p      *processor
	cache  unwinder.Cache
	sym    *resolve.Symbolizer
	frames []unwinder.Frame
	stack  unwinder.Stack
	// fpFrames is the frame-pointer audit's buffer and insn the probed
	// instruction's bytes (fpaudit.go).
	fpFrames []unwinder.FPFrame
	insn     [4]byte
	// ksyms is the processor's kernel symbol table once loaded.
	ksyms *kallsyms.Table
}

func newWorker(p *processor) *worker {
	return &worker{p: p, sym: resolve.NewSymbolizer(), frames: make([]unwinder.Frame, p.opts.MaxFrames)}
}

func (w *worker) process(j *job) {
	j.setTraceFields(w.p.opts.TraceValues)
	inExec := false
	for _, ip := range j.kernel {
		if ip >= perfdata.ContextMax {
			continue
		}
		f := w.kernelFrame(ip)
		inExec = inExec || execFunctions[f.Symbol]
		j.out.Frames = append(j.out.Frames, f)
	}
	as := j.space.AddressSpace()
	switch {
	case j.hasReg && inExec && !w.execStackIntact(j):
		// Taken inside execve: once the kernel has replaced the address
		// space, the user registers are still the old program's, its
		// stack and code gone. Nothing of it is unwound or named (perf
		// names the old PC in the new program's objects).
		j.out.Stop = StopExec
		j.out.StopErr = "sample taken inside execve: the user registers are the replaced program's"
		// Between the exec and the new program's mmaps its process has
		// no maps: that is the exec, not maps the recording lacks.
		j.out.noMaps = false
	case j.hasReg:
		w.unwind(j)
	case len(j.user) > 0:
		// A recording without a stack copy (frame-pointer or LBR call
		// chains, ustack record --unwind): the kernel or the recorder
		// walked the stack already. Its addresses are printed as they
		// are, return addresses included, as perf script does.
		w.sym.Reset()
		for _, ip := range j.user {
			if ip >= perfdata.ContextMax {
				continue
			}
			fr := unwinder.Frame{PC: ip, Mapping: int32(as.Find(ip))}
			j.out.Frames = w.sym.Append(j.out.Frames, j.space, &fr, resolve.HowCallchain)
		}
	case j.userIP:
		// Only the sampled instruction (perf record without -g).
		fr := unwinder.Frame{PC: j.ip, Mapping: int32(as.Find(j.ip))}
		w.sym.Reset()
		j.out.Frames = w.sym.Append(j.out.Frames, j.space, &fr, resolve.HowContext)
	}
}

// StopExec is the stop of a sample taken inside execve (report-level: the
// unwinder is never asked).
const StopExec = "exec"

// execFunctions are the kernel's ELF loaders: a sample with one among its
// kernel frames was taken while the kernel loaded a new program, before or
// after replacing the address space (begin_new_exec) and before setting the
// new registers (start_thread, at the loader's end), so its user registers
// are the replaced program's, and its memory may be gone
// (execStackIntact). Later in execve (bprm_execve's tail, the
// sched_process_exec tracepoint) they are the new program's entry state,
// and are unwound.
var execFunctions = map[string]bool{
	"load_elf_binary": true, "compat_load_elf_binary": true, "load_elf_fdpic_binary": true,
}

func (w *worker) kernelFrame(ip uint64) Frame {
	f := Frame{Addr: ip, PC: ip, Offset: ip, Module: "[kernel.kallsyms]", Kernel: true, How: "kernel"}
	if w.ksyms == nil {
		if w.ksyms = w.p.kernelSyms(); w.ksyms == nil {
			return f
		}
	}
	if sym, off, ok := w.p.lookupKernel(w.ksyms, ip); ok {
		f.Symbol, f.SymOff = sym.Name, off
		if sym.Module != "" {
			f.Module = "[" + sym.Module + "]"
		}
	}
	return f
}

// execStackIntact reports whether a sample taken inside execve's loader
// (execFunctions) was taken before the kernel replaced the address space,
// so that its registers and stack copy are the old program's, as are the
// maps it is read with (the exec's COMM and the new program's MMAPs come
// later): the kernel copied the stack from the process's memory at the
// event, which it could not do once the old stack was unmapped (its copy
// is then empty). The stack must also unwind to the outermost frame: a
// copy made after the replacement (only where the new stack happens to
// lie at the old stack pointer, without address space randomization)
// holds the new program's arguments, which form no such chain.
func (w *worker) execStackIntact(j *job) bool {
	if len(j.stack) == 0 {
		return false
	}
	sp, ok := j.regs.Get(w.p.arch.SP())
	if !ok {
		return false
	}
	st := &w.stack
	*st = unwinder.Stack{Addr: sp, Data: j.stack}
	res := w.p.unw.Unwind(&w.cache, j.space.AddressSpace(), &j.regs, st, w.frames)
	st.Data = nil
	return res.Stop == unwinder.StopOutermost
}

func (w *worker) unwind(j *job) {
	// The Stack lives in the worker: a local one escapes into Unwind, an
	// allocation per sample.
	st := &w.stack
	*st = unwinder.Stack{Addr: 0, Data: j.stack}
	if sp, ok := j.regs.Get(w.p.arch.SP()); ok {
		st.Addr = sp
	}
	res := w.p.unw.Unwind(&w.cache, j.space.AddressSpace(), &j.regs, st, w.frames)
	if n, err := cutInstallCaller(j.space.AddressSpace(), &j.regs, w.frames[:res.Frames]); err != nil {
		res.Frames, res.Stop, res.Err = n, unwinder.StopStackSwitch, err
	}
	fpRes := w.auditFP(j, st, res.Frames)
	st.Data = nil
	j.out.Stop = res.Stop.String()
	if res.Err != nil {
		j.out.StopErr = res.Err.Error()
	}
	if errors.Is(res.Err, unwinder.ErrInterruptedStackNotCaptured) {
		// The snapshot's size did not cut it (Summary.SnapshotCut).
		j.fullStack, j.signalStackMissing = false, true
	}
	j.installing = errors.Is(res.Err, cfi.ErrInstallingHandler)
	w.sym.Reset()
	for i := 0; i < res.Frames; i++ {
		start := len(j.out.Frames)
		j.out.Frames = w.sym.Append(j.out.Frames, j.space, &w.frames[i], resolve.HowOf(w.frames[i].Method))
		j.fp.markLost(&j.out, start, i)
	}
	if res.Stop == unwinder.StopTruncated && !w.p.opts.NoCallchainRepair {
		if k := spliceChain(j.user, w.fpFrames, fpRes, res.Beyond); k >= 0 {
			w.repair(j, k)
		}
	}
	// Go's switches only: past libgcc's install, the kernel's chain
	// goes on from a frame whose return address slot holds the handler
	// or, before it is written, into code without frame pointers.
	if res.Stop == unwinder.StopStackSwitch && !j.installing && !w.p.opts.NoCallchainRepair && res.Frames > 0 {
		if k := switchChain(j.user, w.frames[:res.Frames]); k >= 0 && callsInto(j.space, w.p.arch, j.user[k], &w.frames[res.Frames-1]) {
			w.repair(j, k)
		}
	}
}
