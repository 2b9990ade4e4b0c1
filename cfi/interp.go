package cfi

import (
	"math"

	"github.com/ustack/ustack/arch"
)

// DW_CFA_* opcodes (DWARF 5 section 7.24 and GNU/vendor extensions).
const (
	cfaAdvanceLoc        = 0x40 // high 2 bits; low 6: delta
	cfaOffset            = 0x80 // high 2 bits; low 6: register
	cfaRestore           = 0xc0 // high 2 bits; low 6: register
	cfaNop               = 0x00
	cfaSetLoc            = 0x01
	cfaAdvanceLoc1       = 0x02
	cfaAdvanceLoc2       = 0x03
	cfaAdvanceLoc4       = 0x04
	cfaOffsetExtended    = 0x05
	cfaRestoreExtended   = 0x06
	cfaUndefined         = 0x07
	cfaSameValue         = 0x08
	cfaRegister          = 0x09
	cfaRememberState     = 0x0a
	cfaRestoreState      = 0x0b
	cfaDefCFA            = 0x0c
	cfaDefCFARegister    = 0x0d
	cfaDefCFAOffset      = 0x0e
	cfaDefCFAExpression  = 0x0f
	cfaExpression        = 0x10
	cfaOffsetExtendedSf  = 0x11
	cfaDefCFASf          = 0x12
	cfaDefCFAOffsetSf    = 0x13
	cfaValOffset         = 0x14
	cfaValOffsetSf       = 0x15
	cfaValExpression     = 0x16
	cfaMIPSAdvanceLoc8   = 0x1d
	cfaAArch64NegateRA   = 0x2d // DW_CFA_GNU_window_save on SPARC
	cfaGNUArgsSize       = 0x2e
	cfaGNUNegOffsetExtnd = 0x2f
)

// interp runs CFA programs into a Row.
type interp struct {
	s        *frameSection
	c        *cie
	f        *fde
	row      *Row
	sc       *scratch
	pc, loc  uint64
	budget   int
	arch     arch.Arch
	maxStack int
	depth    int
	inCIE    bool // running the CIE's initial instructions
	done     bool // an advance passed pc; row.Start and row.End are set
}

// advanceTo moves the location to newLoc, or stops when newLoc passes pc.
func (it *interp) advanceTo(newLoc uint64, opOff int) error {
	if newLoc < it.loc {
		return it.s.errf(opOff, "CFA instruction moves the location backwards from %#x to %#x", it.loc, newLoc)
	}
	if it.pc < newLoc {
		it.row.Start = it.loc
		it.row.End = min(newLoc, it.f.end)
		it.done = true
		return nil
	}
	it.loc = newLoc
	return nil
}

// advance moves the location by delta code alignment units.
func (it *interp) advance(delta uint64, opOff int) error {
	ca := it.c.codeAlign
	if ca != 0 && delta > math.MaxUint64/ca {
		return it.s.err(opOff, "CFA advance overflows")
	}
	d := delta * ca
	if it.loc+d < it.loc {
		return it.s.err(opOff, "CFA advance overflows")
	}
	return it.advanceTo(it.loc+d, opOff)
}

func (it *interp) setReg(reg uint64, r Rule) {
	if reg < arch.MaxRegs {
		it.row.Regs[reg] = r
	}
}

func (it *interp) restore(reg uint64) {
	if reg >= arch.MaxRegs {
		return
	}
	if it.inCIE {
		it.row.Regs[reg] = Rule{}
	} else {
		it.row.Regs[reg] = it.sc.init[reg]
	}
}

// factored multiplies a factored offset by the data alignment factor.
func (it *interp) factored(v int64) int64 { return v * it.c.dataAlign }

func (it *interp) truncated(opOff int) error {
	return it.s.errf(opOff, "truncated operand of CFA instruction %#x", it.s.data[opOff])
}

// exec runs the instructions in [start, end) of the section.
func (it *interp) exec(start, end int) error {
	if start < 0 || end > len(it.s.data) || start > end {
		return it.s.err(start, "CFA instructions outside the section")
	}
	r := reader{data: it.s.data[:end], off: start}
	row := it.row
	for r.off < end {
		if it.budget <= 0 {
			return it.s.err(r.off, "CFA instruction limit exceeded")
		}
		it.budget--
		opOff := r.off
		op := r.data[r.off]
		r.off++
		switch op & 0xc0 {
		case cfaAdvanceLoc:
			if err := it.advance(uint64(op&0x3f), opOff); err != nil || it.done {
				return err
			}
			continue
		case cfaOffset:
			v, ok := r.uleb()
			if !ok {
				return it.truncated(opOff)
			}
			it.setReg(uint64(op&0x3f), Rule{Kind: RuleOffset, Offset: it.factored(int64(v))})
			continue
		case cfaRestore:
			it.restore(uint64(op & 0x3f))
			continue
		}
		switch op {
		case cfaNop:
		case cfaSetLoc:
			b := ptrBases{secAddr: it.s.addr, textAddr: it.s.textAddr, dataAddr: it.s.dataAddr,
				funcAddr: it.f.start, hasFunc: true}
			newLoc, code := r.encodedPtr(it.c.ptrEnc, it.c.addrSize, &b, true)
			if code != ptrOK {
				return it.s.errf(opOff, "DW_CFA_set_loc: %s", ptrErrMsgs[code])
			}
			if err := it.advanceTo(newLoc, opOff); err != nil || it.done {
				return err
			}
		case cfaAdvanceLoc1, cfaAdvanceLoc2, cfaAdvanceLoc4, cfaMIPSAdvanceLoc8:
			n := 1
			switch op {
			case cfaAdvanceLoc2:
				n = 2
			case cfaAdvanceLoc4:
				n = 4
			case cfaMIPSAdvanceLoc8:
				n = 8
			}
			d, ok := r.uN(n)
			if !ok {
				return it.truncated(opOff)
			}
			if err := it.advance(d, opOff); err != nil || it.done {
				return err
			}
		case cfaOffsetExtended, cfaValOffset, cfaGNUNegOffsetExtnd:
			reg, ok1 := r.uleb()
			v, ok2 := r.uleb()
			if !ok1 || !ok2 {
				return it.truncated(opOff)
			}
			off := it.factored(int64(v))
			kind := RuleOffset
			switch op {
			case cfaValOffset:
				kind = RuleValOffset
			case cfaGNUNegOffsetExtnd:
				off = -off
			}
			it.setReg(reg, Rule{Kind: kind, Offset: off})
		case cfaOffsetExtendedSf, cfaValOffsetSf:
			reg, ok1 := r.uleb()
			v, ok2 := r.sleb()
			if !ok1 || !ok2 {
				return it.truncated(opOff)
			}
			kind := RuleOffset
			if op == cfaValOffsetSf {
				kind = RuleValOffset
			}
			it.setReg(reg, Rule{Kind: kind, Offset: it.factored(v)})
		case cfaRestoreExtended, cfaUndefined, cfaSameValue:
			reg, ok := r.uleb()
			if !ok {
				return it.truncated(opOff)
			}
			switch op {
			case cfaRestoreExtended:
				it.restore(reg)
			case cfaUndefined:
				it.setReg(reg, Rule{Kind: RuleUndefined})
			default:
				it.setReg(reg, Rule{Kind: RuleSameValue})
			}
		case cfaRegister:
			reg, ok1 := r.uleb()
			src, ok2 := r.uleb()
			if !ok1 || !ok2 {
				return it.truncated(opOff)
			}
			if src > math.MaxUint16 {
				return it.s.errf(opOff, "DW_CFA_register: register %d out of range", src)
			}
			it.setReg(reg, Rule{Kind: RuleRegister, Reg: uint16(src)})
		case cfaRememberState:
			if it.depth >= it.maxStack {
				return it.s.errf(opOff, "DW_CFA_remember_state: state stack overflow (depth %d)", it.maxStack)
			}
			if it.depth == len(it.sc.stack) {
				it.sc.stack = append(it.sc.stack, savedState{})
			}
			st := &it.sc.stack[it.depth]
			st.cfa, st.regs, st.raSigned = row.CFA, row.Regs, row.RASigned
			it.depth++
		case cfaRestoreState:
			if it.depth == 0 {
				return it.s.err(opOff, "DW_CFA_restore_state: state stack underflow")
			}
			it.depth--
			st := &it.sc.stack[it.depth]
			row.CFA, row.Regs, row.RASigned = st.cfa, st.regs, st.raSigned
		case cfaDefCFA, cfaDefCFASf:
			reg, ok1 := r.uleb()
			var off int64
			ok2 := false
			if op == cfaDefCFA {
				var v uint64
				v, ok2 = r.uleb()
				off = int64(v)
			} else {
				var v int64
				v, ok2 = r.sleb()
				off = it.factored(v)
			}
			if !ok1 || !ok2 {
				return it.truncated(opOff)
			}
			if reg >= arch.MaxRegs {
				return it.s.errf(opOff, "CFA register %d out of range", reg)
			}
			row.CFA = Rule{Kind: RuleCFAOffset, Reg: uint16(reg), Offset: off}
		case cfaDefCFARegister:
			reg, ok := r.uleb()
			if !ok {
				return it.truncated(opOff)
			}
			if reg >= arch.MaxRegs {
				return it.s.errf(opOff, "CFA register %d out of range", reg)
			}
			if row.CFA.Kind == RuleCFAExpression {
				return it.s.err(opOff, "DW_CFA_def_cfa_register with an expression CFA rule")
			}
			if row.CFA.Kind != RuleCFAOffset {
				row.CFA = Rule{Kind: RuleCFAOffset}
			}
			row.CFA.Reg = uint16(reg)
		case cfaDefCFAOffset, cfaDefCFAOffsetSf:
			var off int64
			if op == cfaDefCFAOffset {
				v, ok := r.uleb()
				if !ok {
					return it.truncated(opOff)
				}
				off = int64(v)
			} else {
				v, ok := r.sleb()
				if !ok {
					return it.truncated(opOff)
				}
				off = it.factored(v)
			}
			if row.CFA.Kind == RuleCFAExpression {
				return it.s.err(opOff, "DW_CFA_def_cfa_offset with an expression CFA rule")
			}
			if row.CFA.Kind != RuleCFAOffset {
				row.CFA = Rule{Kind: RuleCFAOffset}
			}
			row.CFA.Offset = off
		case cfaDefCFAExpression:
			n, ok := r.uleb()
			eoff := r.off
			if !ok || !r.skip(n) {
				return it.truncated(opOff)
			}
			row.CFA = Rule{Kind: RuleCFAExpression, Offset: int64(eoff), ExprLen: uint32(n)}
		case cfaExpression, cfaValExpression:
			reg, ok1 := r.uleb()
			n, ok2 := r.uleb()
			eoff := r.off
			if !ok1 || !ok2 || !r.skip(n) {
				return it.truncated(opOff)
			}
			kind := RuleExpression
			if op == cfaValExpression {
				kind = RuleValExpression
			}
			it.setReg(reg, Rule{Kind: kind, Offset: int64(eoff), ExprLen: uint32(n)})
		case cfaGNUArgsSize:
			v, ok := r.uleb()
			if !ok {
				return it.truncated(opOff)
			}
			row.ArgsSize = v
		case cfaAArch64NegateRA:
			if it.arch != arch.ARM64 {
				return it.s.errf(opOff, "DW_CFA_GNU_window_save (%#x) is not valid on %v", op, it.arch)
			}
			row.RASigned = !row.RASigned
		default:
			return it.s.errf(opOff, "unknown CFA instruction %#x", op)
		}
	}
	return nil
}
