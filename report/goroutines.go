package report

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
	"github.com/ustack/ustack/coredump"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/goruntime"
	"github.com/ustack/ustack/resolve"
	"github.com/ustack/ustack/unwinder"
)

// GoroutineEvent is the event name of a Go core's goroutines
// (CoreOptions.Goroutines): one sample per goroutine.
const GoroutineEvent = "goroutine"

// Goroutine describes the goroutine a sample of event GoroutineEvent stands
// for.
type Goroutine struct {
	// ID is the goroutine's id (goid), as the runtime's traceback numbers
	// it.
	ID uint64
	// Status is its state ("running", "runnable", "waiting", "syscall",
	// "preempted", "copystack") and WaitReason why it waits ("chan
	// receive", as the traceback prints it), "" unless waiting.
	Status, WaitReason string
	// CreatedBy is the function whose go statement created it (the
	// innermost inlined one there), at CreatedFile:CreatedLine; "" when
	// the runtime recorded none. CreatorID is the creating goroutine's id
	// (0 when unknown).
	CreatedBy, CreatedFile string
	CreatedLine            int
	CreatorID              uint64
	// Thread is the id of the thread it runs on (running or in a system
	// call); 0 when none. Its stack is then unwound from the thread's
	// registers, else from the registers the scheduler saved.
	Thread uint32
	// Addr is the address of its runtime g.
	Addr uint64
}

// bracket is the status as the runtime's traceback prints it between
// brackets: the wait reason of a waiting goroutine, else its state.
func (g *Goroutine) bracket() string {
	if g.WaitReason != "" {
		return g.WaitReason
	}
	return g.Status
}

// mainObject returns the main executable's object and load bias.
func (s *coreSession) mainObject() (*elfcache.Object, uint64, error) {
	as := s.space.AddressSpace()
	for i := 0; i < as.Len(); i++ {
		m := as.Mapping(i)
		if m.Name != s.core.ExePath || !m.Exec {
			continue
		}
		if o := s.space.Object(i); o != nil {
			return o, s.space.Bias(i), nil
		}
	}
	if s.core.ExePath == "" {
		return nil, 0, fmt.Errorf("%s: the core names no main executable (no NT_FILE mapping holds AT_ENTRY)", s.core.File)
	}
	why := s.missing()[s.core.ExePath]
	if why == "" {
		why = "not found"
	}
	return nil, 0, fmt.Errorf("%s: the main executable %s: %s", s.core.File, s.core.ExePath, why)
}

// goroutineRegs sets regs to where goroutine g's stack is to be unwound
// from: its thread's registers when it runs on a thread the core holds,
// else the registers the scheduler saved. It returns the thread, or nil.
func goroutineRegs(c *coredump.Core, g *goruntime.Goroutine, regs *arch.Regs) *coredump.Thread {
	if g.ThreadID != 0 {
		for i := range c.Threads {
			if uint64(c.Threads[i].TID) == g.ThreadID {
				*regs = c.Threads[i].Regs
				return &c.Threads[i]
			}
		}
	}
	savedRegs(c.Arch, g, regs)
	return nil
}

// savedRegs sets regs to the registers the scheduler saved for goroutine g
// (g.sched, or its system call's); none when it saved none.
func savedRegs(a arch.Arch, g *goruntime.Goroutine, regs *arch.Regs) {
	regs.Reset()
	if g.SP == 0 || g.PC == 0 {
		return
	}
	regs.Set(a.PC(), g.PC)
	regs.Set(a.SP(), g.SP)
	regs.Set(a.FP(), g.BP)
	if a == arch.ARM64 && g.LR != 0 {
		regs.Set(arch.ARM64_X30, g.LR)
	}
}

// goroutineOn returns the goroutine thread tid of a Go program's core runs
// (its m's curg: running, or waiting while the thread works for it on the
// g0 stack), reading the runtime's goroutines the first time; nil when there
// is none, or the core is not a Go program's (or its runtime could not be
// read: a warning says why, once).
func (s *coreSession) goroutineOn(tid uint64) *goruntime.Goroutine {
	if !s.goRead {
		s.goRead = true
		obj, bias, err := s.mainObject()
		var rt *goruntime.Runtime
		if err == nil {
			rt, err = goruntime.Open(obj, bias, s.core.Memory())
		}
		if err == nil {
			s.gos, err = rt.Goroutines()
		}
		if err != nil && !errors.Is(err, goruntime.ErrNotGo) {
			s.warn(fmt.Sprintf("a thread's stack ends where Go's runtime switched to the thread's g0 stack; the goroutine it runs for could not be read: %v", err))
		}
	}
	for i := range s.gos {
		g := &s.gos[i]
		if g.CurThreadID == tid && !g.Dead() {
			return g
		}
	}
	return nil
}

// goSwitched goes on from a thread's stack that ended where Go's runtime
// had switched to the thread's g0 stack (res: StopStackSwitch, at
// runtime.systemstack, runtime.morestack or runtime.asmcgocall) onto the
// stack of goroutine g, which runs on the thread, from the registers the
// runtime saved (goruntime.Goroutine's: g.sched, systemstack's as if in
// runtime.systemstack_switch, morestack's in the function whose stack
// grows; in a cgo call, g.syscallsp and pc, in runtime.cgocall), as Go's
// own traceback and Delve do. The frames are appended after res's; the
// result is the whole stack's.
//
// thread is the thread's registers (frame 0's): a thread in gogo, past its
// switch onto g's stack, resumes g at g.sched.pc from the SP it has already
// loaded, and gogo clears g.sched.sp after loading it.
func (s *coreSession) goSwitched(u *unwinder.Unwinder, cache *unwinder.Cache, g *goruntime.Goroutine, thread *arch.Regs,
	frames []unwinder.Frame, res unwinder.Result) unwinder.Result {
	n := res.Frames
	if n >= len(frames) || n == 0 {
		return res
	}
	fn := strings.TrimSuffix(s.frameFunction(&frames[n-1]), ".abi0")
	if !goesOnFrom(fn) {
		// A vDSO call's frame whose caller's frame is outside the
		// core's memory: g.sched is stale while g runs.
		return res
	}
	var regs arch.Regs
	switchedRegs(s.core.Arch, g, fn, &regs)
	if n == 1 && (fn == "gogo" || fn == "runtime.gogo") {
		gogoRegs(s.core.Arch, g, thread, &regs)
	}
	if regs.KnownMask() == 0 {
		return res
	}
	more := u.Unwind(cache, s.space.AddressSpace(), &regs, s.core.Memory(), frames[n:])
	if more.Frames == 0 {
		return res
	}
	s.savedPCFrame(&frames[n])
	more.Frames += n
	return more
}

// switchedRegs sets regs to the registers goroutine g's stack goes on
// from where its thread's walk stopped at a stack switch in function
// switchFn: savedRegs', except after runtime.systemstack, which saved
// them in g.sched as it left the goroutine's stack. A goroutine in a
// system call whose thread is in entersyscall's or exitsyscall's
// systemstack goes on from there, not from the system call's g.syscallsp
// (which skipped runtime.exitsyscall, and gave syscall.Syscall the PC of
// its entersyscall call).
func switchedRegs(a arch.Arch, g *goruntime.Goroutine, switchFn string, regs *arch.Regs) {
	if strings.HasPrefix(switchFn, "runtime.systemstack") && g.SchedSP != 0 && g.SchedPC != 0 {
		sched := *g
		sched.SP, sched.PC, sched.BP, sched.LR = g.SchedSP, g.SchedPC, g.SchedBP, g.SchedLR
		savedRegs(a, &sched, regs)
		return
	}
	savedRegs(a, g, regs)
}

// goSwitchers are the runtime's functions whose stack switch leaves the
// goroutine's registers in g.sched, g.syscallsp or the thread's own
// (gogo's), where goSwitched goes on from; runtime.mcall's for onG0's
// walks, which ended there.
var goSwitchers = []string{"runtime.systemstack", "runtime.morestack", "runtime.asmcgocall", "gogo", "runtime.gogo", "runtime.mcall"}

// goesOnFrom reports whether goSwitched goes on from the goroutine's saved
// registers after a walk that ended in function fn (its ABI0 suffix
// trimmed).
func goesOnFrom(fn string) bool { return slices.Contains(goSwitchers, fn) }

// gogoRegs sets regs to the registers goroutine g resumes with where its
// thread (registers thread) is in gogo past the load of g.sched.sp into
// SP: g.sched's while gogo has not cleared it (it clears the SP first, and
// the frame pointer and arm64's link register after loading them), else
// g.sched.pc (gogo never clears it) with the thread's SP, frame pointer and
// link register, which hold what gogo loaded.
func gogoRegs(a arch.Arch, g *goruntime.Goroutine, thread *arch.Regs, regs *arch.Regs) {
	regs.Reset()
	if g.SchedPC == 0 {
		return
	}
	if g.SchedSP != 0 {
		sched := *g
		sched.SP, sched.PC, sched.BP, sched.LR = g.SchedSP, g.SchedPC, g.SchedBP, g.SchedLR
		savedRegs(a, &sched, regs)
		return
	}
	sp, ok := thread.Get(a.SP())
	if !ok || sp < g.StackLo || sp >= g.StackHi {
		return
	}
	regs.Set(a.PC(), g.SchedPC)
	regs.Set(a.SP(), sp)
	if fp, ok := thread.Get(a.FP()); ok {
		regs.Set(a.FP(), fp)
	}
	if a == arch.ARM64 {
		if lr, ok := thread.Get(arch.ARM64_X30); ok {
			regs.Set(arch.ARM64_X30, lr)
		}
	}
}

// onG0 reports whether goroutine g, running on a thread whose registers are
// regs, was walked (res, into frames) only through the thread's g0 stack:
// the thread's SP lies outside g's stack, the walk ended at
// runtime.mcall, where the g0 stack begins, and g.sched, where g's own
// frames go on, lies in g's stack.
func (s *coreSession) onG0(g *goruntime.Goroutine, regs *arch.Regs, frames []unwinder.Frame, res unwinder.Result) bool {
	sp, ok := regs.Get(s.core.Arch.SP())
	if !ok || res.Stop != unwinder.StopOutermost || res.Frames == 0 {
		return false
	}
	return onG0Stack(g, sp, s.frameFunction(&frames[res.Frames-1]))
}

// onG0Stack is onG0 for a walk that ended outermost in function lastFn,
// from SP sp.
func onG0Stack(g *goruntime.Goroutine, sp uint64, lastFn string) bool {
	in := func(a uint64) bool { return a >= g.StackLo && a < g.StackHi }
	return g.StackLo < g.StackHi && !in(sp) && in(g.SchedSP) && g.SchedPC != 0 && strings.HasPrefix(lastFn, "runtime.mcall")
}

// frameFunction returns the symbol of the function of frame f (its
// object's symbol table's), "" where none is known.
func (s *coreSession) frameFunction(f *unwinder.Frame) string {
	as := s.space.AddressSpace()
	if f.Mapping < 0 || int(f.Mapping) >= as.Len() {
		return ""
	}
	m := as.Mapping(int(f.Mapping))
	so, ok := m.Object.(unwinder.SymbolObject)
	if !ok || f.LookupPC() < m.Bias {
		return ""
	}
	name, _, _ := so.Symbolize(f.LookupPC() - m.Bias)
	return name
}

// runGoroutines reports every live goroutine of a Go core as a sample of
// event GoroutineEvent, in the runtime's order (runtime.allgs).
func (s *coreSession) runGoroutines(sum *Summary, u *unwinder.Unwinder, cache *unwinder.Cache, sym *resolve.Symbolizer,
	frames []unwinder.Frame, emit func(*Sample) error) error {
	c := s.core
	obj, bias, err := s.mainObject()
	if err != nil {
		return fmt.Errorf("--goroutines: %w", err)
	}
	rt, err := goruntime.Open(obj, bias, c.Memory())
	if err != nil {
		if errors.Is(err, goruntime.ErrNotGo) {
			return fmt.Errorf("--goroutines: %s is not a Go program: %w", c.ExePath, err)
		}
		return fmt.Errorf("--goroutines: %w", err)
	}
	for _, w := range rt.Warnings {
		s.warn(w)
	}
	gs, err := rt.Goroutines()
	if err != nil {
		// Those read before the damage are still reported.
		s.warn(fmt.Sprintf("--goroutines: %v", err))
	}
	mem := c.Memory()
	as := s.space.AddressSpace()
	pid := pidOf(c.Core)
	out := Sample{Event: GoroutineEvent, Period: 1, space: s.space}
	var regs arch.Regs
	var src []elfcache.SourceFrame
	info := &Goroutine{}
	for i := range gs {
		g := &gs[i]
		if g.Dead() {
			continue
		}
		th := goroutineRegs(c.Core, g, &regs)
		comm := c.Process.Comm
		tid := ^uint32(0)
		if th != nil {
			tid = uint32(th.TID)
			if th.Name != "" {
				comm = th.Name
			}
		}
		if f := s.opts.Filter; f != nil && !f.Keep(pid, tid, 0, 0, comm) {
			sum.Filtered++
			continue
		}
		*info = Goroutine{ID: g.ID, Status: g.State(), WaitReason: g.WaitReason, CreatorID: g.ParentID, Addr: g.Addr}
		if g.ThreadID != 0 {
			info.Thread = uint32(g.ThreadID)
		}
		// Goroutine 1 (main) was started by the runtime's entry code,
		// which the runtime's traceback does not name either.
		if g.GoPC > bias && g.ID != 1 {
			// The go statement's call returns to GoPC: its line is
			// the call's, at GoPC-1 (as the runtime prints it).
			src = obj.SourceFrames(g.GoPC-bias-1, src[:0])
			if len(src) > 0 {
				info.CreatedBy, info.CreatedFile, info.CreatedLine = src[0].Function, src[0].File, src[0].Line
			} else if name, _, ok := obj.Symbolize(g.GoPC - bias - 1); ok {
				info.CreatedBy = name
			}
		}
		out.Index, out.Pid, out.Tid, out.Comm, out.Goroutine = i, pid, tid, comm, info
		out.Signal = ""
		if th != nil && th == &c.Threads[0] && c.Signal != nil && c.Signal.Signo != 0 {
			out.Signal = c.Signal.Name()
		}
		out.IP, _ = regs.Get(c.Arch.PC())
		out.Frames = out.Frames[:0]
		out.Stop, out.StopErr, out.StackSize = "", "", 0
		if regs.KnownMask() == 0 {
			out.Stop = unwinder.StopUnknownRegister.String()
			out.StopErr = fmt.Sprintf("goroutine %d is %s on thread %d, which the core does not hold", g.ID, g.State(), g.ThreadID)
		} else {
			if th != nil {
				out.StackSize = stackBytes(c.Core, th)
			} else if g.StackHi > g.SP {
				out.StackSize = int(min(g.StackHi-g.SP, 1<<30))
			}
			res := u.Unwind(cache, as, &regs, mem, frames)
			if n, err := cutInstallCaller(as, &regs, frames[:res.Frames]); err != nil {
				res.Frames, res.Stop, res.Err = n, unwinder.StopStackSwitch, err
			}
			if th == nil && res.Frames > 0 {
				s.savedPCFrame(&frames[0])
			}
			if th != nil && res.Stop == unwinder.StopStackSwitch {
				res = s.goSwitched(u, cache, g, &regs, frames, res)
			}
			if th != nil && s.onG0(g, &regs, frames, res) {
				// The thread runs the scheduler for g on its g0
				// stack (execute about to resume it): g's own
				// frames are those g.sched holds, after the g0
				// ones, as delve shows them.
				res = s.goSwitched(u, cache, g, &regs, frames, res)
			}
			out.Stop = res.Stop.String()
			if res.Err != nil {
				out.StopErr = res.Err.Error()
			}
			if errors.Is(res.Err, cfi.ErrInstallingHandler) {
				sum.installing++
			}
			sym.Reset()
			for k := 0; k < res.Frames; k++ {
				out.Frames = sym.Append(out.Frames, s.space, &frames[k], resolve.HowOf(frames[k].Method))
			}
		}
		sum.Samples++
		sum.Stops[out.Stop]++
		if err := emit(&out); err != nil {
			return err
		}
	}
	return nil
}

// savedPCFrame marks the first frame of a goroutine unwound from the
// registers the scheduler saved as a return address when its PC is past
// its function's entry, as the runtime's traceback does: g.sched.pc is
// where mcall (gopark, Gosched) returns to, so the goroutine waits in the
// call before it; only a goroutine that has not run yet saved its
// function's entry.
func (s *coreSession) savedPCFrame(f *unwinder.Frame) {
	obj := s.space.Object(int(f.Mapping))
	if obj == nil || f.PC == 0 {
		return
	}
	if _, off, ok := obj.Symbolize(f.PC - s.space.Bias(int(f.Mapping))); ok && off > 0 {
		f.Flags |= unwinder.FrameReturnAddress
	}
}
