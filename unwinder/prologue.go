package unwinder

import (
	"golang.org/x/arch/x86/x86asm"

	"github.com/ustack/ustack/arch"
)

// prologueStep steps out of an x86_64 frame that has no CFI and no frame
// pointer set up (hand-written assembly such as cgo's crosscall1, which
// pushes the callee-saved registers and calls) by decoding its function
// from its first instruction (FunctionObject: the symbol table's) to the
// frame's PC: where that is straight-line code (no jump or return before
// the PC) whose only changes to the stack pointer are pushes, pops and
// additions or subtractions of constants, the pushes and adjustments give
// the CFA (the SP plus all of them plus the return address) and where each
// callee-saved register pushed before being written was saved, as LLDB's
// and Windows' unwinders emulate prologues. The word at the CFA-8 is taken
// as the return address only where it returns into code whose instruction
// before it is a call to the function's first instruction (amd64CallsTo,
// as MethodFrameless). It reports whether it stepped (MethodPrologue).
func (u *Unwinder) prologueStep(c *Cache, m *Mapping, lookup, pc uint64, cur, next *arch.Regs, st *stepResult) bool {
	fo, ok := m.Object.(FunctionObject)
	if !ok || lookup < m.Bias {
		return false
	}
	start, ok := fo.FunctionStart(lookup - m.Bias)
	end := pc - m.Bias // the exact PC, or the return address: past the call
	if !ok || end <= start || end-start > fpProloguePeek {
		return false
	}
	var code [fpProloguePeek]byte
	n := int(end - start)
	if m.Object.ReadCode(start, code[:n]) != n {
		return false
	}
	delta := int64(0)  // bytes pushed or allocated below the return address
	var slot [16]int64 // per DWARF register: delta just after its push, 0 for none
	var written uint32 // registers written before they were pushed
	for off := 0; off < n; {
		if off+4 <= n && code[off] == 0xf3 && code[off+1] == 0x0f && code[off+2] == 0x1e && code[off+3]&0xfe == 0xfa {
			off += 4 // endbr64, endbr32: x86asm does not know them
			continue
		}
		in, err := x86asm.Decode(code[off:n], 64)
		if err != nil || in.Op == 0 || off+in.Len > n {
			return false
		}
		off += in.Len
		dst, isReg := in.Args[0].(x86asm.Reg)
		r := dwarfGPR(dst)
		switch in.Op {
		case x86asm.PUSH:
			delta += 8
			if isReg && r >= 0 && written&(1<<r) == 0 && slot[r] == 0 {
				slot[r] = delta
			}
			continue
		case x86asm.POP:
			own := r >= 0 && slot[r] == delta // the register's own save, popped back
			delta -= 8
			if own {
				slot[r] = 0
				written &^= 1 << r // it holds the caller's value again
			} else if r >= 0 {
				written |= 1 << r
			}
			written = dropSlots(&slot, delta, written)
			continue
		case x86asm.SUB, x86asm.ADD:
			if isReg && dst == x86asm.RSP {
				imm, ok := in.Args[1].(x86asm.Imm)
				if !ok {
					return false
				}
				if in.Op == x86asm.SUB {
					delta += int64(imm)
				} else {
					delta -= int64(imm)
				}
				written = dropSlots(&slot, delta, written)
				continue
			}
		case x86asm.CALL, x86asm.NOP:
			continue
		case x86asm.JMP, x86asm.RET, x86asm.LEAVE, x86asm.ENTER, x86asm.PUSHF, x86asm.POPF,
			x86asm.PUSHFQ, x86asm.POPFQ, x86asm.IRETQ, x86asm.SYSCALL, x86asm.INT, x86asm.UD2,
			x86asm.HLT, x86asm.LOOP, x86asm.JRCXZ:
			return false
		}
		if isJcc(in.Op) {
			return false
		}
		if isReg && (dst == x86asm.RSP || dst == x86asm.ESP || dst == x86asm.SP) {
			return false // an SP change not known: and, lea, mov into it
		}
		if r >= 0 {
			written |= 1 << r
		}
	}
	if delta < 0 || delta > 1<<16 {
		return false
	}
	sp, ok := cur.Get(arch.AMD64_RSP)
	if !ok {
		return false
	}
	cfa := sp + uint64(delta) + 8
	ra, ms := c.win.read8(cfa - 8)
	if ms != MemOK || !u.callsFunction(st.space, m, ra, start+m.Bias, cur) {
		return false
	}
	*next = *cur
	for r, d := range slot {
		if d == 0 {
			if written&(1<<r) != 0 && calleeSaved(r) {
				next.Unset(r)
			}
			continue
		}
		v, ms := c.win.read8(cfa - 8 - uint64(d))
		if ms != MemOK {
			next.Unset(r)
			continue
		}
		next.Set(r, v)
	}
	next.Set(arch.AMD64_RIP, ra)
	next.Set(arch.AMD64_RSP, cfa)
	st.cfa = cfa
	st.method = MethodPrologue
	return true
}

// dropSlots forgets the saves that now lie below the stack pointer (delta
// bytes below the return address): a later call may overwrite them, so
// their registers' values are unknown (written). It returns written.
func dropSlots(slot *[16]int64, delta int64, written uint32) uint32 {
	for r, d := range slot {
		if d > delta {
			slot[r] = 0
			written |= 1 << r
		}
	}
	return written
}

// hwToDWARF maps x86 register encoding numbers (rax, rcx, rdx, rbx, rsp,
// rbp, rsi, rdi, r8-r15) to DWARF numbers.
var hwToDWARF = [16]int{0, 2, 1, 3, 7, 6, 4, 5, 8, 9, 10, 11, 12, 13, 14, 15}

// dwarfGPR returns the DWARF number of the general register r is (or the
// low 32 bits of, whose writes clear the rest), else -1.
func dwarfGPR(r x86asm.Reg) int {
	switch {
	case r >= x86asm.RAX && r <= x86asm.R15:
		return hwToDWARF[r-x86asm.RAX]
	case r >= x86asm.EAX && r <= x86asm.R15L:
		return hwToDWARF[r-x86asm.EAX]
	}
	return -1
}

// calleeSaved reports whether the System V ABI has the callee preserve
// DWARF register r (rbx, rbp, r12-r15).
func calleeSaved(r int) bool {
	return r == arch.AMD64_RBX || r == arch.AMD64_RBP || r >= arch.AMD64_R8+4 && r <= arch.AMD64_R15
}

// isJcc reports whether op is a conditional jump.
func isJcc(op x86asm.Op) bool {
	switch op {
	case x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JE, x86asm.JG, x86asm.JGE, x86asm.JL, x86asm.JLE,
		x86asm.JNE, x86asm.JNO, x86asm.JNP, x86asm.JNS, x86asm.JO, x86asm.JP, x86asm.JS, x86asm.JCXZ, x86asm.JECXZ:
		return true
	}
	return false
}
