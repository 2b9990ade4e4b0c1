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
	// MaxExprSteps bounds each DWARF expression evaluation (default 1000).
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
		opts.MaxExprSteps = 1000
	}
	return &Unwinder{arch: a, opts: opts}
}

// Arch returns the architecture the Unwinder was made for.
func (u *Unwinder) Arch() arch.Arch { return u.arch }

const cacheSize = 512 // rows; a power of two

type cacheEntry struct {
	obj  Object
	addr uint64 // the looked-up link-time address (exact key)
	err  error  // nil, cfi.ErrNoFDE or a CFI error
	row  cfi.Row
}

// Cache holds per-worker unwinding state: a direct-mapped cache of CFI rows
// keyed by object and address. It is not safe for concurrent use; give each
// goroutine its own. The zero Cache is ready to use. Objects used as cache
// keys must be comparable (pointer types).
type Cache struct {
	entries [cacheSize]cacheEntry
	mem     exprMemory
}

// Reset empties the cache; call it when an Object may have changed.
func (c *Cache) Reset() {
	for i := range c.entries {
		c.entries[i] = cacheEntry{}
	}
}

// row returns the CFI row for link-time address addr in obj, from the cache
// or by asking the object.
func (c *Cache) row(obj Object, addr uint64) (*cfi.Row, error) {
	h := addr * 0x9E3779B97F4A7C15
	e := &c.entries[h>>(64-9)]
	if e.obj == obj && e.obj != nil && e.addr == addr {
		return &e.row, e.err
	}
	e.obj = obj
	e.addr = addr
	e.err = obj.FindRow(addr, &e.row)
	return &e.row, e.err
}

// exprMemory adapts the captured stack to cfi.Memory and remembers why the
// last failed read failed.
type exprMemory struct {
	stack  *Stack
	status memStatus
}

func (m *exprMemory) ReadUint64(addr uint64) (uint64, bool) {
	v, st := m.stack.read8(addr)
	if st != memOK {
		m.status = st
	}
	return v, st == memOK
}

// Unwind walks the stack described by regs and stack in the process space,
// writing frames innermost first into frames, and returns how many it wrote
// and why it stopped. regs holds the captured user registers; registers the
// kernel did not save must be unknown (see arch.Regs). Unwind reads memory
// only from stack. It allocates nothing once c is warm, except to build the
// error of a Result that carries one.
func (u *Unwinder) Unwind(c *Cache, space *AddressSpace, regs *arch.Regs, stack *Stack, frames []Frame) Result {
	a := u.arch
	limit := len(frames)
	if u.opts.MaxFrames > 0 && u.opts.MaxFrames < limit {
		limit = u.opts.MaxFrames
	}
	if limit == 0 {
		return Result{Stop: StopDepth}
	}
	c.mem.stack = stack
	defer func() { c.mem.stack = nil }()

	pcReg, spReg := a.PC(), a.SP()
	cur := *regs
	method := MethodContext
	var flags FrameFlags
	n := 0
	lastSignalSP := uint64(0)
	signalFrames := 0
	prevSameSP := false
	for {
		pc, ok := cur.Get(pcReg)
		if !ok {
			return Result{Frames: n, Stop: StopUnknownRegister, Err: errors.New("unwinder: PC unknown")}
		}
		sp, spOK := cur.Get(spReg)
		mi := space.Find(pc)
		frames[n] = Frame{PC: pc, SP: sp, Mapping: int32(mi), Method: method, Flags: flags}
		n++
		if mi < 0 {
			return Result{Frames: n, Stop: StopNoMapping}
		}
		if n >= limit {
			return Result{Frames: n, Stop: StopDepth}
		}
		if !spOK {
			return Result{Frames: n, Stop: StopUnknownRegister, Err: errors.New("unwinder: SP unknown")}
		}
		m := space.Mapping(mi)
		lookup := pc
		if flags&FrameReturnAddress != 0 {
			lookup = pc - 1
		}

		next, st := u.step(c, m, &cur, lookup, pc, n == 1)
		if st.stop != stopNone {
			return Result{Frames: n, Stop: st.stop, Err: st.err}
		}
		frames[n-1].CFA = st.cfa
		if st.signal {
			// The handler "returned" to the trampoline's first byte; no
			// call precedes it, so the PC itself is what to symbolize.
			frames[n-1].Flags = frames[n-1].Flags&^FrameReturnAddress | FrameSignalTrampoline
		}

		newPC, ok := next.Get(pcReg)
		if !ok {
			return Result{Frames: n, Stop: StopOutermost}
		}
		if a == arch.ARM64 {
			newPC = a.StripPAC(newPC, u.opts.PACMask)
			next.Set(pcReg, newPC)
		}
		if newPC == 0 {
			return Result{Frames: n, Stop: StopOutermost}
		}
		newSP, ok := next.Get(spReg)
		if !ok {
			return Result{Frames: n, Stop: StopUnknownRegister, Err: errors.New("unwinder: caller SP unknown")}
		}

		// Sanity: the stack grows down, so a caller's SP lies above its
		// callee's. Two exceptions: a frame that has not yet pushed
		// anything (arm64 leaf, return address still in the link
		// register) leaves SP unchanged, and a signal frame may jump from
		// a sigaltstack back to the thread stack, in either direction.
		switch {
		case st.signal:
			if signalFrames > 0 && newSP == lastSignalSP {
				return Result{Frames: n, Stop: StopLoop}
			}
			signalFrames++
			lastSignalSP = newSP
			if signalFrames > 64 {
				return Result{Frames: n, Stop: StopLoop}
			}
		case newSP > sp:
		case newSP == sp && st.raFromRegister && newPC != pc && !prevSameSP:
			// A leaf on a link-register architecture. Allow it only
			// once in a row: only the innermost frame, or the frame
			// interrupted by a signal, can still hold its return
			// address in the link register.
		default:
			return Result{Frames: n, Stop: StopLoop}
		}

		// The return address must point into executable code. A frame
		// recovered from CFI is reported even when its PC is unmapped
		// (the maps may be incomplete); one from the frame-pointer
		// heuristics is dropped, since its PC is more likely garbage.
		if st.method == MethodFramePointer || st.method == MethodLinkRegister {
			if j := space.Find(newPC); j < 0 || !space.Mapping(j).Exec {
				return Result{Frames: n, Stop: StopNoUnwindInfo, Err: errors.New("unwinder: frame-pointer chain left the code")}
			}
		}

		prevSameSP = newSP == sp && !st.signal
		cur = next
		method = st.method
		if st.signal {
			flags = 0 // the interrupted PC is exact
		} else {
			flags = FrameReturnAddress
		}
	}
}

const stopNone StopReason = 255

type stepResult struct {
	stop           StopReason
	err            error
	cfa            uint64
	method         Method // how the caller's registers were recovered
	signal         bool   // the frame was a signal trampoline
	raFromRegister bool   // the return address came from a register, not memory
}

// step computes the caller's registers from the frame whose registers are
// cur, in mapping m. lookup is the address to look CFI up at (PC-1 for
// return addresses) and pc the frame's PC.
func (u *Unwinder) step(c *Cache, m *Mapping, cur *arch.Regs, lookup, pc uint64, first bool) (next arch.Regs, st stepResult) {
	st.stop = stopNone
	var row *cfi.Row
	var err error = cfi.ErrNoFDE
	if m.Object != nil {
		row, err = c.row(m.Object, lookup-m.Bias)
		if err == nil && row.Signal && lookup != pc {
			// An 'S' FDE describes a trampoline whose PC is exact:
			// look it up again at the PC itself.
			row, err = c.row(m.Object, pc-m.Bias)
		}
	}
	if err == nil {
		st.signal = row.Signal
		st.method = MethodCFI
		if row.Signal {
			st.method = MethodSignal
		}
		next, st = u.applyRow(c, row, cur, st)
		return next, st
	}
	if !errors.Is(err, cfi.ErrNoFDE) {
		st.stop = StopBadCFI
		st.err = err
		return next, st
	}

	// No CFI. A sigreturn trampoline is recognised by its code.
	if m.Object != nil && u.isSigreturn(m.Object, pc-m.Bias) {
		st.signal = true
		st.method = MethodSignal
		next, st = u.restoreSignal(c, cur, st)
		return next, st
	}
	if u.opts.NoFramePointer {
		st.stop = StopNoUnwindInfo
		return next, st
	}
	if first && u.arch.HasLinkRegister() {
		return u.linkRegister(cur, st)
	}
	return u.framePointer(c, cur, st)
}

// applyRow computes the caller's registers from a CFI row.
func (u *Unwinder) applyRow(c *Cache, row *cfi.Row, cur *arch.Regs, st stepResult) (arch.Regs, stepResult) {
	a := u.arch
	var next arch.Regs
	// The CFA.
	var cfa uint64
	switch row.CFA.Kind {
	case cfi.RuleCFAOffset:
		v, ok := cur.Get(int(row.CFA.Reg))
		if !ok {
			st.stop = StopUnknownRegister
			st.err = fmt.Errorf("unwinder: CFA register %s unknown", a.RegName(int(row.CFA.Reg)))
			return next, st
		}
		cfa = v + uint64(row.CFA.Offset)
	case cfi.RuleCFAExpression:
		v, ok := u.eval(c, row.Expr(row.CFA), cur, 0, false, &st)
		if !ok {
			return next, st
		}
		cfa = v
	default:
		st.stop = StopBadCFI
		st.err = fmt.Errorf("unwinder: row has CFA rule %v", row.CFA.Kind)
		return next, st
	}
	st.cfa = cfa

	nregs := a.NumRegs()
	pcReg, spReg := a.PC(), a.SP()
	ra := int(row.RA)
	for r := 0; r < nregs; r++ {
		rule := row.Regs[r]
		switch rule.Kind {
		case cfi.RuleUnspecified, cfi.RuleSameValue:
			if v, ok := cur.Get(r); ok {
				next.Set(r, v)
			}
		case cfi.RuleUndefined:
			// unknown in the caller
		case cfi.RuleOffset:
			v, ms := c.mem.stack.read8(cfa + uint64(rule.Offset))
			if ms != memOK {
				if r == ra || r == spReg || r == pcReg {
					st.stop = memStop(ms)
					return next, st
				}
				continue // an unreadable callee-saved register is unknown
			}
			next.Set(r, v)
		case cfi.RuleValOffset:
			next.Set(r, cfa+uint64(rule.Offset))
		case cfi.RuleRegister:
			if v, ok := cur.Get(int(rule.Reg)); ok {
				next.Set(r, v)
			}
			if r == ra {
				st.raFromRegister = true
			}
		case cfi.RuleExpression:
			addr, ok := u.eval(c, row.Expr(rule), cur, cfa, true, &st)
			if !ok {
				if r == ra || r == spReg || r == pcReg {
					return next, st
				}
				st.stop, st.err = stopNone, nil
				continue
			}
			v, ms := c.mem.stack.read8(addr)
			if ms != memOK {
				if r == ra || r == spReg || r == pcReg {
					st.stop = memStop(ms)
					return next, st
				}
				continue
			}
			next.Set(r, v)
		case cfi.RuleValExpression:
			v, ok := u.eval(c, row.Expr(rule), cur, cfa, true, &st)
			if !ok {
				if r == ra || r == spReg || r == pcReg {
					return next, st
				}
				st.stop, st.err = stopNone, nil
				continue
			}
			next.Set(r, v)
		}
	}
	if ra < nregs && (row.Regs[ra].Kind == cfi.RuleUnspecified || row.Regs[ra].Kind == cfi.RuleSameValue) && ra != pcReg {
		// arm64: the return address is still in the link register.
		st.raFromRegister = true
	}

	// The caller's PC is the return address column, unless the row says
	// where the PC itself was saved (signal frames on arm64 may).
	if ra != pcReg {
		pcRule := row.Regs[pcReg].Kind
		if pcRule == cfi.RuleUnspecified || pcRule == cfi.RuleSameValue || !row.Signal {
			if v, ok := next.Get(ra); ok {
				next.Set(pcReg, v)
			} else {
				next.Unset(pcReg)
			}
		}
	} else if k := row.Regs[ra].Kind; k == cfi.RuleUnspecified || k == cfi.RuleSameValue {
		// x86_64: a return address "the same as" the PC would loop.
		st.stop = StopBadCFI
		st.err = errors.New("unwinder: CFI gives no rule for the return address")
		return next, st
	}
	if k := row.Regs[ra].Kind; k == cfi.RuleUndefined {
		next.Unset(pcReg) // outermost frame
	}
	// The caller's SP is the CFA unless the row says otherwise.
	if k := row.Regs[spReg].Kind; k == cfi.RuleUnspecified || k == cfi.RuleSameValue {
		next.Set(spReg, cfa)
	}
	return next, st
}

func memStop(ms memStatus) StopReason {
	if ms == memTruncated {
		return StopTruncated
	}
	return StopBadMemory
}

// eval runs a CFI expression; on failure it sets st.stop and st.err.
func (u *Unwinder) eval(c *Cache, expr []byte, cur *arch.Regs, initial uint64, push bool, st *stepResult) (uint64, bool) {
	c.mem.status = memOK
	v, err := cfi.Eval(u.arch, expr, cur, &c.mem, initial, push, u.opts.MaxExprSteps)
	if err != nil {
		switch c.mem.status {
		case memTruncated:
			st.stop = StopTruncated
		case memOutside:
			st.stop = StopBadMemory
		default:
			st.stop = StopBadCFI
			st.err = err
		}
		return 0, false
	}
	return v, true
}
