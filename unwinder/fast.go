package unwinder

import (
	"encoding/binary"
	"math/bits"
	"unsafe"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
)

// fastRule is one explicit register rule of a row in the compact form that
// applyFast uses.
type fastRule struct {
	off  int32 // RuleOffset, RuleValOffset: the offset from the row's base
	col  uint8 // the register column
	kind cfi.RuleKind
	reg  uint8 // RuleRegister: the source register
	vtl  bool  // the column is the return address, SP or PC
}

// Flags of a fastRow, computed when the row is cached.
const (
	fastOK         uint16 = 1 << iota // applyFast can apply the row
	fastRAFromReg                     // the return address comes from a register
	fastCopyRA                        // the caller's PC is the return address column
	fastUnsetPC                       // the return address is undefined: outermost
	fastSetSP                         // the caller's SP is the CFA
	fastRAOff                         // the caller's PC is saved at base+raOff
	fastExprCFA                       // the CFA rule is an expression
	fastCFADeref                      // the CFA is the word at base; see fastRow
	fastSignal                        // the row is a signal trampoline's ('S')
	fastSimple                        // walkSimple can apply the row; see compact
	fastCFASP                         // the CFA register is the SP
	fastOutermost                     // walkSimple can apply the row: the outermost frame's
	fastSignalNext                    // a signal row that applies at the next address too (set by Cache.rowMiss)
)

// maxFastRules bounds the explicit rules of a row in compact form, to keep
// the hot cache small (a cacheEntry in 256 bytes); rows with more (an
// arm64 signal frame's, which restores 33 registers; x86_64's restores 17)
// take the general step.
const maxFastRules = 23

// fastRow is the compact form of a cfi.Row that applyFast applies: the
// common rows, with CFA = register + offset and plain register rules, and
// the rows whose expressions are "register plus offset" forms (glibc's
// signal trampolines), compiled into plain rules once when the row is
// cached.
//
// The row's addresses are relative to its base, the value of cfaReg plus
// cfaOff: the CFA, except when the CFA is itself loaded from memory (flags
// has fastCFADeref), where the base is the address of the word that holds
// the CFA. applyFast applies both kinds alike.
type fastRow struct {
	// cfaOff is the offset from register cfaReg of the CFA (or, with
	// fastCFADeref, of the word holding the CFA).
	cfaOff int64
	// offMask has bit r set for the column r of each of rules[:noff].
	offMask uint64
	// minOff and maxOff bound the offsets of rules[:noff], so that one
	// check can cover every stack read of the row.
	minOff, maxOff int32
	// raOff is the offset from the base of the saved caller's PC when
	// flags has fastRAOff.
	raOff  int32
	flags  uint16    // 0: no compact form, use the general step
	arch   arch.Arch // the architecture the compact form is for
	cfaReg uint8
	raReg  uint8
	pcReg  uint8
	spReg  uint8
	nrules uint8
	noff   uint8 // rules[:noff] are the RuleOffset rules
	// nwalk is how many of rules[:noff] walkSimple loads: all but the
	// last when that is the PC's (x86_64's return address column),
	// which it loads as the caller's PC and leaves out of the registers
	// until it stops.
	nwalk uint8
	rules [maxFastRules]fastRule
}

// compile fills f with the compact form of row for architecture a; explicit
// is the mask of row's columns with rules that change a register (see
// explicitRules). f.flags is 0 when the row needs the general step.
func (f *fastRow) compile(a arch.Arch, row *cfi.Row, explicit uint64) {
	f.arch = a
	f.flags = 0
	f.nrules, f.noff, f.nwalk = 0, 0, 0
	if a == arch.Unknown || row.OtherStack {
		return // the general step, which lets the caller's SP lie below
	}
	f.flags = f.compact(a, row, explicit)
}

// spillRow is a fastRow packed for the row cache's second level: 64 bytes
// instead of 224, for rows of at most maxSpillRules rules whose offsets fit
// 16 bits and whose CFA offset fits 32 (every row of an ordinary function;
// not a signal frame's), which pack returns false for. offMask, minOff and
// maxOff are not kept: setFromSpill computes them again from the rules.
type spillRow struct {
	cfaOff int32
	raOff  int32
	flags  uint16
	arch   arch.Arch
	cfaReg uint8
	raReg  uint8
	pcReg  uint8
	spReg  uint8
	nrules uint8
	noff   uint8
	nwalk  uint8
	rules  [maxSpillRules]spillRule
}

// maxSpillRules is as many rules as a spillRow holds in 64 bytes: x86_64's
// return address and its six callee-saved registers; on arm64 the return
// address, the frame pointer and eight of x19-x28 (a function that saves
// all ten, 12 rules, is compiled again at each of its misses).
const maxSpillRules = 11

// spillRule is a fastRule packed: off is the offset, or for a RuleRegister
// rule the source register; kv is the kind, with spillVTL for vtl.
type spillRule struct {
	off int16
	col uint8
	kv  uint8
}

const spillVTL = 0x80

var _ [64 - unsafe.Sizeof(spillRow{})]byte // no larger than 64 bytes

// pack stores f in s; false when f does not pack (s is then unchanged).
func (s *spillRow) pack(f *fastRow) bool {
	if f.flags&fastOK == 0 {
		// No compact form: the general step, which reads only flags.
		*s = spillRow{flags: f.flags, arch: f.arch}
		return true
	}
	n := int(f.nrules)
	if n > maxSpillRules || n > len(f.rules) || int64(int32(f.cfaOff)) != f.cfaOff {
		return false
	}
	var rules [maxSpillRules]spillRule
	for i := range n {
		fr := &f.rules[i]
		off := fr.off
		if fr.kind == cfi.RuleRegister {
			off = int32(fr.reg)
		}
		if int32(int16(off)) != off || fr.kind >= spillVTL {
			return false
		}
		kv := uint8(fr.kind)
		if fr.vtl {
			kv |= spillVTL
		}
		rules[i] = spillRule{off: int16(off), col: fr.col, kv: kv}
	}
	*s = spillRow{cfaOff: int32(f.cfaOff), raOff: f.raOff, flags: f.flags, arch: f.arch,
		cfaReg: f.cfaReg, raReg: f.raReg, pcReg: f.pcReg, spReg: f.spReg,
		nrules: f.nrules, noff: f.noff, nwalk: f.nwalk, rules: rules}
	return true
}

// setFromSpill makes f the row s packed.
func (f *fastRow) setFromSpill(s *spillRow) {
	f.cfaOff, f.raOff, f.flags, f.arch = int64(s.cfaOff), s.raOff, s.flags, s.arch
	f.cfaReg, f.raReg, f.pcReg, f.spReg = s.cfaReg, s.raReg, s.pcReg, s.spReg
	f.nrules, f.noff, f.nwalk = s.nrules, s.noff, s.nwalk
	f.offMask, f.minOff, f.maxOff = 0, 0, 0
	n := min(int(s.nrules), maxSpillRules)
	for i := range n {
		r := &s.rules[i]
		fr := fastRule{col: r.col, kind: cfi.RuleKind(r.kv &^ spillVTL), vtl: r.kv&spillVTL != 0}
		if fr.kind == cfi.RuleRegister {
			fr.reg = uint8(r.off)
		} else {
			fr.off = int32(r.off)
		}
		if i < int(s.noff) {
			// As compact computes them, over the RuleOffset rules.
			if i == 0 || fr.off < f.minOff {
				f.minOff = fr.off
			}
			if i == 0 || fr.off > f.maxOff {
				f.maxOff = fr.off
			}
			f.offMask |= 1 << fr.col
		}
		f.rules[i] = fr
	}
}

// plainRule is a rule with its expression, if any, compiled: kind is
// RuleUndefined, RuleOffset, RuleValOffset or RuleRegister, and off is
// relative to the row's base.
type plainRule struct {
	kind cfi.RuleKind
	off  int64
	reg  uint16
}

// plain compiles the rule of column r; ok is false when it has no plain
// form. deref says whether the row's base is a register (the CFA is loaded
// from memory) rather than the CFA.
func (f *fastRow) plain(row *cfi.Row, r int, deref bool) (p plainRule, ok bool) {
	rule := row.Regs[r]
	switch rule.Kind {
	case cfi.RuleUndefined:
		return plainRule{kind: cfi.RuleUndefined}, true
	case cfi.RuleRegister:
		return plainRule{kind: cfi.RuleRegister, reg: rule.Reg}, true
	case cfi.RuleOffset, cfi.RuleValOffset:
		// Relative to the CFA: expressible only where the base is the
		// CFA.
		return plainRule{kind: rule.Kind, off: rule.Offset}, !deref
	case cfi.RuleExpression, cfi.RuleValExpression:
		// "DW_OP_breg<n> k" (the pushed CFA lies beneath, unused): the
		// address, or value, is register n + k of this frame. Register n
		// must be the one the base derives from, which applyFast reads
		// before it updates any register.
		reg, k, derefExpr, ok := cfi.RegOffset(row.Expr(rule))
		if !ok || derefExpr || reg != uint64(f.cfaReg) {
			return plainRule{}, false
		}
		kind := cfi.RuleOffset
		if rule.Kind == cfi.RuleValExpression {
			kind = cfi.RuleValOffset
		}
		// base = reg + cfaOff, so reg + k = base + (k - cfaOff)
		// (modulo 2^64, as the expression computes it).
		return plainRule{kind: kind, off: k - f.cfaOff}, true
	}
	return plainRule{}, false
}

// compact fills f's rules for architecture a and returns the flags of the
// compact form, or 0 when the row needs the general applyRow: a CFA or
// register expression that is not a register-plus-offset form, offsets
// beyond 32 bits, a missing return address rule, too many rules, or a
// register rule whose source another rule overwrites (applyFast updates the
// registers in place).
func (f *fastRow) compact(a arch.Arch, row *cfi.Row, explicit uint64) uint16 {
	ra := int(row.RA)
	if ra >= arch.MaxRegs || bits.OnesCount64(explicit) > maxFastRules {
		return 0
	}
	pcReg, spReg := a.PC(), a.SP()
	flags := fastOK
	deref := false
	switch row.CFA.Kind {
	case cfi.RuleCFAOffset:
		if row.CFA.Reg >= arch.MaxRegs {
			return 0
		}
		f.cfaReg, f.cfaOff = uint8(row.CFA.Reg), row.CFA.Offset
	case cfi.RuleCFAExpression:
		reg, off, d, ok := cfi.RegOffset(row.Expr(row.CFA))
		if !ok || reg >= arch.MaxRegs || (d && a.PtrSize() != 8) {
			return 0
		}
		f.cfaReg, f.cfaOff, deref = uint8(reg), off, d
		flags |= fastExprCFA
		if d {
			flags |= fastCFADeref
		}
	default:
		return 0
	}
	if row.Signal {
		flags |= fastSignal
	}
	var rules [arch.MaxRegs]plainRule
	for m := explicit; m != 0; m &= m - 1 {
		r := bits.TrailingZeros64(m)
		p, ok := f.plain(row, r, deref)
		if !ok || ((p.kind == cfi.RuleOffset || p.kind == cfi.RuleValOffset) && int64(int32(p.off)) != p.off) {
			return 0
		}
		rules[r] = p
	}
	raKind := rules[ra].kind // unspecified when ra has no explicit rule
	if explicit&(1<<uint(ra)) == 0 {
		raKind = cfi.RuleUnspecified
	}
	// pcSrc is the column that holds the caller's PC once the rules are
	// applied.
	pcSrc := pcReg
	if ra != pcReg {
		// arm64: the return address column is the link register. With
		// no rule it still holds the return address (a leaf, or a
		// prologue before the save).
		if raKind == cfi.RuleUnspecified {
			flags |= fastRAFromReg
		}
		// The caller's PC is the return address column, unless a
		// signal frame's row says where the PC itself was saved.
		if !row.Signal || explicit&(1<<uint(pcReg)) == 0 {
			flags |= fastCopyRA
			pcSrc = ra
		}
	} else if raKind == cfi.RuleUnspecified {
		return 0 // errNoRARule
	}
	if raKind == cfi.RuleUndefined {
		flags |= fastUnsetPC
	}
	if explicit&(1<<uint(spReg)) == 0 {
		flags |= fastSetSP
	}
	if explicit&(1<<uint(pcSrc)) != 0 && rules[pcSrc].kind == cfi.RuleOffset {
		flags |= fastRAOff
		f.raOff = int32(rules[pcSrc].off) // checked in the loop above
	}
	// RuleOffset rules first: applyFast runs them in a loop of their own.
	n := 0
	f.offMask = 0
	f.minOff, f.maxOff = 0, 0
	for m := explicit; m != 0; m &= m - 1 {
		r := bits.TrailingZeros64(m)
		p := rules[r]
		if p.kind != cfi.RuleOffset {
			continue
		}
		off := int32(p.off)
		if n == 0 || off < f.minOff {
			f.minOff = off
		}
		if n == 0 || off > f.maxOff {
			f.maxOff = off
		}
		f.offMask |= 1 << uint(r)
		f.rules[n] = fastRule{col: uint8(r), kind: cfi.RuleOffset, off: off,
			vtl: r == ra || r == spReg || r == pcReg}
		n++
	}
	noff := n
	for m := explicit; m != 0; m &= m - 1 {
		r := bits.TrailingZeros64(m)
		p := rules[r]
		fr := fastRule{col: uint8(r), kind: p.kind, vtl: r == ra || r == spReg || r == pcReg}
		switch p.kind {
		case cfi.RuleOffset:
			continue // done above
		case cfi.RuleUndefined:
		case cfi.RuleValOffset:
			fr.off = int32(p.off)
		case cfi.RuleRegister:
			src := int(p.reg)
			if src >= arch.MaxRegs {
				fr.kind = cfi.RuleUndefined // an untracked register is unknown
			} else if src != r && explicit&(1<<uint(src)) != 0 {
				return 0
			}
			fr.reg = uint8(src)
			if r == ra {
				flags |= fastRAFromReg
			}
		}
		f.rules[n] = fr
		n++
	}
	f.nrules = uint8(n)
	f.noff = uint8(noff)
	f.raReg, f.pcReg, f.spReg = uint8(ra), uint8(pcReg), uint8(spReg)
	// The common shape, which walkSimple applies without the general
	// rules: only RuleOffset rules (of columns below 32, which it need
	// not check against MaxRegs), the caller's PC among them, the
	// caller's SP the CFA, and the CFA a register (not the PC) plus
	// offset.
	const simpleNot = fastSignal | fastCFADeref | fastUnsetPC | fastRAFromReg
	if flags&(fastRAOff|fastSetSP) == fastRAOff|fastSetSP && flags&simpleNot == 0 && n == noff && noff > 0 &&
		int(f.cfaReg) != pcReg && f.offMask < 1<<32 {
		flags |= fastSimple
	}
	// The outermost frame's (_start's), whose only rule makes the return
	// address undefined: the unwind ends there, with the CFA known.
	if flags&fastUnsetPC != 0 && flags&(fastSignal|fastCFADeref) == 0 && n == 1 && int(f.cfaReg) != pcReg {
		flags |= fastOutermost
	}
	if int(f.cfaReg) == spReg {
		flags |= fastCFASP
	}
	f.nwalk = uint8(noff)
	if noff > 0 && int(f.rules[noff-1].col) == pcReg {
		f.nwalk--
	}
	return flags
}

// stopGeneral is what applyFast and applyCompact return, before changing any
// register, when the general step must decide: the base register of an
// expression is unknown (the general step reports the expression's error),
// or the word holding the CFA cannot be read in one piece.
const stopGeneral StopReason = 254

// loadSaved loads the saved registers of f's first n rules (RuleOffset
// rules, n <= len(f.rules)) from the block at p, whose row base lies off
// bytes in, into vals. The caller has checked that every slot lies inside
// the block; the base itself may not (a CFA just past the captured stack),
// so a pointer is formed only to each slot: Go forbids one past the end of
// its allocation (checkptr, under -race, caught the base's). compact
// makes only rules whose column is below arch.MaxRegs, so vals needs no
// check either. walkSimple's loop and applyFast's in-range case share it.
func loadSaved(vals *[arch.MaxRegs]uint64, p unsafe.Pointer, off uintptr, f *fastRow, n int) {
	rl := unsafe.Pointer(&f.rules)
	for end := unsafe.Add(rl, uintptr(n)*unsafe.Sizeof(fastRule{})); rl != end; rl = unsafe.Add(rl, unsafe.Sizeof(fastRule{})) {
		fr := (*fastRule)(rl)
		*(*uint64)(unsafe.Add(unsafe.Pointer(vals), uintptr(fr.col)*8)) = binary.LittleEndian.Uint64((*[8]byte)(unsafe.Add(p, off+uintptr(fr.off)))[:])
	}
}

// applyFast computes the caller's registers from a row in compact form,
// updating r in place, and returns the CFA, the caller's PC (with the bits of
// pacMask cleared) and SP, and the mask of the registers now known. It
// returns a stop reason other than stopNone when the CFA register is unknown
// (StopUnknownRegister, or stopGeneral for an expression), or a vital
// register cannot be read. It ignores fastCFADeref: applyCompact handles
// those rows.
//
// A save slot below curSP means the frame is in its epilogue and has
// restored the register already: the register keeps its value and its bit
// is set in w.restored (FrameRestoredRegister).
//
// It works on r's values and a local copy of its known mask, written back
// once, so that the registers do not make a round trip through memory for
// each rule.
func applyFast(f *fastRow, r *arch.Regs, w *window, curSP, pacMask uint64) (cfa, pc, sp, known uint64, stop StopReason) {
	vals := r.Values()
	known = r.KnownMask()
	cfaReg := f.cfaReg
	if cfaReg >= arch.MaxRegs || known&(1<<cfaReg) == 0 {
		if f.flags&fastExprCFA != 0 {
			return 0, 0, 0, known, stopGeneral
		}
		return 0, 0, 0, known, StopUnknownRegister
	}
	// The SP, the usual CFA register, is at hand in curSP.
	base := curSP
	if cfaReg != f.spReg {
		base = vals[cfaReg]
	}
	base += uint64(f.cfaOff)
	cfa = base
	inRange := false
	data := w.data
	nrules := min(int(f.nrules), len(f.rules))
	noff := min(int(f.noff), nrules)
	// The common case: every saved register lies inside the window, and
	// one check covers them all.
	lo := base + uint64(int64(f.minOff)) - w.addr
	hi := base + uint64(int64(f.maxOff)) - w.addr
	if noff > 0 && lo <= hi && hi < uint64(len(data)) && uint64(len(data))-hi >= 8 && base+uint64(int64(f.minOff)) >= w.addr &&
		base+uint64(int64(f.minOff)) >= curSP {
		// Checked above: no further bounds checks on data.
		loadSaved(vals, unsafe.Pointer(unsafe.SliceData(data)), uintptr(base-w.addr), f, noff)
		known |= f.offMask
		inRange = true
	} else {
		for i := 0; i < noff; i++ {
			fr := &f.rules[i]
			col := fr.col
			addr := base + uint64(int64(fr.off))
			if addr < curSP && col != f.pcReg && col != f.spReg {
				// A save slot below the SP: already restored (see
				// FrameRestoredRegister); the register keeps its value.
				w.restored |= 1 << col
				continue
			}
			if off := addr - w.addr; off < uint64(len(data)) && uint64(len(data))-off >= 8 {
				vals[col] = binary.LittleEndian.Uint64(data[off:])
				known |= 1 << col
				continue
			}
			v, ms := w.readSlow(addr)
			if ms != MemOK {
				if fr.vtl {
					r.SetKnownMask(known)
					return 0, 0, 0, known, memStop(ms)
				}
				v = 0 // an unreadable callee-saved register is unknown
				known &^= 1 << col
			} else {
				known |= 1 << col
			}
			vals[col] = v
		}
	}
	for i := noff; i < nrules; i++ {
		fr := &f.rules[i]
		col := fr.col
		switch fr.kind {
		case cfi.RuleValOffset:
			vals[col] = base + uint64(int64(fr.off))
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
	fl := f.flags
	pcReg, spReg := f.pcReg, f.spReg
	if inRange && fl&fastRAOff != 0 {
		// The caller's PC was just loaded from the stack: load it again
		// rather than wait for the store to vals to forward.
		off := base + uint64(int64(f.raOff)) - w.addr
		pc = binary.LittleEndian.Uint64(data[off : off+8])
		known |= 1 << pcReg
	} else if fl&fastCopyRA != 0 {
		// arm64: the caller's PC is the return address column.
		raReg := f.raReg
		pc = vals[raReg] // zero if unknown
		known = known&^(1<<pcReg) | (known>>raReg&1)<<pcReg
	} else {
		pc = vals[pcReg]
	}
	if fl&fastUnsetPC != 0 {
		pc = 0 // the outermost frame
		known &^= 1 << pcReg
	}
	pc &^= pacMask
	vals[pcReg] = pc
	if fl&fastSetSP != 0 {
		sp = cfa
		vals[spReg] = cfa
		known |= 1 << spReg
	} else {
		sp = vals[spReg]
	}
	r.SetKnownMask(known)
	return cfa, pc, sp, known, stopNone
}

// applyCompact applies the compact row f of any kind, including those whose
// CFA is loaded from memory (fastCFADeref), which the unwind loop leaves to
// it: their CFA is read first (the word at the row's base), then applyFast
// applies the rules, relative to the base as ever, and the caller's SP is set
// to the CFA afterwards.
func applyCompact(f *fastRow, r *arch.Regs, w *window, pacMask uint64) (cfa, pc, sp, known uint64, stop StopReason) {
	curSP, _ := r.Get(int(f.spReg))
	if f.flags&fastCFADeref == 0 {
		return applyFast(f, r, w, curSP, pacMask)
	}
	base, ok := r.Get(int(f.cfaReg))
	if !ok {
		return 0, 0, 0, r.KnownMask(), stopGeneral
	}
	// w.read8, its common case by hand (read8 is too big to inline).
	addr := base + uint64(f.cfaOff)
	ms := MemOK
	if off := addr - w.addr; off < uint64(len(w.data)) && uint64(len(w.data))-off >= 8 {
		cfa = binary.LittleEndian.Uint64(w.data[off : off+8])
	} else {
		cfa, ms = w.readSlow(addr)
	}
	if ms != MemOK {
		// DW_OP_deref may still read the word from its aligned halves,
		// and the general step says why it cannot.
		return 0, 0, 0, r.KnownMask(), stopGeneral
	}
	_, pc, sp, known, stop = applyFast(f, r, w, curSP, pacMask)
	if stop == stopNone && f.flags&fastSetSP != 0 {
		sp = cfa
		r.Set(int(f.spReg), cfa)
		known |= 1 << f.spReg
	}
	return cfa, pc, sp, known, stop
}
