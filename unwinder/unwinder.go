package unwinder

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"unsafe"

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

const (
	cacheWays = 2
	cacheSets = 256 // a power of two
	cacheBits = 8   // log2(cacheSets)
)

// fastRule is one explicit register rule of a row in the compact form that
// applyFast uses.
type fastRule struct {
	off  int32 // RuleOffset, RuleValOffset: the offset from the CFA
	col  uint8 // the register column
	kind cfi.RuleKind
	reg  uint8 // RuleRegister: the source register
	vtl  bool  // the column is the return address, SP or PC
}

// Flags of a cacheEntry, computed when the row is cached.
const (
	fastOK        uint8 = 1 << iota // applyFast can apply the row
	fastRAFromReg                   // the return address comes from a register
	fastCopyRA                      // the caller's PC is the return address column
	fastUnsetPC                     // the return address is undefined: outermost
	fastSetSP                       // the caller's SP is the CFA
	fastRAOff                       // the return address is saved at CFA+raOff
)

// cacheEntry is a cacheEntryData padded to a power-of-two size, so that
// indexing the cache is a shift rather than a multiplication on the path from
// one frame's PC to the next. (The array length goes negative, failing the
// build, if cacheEntryData outgrows the size.)
type cacheEntry struct {
	cacheEntryData
	_ [cacheEntrySize - unsafe.Sizeof(cacheEntryData{})]byte
}

const cacheEntrySize = 1024

type cacheEntryData struct {
	obj      Object
	addr     uint64 // the looked-up link-time address (exact key)
	err      error  // nil, cfi.ErrNoFDE or a CFI error
	explicit uint64 // bit r set when row.Regs[r] is not unspecified or same value

	// The compact form of the row, valid when flags&fastOK != 0: the CFA
	// is register cfaReg + cfaOff and rules[:nrules] are the explicit rules.
	flags  uint8
	arch   arch.Arch // the architecture the compact form is for
	cfaReg uint8
	raReg  uint8
	pcReg  uint8
	spReg  uint8
	nrules uint8
	noff   uint8 // rules[:noff] are the RuleOffset rules
	// raOff is the offset from the CFA of the saved return address when
	// flags has fastRAOff.
	raOff int32
	// offMask has bit r set for the column r of each of rules[:noff].
	offMask uint64
	// minOff and maxOff bound the offsets of rules[:noff], so that one
	// check can cover every stack read of the row.
	minOff, maxOff int32
	cfaOff         int64
	rules          [arch.MaxRegs]fastRule

	row cfi.Row
}

// Cache holds per-worker unwinding state: a set-associative cache of CFI rows
// keyed by object and address. It is not safe for concurrent use; give each
// goroutine its own. The zero Cache is ready to use. Objects used as cache
// keys must be comparable (pointer types).
type Cache struct {
	entries [cacheSets * cacheWays]cacheEntry
	recent  [cacheSets]uint8 // the way of each set used last
	mem     exprMemory
	regs    [2]arch.Regs // the current frame's and the caller's registers
	last    [2]int       // indexes of the mappings found last
}

// Reset empties the cache; call it when an Object may have changed.
func (c *Cache) Reset() {
	for i := range c.entries {
		c.entries[i] = cacheEntry{}
	}
	c.recent = [cacheSets]uint8{}
}

// iface is the layout of a non-empty interface value.
type iface struct {
	tab, data unsafe.Pointer
}

// sameObject reports whether a and b hold the same dynamic type and the same
// data word: for the pointer types that implement Object this is a == b,
// without the call to the runtime that comparing interfaces costs. (For other
// types equal words still imply equal values; unequal words only cost a
// cache miss.)
func sameObject(a, b *Object) bool {
	x := (*iface)(unsafe.Pointer(a))
	y := (*iface)(unsafe.Pointer(b))
	return x.tab == y.tab && x.data == y.data
}

// row returns the CFI row for link-time address addr in obj, from the cache
// or by asking the object. obj is not nil; a is the architecture to prepare
// the compact form for. (Unwind has this inlined by hand.)
func (c *Cache) row(a arch.Arch, obj Object, addr uint64) *cacheEntry {
	set := (addr * 0x9E3779B97F4A7C15) >> (64 - cacheBits)
	ways := (*[cacheWays]cacheEntry)(c.entries[set*cacheWays:])
	if e := &ways[0]; e.addr == addr && sameObject(&e.obj, &obj) {
		if c.recent[set] != 0 {
			c.recent[set] = 0
		}
		return e
	}
	if e := &ways[1]; e.addr == addr && sameObject(&e.obj, &obj) {
		if c.recent[set] != 1 {
			c.recent[set] = 1
		}
		return e
	}
	return c.rowMiss(a, obj, addr, set)
}

// rowMiss fills the way of set not used last with the row at addr.
//
//go:noinline
func (c *Cache) rowMiss(a arch.Arch, obj Object, addr, set uint64) *cacheEntry {
	w := c.recent[set] ^ 1 // replace the way not used last
	c.recent[set] = w
	e := &c.entries[set*cacheWays+uint64(w&1)]
	e.fill(a, obj, addr)
	return e
}

// fill asks obj for the row at addr and precomputes its compact form.
//
//go:noinline
func (e *cacheEntry) fill(a arch.Arch, obj Object, addr uint64) {
	e.obj = obj
	e.addr = addr
	e.err = obj.FindRow(addr, &e.row)
	e.explicit = 0
	e.flags = 0
	e.arch = arch.Unknown
	e.nrules = 0
	if e.err != nil {
		return
	}
	row := &e.row
	for r := range row.Regs {
		if k := row.Regs[r].Kind; k != cfi.RuleUnspecified && k != cfi.RuleSameValue {
			e.explicit |= 1 << uint(r)
		}
	}
	e.flags = e.compact(a)
	e.arch = a
}

// compact fills e.rules for architecture a and returns the flags of the
// compact form, or 0 when the row needs the general applyRow: a signal frame,
// expressions, offsets beyond 32 bits, a missing return address rule, or a
// register rule whose source another rule overwrites (applyFast updates the
// registers in place).
func (e *cacheEntry) compact(a arch.Arch) uint8 {
	row := &e.row
	ra := int(row.RA)
	if row.Signal || row.CFA.Kind != cfi.RuleCFAOffset || row.CFA.Reg >= arch.MaxRegs ||
		ra >= arch.MaxRegs || a == arch.Unknown {
		return 0
	}
	pcReg, spReg := a.PC(), a.SP()
	flags := fastOK
	raKind := row.Regs[ra].Kind
	if ra != pcReg {
		if raKind == cfi.RuleUnspecified || raKind == cfi.RuleSameValue {
			flags |= fastRAFromReg
		}
		flags |= fastCopyRA
	} else if raKind == cfi.RuleUnspecified || raKind == cfi.RuleSameValue {
		return 0 // errNoRARule
	}
	if raKind == cfi.RuleUndefined {
		flags |= fastUnsetPC
	}
	if k := row.Regs[spReg].Kind; k == cfi.RuleUnspecified || k == cfi.RuleSameValue {
		flags |= fastSetSP
	}
	// RuleOffset rules first: applyFast runs them in a loop of their own.
	n, noff := 0, 0
	for m := e.explicit; m != 0; m &= m - 1 {
		if e.row.Regs[bits.TrailingZeros64(m)].Kind != cfi.RuleOffset {
			continue
		}
		r := bits.TrailingZeros64(m)
		off := row.Regs[r].Offset
		if int64(int32(off)) != off {
			return 0
		}
		e.rules[n] = fastRule{col: uint8(r), kind: cfi.RuleOffset, off: int32(off),
			vtl: r == ra || r == spReg || r == pcReg}
		n++
	}
	noff = n
	if raKind == cfi.RuleOffset {
		flags |= fastRAOff
		e.raOff = int32(row.Regs[ra].Offset) // checked in the loop above
	}
	e.offMask = 0
	for i := 0; i < noff; i++ {
		e.offMask |= 1 << e.rules[i].col
	}
	e.minOff, e.maxOff = 0, 0
	for i := 0; i < noff; i++ {
		if i == 0 || e.rules[i].off < e.minOff {
			e.minOff = e.rules[i].off
		}
		if i == 0 || e.rules[i].off > e.maxOff {
			e.maxOff = e.rules[i].off
		}
	}
	for m := e.explicit; m != 0; m &= m - 1 {
		r := bits.TrailingZeros64(m)
		rule := row.Regs[r]
		fr := fastRule{col: uint8(r), kind: rule.Kind, vtl: r == ra || r == spReg || r == pcReg}
		switch rule.Kind {
		case cfi.RuleOffset:
			continue // done above
		case cfi.RuleUndefined:
		case cfi.RuleValOffset:
			if int64(int32(rule.Offset)) != rule.Offset {
				return 0
			}
			fr.off = int32(rule.Offset)
		case cfi.RuleRegister:
			src := int(rule.Reg)
			if src >= arch.MaxRegs {
				fr.kind = cfi.RuleUndefined // an untracked register is unknown
			} else if src != r && e.explicit&(1<<uint(src)) != 0 {
				return 0
			}
			fr.reg = uint8(src)
			if r == ra {
				flags |= fastRAFromReg
			}
		default:
			return 0
		}
		e.rules[n] = fr
		n++
	}
	e.nrules = uint8(n)
	e.noff = uint8(noff)
	e.cfaReg = uint8(row.CFA.Reg)
	e.raReg, e.pcReg, e.spReg = uint8(ra), uint8(pcReg), uint8(spReg)
	e.cfaOff = row.CFA.Offset
	return flags
}

// findMiss returns the index of the mapping containing addr when neither of
// the two mappings found last (c.last) holds it. Unwind tries those inline.
//
//go:noinline
func (c *Cache) findMiss(space *AddressSpace, addr uint64) int {
	i := space.Find(addr)
	if i >= 0 {
		c.last[0], c.last[1] = i, c.last[0]
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
	frames = frames[:limit]

	pcReg, spReg := a.PC(), a.SP()
	cur, next := &c.regs[0], &c.regs[1]
	*cur = *regs
	method := MethodContext
	var flags FrameFlags
	n := 0
	lastSignalSP := uint64(0)
	signalFrames := 0
	prevSameSP := false
	// The PAC bits to strip from return addresses (none off arm64).
	pacMask := uint64(0)
	if a == arch.ARM64 {
		pacMask = u.opts.PACMask
	}
	// The frame's PC and SP travel in locals from one frame to the next,
	// rather than through cur.
	pc, pcOK := cur.Get(pcReg)
	sp, spOK := cur.Get(spReg)
	for {
		if !pcOK {
			return Result{Frames: n, Stop: StopUnknownRegister, Err: errPCUnknown}
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
		// Field by field: a composite literal is built on the stack and
		// copied, which stalls on store forwarding.
		fr := &frames[n]
		fr.PC, fr.SP, fr.CFA = pc, sp, 0
		fr.Mapping, fr.Method, fr.Flags = int32(mi), method, flags
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

		// The caller's registers end up in out: cur itself when the row
		// is applied in place, next otherwise.
		var (
			e              *cacheEntry
			out            *arch.Regs
			cfa            uint64
			newPC, newSP   uint64
			newPCOK        bool
			newSPOK        bool
			stepMethod     Method
			signal         bool
			raFromRegister bool
		)
		if m.Object != nil {
			// c.row, its common case inlined by hand.
			addr := lookup - m.Bias
			set := (addr * 0x9E3779B97F4A7C15) >> (64 - cacheBits)
			ways := (*[cacheWays]cacheEntry)(c.entries[set*cacheWays:])
			if e = &ways[0]; e.addr == addr && sameObject(&e.obj, &m.Object) {
				if c.recent[set] != 0 {
					c.recent[set] = 0
				}
			} else if e = &ways[1]; e.addr == addr && sameObject(&e.obj, &m.Object) {
				if c.recent[set] != 1 {
					c.recent[set] = 1
				}
			} else {
				e = c.rowMiss(a, m.Object, addr, set)
			}
		}
		if e != nil && e.flags&fastOK != 0 && e.arch == a {
			// The common case: CFA = register + offset and plain rules.
			var (
				stop  StopReason
				known uint64
			)
			cfa, newPC, newSP, known, stop = applyFast(e, cur, stack, sp, pacMask)
			if stop != stopNone {
				var err error
				if stop == StopUnknownRegister {
					err = errCFARegUnknown
				}
				return Result{Frames: n, Stop: stop, Err: err}
			}
			newPCOK = known&(1<<uint(pcReg)) != 0
			newSPOK = known&(1<<uint(spReg)) != 0
			out = cur
			stepMethod = MethodCFI
			raFromRegister = e.flags&fastRAFromReg != 0
		} else {
			var st stepResult
			c.mem.stack = stack
			u.step(c, m, e, cur, next, lookup, pc, n == 1, &st)
			c.mem.stack = nil
			if st.stop != stopNone {
				return Result{Frames: n, Stop: st.stop, Err: st.err}
			}
			out = next
			cfa, stepMethod, signal, raFromRegister = st.cfa, st.method, st.signal, st.raFromRegister
			newPC, newPCOK = out.Get(pcReg)
			if newPCOK && a == arch.ARM64 {
				newPC = a.StripPAC(newPC, u.opts.PACMask)
				out.Set(pcReg, newPC)
			}
			newSP, newSPOK = out.Get(spReg)
		}
		fr.CFA = cfa
		if signal {
			// The handler "returned" to the trampoline's first byte; no
			// call precedes it, so the PC itself is what to symbolize.
			fr.Flags = fr.Flags&^FrameReturnAddress | FrameSignalTrampoline
		}

		if !newPCOK || newPC == 0 {
			return Result{Frames: n, Stop: StopOutermost}
		}
		if !newSPOK {
			return Result{Frames: n, Stop: StopUnknownRegister, Err: errCallerSP}
		}

		// Sanity: the stack grows down, so a caller's SP lies above its
		// callee's. Two exceptions: a frame that has not yet pushed
		// anything (arm64 leaf, return address still in the link
		// register) leaves SP unchanged, and a signal frame may jump from
		// a sigaltstack back to the thread stack, in either direction.
		switch {
		case signal:
			if signalFrames > 0 && newSP == lastSignalSP {
				return Result{Frames: n, Stop: StopLoop}
			}
			signalFrames++
			lastSignalSP = newSP
			if signalFrames > 64 {
				return Result{Frames: n, Stop: StopLoop}
			}
		case newSP > sp:
		case newSP == sp && raFromRegister && newPC != pc && !prevSameSP:
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
		if stepMethod == MethodFramePointer || stepMethod == MethodLinkRegister {
			if j := space.Find(newPC); j < 0 || !space.Mapping(j).Exec {
				return Result{Frames: n, Stop: StopNoUnwindInfo, Err: errFPLeftCode}
			}
		}

		prevSameSP = newSP == sp && !signal
		if out == next {
			cur, next = next, cur
		}
		pc, sp, spOK = newPC, newSP, true
		method = stepMethod
		if signal {
			flags = 0 // the interrupted PC is exact
		} else {
			flags = FrameReturnAddress
		}
	}
}

// applyFast computes the caller's registers from a row in compact form,
// updating r in place, and returns the CFA, the caller's PC (with the bits of
// pacMask cleared) and SP, and the mask of the registers now known. It
// returns a stop reason other than stopNone when the CFA register is unknown
// (StopUnknownRegister) or a vital register cannot be read from the stack.
//
// It works on r's values and a local copy of its known mask, written back
// once, so that the registers do not make a round trip through memory for
// each rule.
func applyFast(e *cacheEntry, r *arch.Regs, stk *Stack, curSP, pacMask uint64) (cfa, pc, sp, known uint64, stop StopReason) {
	vals := r.Values()
	known = r.KnownMask()
	cfaReg := e.cfaReg
	if cfaReg >= arch.MaxRegs || known&(1<<cfaReg) == 0 {
		return 0, 0, 0, known, StopUnknownRegister
	}
	// The SP, the usual CFA register, is at hand in curSP.
	base := curSP
	if cfaReg != e.spReg {
		base = vals[cfaReg]
	}
	cfa = base + uint64(e.cfaOff)
	inRange := false
	data := stk.Data
	rules := e.rules[:e.nrules]
	noff := min(int(e.noff), len(rules))
	// The common case: every saved register lies inside the snapshot, and
	// one check covers them all.
	lo := cfa + uint64(int64(e.minOff)) - stk.Addr
	hi := cfa + uint64(int64(e.maxOff)) - stk.Addr
	if noff > 0 && lo <= hi && hi < uint64(len(data)) && uint64(len(data))-hi >= 8 && cfa+uint64(int64(e.minOff)) >= stk.Addr {
		// Checked above: no further bounds checks on data.
		p := unsafe.Pointer(unsafe.SliceData(data))
		base := cfa - stk.Addr
		for i := range rules[:noff] {
			fr := &rules[i]
			off := base + uint64(int64(fr.off))
			vals[fr.col] = binary.LittleEndian.Uint64((*[8]byte)(unsafe.Add(p, off))[:])
		}
		known |= e.offMask
		noff, rules = 0, rules[noff:]
		inRange = true
	}
	for i := range rules[:noff] {
		fr := &rules[i]
		col := fr.col
		addr := cfa + uint64(int64(fr.off))
		if off := addr - stk.Addr; off < uint64(len(data)) && uint64(len(data))-off >= 8 {
			vals[col] = binary.LittleEndian.Uint64(data[off:])
			known |= 1 << col
			continue
		}
		v, ms := stk.read8Slow(addr)
		if ms != memOK {
			if fr.vtl {
				r.SetKnownMask(known)
				return cfa, 0, 0, known, memStop(ms)
			}
			v = 0 // an unreadable callee-saved register is unknown
			known &^= 1 << col
		} else {
			known |= 1 << col
		}
		vals[col] = v
	}
	for i := range rules[noff:] {
		fr := &rules[noff+i]
		col := fr.col
		switch fr.kind {
		case cfi.RuleValOffset:
			vals[col] = cfa + uint64(int64(fr.off))
			known |= 1 << col
		case cfi.RuleRegister:
			// The source is no other rule's column: it still holds
			// this frame's value (zero if unknown).
			vals[col] = vals[fr.reg]
			known = known&^(1<<col) | (known>>fr.reg&1)<<col
		default: // cfi.RuleUndefined
			vals[col] = 0
			known &^= 1 << col
		}
	}
	f := e.flags
	pcReg, spReg := e.pcReg, e.spReg
	if inRange && f&fastRAOff != 0 {
		// The return address was just loaded from the stack: load it
		// again rather than wait for the store to vals to forward.
		off := cfa + uint64(int64(e.raOff)) - stk.Addr
		pc = binary.LittleEndian.Uint64(data[off : off+8])
		known |= 1 << pcReg
	} else if f&fastCopyRA != 0 {
		// arm64: the caller's PC is the return address column.
		raReg := e.raReg
		pc = vals[raReg] // zero if unknown
		known = known&^(1<<pcReg) | (known>>raReg&1)<<pcReg
	} else {
		pc = vals[pcReg]
	}
	if f&fastUnsetPC != 0 {
		pc = 0 // the outermost frame
		known &^= 1 << pcReg
	}
	pc &^= pacMask
	vals[pcReg] = pc
	if f&fastSetSP != 0 {
		sp = cfa
		vals[spReg] = cfa
		known |= 1 << spReg
	} else {
		sp = vals[spReg]
	}
	r.SetKnownMask(known)
	return cfa, pc, sp, known, stopNone
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
// cur, in mapping m, into next, for the rows applyFast cannot handle and
// the frames without CFI. e is the cached row at lookup (nil when the
// mapping has no object). lookup is the address to look CFI up at (PC-1 for
// return addresses) and pc the frame's PC.
func (u *Unwinder) step(c *Cache, m *Mapping, e *cacheEntry, cur, next *arch.Regs, lookup, pc uint64, first bool, st *stepResult) {
	st.stop = stopNone
	var err error = cfi.ErrNoFDE
	if e != nil {
		err = e.err
		if err == nil && e.row.Signal && lookup != pc {
			// An 'S' FDE describes a trampoline whose PC is exact:
			// look it up again at the PC itself.
			e = c.row(u.arch, m.Object, pc-m.Bias)
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
			addr := cfa + uint64(rule.Offset)
			if off := addr - stk.Addr; off < uint64(len(stk.Data)) && uint64(len(stk.Data))-off >= 8 {
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
