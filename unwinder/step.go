package unwinder

import (
	"errors"
	"math/bits"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
)

// exprMemory adapts the unwind's memory to cfi.Memory and remembers why the
// last failed read failed.
type exprMemory struct {
	win    *window
	status MemStatus
}

func (m *exprMemory) ReadUint64(addr uint64) (uint64, bool) {
	v, st := m.win.read8(addr)
	if st != MemOK {
		m.status = st
	}
	return v, st == MemOK
}

type stepResult struct {
	stop           StopReason
	err            error
	cfa            uint64
	method         Method // how the caller's registers were recovered
	signal         bool   // the frame was a signal trampoline
	raFromRegister bool   // the return address came from a register, not memory
	restored       bool   // a register kept its value: its save slot was below SP
	entered        bool   // the frame's PC is a function's entry it was returned into (enteredAt)
	otherStack     bool   // the row says the caller may lie on another stack, below (cfi.Row.OtherStack)
	// fpGuess: the step followed a frame pointer the frame is not shown
	// to have set up (framePointerSetUp): a frame may be missing.
	fpGuess bool
	// spGuess: the frame's SP came from an arm64 frame record (its
	// callee had no CFI), a lower bound only; set by the unwind loop.
	// cfaGuess: so did the CFA the row found, for want of a frame
	// record of its own (applyRow): a zero return address read there
	// proves nothing.
	spGuess, cfaGuess bool

	// space is the address space of the unwind (set by the unwind loop),
	// for a fallback that checks the code at a return address.
	space *AddressSpace

	// Set by slowStep: where the caller's registers are, and its PC and SP.
	out        *arch.Regs
	pc, sp     uint64
	pcOK, spOK bool
}

// setStop records a stop reason that applyFast returned.
func (st *stepResult) setStop(stop StopReason) {
	st.stop, st.err = stop, nil
	if stop == StopUnknownRegister {
		st.err = errCFARegUnknown
	}
}

// slowStep steps from the frame whose registers are cur to its caller where
// the loop's fast path did not: fastStop is what applyFast returned
// (stopGeneral when it did not run). It applies the compact rows the loop
// leaves to it (signal trampolines', looked up again at the exact PC, and
// CFAs loaded from memory), and otherwise the general step, writing the
// caller's registers into cur or next and the outcome into st.
//
//go:noinline
func (u *Unwinder) slowStep(c *Cache, m *Mapping, e *cacheEntry, cur, next *arch.Regs, w *window, lookup, pc uint64, first bool, pacMask uint64, fastStop StopReason, st *stepResult) {
	a := u.arch
	pcReg, spReg := a.PC(), a.SP()
	if fastStop != stopGeneral {
		st.setStop(fastStop)
		return
	}
	if e.flags&fastOK != 0 && e.arch == a && !st.spGuess {
		// A compact row the loop leaves here: a signal trampoline's,
		// whose PC is exact (look the row up again at the PC itself),
		// or one whose CFA is loaded from memory.
		if e.flags&(fastSignal|fastSignalNext) == fastSignal && lookup != pc {
			e = c.row(a, m.Object, pc-m.Bias)
		}
		if e.flags&fastOK != 0 && e.arch == a {
			cfa, newPC, newSP, known, stop := applyCompact(&e.fastRow, cur, w, pacMask)
			if stop == stopNone {
				st.stop, st.cfa, st.out = stopNone, cfa, cur
				st.pc, st.sp = newPC, newSP
				st.pcOK, st.spOK, st.raFromRegister, st.restored = compactApplied(e, w, known, pcReg, spReg)
				st.signal = e.flags&fastSignal != 0
				st.method = MethodCFI
				if st.signal {
					st.method = MethodSignal
				}
				return
			}
			if stop != stopGeneral {
				st.setStop(stop)
				return
			}
		}
	}
	st.stop = stopNone
	c.win = *w
	u.step(c, m, cur, next, lookup, pc, first, st)
	w.beyond = c.win.beyond
	c.win = window{} // keep no reference to the caller's memory
	if st.stop != stopNone {
		return
	}
	st.out = next
	st.pc, st.pcOK = next.Get(pcReg)
	if st.pcOK && a == arch.ARM64 {
		st.pc = a.StripPAC(st.pc, u.opts.PACMask)
		next.Set(pcReg, st.pc)
	}
	st.sp, st.spOK = next.Get(spReg)
}

// compactApplied is what applying e's compact row in place (applyCompact)
// tells beyond the registers: whether the caller's PC and SP are known
// (known, its mask of known registers), whether its return address came
// from a register (the row's rule, or an arm64 epilogue that restored the
// link register: w.restored, which it clears) and whether one was
// restored. The unwind loop's signal-trampoline path and slowStep share it.
func compactApplied(e *cacheEntry, w *window, known uint64, pcReg, spReg int) (pcOK, spOK, raFromReg, restored bool) {
	pcOK, spOK = known&(1<<uint(pcReg)) != 0, known&(1<<uint(spReg)) != 0
	raFromReg = e.flags&fastRAFromReg != 0 || w.restored>>e.raReg&1 != 0
	restored, w.restored = w.restored != 0, 0
	return
}

// step computes the caller's registers from the frame whose registers are
// cur, in mapping m, into next, for the rows applyFast cannot handle and
// the frames without CFI. lookup is the address to look CFI up at (PC-1 for
// return addresses) and pc the frame's PC.
func (u *Unwinder) step(c *Cache, m *Mapping, cur, next *arch.Regs, lookup, pc uint64, first bool, st *stepResult) {
	st.stop = stopNone
	var err error = cfi.ErrNoFDE
	var e *rowEntry
	if m.Object != nil {
		e = c.fullRow(m.Object, lookup-m.Bias)
		err = e.err
		if err == nil && e.row.Signal && lookup != pc {
			// An 'S' FDE describes a trampoline whose PC is exact:
			// look it up again at the PC itself.
			e = c.fullRow(m.Object, pc-m.Bias)
			err = e.err
		}
		if lookup == pc && errors.Is(err, cfi.ErrNoFDE) {
			if n := u.syscallBefore(m, pc); n != 0 {
				// In a system call that ends its function's CFI
				// (sigreturn's, in glibc's __restore_rt: a sample at
				// its entry has the PC after it): the row at the
				// system call applies, the state it left unchanged.
				if e2 := c.fullRow(m.Object, pc-n-m.Bias); e2.err == nil && e2.row.End == pc-m.Bias {
					e, err = e2, nil
				}
			}
		}
	}
	if err == nil {
		u.applyCFI(c, e, cur, next, st)
		return
	}
	if err != cfi.ErrNoFDE && !errors.Is(err, cfi.ErrNoFDE) {
		st.stop = StopBadCFI
		if errors.Is(err, cfi.ErrStackSwitch) {
			st.stop = StopStackSwitch
		}
		st.err = err
		return
	}

	// No CFI. A sigreturn trampoline is recognised by its code, wherever
	// the capture holds it; where it holds none, by the markers of the
	// signal frame the kernel wrote on the stack.
	found, readable := u.sigreturnAt(c, m, pc)
	if !found && lookup == pc && u.syscallBefore(m, pc) != 0 {
		// At the entry of the trampoline's system call (musl's
		// __restore_rt has no CFI): the PC is after it.
		found, _ = u.sigreturnAt(c, m, pc-uint64(len(sigreturnCode(u.arch))))
	}
	if !found && !readable {
		if sp, ok := cur.Get(u.arch.SP()); ok && !first && u.signalMarker(&c.win, sp) {
			st.signal = true
			st.method = MethodSignalMarker
			u.restoreSignal(c, cur, next, st)
			return
		}
	}
	if found {
		st.signal = true
		st.method = MethodSignal
		u.restoreSignal(c, cur, next, st)
		return
	}
	if lookup != pc && m.Object != nil {
		if at := u.enteredAt(c, m, pc); at != nil {
			// Returned into at a function's entry, not after a
			// call: the row at the PC itself applies.
			st.entered = true
			u.applyCFI(c, at, cur, next, st)
			return
		}
	}
	if u.opts.NoFramePointer {
		st.stop = StopNoUnwindInfo
		return
	}
	// Where the function's prologue shows it set up its frame pointer
	// before the PC, the frame record it points at is the frame's own:
	// the step is proven, and the other fallbacks' readings are not
	// (arm64's link register may have been reused by a call since;
	// x86_64's word at the SP is one the function pushed, or stale
	// below its frame: a return address left there by an earlier call
	// passes framelessReturn's check).
	setUp := u.framePointerSetUp(m, lookup, lookup != pc)
	if !setUp {
		if u.arch == arch.ARM64 && u.arm64PrologueStep(c, m, lookup, pc, cur, next, first, st) {
			return
		}
		if first && u.arch == arch.ARM64 && ownFrameRecord(c, cur) {
			// The function has stored its frame record: its
			// return address is in it, and the caller's SP is
			// above it, not the frame's own.
			u.framePointer(c, m, lookup, cur, next, true, st)
			return
		}
		if first && u.arch.HasLinkRegister() && u.linkRegisterUsable(c, st.space, m, cur, pc) {
			u.linkRegister(cur, next, st)
			return
		}
		// Else x30 holds no return address into a caller (0, data,
		// the frame's own code): the frame record is the guess left.
		if u.arch == arch.AMD64 && (u.prologueStep(c, m, lookup, pc, cur, next, st) || u.framelessReturn(c, m, lookup, cur, next, st)) {
			return
		}
	}
	u.framePointer(c, m, lookup, cur, next, setUp, st)
	if st.stop == StopNoUnwindInfo && m.Object == nil && fileMapping(m.Name) {
		u.scanStep(c, m, cur, next, st)
	}
}

// applyCFI steps by the row e: a signal frame's when its FDE says so.
func (u *Unwinder) applyCFI(c *Cache, e *rowEntry, cur, next *arch.Regs, st *stepResult) {
	st.signal = e.row.Signal
	st.otherStack = e.row.OtherStack
	st.method = MethodCFI
	if e.row.Signal {
		st.method = MethodSignal
	}
	u.applyRow(c, e, cur, next, st)
}

// applyRow computes the caller's registers from a cached CFI row.
func (u *Unwinder) applyRow(c *Cache, e *rowEntry, cur, next *arch.Regs, st *stepResult) {
	a := u.arch
	row := &e.row
	// The CFA.
	var cfa uint64
	switch row.CFA.Kind {
	case cfi.RuleCFAOffset:
		v, ok := cur.Get(int(row.CFA.Reg))
		if !ok {
			st.stop = StopUnknownRegister
			st.err = errCFARegUnknown
			return
		}
		cfa = v + uint64(row.CFA.Offset)
		if st.spGuess && int(row.CFA.Reg) == a.SP() {
			cfa, st.cfaGuess = recordCFA(row, cur, cfa)
		}
	case cfi.RuleCFAExpression:
		v, ok := u.eval(c, row.Expr(row.CFA), cur, 0, false, st)
		if !ok {
			return
		}
		cfa = v
	default:
		st.stop = StopBadCFI
		st.err = errBadCFARule
		return
	}
	st.cfa = cfa

	pcReg, spReg := a.PC(), a.SP()
	ra := int(row.RA)
	curSP, spOK := cur.Get(spReg)
	// belowSP reports whether a save slot of register r lies below the
	// frame's SP: the epilogue restored r already, so it keeps its value
	// (FrameRestoredRegister). The caller's PC and SP are never restored
	// before the return.
	belowSP := func(r int, addr uint64) bool {
		return spOK && addr < curSP && r != pcReg && r != spReg
	}
	// Registers without a rule keep their values ("same value"); then
	// each explicit rule is applied.
	*next = *cur
	w := &c.win
	for m := e.explicit; m != 0; m &= m - 1 {
		r := bits.TrailingZeros64(m)
		rule := row.Regs[r]
		vital := r == ra || r == spReg || r == pcReg
		switch rule.Kind {
		case cfi.RuleUndefined:
			next.Unset(r)
		case cfi.RuleOffset:
			addr := cfa + uint64(rule.Offset)
			if belowSP(r, addr) {
				st.restored = true
				st.raFromRegister = st.raFromRegister || r == ra
				continue // next holds cur's value
			}
			v, ms := w.read8(addr)
			if ms != MemOK {
				if vital {
					st.stop = memStop(ms)
					return
				}
				next.Unset(r) // an unreadable callee-saved register is unknown
				continue
			}
			next.Set(r, v)
		case cfi.RuleValOffset:
			next.Set(r, cfa+uint64(rule.Offset))
		case cfi.RuleRegister:
			if v, ok := cur.Get(int(rule.Reg)); ok {
				next.Set(r, v)
			} else {
				next.Unset(r)
			}
			if r == ra {
				st.raFromRegister = true
			}
		case cfi.RuleExpression, cfi.RuleValExpression:
			v, ok := u.eval(c, row.Expr(rule), cur, cfa, true, st)
			if ok && rule.Kind == cfi.RuleExpression && belowSP(r, v) {
				st.restored = true
				st.raFromRegister = st.raFromRegister || r == ra
				continue
			}
			if ok && rule.Kind == cfi.RuleExpression {
				var ms MemStatus
				if v, ms = w.read8(v); ms != MemOK {
					ok = false
					st.stop = memStop(ms)
				}
			}
			if !ok {
				if vital {
					return
				}
				st.stop, st.err = stopNone, nil
				next.Unset(r)
				continue
			}
			next.Set(r, v)
		default:
			next.Unset(r)
		}
	}
	raKind := row.Regs[ra].Kind
	if ra != pcReg {
		// arm64: the return address column is the link register. With
		// no rule it still holds the return address (a leaf, or a
		// prologue before the save).
		if raKind == cfi.RuleUnspecified || raKind == cfi.RuleSameValue {
			st.raFromRegister = true
		}
		// The caller's PC is the return address column, unless a
		// signal frame's row says where the PC itself was saved.
		if pk := row.Regs[pcReg].Kind; !row.Signal || pk == cfi.RuleUnspecified || pk == cfi.RuleSameValue {
			if v, ok := next.Get(ra); ok {
				next.Set(pcReg, v)
			} else {
				next.Unset(pcReg)
			}
		}
	} else if raKind == cfi.RuleUnspecified || raKind == cfi.RuleSameValue {
		// x86_64: a return address "the same as" the PC would loop.
		st.stop = StopBadCFI
		st.err = errNoRARule
		return
	}
	if raKind == cfi.RuleUndefined {
		next.Unset(pcReg) // the outermost frame
	}
	// The caller's SP is the CFA unless the row says otherwise; above
	// the pair PLT0 pushed when the CFA leaves it out (plt.go).
	if k := row.Regs[spReg].Kind; k == cfi.RuleUnspecified || k == cfi.RuleSameValue {
		if e.pltEntered {
			cfa += 16
			st.cfa = cfa
		}
		next.Set(spReg, cfa)
	}
}

func memStop(ms MemStatus) StopReason {
	if ms == MemTruncated {
		return StopTruncated
	}
	return StopBadMemory
}

// eval runs a CFI expression, with cfa pushed first when pushCFA is true; on
// failure it sets st.stop and st.err.
func (u *Unwinder) eval(c *Cache, expr []byte, cur *arch.Regs, cfa uint64, pushCFA bool, st *stepResult) (uint64, bool) {
	c.mem.win = &c.win
	c.mem.status = MemOK
	ctx := cfi.ExprContext{Arch: u.arch, Regs: cur, Mem: &c.mem, CFA: cfa, PushCFA: pushCFA, MaxSteps: u.opts.MaxExprSteps}
	v, err := cfi.Eval(expr, &ctx)
	if err != nil {
		switch c.mem.status {
		case MemTruncated:
			st.stop = StopTruncated
		case MemOutside:
			st.stop = StopBadMemory
		default:
			st.stop = StopBadCFI
			st.err = err
		}
		return 0, false
	}
	return v, true
}

// recordCFA returns the CFA of an arm64 frame whose SP is only a lower
// bound: its callee had no CFI, and the callee's frame record, which gave
// the SP, lies at the bottom of the callee's frame (stp x29, x30, [sp,
// #-N]!; mov x29, sp), N-16 bytes below the SP at the call. Where the row
// saves x29 and x30 as a frame record at CFA+k (x29 at CFA+k, x30 at
// CFA+k+8), x29, which the callee's record restored, points at that
// record (AAPCS64), so the CFA is x29-k exactly. Otherwise it keeps the
// SP-based CFA, guess, and says so (gdb reads the callee's prologue
// instead).
func recordCFA(row *cfi.Row, cur *arch.Regs, guess uint64) (cfa uint64, guessed bool) {
	r29, r30 := row.Regs[arch.ARM64_X29], row.Regs[arch.ARM64_X30]
	x29, ok := cur.Get(arch.ARM64_X29)
	if !ok || r29.Kind != cfi.RuleOffset || r30.Kind != cfi.RuleOffset || r30.Offset != r29.Offset+8 {
		return guess, true
	}
	cfa = x29 - uint64(r29.Offset)
	if cfa < guess {
		return guess, true // below the lower bound: x29 is not this frame's record
	}
	return cfa, false
}
