package unwinder

import (
	"golang.org/x/arch/x86/x86asm"

	"github.com/ustack/ustack/arch"
)

// prologueStep steps out of an x86_64 frame that has no CFI and no frame
// pointer set up (hand-written assembly such as cgo's crosscall1, code built
// without unwind tables such as musl's libc) by decoding its function from
// its first instruction to the frame's PC (sweep), as LLDB's x86 assembly
// inspection and Windows' unwinder emulate a function: its pushes, pops and
// constant adjustments of the stack pointer give the CFA (the SP plus all
// of them plus the return address) and where each callee-saved register
// pushed before being written was saved. The function begins at its
// symbol's address (FunctionObject), or, for an address no symbol covers
// (a stripped library's hidden functions), the sweep begins at the nearest
// symbol, direct call target or executable section start before it
// (StartBeforeObject) and finds where each function after it ends and the
// next begins.
//
// The word at the CFA-8 is taken as the return address only where it
// returns into code whose instruction before it is a call to the
// function's first instruction (a direct call, one to a jump to it, one
// through a register that still holds it: callsFunction, as
// MethodFrameless, or to its PLT entry by name). Where the instruction is
// a call whose target cannot be checked (a function pointer in a
// structure, as stdio's f->write) or is another function (which may have
// tail-called this one), the step is taken but marked a guess
// (st.fpGuess): the stack is not called complete. It reports whether it
// stepped (MethodPrologue, or MethodFrameless where nothing was pushed).
func (u *Unwinder) prologueStep(c *Cache, m *Mapping, lookup, pc uint64, cur, next *arch.Regs, st *stepResult) bool {
	if m.Object == nil || lookup < m.Bias || pc < m.Bias {
		return false
	}
	start, sw, ok := c.sweepAt(m.Object, lookup-m.Bias, pc-m.Bias)
	if !ok {
		return false
	}
	var cfa uint64
	if sw.rbp {
		bp, ok := cur.Get(arch.AMD64_RBP)
		if !ok {
			return false
		}
		cfa = bp + 8 + uint64(sw.slot[arch.AMD64_RBP])
	} else {
		sp, ok := cur.Get(arch.AMD64_RSP)
		if !ok {
			return false
		}
		cfa = sp + uint64(sw.delta) + 8
	}
	ra, ms := c.win.read8(cfa - 8)
	if ms != MemOK {
		return false
	}
	ownRecord, ok := calledFrameRecord(c, &sw, cur, cfa, ra)
	if !ok {
		return false
	}
	if sw.delta == 0 && !sw.rbp && sw.called && c.returnsInto(m, ra, start) && !(lookup == pc && atReturn(m.Object, pc-m.Bias)) {
		// Nothing pushed since a call, and the word at the SP
		// returns into the function itself: a recursion's return
		// address, which an earlier call of it may have left there.
		// Code that set up its frame in a called function (V8's
		// baseline code calls its prologue so; the sweep sees
		// nothing pushed) has such words at its SP. Where no call
		// was passed since the function's first instruction, no
		// callee can have moved the SP: the word is the return
		// address, of the function's own recursion (a recursive
		// call sampled at its callee's entry). So it is at a return
		// instruction, which takes it (the recursion's last pop
		// done).
		return false
	}
	guess := false
	if !u.callsFunction(st.space, m, ra, start+m.Bias, cur) {
		if !u.callsUnchecked(st.space, m, ra) {
			return false
		}
		guess = true
	}
	*next = *cur
	for r, d := range sw.slot {
		if d == 0 {
			if sw.written&(1<<r) != 0 && calleeSaved(r) {
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
	if ownRecord {
		if v, ms := c.win.read8(cfa - 16); ms == MemOK {
			next.Set(arch.AMD64_RBP, v)
		} else {
			next.Unset(arch.AMD64_RBP)
		}
	}
	next.Set(arch.AMD64_RIP, ra)
	next.Set(arch.AMD64_RSP, cfa)
	st.cfa = cfa
	st.method = MethodPrologue
	if sw.delta == 0 && !sw.rbp {
		st.method = MethodFrameless // nothing pushed: the word at the SP
	}
	st.fpGuess = guess
	return true
}

// calledFrameRecord checks the sweep's frame against %rbp where a call was
// passed and the function was not seen to write %rbp: a function it called
// may have set up its frame record and frame out of the sweep's sight, as
// V8's baseline code does (its first instruction calls
// BaselineOutOfLinePrologue, which pushes %rbp, points %rbp at it and
// allocates the frame; the JS functions it calls pop their arguments, so
// the pushes the sweep counts overstate the frame). A caller's frame
// record lies above its callee's CFA, so %rbp inside the frame the sweep
// found is no caller's: it is the frame's own record, set up by a callee.
// Where that record sits just below the return address the sweep found
// (%rbp = CFA-16, [%rbp+8] = ra), the two agree and the caller's %rbp is
// the word the record saved (own); anywhere else the sweep's frame is
// contradicted and not taken (ok false: the frame pointer is the fallback
// left, a guess). Code that keeps the ABI restores %rbp before returning
// and never meets either case.
func calledFrameRecord(c *Cache, sw *frameState, cur *arch.Regs, cfa, ra uint64) (own, ok bool) {
	if sw.rbp || !sw.called || sw.written&(1<<arch.AMD64_RBP) != 0 {
		return false, true
	}
	bp, okBP := cur.Get(arch.AMD64_RBP)
	sp, okSP := cur.Get(arch.AMD64_RSP)
	if !okBP || !okSP || bp < sp || bp >= cfa {
		return false, true
	}
	if bp != cfa-16 {
		return false, false
	}
	saved, ms := c.win.read8(bp + 8)
	agree := ms == MemOK && saved == ra
	return agree, agree
}

// callsUnchecked reports whether the instruction before return address ra
// is a call, of any form (amd64CallsTo without registers): one whose
// target cannot be read (through memory, as a structure's function
// pointer), or one to a function other than the one the walk is in, which
// may have tail-called it (musl's _start_c jumps to __libc_start_main
// through its PLT entry, which jumps to libc_start_main_stage2; Python's
// PyObject_Vectorcall jumps to _PyObject_MakeTpCall).
func (u *Unwinder) callsUnchecked(space *AddressSpace, m *Mapping, ra uint64) bool {
	cm := mappingAt(space, m, ra)
	if cm == nil || !cm.Exec || cm.Object == nil || ra < cm.Start+8 || ra >= cm.End || ra-cm.Bias < 8 {
		return false
	}
	var code [8]byte
	return cm.Object.ReadCode(ra-cm.Bias-8, code[:]) == len(code) && amd64CallsTo(code, ra, 0, nil)
}

// StartBeforeObject is implemented by an Object that can name the start of
// the nearest function at or before a link-time address that lies in no
// function it knows (past the end of the symbol before it: a function its
// symbol table leaves out, as a stripped library's hidden ones).
type StartBeforeObject interface {
	StartBefore(addr uint64) (uint64, bool)
}

// resume gives the state of the instruction at addr, the first after a
// return or a jump that no recorded branch reaches. Where a function is
// known to begin there (its symbol, or a direct call to it:
// CallTargetObject), addr begins the next one (start, and the entry's
// state). Else, after the function jumped through a table it could not
// read (a switch; an interpreter's computed goto, whose opcode handlers
// follow, between its exits' returns, reached by no branch the sweep saw:
// python's _PyEval_EvalFrameDefault), the state at that jump (table); else,
// where a recorded target ahead was branched to with anything pushed, the
// function goes on, with the state carried (cur: unknown after a return or
// a tail call); else the function has ended and addr begins the next one
// (the targets still ahead were jumps out of the function, as from a part
// split off to a cold section back to it, or tail calls).
func (w *sweeper) resume(addr uint64) {
	w.blocks = append(w.blocks, addr)
	if !knownStart(w.obj, addr) {
		if w.table.known {
			w.cur = w.table // a case of a jump table: the frame of the jump
			return
		}
		// (arrive dropped the targets before addr.) A branch ahead
		// taken with nothing pushed (a tail call from a function
		// that pushed nothing, as to a function only called
		// through pointers) gives the entry's state anyway: it
		// does not keep the next function from beginning here.
		for i := range w.pending {
			if st := &w.pending[i].st; !st.known || st.delta != 0 || st.rbp || st.spLost {
				return
			}
		}
	}
	w.pending = w.pending[:0]
	w.start, w.coldAt = addr, 0
	w.cur = frameState{known: true}
	w.table = frameState{}
}

// CallTargetObject is implemented by an Object that knows whether a direct
// call in its code targets a link-time address: a function begins there.
type CallTargetObject interface {
	CallTarget(addr uint64) bool
}

// knownStart reports whether obj's symbols or calls say a function begins
// at link-time address addr.
func knownStart(obj Object, addr uint64) bool {
	if ct, ok := obj.(CallTargetObject); ok && ct.CallTarget(addr) {
		return true
	}
	return functionStart(obj, addr)
}

// functionStart reports whether obj's symbols say a function begins at
// link-time address t: a jump there is a tail call, not a branch of the
// function that jumps.
func functionStart(obj Object, t uint64) bool {
	fo, ok := obj.(FunctionObject)
	if !ok {
		return false
	}
	s, ok := fo.FunctionStart(t)
	return ok && s == t
}

// atReturn reports whether the instruction at link-time address addr of
// obj is a return: ret, ret imm16, or with a rep or bnd prefix.
func atReturn(obj Object, addr uint64) bool {
	var code [2]byte
	n := obj.ReadCode(addr, code[:])
	if n >= 1 && (code[0] == 0xc3 || code[0] == 0xc2) {
		return true
	}
	return n == 2 && (code[0] == 0xf3 || code[0] == 0xf2) && (code[1] == 0xc3 || code[1] == 0xc2)
}

// endbr reports whether code begins with endbr64 or endbr32, which the
// decoder does not know: no-ops.
func endbr(code []byte) bool {
	return len(code) >= 4 && code[0] == 0xf3 && code[1] == 0x0f && code[2] == 0x1e && code[3]&0xfe == 0xfa
}

// padding reports whether in only pads: nop in its forms, int3, xchg
// %ax,%ax.
func padding(in *x86asm.Inst) bool {
	return in.Op == x86asm.NOP || in.Op == x86asm.INT && in.Len == 1 || in.Op == x86asm.XCHG && in.Args[0] == in.Args[1]
}

// dropSlotsBelow forgets the saves that now lie below the stack pointer: a
// later call may overwrite them, so their registers' values are unknown.
func dropSlotsBelow(st *frameState) {
	if st.spLost {
		return
	}
	for r, d := range st.slot {
		if d > st.delta {
			st.slot[r] = 0
			st.written |= 1 << r
		}
	}
}

// writes reports whether op writes its first operand.
func writes(op x86asm.Op) bool {
	return op != x86asm.CMP && op != x86asm.TEST && op != x86asm.BT
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
