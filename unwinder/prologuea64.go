package unwinder

import (
	"encoding/binary"

	"github.com/ustack/ustack/arch"
)

// arm64ProloguePeek bounds the code arm64PrologueStep decodes: GCC may
// schedule the prologue's saves among a function's first hundreds of
// instructions (a store of x30 516 bytes in, before any branch).
const arm64ProloguePeek = 4096

// arm64PrologueStep is prologueStep for arm64: it steps out of a frame that
// has no CFI and no frame pointer set up (code built with
// -fomit-frame-pointer and without unwind tables, hand-written assembly) by
// decoding its function from its first instruction (FunctionObject: the
// symbol table's) to the frame's PC. Where that is straight-line code (no
// branch or return before the PC; calls are fine) whose only changes to
// the stack pointer are constant ones (sub and add of an immediate, the
// writeback of a load or store), those give the CFA (the SP plus all of
// them), and its stores of x19-x30 relative to the SP give where each was
// saved, as gdb's aarch64 prologue analysis finds them. The return address
// is the saved x30, or x30 itself in the first frame when nothing wrote
// it; it is taken only where the instruction before it is a bl to the
// function's first instruction (DirectCall). In the first frame, where
// neither the SP moved nor x30 was written, the link register step (lr)
// is the same and applies instead. It reports whether it stepped
// (MethodPrologue).
func (u *Unwinder) arm64PrologueStep(c *Cache, m *Mapping, lookup, pc uint64, cur, next *arch.Regs, first bool, st *stepResult) bool {
	fo, ok := m.Object.(FunctionObject)
	if !ok || lookup < m.Bias {
		return false
	}
	start, ok := fo.FunctionStart(lookup - m.Bias)
	// Where no symbol covers the PC (a stripped library's hidden
	// functions), the nearest target of a bl before it may be its
	// function's start: taken only where the return address found
	// follows a bl to it, which no decoding from a wrong start gives.
	byCall := false
	if !ok {
		if ct, is := m.Object.(CallTargetObject); is {
			if so, is := m.Object.(StartBeforeObject); is {
				start, ok = so.StartBefore(lookup - m.Bias)
				byCall = ok && ct.CallTarget(start)
				ok = byCall
			}
		}
	}
	end := pc - m.Bias // the exact PC, or the return address: past the call
	if !ok || end <= start || (end-start)%4 != 0 {
		return false
	}
	// Past arm64ProloguePeek bytes, the prologue must have ended at a
	// branch within them.
	var code [arm64ProloguePeek]byte
	n := int(min(end-start, arm64ProloguePeek))
	if m.Object.ReadCode(start, code[:n]) != n {
		return false
	}
	delta := int64(0) // bytes allocated below the CFA
	// slot holds, per register x19-x30, its save's offset from the CFA
	// (negative), or 0 for none; written says which were written since
	// the function began (and so no longer hold the caller's values).
	var slot [31]int64
	var written uint32
	partial := false // a branch ended the analysis before the PC
scan:
	for off := 0; off < n; off += 4 {
		insn := binary.LittleEndian.Uint32(code[off:])
		switch {
		case arm64Call(insn):
			written |= 1 << 30
			continue
		case insn&0xfc000000 == 0x14000000, // b
			insn&0xff000010 == 0x54000000, // b.cond
			insn&0x7e000000 == 0x34000000, // cbz, cbnz
			insn&0x7e000000 == 0x36000000, // tbz, tbnz
			insn&0xfe000000 == 0xd6000000: // br, ret, eret and the rest of the class, calls aside
			// The prologue ends at the first branch, as gdb's analysis
			// takes it: the frame it set up holds after it, the
			// registers written after it are unknown.
			partial = true
			break scan
		case insn&0xff000000 == 0xd4000000, // svc, brk and the other exceptions
			insn&0xfffff01f == 0xd503201f: // hints: nop, paciasp, autiasp, bti
			continue
		}
		rd, rn := int(insn&31), int(insn>>5&31)
		if insn&0xbf800000 == 0x91000000 { // add/sub (immediate), 64-bit, no flags
			imm := int64(insn >> 10 & 0xfff)
			if insn&(1<<22) != 0 {
				imm <<= 12
			}
			sub := insn&(1<<30) != 0
			switch {
			case rd == 31 && rn == 31:
				if sub {
					delta += imm
				} else {
					delta -= imm
				}
				dropSlots64(&slot, delta, &written)
				continue
			case rd == 31:
				return false // mov sp, xN and the like
			}
			written |= 1 << rd
			continue
		}
		if insn&0x0a000000 == 0x08000000 { // loads and stores
			if !arm64LoadStore(insn, &delta, &slot, &written) {
				return false
			}
			continue
		}
		if rd == 31 && (insn&0x1f800000 == 0x12000000 && insn>>29&3 != 3 || // logical (immediate), not ands: and sp, xN, #mask
			insn&0x3f200000 == 0x0b200000) { // add/sub (extended register), no flags: sub sp, sp, xN
			return false
		}
		if rd < 31 {
			written |= 1 << rd
		}
	}
	if !partial && uint64(n) < end-start {
		return false // the straight-line code runs on past what was read
	}
	if delta < 0 || delta > 1<<16 || first && delta == 0 && written&(1<<30) == 0 {
		return false
	}
	sp, ok := cur.Get(arch.ARM64_SP)
	if !ok {
		return false
	}
	cfa := sp + uint64(delta)
	var ra uint64
	switch {
	case slot[30] != 0:
		v, ms := c.win.read8(cfa + uint64(slot[30]))
		if ms != MemOK {
			return false
		}
		ra = v
	case first && written&(1<<30) == 0 && !partial:
		if ra, ok = cur.Get(arch.ARM64_X30); !ok {
			return false
		}
		st.raFromRegister = true
	default:
		return false
	}
	if delta == 0 {
		// Nothing allocated: the caller's SP is the frame's, as a leaf's
		// is (OpenSSL's KeccakF1600_int saves x30 in its caller's
		// outgoing area, stp x28, x30, [sp, #16]).
		st.raFromRegister = true
	}
	ra = u.arch.StripPAC(ra, u.opts.PACMask)
	if !u.callsFunction(st.space, m, ra, start+m.Bias, cur) {
		return false
	}
	if byCall {
		code, _, ok := codeBefore(st.space, m, ra)
		if !ok || !DirectCall(arch.ARM64, code[:], ra, start+m.Bias) {
			return false
		}
	}
	*next = *cur
	for r := 19; r <= 29; r++ {
		switch {
		case slot[r] != 0:
			v, ms := c.win.read8(cfa + uint64(slot[r]))
			if ms != MemOK {
				next.Unset(r)
				continue
			}
			next.Set(r, v)
		case written&(1<<r) != 0 || partial:
			next.Unset(r)
		}
	}
	next.Set(arch.ARM64_X30, ra)
	next.Set(arch.ARM64_PC, ra)
	next.Set(arch.ARM64_SP, cfa)
	st.cfa = cfa
	st.method = MethodPrologue
	return true
}

// arm64LoadStore applies a load or store instruction to the prologue
// analysis: a writeback to the SP moves it (delta), a store of an X
// register of x19-x30 relative to the SP saves it (slot), a load writes its
// registers, one from its own save slot restoring the caller's value. It
// reports false for what the analysis cannot follow (a writeback to the SP
// it cannot size).
func arm64LoadStore(insn uint32, delta *int64, slot *[31]int64, written *uint32) bool {
	rt, rn, rt2 := int(insn&31), int(insn>>5&31), int(insn>>10&31)
	load := insn&(1<<22) != 0
	var pair bool
	var scale, imm int64
	var wb, pre bool
	switch {
	case insn&0x3a000000 == 0x28000000: // load/store pair
		pair = true
		v, opc := insn&(1<<26) != 0, insn>>30
		switch {
		case !v && opc == 2:
			scale = 8
		case !v:
			scale = 4
		default:
			scale = 4 << opc
		}
		imm = int64(int32(insn<<10)>>25) * scale
		switch insn >> 23 & 3 {
		case 1: // post-index
			wb = true
		case 3: // pre-index
			wb, pre = true, true
		}
		// Only an X register pair (opc 10, not SIMD) is a save of
		// x19-x30.
		if v || opc != 2 {
			scale = 0
		}
	case insn&0x3b200c00 == 0x38000400 || insn&0x3b200c00 == 0x38000c00: // load/store register, pre- or post-index
		wb, pre = true, insn&0x800 != 0
		imm = int64(int32(insn<<11) >> 23)
		load = insn>>22&3 != 0
		if insn>>30 == 3 && insn&(1<<26) == 0 {
			scale = 8
		}
	case insn&0x3b000000 == 0x39000000: // load/store register, unsigned offset
		load = insn>>22&3 != 0
		if insn>>30 == 3 && insn&(1<<26) == 0 {
			scale = 8
			imm = int64(insn>>10&0xfff) * 8
		}
	default:
		// Other loads and stores (register offset, literal,
		// exclusive, unscaled): a load writes its register; none of
		// them moves the SP unless it is a writeback form above.
		if load && rt < 31 {
			*written |= 1 << rt
		}
		return true
	}
	if wb && rn == 31 && pre {
		*delta -= imm // the SP moves before the access: [sp, #-N]!
		dropSlots64(slot, *delta, written)
	}
	at := -*delta + imm // the access's offset from the CFA
	if wb {
		at = -*delta // pre-index: the new SP; post-index: the old one
	}
	regs := []int{rt}
	if pair {
		regs = append(regs, rt2)
	}
	for i, r := range regs {
		if r >= 31 {
			continue
		}
		switch {
		case load:
			if rn == 31 && scale == 8 && slot[r] == at+int64(i)*8 {
				slot[r] = 0 // its own save, read back: the caller's value again
				*written &^= 1 << r
			} else {
				*written |= 1 << r
			}
		case rn == 31 && scale == 8 && r >= 19 && *written&(1<<r) == 0 && slot[r] == 0:
			slot[r] = at + int64(i)*8
		}
	}
	if wb && rn == 31 && !pre {
		*delta -= imm // post-index: [sp], #N moves it after
		dropSlots64(slot, *delta, written)
	}
	if wb && rn < 31 {
		*written |= 1 << rn
	}
	if *delta < 0 {
		return false
	}
	return true
}

// dropSlots64 forgets the saves that now lie below the SP (delta bytes
// below the CFA): a later call may overwrite them, so their registers'
// values are unknown (written).
func dropSlots64(slot *[31]int64, delta int64, written *uint32) {
	for r, d := range slot {
		if d != 0 && d < -delta {
			slot[r] = 0
			*written |= 1 << r
		}
	}
}
