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
