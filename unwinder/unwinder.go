package unwinder

import (
	"encoding/binary"
	"errors"
	"math/bits"

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
	obj      Object
	addr     uint64 // the looked-up link-time address (exact key)
	err      error  // nil, cfi.ErrNoFDE or a CFI error
	explicit uint64 // bit r set when row.Regs[r] is not unspecified or same value
	row      cfi.Row
}

// Cache holds per-worker unwinding state: a direct-mapped cache of CFI rows
// keyed by object and address. It is not safe for concurrent use; give each
// goroutine its own. The zero Cache is ready to use. Objects used as cache
// keys must be comparable (pointer types).
type Cache struct {
	entries [cacheSize]cacheEntry
	mem     exprMemory
	regs    [2]arch.Regs // the current frame's and the caller's registers
	last    int          // index of the mapping found last
}

// Reset empties the cache; call it when an Object may have changed.
func (c *Cache) Reset() {
	for i := range c.entries {
		c.entries[i] = cacheEntry{}
	}
}

// row returns the CFI row for link-time address addr in obj, from the cache
// or by asking the object.
func (c *Cache) row(obj Object, addr uint64) *cacheEntry {
	h := addr * 0x9E3779B97F4A7C15
	e := &c.entries[h>>(64-9)]
	if e.addr == addr && e.obj == obj && e.obj != nil {
		return e
	}
	e.obj = obj
	e.addr = addr
	e.err = obj.FindRow(addr, &e.row)
	e.explicit = 0
	if e.err == nil {
		for r := range e.row.Regs {
			if k := e.row.Regs[r].Kind; k != cfi.RuleUnspecified && k != cfi.RuleSameValue {
				e.explicit |= 1 << uint(r)
			}
		}
	}
	return e
}

// find returns the index of the mapping containing addr, trying the mapping
// found last first.
func (c *Cache) find(space *AddressSpace, addr uint64) int {
	if i := c.last; i < len(space.maps) && space.maps[i].Start <= addr && addr < space.maps[i].End {
		return i
	}
	i := space.Find(addr)
	if i >= 0 {
		c.last = i
	}
	return i
}

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
)

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
	cur, next := &c.regs[0], &c.regs[1]
	*cur = *regs
	method := MethodContext
	var flags FrameFlags
	n := 0
	lastSignalSP := uint64(0)
	signalFrames := 0
	prevSameSP := false
	for {
		pc, ok := cur.Get(pcReg)
		if !ok {
			return Result{Frames: n, Stop: StopUnknownRegister, Err: errPCUnknown}
		}
		sp, spOK := cur.Get(spReg)
		mi := c.find(space, pc)
		frames[n] = Frame{PC: pc, SP: sp, Mapping: int32(mi), Method: method, Flags: flags}
		n++
		if mi < 0 {
			return Result{Frames: n, Stop: StopNoMapping}
		}
		if n >= limit {
			return Result{Frames: n, Stop: StopDepth}
		}
		if !spOK {
			return Result{Frames: n, Stop: StopUnknownRegister, Err: errSPUnknown}
		}
		m := space.Mapping(mi)
		lookup := pc
		if flags&FrameReturnAddress != 0 {
			lookup = pc - 1
		}

		var st stepResult
		u.step(c, m, cur, next, lookup, pc, n == 1, &st)
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
			return Result{Frames: n, Stop: StopUnknownRegister, Err: errCallerSP}
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
				return Result{Frames: n, Stop: StopNoUnwindInfo, Err: errFPLeftCode}
			}
		}

		prevSameSP = newSP == sp && !st.signal
		cur, next = next, cur
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
func (u *Unwinder) step(c *Cache, m *Mapping, cur, next *arch.Regs, lookup, pc uint64, first bool, st *stepResult) {
	st.stop = stopNone
	var e *cacheEntry
	var err error = cfi.ErrNoFDE
	if m.Object != nil {
		e = c.row(m.Object, lookup-m.Bias)
		err = e.err
		if err == nil && e.row.Signal && lookup != pc {
			// An 'S' FDE describes a trampoline whose PC is exact:
			// look it up again at the PC itself.
			e = c.row(m.Object, pc-m.Bias)
			err = e.err
		}
	}
	if err == nil {
		st.signal = e.row.Signal
		st.method = MethodCFI
		if e.row.Signal {
			st.method = MethodSignal
		}
		u.applyRow(c, e, cur, next, st)
		return
	}
	if err != cfi.ErrNoFDE && !errors.Is(err, cfi.ErrNoFDE) {
		st.stop = StopBadCFI
		st.err = err
		return
	}

	// No CFI. A sigreturn trampoline is recognised by its code.
	if m.Object != nil && u.isSigreturn(m.Object, pc-m.Bias) {
		st.signal = true
		st.method = MethodSignal
		u.restoreSignal(c, cur, next, st)
		return
	}
	if u.opts.NoFramePointer {
		st.stop = StopNoUnwindInfo
		return
	}
	if first && u.arch.HasLinkRegister() {
		u.linkRegister(cur, next, st)
		return
	}
	u.framePointer(c, cur, next, st)
}

// applyRow computes the caller's registers from a cached CFI row.
func (u *Unwinder) applyRow(c *Cache, e *cacheEntry, cur, next *arch.Regs, st *stepResult) {
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
	// Registers without a rule keep their values ("same value"); then
	// each explicit rule is applied.
	*next = *cur
	stk := c.mem.stack
	for m := e.explicit; m != 0; m &= m - 1 {
		r := bits.TrailingZeros64(m)
		rule := row.Regs[r]
		vital := r == ra || r == spReg || r == pcReg
		switch rule.Kind {
		case cfi.RuleUndefined:
			next.Unset(r)
		case cfi.RuleOffset:
			// The hottest read of all, inlined by hand.
			addr := cfa + uint64(rule.Offset)
			if off := addr - stk.Addr; off+8 <= uint64(len(stk.Data)) && off+8 > off {
				next.Set(r, binary.LittleEndian.Uint64(stk.Data[off:]))
				continue
			}
			v, ms := stk.read8Slow(addr)
			if ms != memOK {
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
			if ok && rule.Kind == cfi.RuleExpression {
				var ms memStatus
				if v, ms = c.mem.stack.read8(v); ms != memOK {
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
	// The caller's SP is the CFA unless the row says otherwise.
	if k := row.Regs[spReg].Kind; k == cfi.RuleUnspecified || k == cfi.RuleSameValue {
		next.Set(spReg, cfa)
	}
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
