package unwinder

import (
	"errors"
	"fmt"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
)

// Options configure an Unwinder. The zero value works.
type Options struct {
	// MaxFrames bounds the frames of one stack (default and upper bound:
	// the length of the caller's buffer).
	MaxFrames int
	// PACMask is the set of pointer authentication bits removed from arm64
	// return addresses. Zero selects arch.PACMask(48) (48-bit user virtual
	// addresses), which is right for any capture with 48-bit or smaller
	// address spaces.
	PACMask uint64
	// MaxExprSteps bounds each DWARF expression evaluation (default
	// cfi.DefaultMaxSteps).
	MaxExprSteps int
	// NoFramePointer disables the frame-pointer and link-register
	// fallbacks used where an object has no CFI for a PC.
	NoFramePointer bool
}

// Unwinder unwinds stacks of one architecture. It holds only configuration:
// it is safe to share between goroutines.
type Unwinder struct {
	arch arch.Arch
	opts Options
}

// New returns an Unwinder for architecture a.
func New(a arch.Arch, opts Options) *Unwinder {
	if opts.PACMask == 0 {
		opts.PACMask = arch.PACMask(48)
	}
	if opts.MaxExprSteps <= 0 {
		opts.MaxExprSteps = cfi.DefaultMaxSteps
	}
	return &Unwinder{arch: a, opts: opts}
}

// Arch returns the architecture the Unwinder was made for.
func (u *Unwinder) Arch() arch.Arch { return u.arch }

// Errors that end an unwind; static so that ending one allocates nothing.
var (
	errPCUnknown      = errors.New("unwinder: PC unknown")
	errSPUnknown      = errors.New("unwinder: SP unknown")
	errCallerSP       = errors.New("unwinder: caller SP unknown")
	errFPLeftCode     = errors.New("unwinder: frame-pointer chain left the code")
	errCFARegUnknown  = errors.New("unwinder: CFA register unknown")
	errBadCFARule     = errors.New("unwinder: row has no CFA rule")
	errNoRARule       = errors.New("unwinder: CFI gives no rule for the return address")
	errNoFramePointer = errors.New("unwinder: no CFI and no usable frame pointer")
	errLinkRegUnknown = errors.New("unwinder: link register unknown")
	// The ends of a frame-pointer or link-register chain where nothing
	// says the stack begins (chainEnd).
	errNoObject          = errors.New("unwinder: the mapping has no object file (not found, or anonymous memory) to say how to unwind it")
	errZeroFramePointer  = errors.New("unwinder: no CFI, and a zero frame pointer in a function not known to begin a stack")
	errZeroReturnAddress = errors.New("unwinder: no CFI, and a zero return address in a function not known to begin a stack")
	errCFAGuess          = errors.New("unwinder: the caller of a frame without CFI (arm64) keeps no frame record in its CFI, so its frame's position is unknown: a zero return address read there proves nothing")
	// errOtherStack: a row marked OtherStack (Go's vDSO calls on the g0
	// stack) put the caller's frame on another stack the capture does not
	// hold.
	errOtherStack = fmt.Errorf("unwinder: the function moved SP to another stack and its caller's frame, on the stack it left, is outside the captured memory: %w", cfi.ErrStackSwitch)
)

// ErrInterruptedStackNotCaptured ends a walk (StopTruncated or
// StopBadMemory) at a frame a signal frame restored whose stack the
// captured memory does not hold: the signal was delivered on an alternate
// signal stack (sigaltstack; Go's runtime delivers every signal so), and a
// recording's snapshot, taken from the handler's SP, holds that stack, not
// the interrupted one. A larger snapshot does not reach it.
var ErrInterruptedStackNotCaptured = errors.New("unwinder: the signal was delivered on an alternate signal stack (sigaltstack) and the interrupted code's stack is not in the captured memory")

// Unwind walks the stack described by regs and mem in the process space,
// writing frames innermost first into frames, and returns how many it wrote
// and why it stopped. regs holds the captured user registers; registers the
// kernel did not save must be unknown (see arch.Regs). Unwind reads memory
// only through mem: a *Stack for a perf sample (read directly, the fast
// case), *Segments for a core dump, or the caller's own Memory. It allocates
// nothing once c is warm, except to build the error of a Result that
// carries one.
func (u *Unwinder) Unwind(c *Cache, space *AddressSpace, regs *arch.Regs, mem Memory, frames []Frame) (res Result) {
	a := u.arch
	if u.opts.MaxFrames > 0 && u.opts.MaxFrames < len(frames) {
		frames = frames[:u.opts.MaxFrames]
	}
	if len(frames) == 0 {
		return Result{Stop: StopDepth}
	}
	// The window lives on the stack: the fast path reads it there, and
	// only the general step copies it into c (pointer stores into a heap
	// object cost write-barrier checks on every Unwind).
	var w window
	sp, spOK := regs.Get(a.SP())
	if s, ok := mem.(*Stack); ok && s != nil {
		w.addr, w.data, w.more = s.Addr, s.Data, mem // w.set, inlined
	} else {
		w.set(mem, sp)
	}
	cur := &c.regs[0]
	*cur = *regs
	// The PAC bits to strip from return addresses (none off arm64).
	pacMask := uint64(0)
	if a == arch.ARM64 {
		pacMask = u.opts.PACMask
	}
	var st walkState // field by field, as in unwind
	pc, pcOK := regs.Get(a.PC())
	st.pc, st.sp, st.method = pc, sp, MethodContext
	if pcOK && spOK {
		// Most stacks are walked to their end here, without the
		// general loop.
		if n, done := u.walkSimple(c, space, cur, &w, frames, pacMask, &st); done {
			res.Frames, res.Stop = n, StopOutermost
			if st.zeroRA {
				f := &frames[n-1]
				res.Stop, res.Err = zeroReturn(c, &space.maps[f.Mapping], f)
				threadStart(&res, space, regs, frames)
			}
			return res
		}
		if st.n > 0 {
			res.Frames, res.Stop, res.Err, res.Beyond = u.unwind(c, space, &w, frames, pacMask, &st, true, true)
			guessed(&res, &st, frames)
			threadStart(&res, space, regs, frames)
			return res
		}
	}
	res.Frames, res.Stop, res.Err, res.Beyond = u.unwind(c, space, &w, frames, pacMask, &st, pcOK, spOK)
	guessed(&res, &st, frames)
	threadStart(&res, space, regs, frames)
	return res
}

// ThreadStartObject is implemented by an Object that knows where a clone
// system call returns in a function that begins a thread's stack: a first
// frame there whose result register (rax, x0: DWARF register 0 on both)
// holds 0 is the new thread's, which the kernel started there on a stack
// of its own, with no caller (its parent comes back there with the
// thread's id, and returns).
type ThreadStartObject interface {
	Object
	// CloneReturn reports whether the link-time address addr lies from
	// such a return up to the branch the child takes.
	CloneReturn(addr uint64) bool
}

// threadStart makes a walk that did not end at an outermost frame, from a
// first frame where a clone returned to its child (ThreadStartObject),
// that frame alone and outermost: what the walk found above it (the
// parent's return address in x30, its frame pointer in rbp) is not the
// thread's.
func threadStart(res *Result, space *AddressSpace, regs *arch.Regs, frames []Frame) {
	if res.Stop == StopOutermost || res.Frames == 0 {
		return
	}
	f := &frames[0]
	if v, ok := regs.Get(0); !ok || v != 0 || f.Flags&FrameReturnAddress != 0 || f.Mapping < 0 || int(f.Mapping) >= len(space.maps) {
		return
	}
	m := &space.maps[f.Mapping]
	o, ok := m.Object.(ThreadStartObject)
	if !ok || f.PC < m.Bias || !o.CloneReturn(f.PC-m.Bias) {
		return
	}
	f.CFA = 0
	res.Frames, res.Stop, res.Err, res.Beyond = 1, StopOutermost, nil, 0
}

// guessed turns a walk that reached the outermost frame through a
// step nothing proves (walkState.guess) into
// StopFramePointerGuess: the frames stay, the claim that the stack is
// complete does not.
func guessed(res *Result, st *walkState, frames []Frame) {
	if res.Stop != StopOutermost || st.guess == 0 {
		return
	}
	i := st.guess - 1
	res.Stop = StopFramePointerGuess
	res.Err = &FramePointerGuessError{Frame: i, PC: frames[i].PC, Call: st.guessCall, Scan: st.guessScan}
}

// FramePointerGuessError is the Err of a Result that ended with
// StopFramePointerGuess: the first frame the walk left by a frame pointer
// that frame is not shown to have set up, or (Call) by a prologue analysis
// whose return address follows a call not shown to be to the frame's
// function (MethodPrologue).
type FramePointerGuessError struct {
	Frame int    // the frame's index in the Result's frames
	PC    uint64 // its PC
	// Call: the step was MethodPrologue's, and the call before the
	// return address it found is through memory or to another function.
	Call bool
	// Scan: the step was MethodScan's: the frame's code was not in the
	// capture, and its caller's return address was found by scanning
	// the stack.
	Scan bool
}

func (e *FramePointerGuessError) Error() string {
	if e.Scan {
		return fmt.Sprintf("unwinder: the frame at pc %#x has no CFI, its code is not in the capture and its frame pointer is unusable: its caller was found by scanning the stack for a return address (after a call, in code with CFI), and callers in between may be missing", e.PC)
	}
	if e.Call {
		return fmt.Sprintf("unwinder: the frame at pc %#x has no CFI, and the call before the return address its code gives is not shown to be to its function (a call through memory, or to another that may have tail-called it): its caller may be wrong", e.PC)
	}
	return fmt.Sprintf("unwinder: the frame at pc %#x has no CFI, and nothing shows that its function set up the frame pointer the walk followed out of it: its caller may be missing", e.PC)
}

// unwind is Unwind's general loop, reading memory through w. It goes on from
// st, with the registers of the frame st.n in c.regs[0]; pcOK and spOK say
// whether its PC and SP are known. walkSimple has just stopped at that
// frame (or was not called for it). It returns the Result's fields (Frames,
// Stop, Err, Beyond), which Unwind stores into its named result: a Result
// is 40 bytes, more than the compiler keeps in registers, and one returned
// from a variable was copied through memory with a store-forwarding stall
// (4-6 ns an Unwind on the benchmarks).
func (u *Unwinder) unwind(c *Cache, space *AddressSpace, w *window, frames []Frame, pacMask uint64, st *walkState, pcOK, spOK bool) (int, StopReason, error, uint64) {
	a := u.arch
	limit := len(frames)
	pcReg, spReg := a.PC(), a.SP()
	state := st // st names each step's result below
	cur, next := &c.regs[0], &c.regs[1]
	method, flags, n := st.method, st.flags, st.n
	lastSignalSP := uint64(0)
	stackReturns := 0 // steps to a caller below the frame on another stack (cfi.Row.OtherStack)
	signalFrames := 0
	prevSameSP := false
	// The frame's PC and SP travel in locals from one frame to the next,
	// rather than through cur.
	pc, sp := st.pc, st.sp
	walked := true
	// spGuess: the frame's SP came from an arm64 frame record, a lower
	// bound (recordCFA); such a frame takes the general step.
	spGuess := false
	// walkSimple's state, set field by field: a composite literal was
	// built aside and copied whole, a store-forwarding stall at every
	// return to the fast path (6% of the X86Signal benchmark).
	var ws walkState
	for {
		if pcOK && spOK && !walked && !spGuess {
			// The common frames, in a loop of their own.
			ws.pc, ws.sp, ws.n, ws.method, ws.flags = pc, sp, n, method, flags
			if n, done := u.walkSimple(c, space, cur, w, frames, pacMask, &ws); done {
				if ws.zeroRA {
					f := &frames[n-1]
					stop, err := zeroReturn(c, &space.maps[f.Mapping], f)
					return n, stop, err, 0
				}
				return n, StopOutermost, nil, 0
			}
			if ws.n != n {
				pc, sp, n, method, flags = ws.pc, ws.sp, ws.n, ws.method, ws.flags
				prevSameSP = false
			}
		}
		walked = false
		if !pcOK {
			return n, StopUnknownRegister, errPCUnknown, 0
		}
		// The mapping of pc: the one found last, or the one before (stacks
		// often alternate between two objects, a program and libc), or
		// a search.
		mi := c.last[0]
		if maps := space.maps; uint(mi) >= uint(len(maps)) || pc < maps[mi].Start || pc >= maps[mi].End {
			if j := c.last[1]; uint(j) < uint(len(maps)) && maps[j].Start <= pc && pc < maps[j].End {
				c.last[0], c.last[1] = j, mi
				mi = j
			} else {
				mi = c.findMiss(space, pc)
			}
		}
		marked := false
		if flags&FrameReturnAddress != 0 && (mi < 0 || !space.maps[mi].Exec && space.maps[mi].Object == nil) {
			// A return address must point into code; one that does not
			// is where the walk went wrong (or the maps are incomplete),
			// not a frame. A mapping of an object file counts as code
			// even when not marked executable: core dumps written by
			// gdb's gcore leave the text segments out, so their
			// permissions are unknown. The exception: a handler's
			// return into a sigreturn trampoline the maps do not show
			// (qemu-user's page), known by the signal frame's markers.
			if !spOK || n == 0 || !u.signalMarker(w, sp) {
				if n > 0 && baseFrame(c, space, &frames[n-1]) {
					return n, StopOutermost, nil, 0
				}
				return n, StopNoMapping, &NoMappingError{PC: pc, Mapped: mi >= 0}, 0
			}
			marked = true
		}
		// Field by field: a composite literal is built on the stack and
		// copied, which stalls on store forwarding.
		fr := &frames[n]
		fr.PC, fr.SP, fr.CFA = pc, sp, 0
		fr.Mapping, fr.Method, fr.Flags = int32(mi), method, flags
		if marked {
			// The markers vouch for a sigreturn trampoline here, even
			// where the frame buffer ends before its step.
			fr.Flags = fr.Flags&^FrameReturnAddress | FrameSignalTrampoline
		}
		n++
		if flags&FrameReturnAddress == 0 && !marked && (mi < 0 || !space.maps[mi].Exec && space.maps[mi].Object == nil) {
			// An exact PC (the first frame's, or one a signal
			// interrupted) is where the thread was, even in no code,
			// but nothing says how to unwind from it: unless a call
			// to it just happened (badCall).
			if n >= limit {
				return n, StopDepth, nil, 0
			}
			if spOK {
				if ra, callerSP, ok := u.badCall(space, cur, w, sp, pacMask); ok {
					if u.arch == arch.ARM64 {
						cur.Unset(arch.ARM64_X30) // the call overwrote it
					}
					cur.Set(pcReg, ra)
					cur.Set(spReg, callerSP)
					prevSameSP = callerSP == sp
					pc, sp = ra, callerSP
					method, flags = MethodBadCall, FrameReturnAddress
					continue
				}
			}
			if mi < 0 {
				return n, StopNoMapping, &NoMappingError{PC: pc}, 0
			}
		}
		if n >= limit {
			return n, StopDepth, nil, 0
		}
		if !spOK {
			return n, StopUnknownRegister, errSPUnknown, 0
		}
		m := &noMapping
		if mi >= 0 {
			m = space.Mapping(mi)
		}
		lookup := pc
		if flags&FrameReturnAddress != 0 {
			lookup = pc - 1
		}

		// The caller's registers end up in out: cur itself when the row
		// is applied in place, next otherwise.
		var (
			out            *arch.Regs
			cfa            uint64
			newPC, newSP   uint64
			newPCOK        bool
			newSPOK        bool
			stepMethod     Method
			signal         bool
			raFromRegister bool
			restored       bool
		)
		e := &c.none
		if m.Object != nil {
			// c.row, its common case inlined by hand.
			addr := lookup - m.Bias
			set := cacheSet(addr)
			ways := (*[cacheWays]cacheEntry)(c.entries[set*cacheWays:])
			if e = &ways[0]; e.addr == addr && sameObject(&e.obj, &m.Object) {
				if c.victim[set] != 1 {
					c.victim[set] = 1
				}
			} else if e = &ways[1]; e.addr == addr && sameObject(&e.obj, &m.Object) {
				if c.victim[set] != 0 {
					c.victim[set] = 0
				}
			} else {
				e = c.rowMiss(a, m.Object, addr, set)
			}
		}
		stop := stopGeneral
		if e.flags&(fastOK|fastSignal|fastCFADeref) == fastOK && e.arch == a && !spGuess {
			// The common case: the row has a compact form (CFA =
			// register + offset and plain rules, or compiled
			// expressions) and is no signal frame's.
			var known uint64
			cfa, newPC, newSP, known, stop = applyFast(&e.fastRow, cur, w, sp, pacMask)
			if stop == stopNone {
				// What the general tail below does, for this case.
				fr.CFA = cfa
				if known&(1<<uint(pcReg)) == 0 && u.sigFrameAbove(w, cfa, cur) {
					pc, sp, spOK = cur.Values()[pcReg], cur.Values()[spReg], true
					method, flags = MethodSignalMarker, 0
					prevSameSP = false
					w.restored = 0 // of the handler's row, not the interrupted frame's
					continue
				}
				if known&(1<<uint(pcReg)) == 0 || newPC == 0 {
					if known&(1<<uint(pcReg)) == 0 && e.fastRow.flags&fastUnsetPC != 0 {
						return n, StopOutermost, nil, 0
					}
					// A zero, or (arm64) a return address column that
					// copies an unknown x30, which the general step
					// reads as zero too.
					stop, err := zeroReturn(c, m, fr)
					return n, stop, err, 0
				}
				if known&(1<<uint(spReg)) == 0 {
					return n, StopUnknownRegister, errCallerSP, 0
				}
				raFromReg := e.flags&fastRAFromReg != 0
				restored := w.restored
				if restored != 0 {
					// An arm64 epilogue restored x30: the
					// return address is in the register.
					raFromReg = raFromReg || restored>>e.raReg&1 != 0
					w.restored = 0
				}
				if !callerSane(newSP, sp, newPC, pc, raFromReg, prevSameSP) {
					return n, StopLoop, loopError(pc, sp, newPC, newSP), 0
				}
				prevSameSP = newSP == sp
				pc, sp, spOK = newPC, newSP, true
				method, flags = MethodCFI, FrameReturnAddress
				if restored != 0 {
					flags |= FrameRestoredRegister
				}
				continue
			}
		}
		if stop == stopGeneral && e.flags&(fastOK|fastSignal) == fastOK|fastSignal && e.arch == a && !spGuess &&
			(lookup == pc || e.flags&fastSignalNext != 0) {
			// A signal trampoline's compact row (glibc's __restore_rt),
			// found at the PC itself or valid there: what slowStep does
			// for it, without the call.
			var known uint64
			cfa, newPC, newSP, known, stop = applyCompact(&e.fastRow, cur, w, pacMask)
			if stop == stopNone {
				out, stepMethod, signal = cur, MethodSignal, true
				newPCOK, newSPOK, raFromRegister, restored = compactApplied(e, w, known, pcReg, spReg)
			}
		}
		cfaGuess, otherStack := false, false
		if stop != stopNone {
			var st stepResult
			st.spGuess, st.space = spGuess, space
			u.slowStep(c, m, e, cur, next, w, lookup, pc, n == 1, pacMask, stop, &st)
			if st.stop != stopNone {
				if (st.stop == StopTruncated || st.stop == StopBadMemory) && fr.Flags&FrameReturnAddress != 0 && baseFrame(c, space, fr) {
					// A return into a function that begins a stack
					// (clone's child, _start) is its first frame,
					// whatever lies above it: the word its CFI
					// reads may be past the new thread's stack.
					return n, StopOutermost, nil, 0
				}
				if (st.stop == StopTruncated || st.stop == StopBadMemory) && st.otherStack {
					// Not the snapshot's size: the caller is on
					// the stack the function left.
					return n, StopStackSwitch, errOtherStack, 0
				}
				if (st.stop == StopTruncated || st.stop == StopBadMemory) && st.err == nil &&
					(fr.Method == MethodSignal || fr.Method == MethodSignalMarker) && !w.holds(sp) {
					st.err = ErrInterruptedStackNotCaptured
				}
				if st.stop == StopTruncated {
					return n, st.stop, st.err, w.beyond
				}
				return n, st.stop, st.err, 0
			}
			out, cfa, stepMethod, signal, raFromRegister, restored = st.out, st.cfa, st.method, st.signal, st.raFromRegister, st.restored
			if st.fpGuess && state.guess == 0 {
				state.guess, state.guessCall = n, st.method == MethodPrologue || st.method == MethodFrameless
				state.guessScan = st.method == MethodScan
			}
			if st.entered {
				// Returned into at a function's entry (enteredAt):
				// no call precedes its PC, which is exact.
				fr.Flags &^= FrameReturnAddress
			}
			newPC, newSP, newPCOK, newSPOK = st.pc, st.sp, st.pcOK, st.spOK
			cfaGuess, otherStack = st.cfaGuess, st.otherStack
		}
		spGuess = false
		fr.CFA = cfa
		if marked && !signal {
			// Let in only as a trampoline the signal frame's markers
			// vouch for: a step that did not restore that frame leaves
			// the return address where it was, outside code.
			n--
			*fr = Frame{}
			return n, StopNoMapping, &NoMappingError{PC: pc, Mapped: mi >= 0}, 0
		}
		if signal {
			// The handler "returned" to the trampoline's first byte; no
			// call precedes it, so the PC itself is what to symbolize.
			fr.Flags = fr.Flags&^FrameReturnAddress | FrameSignalTrampoline
		}

		// A signal that interrupted the thread at address 0 (a call
		// through a NULL function pointer, which faulted there) restores
		// a PC of 0: no end of the stack, but the frame at 0, whose
		// caller the call left (badCall) or nothing is known of.
		nullCall := signal && newPCOK && newPC == 0 && newSPOK
		if !nullCall && (!newPCOK || newPC == 0) {
			if stepMethod == MethodFramePointer || stepMethod == MethodLinkRegister {
				// A zero return address from a heuristic
				// proves the end only in a function that
				// begins a stack.
				var st stepResult
				chainEnd(c, m, lookup, &st, errZeroReturnAddress)
				return n, st.stop, st.err, 0
			}
			if newPCOK && cfaGuess {
				// Read at a CFA that is only a guess: zero is
				// whatever lay there, not the end.
				return n, StopNoUnwindInfo, errCFAGuess, 0
			}
			if !newPCOK && stepMethod == MethodCFI && u.sigFrameAbove(w, cfa, cur) {
				pc, sp, spOK = cur.Values()[pcReg], cur.Values()[spReg], true
				method, flags = MethodSignalMarker, 0
				prevSameSP = false
				continue
			}
			if newPCOK {
				stop, err := zeroReturn(c, m, fr)
				return n, stop, err, 0
			}
			return n, StopOutermost, nil, 0
		}
		if !newSPOK {
			return n, StopUnknownRegister, errCallerSP, 0
		}

		// Sanity (callerSane), except that a signal frame may jump from
		// a sigaltstack back to the thread stack, in either direction.
		switch {
		case signal:
			if signalFrames > 0 && newSP == lastSignalSP {
				return n, StopLoop, fmt.Errorf("unwinder: a signal frame at pc %#x restores the SP %#x of the signal frame before it", pc, newSP), 0
			}
			signalFrames++
			lastSignalSP = newSP
			if signalFrames > 64 {
				return n, StopLoop, fmt.Errorf("unwinder: more than 64 signal frames (the last at pc %#x)", pc), 0
			}
		case otherStack && newSP < sp:
			// Back from another stack (Go's g0, where a vDSO call
			// ran) to the one below it: a few times a stack at most.
			if stackReturns++; stackReturns > 8 {
				return n, StopLoop, loopError(pc, sp, newPC, newSP), 0
			}
		case !callerSane(newSP, sp, newPC, pc, raFromRegister, prevSameSP):
			return n, StopLoop, loopError(pc, sp, newPC, newSP), 0
		}

		// The return address must point into executable code (the
		// loop's next turn ends with StopNoMapping otherwise); one from
		// the frame-pointer heuristics that does not is the heuristic's
		// failure, not the stack's end.
		if stepMethod == MethodFramePointer || stepMethod == MethodLinkRegister {
			if j := space.Find(newPC); (j < 0 || !space.Mapping(j).Exec) && !u.signalMarker(w, newSP) {
				return n, StopNoUnwindInfo, errFPLeftCode, 0
			}
		}

		prevSameSP = newSP == sp && !signal
		if out == next {
			cur, next = next, cur
		}
		pc, sp, spOK = newPC, newSP, true
		method = stepMethod
		spGuess = stepMethod == MethodFramePointer && a == arch.ARM64
		if signal {
			flags = 0 // the interrupted PC is exact
		} else {
			flags = FrameReturnAddress
		}
		if restored {
			flags |= FrameRestoredRegister
		}
	}
}

// zeroReturn ends the walk where the step out of frame f, in mapping m,
// read a return address of zero (its CFI does not mark the return address
// undefined): the outermost frame where f's object says f's function
// begins a stack (an entry point or a thread's start whose CFI leaves the
// word to the zero the kernel or clone put there; makecontext's
// __start_context, returned into at its entry), else a stop at a caller
// in no mapping: a zero in any other function's return address slot is an
// overwritten stack (a buffer overflow), whose caller gdb shows at 0
// ("#1 0x0000000000000000 in ??").
func zeroReturn(c *Cache, m *Mapping, f *Frame) (StopReason, error) {
	if c.outermost(m, f.PC-uint64(f.Flags&FrameReturnAddress)-m.Bias) {
		return StopOutermost, nil
	}
	return StopNoMapping, &NoMappingError{PC: 0}
}

// loopError says where the stack did not move: the frame at pc with SP
// sp, whose caller (at newPC) would have SP newSP.
func loopError(pc, sp, newPC, newSP uint64) error {
	if newSP == sp {
		return fmt.Errorf("unwinder: the frame at pc %#x and its caller at %#x have the same SP %#x", pc, newPC, sp)
	}
	return fmt.Errorf("unwinder: the caller (pc %#x) of the frame at pc %#x has SP %#x, below the frame's %#x: the stack grows down", newPC, pc, newSP, sp)
}

// callerSane reports whether a caller's SP and PC, recovered from a frame
// that is no signal frame, make sense: the stack grows down, so the caller's
// SP lies above its callee's, or it is the same in a leaf on a link-register
// architecture (the return address came from a register and differs from
// the PC). That is allowed only once in a row (prevSameSP): only the
// innermost frame, or the frame interrupted by a signal, can still hold its
// return address in the link register.
func callerSane(newSP, sp, newPC, pc uint64, raFromRegister, prevSameSP bool) bool {
	return newSP > sp || newSP == sp && raFromRegister && newPC != pc && !prevSameSP
}

const stopNone StopReason = 255

// noMapping stands for the mapping of a sigreturn trampoline found by the
// signal frame's markers outside every mapping: no object, no code.
var noMapping Mapping
