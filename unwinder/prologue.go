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
// symbol before it (StartBeforeObject) and finds where each function after
// it ends and the next begins.
//
// The word at the CFA-8 is taken as the return address only where it
// returns into code whose instruction before it is a call to the
// function's first instruction (a direct call, one to a jump to it, one
// through a register that still holds it: callsFunction, as
// MethodFrameless, or to its PLT entry by name). Where the instruction is
// a call whose target cannot be checked (a function pointer in a
// structure, as stdio's f->write) or is another function (which may have
// tail-called this one), the step is taken but marked a guess (st.fpGuess): the stack is not
// called complete. It reports whether it stepped (MethodPrologue).
func (u *Unwinder) prologueStep(c *Cache, m *Mapping, lookup, pc uint64, cur, next *arch.Regs, st *stepResult) bool {
	if m.Object == nil || lookup < m.Bias || pc < m.Bias {
		return false
	}
	sw := c.sweepAt(m.Object, lookup-m.Bias, pc-m.Bias)
	if !sw.ok {
		return false
	}
	sp, ok := cur.Get(arch.AMD64_RSP)
	if !ok {
		return false
	}
	cfa := sp + uint64(sw.delta) + 8
	ra, ms := c.win.read8(cfa - 8)
	if ms != MemOK {
		return false
	}
	guess := false
	if !u.callsFunction(st.space, m, ra, sw.start+m.Bias, cur) {
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
	next.Set(arch.AMD64_RIP, ra)
	next.Set(arch.AMD64_RSP, cfa)
	st.cfa = cfa
	st.method = MethodPrologue
	if sw.delta == 0 {
		st.method = MethodFrameless // nothing pushed: the word at the SP
	}
	st.fpGuess = guess
	return true
}

// callsUnchecked reports whether the instruction before return address ra
// is a call, of any form (amd64CallsTo without registers): one whose
// target cannot be read (through memory, as a structure's function
// pointer), or one to a function other than the one the walk is in, which
// may have tail-called it (musl's _start_c jumps to __libc_start_main
// through its PLT entry, which jumps to libc_start_main_stage2).
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

// Sweep limits: the bytes decoded from the first instruction to the PC, and
// the forward branches whose targets are still ahead at once.
const (
	sweepMax     = 32 << 10
	sweepTargets = 64
	sweepChunk   = 4096
)

// frameState is what a sweep knows at an instruction: the bytes pushed or
// allocated below the return address, each DWARF register's slot (delta
// just after its push; 0 for none) and the registers written before they
// were pushed.
type frameState struct {
	delta   int32
	slot    [16]int32
	written uint16
	known   bool
}

// sweepResult is a sweep's answer for one PC: the function's first
// instruction and the frame's state at the PC.
type sweepResult struct {
	obj     Object
	pc      uint64 // the key: the PC's link-time address
	start   uint64
	delta   int32
	slot    [16]int32
	written uint16
	ok      bool
}

// sweepSets is the size of the memo of sweep results (direct-mapped).
const sweepSets = 256

// sweepAt returns the sweep of obj's function holding link-time address
// lookup up to link-time pc, from the memo or by decoding: the answer
// depends on the code alone.
func (c *Cache) sweepAt(obj Object, lookup, pc uint64) *sweepResult {
	if c.sweeps == nil {
		c.sweeps = new([sweepSets]sweepResult)
	}
	r := &c.sweeps[(pc*0x9E3779B97F4A7C15)>>(64-8)]
	if r.pc == pc && r.obj != nil && sameObject(&r.obj, &obj) {
		return r
	}
	*r = sweepResult{obj: obj, pc: pc}
	start, ok := uint64(0), false
	if fo, is := obj.(FunctionObject); is {
		start, ok = fo.FunctionStart(lookup)
	}
	if !ok {
		if so, is := obj.(StartBeforeObject); is {
			start, ok = so.StartBefore(lookup)
		}
	}
	if !ok || pc <= start || pc-start > sweepMax {
		return r
	}
	var fs frameState
	r.start, fs, r.ok = sweep(obj, start, pc)
	r.delta, r.slot, r.written = fs.delta, fs.slot, fs.written
	return r
}

// sweepTarget is a forward branch's target and the state the branch takes
// there.
type sweepTarget struct {
	addr uint64
	st   frameState
}

// sweep decodes obj's code from link-time address from, a function's first
// instruction, to end (exclusive), following the state of the frame along
// the code as laid out. A conditional or direct jump forward records its
// target's state; arriving there, the state must agree with the one falling
// through (or is taken from it where none falls through). After a return or
// a jump, the code that follows has the state a recorded branch gave it, or
// else, where no recorded branch target lies ahead any more, is the start
// of the next function (padding skipped): its state is the entry's. Code
// after a return that only a later backward branch reaches keeps the state
// from before the epilogue (pops and stack additions before the return), as
// LLDB does; after a jump, the state at the jump. It returns the start of
// the function holding end and the state at end; ok is false where the
// code could not be followed (an undecodable instruction, a change of the
// stack pointer that is not a constant, two states meeting that disagree,
// too many branches ahead).
func sweep(obj Object, from, end uint64) (start uint64, cur frameState, ok bool) {
	var buf [sweepChunk]byte
	var bufAt uint64 // the link-time address of buf[0]
	bufLen := 0
	var targets [sweepTargets]sweepTarget
	nt := 0
	start = from
	cur = frameState{known: true}
	body := cur    // the state before the current run of epilogue instructions
	inEpi := false // the instructions since the last other one are pops and stack additions
	gap := false   // the last instruction was a return or a jump: nothing falls through
	afterCall := false
	var table frameState // the state at the function's jump through a table, if any
	for addr := from; ; {
		// The states recorded for this address.
		arrived := false
		for i := 0; i < nt; {
			t := &targets[i]
			if t.addr != addr {
				i++
				continue
			}
			switch {
			case !arrived && (gap || !cur.known):
				cur = t.st
			case cur.delta != t.st.delta:
				return 0, cur, false
			}
			arrived = true
			nt--
			targets[i] = targets[nt]
		}
		if arrived {
			gap, afterCall = false, false
		}
		if addr >= end {
			if addr > end {
				return 0, cur, false
			}
			if gap {
				resume(obj, &targets, &nt, addr, &start, &cur, &body, &table)
			}
			return start, cur, cur.known
		}
		// The instruction at addr.
		if addr < bufAt || addr+16 > bufAt+uint64(bufLen) {
			bufAt = addr
			want := min(uint64(len(buf)), end+16-addr)
			bufLen = obj.ReadCode(addr, buf[:want])
			if bufLen == 0 {
				return 0, cur, false
			}
		}
		code := buf[addr-bufAt : bufLen]
		size, pad := padding(code)
		if pad {
			if afterCall && addr%16 != 0 {
				gap = true // a call that does not return, then the next function's alignment
			}
			addr += uint64(size)
			continue
		}
		if gap || afterCall {
			if gap {
				resume(obj, &targets, &nt, addr, &start, &cur, &body, &table)
			}
			gap, afterCall = false, false
		}
		if size > 0 { // endbr64: a no-op
			inEpi = false
			addr += uint64(size)
			continue
		}
		in, err := x86asm.Decode(code, 64)
		if err != nil || in.Op == 0 || in.Len > len(code) {
			return 0, cur, false
		}
		next := addr + uint64(in.Len)
		epi := false
		dst, isReg := in.Args[0].(x86asm.Reg)
		r := dwarfGPR(dst)
		switch op := in.Op; {
		case op == x86asm.PUSH || op == x86asm.PUSHFQ:
			cur.delta += 8
			if op == x86asm.PUSH && isReg && r >= 0 && cur.written&(1<<r) == 0 && cur.slot[r] == 0 {
				cur.slot[r] = cur.delta
			}
		case op == x86asm.POP || op == x86asm.POPFQ:
			epi = true
			if !inEpi {
				body = cur
			}
			own := op == x86asm.POP && r >= 0 && cur.slot[r] == cur.delta
			cur.delta -= 8
			if own {
				cur.slot[r] = 0
				cur.written &^= 1 << r // it holds the caller's value again
			} else if op == x86asm.POP && r >= 0 {
				cur.written |= 1 << r
			}
			dropSlotsBelow(&cur)
		case (op == x86asm.SUB || op == x86asm.ADD) && isReg && dst == x86asm.RSP:
			imm, isImm := in.Args[1].(x86asm.Imm)
			if !isImm || int64(imm) > 1<<20 || int64(imm) < -(1<<20) {
				cur.known = false
				break
			}
			if op == x86asm.SUB {
				cur.delta += int32(imm)
			} else {
				epi = true
				if !inEpi {
					body = cur
				}
				cur.delta -= int32(imm)
			}
			dropSlotsBelow(&cur)
		case op == x86asm.LEA && isReg && dst == x86asm.RSP:
			mem, isMem := in.Args[1].(x86asm.Mem)
			if !isMem || mem.Base != x86asm.RSP || mem.Index != 0 || mem.Disp > 1<<20 || mem.Disp < -(1<<20) {
				cur.known = false
				break
			}
			if mem.Disp > 0 {
				epi = true
				if !inEpi {
					body = cur
				}
			}
			cur.delta -= int32(mem.Disp)
			dropSlotsBelow(&cur)
		case op == x86asm.LEAVE:
			epi = true
			if !inEpi {
				body = cur
			}
			cur.known = false // the frame pointer's value: not followed here
		case op == x86asm.RET:
			if !inEpi {
				body = cur
			}
			cur = body
			gap = true
		case op == x86asm.JMP:
			if rel, isRel := in.Args[0].(x86asm.Rel); isRel && cur.known {
				if t := next + uint64(int64(rel)); !functionStart(obj, t) && !record(&targets, &nt, t, addr, cur) {
					return 0, cur, false
				}
			}
			if inEpi {
				cur = body // a tail call: what follows is reached with the frame
			} else if _, isRel := in.Args[0].(x86asm.Rel); !isRel && cur.known {
				table = cur
			}
			gap = true
		case isJcc(op) || op == x86asm.JRCXZ || op == x86asm.LOOP || op == x86asm.LOOPE || op == x86asm.LOOPNE:
			if rel, isRel := in.Args[0].(x86asm.Rel); isRel && cur.known {
				if !record(&targets, &nt, next+uint64(int64(rel)), addr, cur) {
					return 0, cur, false
				}
			}
		case op == x86asm.CALL:
			afterCall = true
		case op == x86asm.UD2 || op == x86asm.HLT:
			gap = true
		case op == x86asm.ENTER || op == x86asm.PUSHF || op == x86asm.POPF || op == x86asm.IRETQ:
			cur.known = false
		default:
			if isReg && (dst == x86asm.RSP || dst == x86asm.ESP || dst == x86asm.SP) && writes(op) {
				cur.known = false // an SP change not known: and, mov into it
			} else if r >= 0 && writes(op) {
				cur.written |= 1 << r
			}
		}
		inEpi = epi
		addr = next
	}
}

// resume gives the state of the instruction at addr, the first after a
// return or a jump that no recorded branch reaches. Where a function is
// known to begin there (its symbol, or a direct call to it:
// CallTargetObject), or no recorded target lies ahead, the function has
// ended and addr begins the next one (start, and the entry's state; the
// targets still ahead were jumps out of the function, as from a part
// split off to a cold section back to it); else the state carried (cur),
// or, after the function jumped through a register or memory other than
// in an epilogue (a jump table: its cases follow, reached by no branch
// the sweep saw), the state at that jump (table).
func resume(obj Object, targets *[sweepTargets]sweepTarget, nt *int, addr uint64, start *uint64, cur, body, table *frameState) {
	if !knownStart(obj, addr) {
		for i := range *nt {
			if targets[i].addr > addr {
				return
			}
		}
		if table.known {
			*cur = *table // a case of a jump table: the frame of the jump
			return
		}
	}
	*table = frameState{}
	*nt = 0
	*start = addr
	*cur = frameState{known: true}
	*body = *cur
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

// record notes that a branch at addr to target t takes state st there: a
// forward branch only (a backward one's target was decoded already). It
// reports false where t was recorded with another stack depth, or where
// there is no room.
func record(targets *[sweepTargets]sweepTarget, nt *int, t, addr uint64, st frameState) bool {
	if t <= addr {
		return true
	}
	for i := range *nt {
		if targets[i].addr == t {
			return targets[i].st.delta == st.delta
		}
	}
	if *nt == len(targets) {
		return false
	}
	targets[*nt] = sweepTarget{addr: t, st: st}
	*nt++
	return true
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

// padding reports whether code begins with an instruction that only pads
// (nop in its forms, int3), and its length; for endbr64 and endbr32, which
// the decoder does not know, it gives their length and false.
func padding(code []byte) (int, bool) {
	if len(code) >= 4 && code[0] == 0xf3 && code[1] == 0x0f && code[2] == 0x1e && code[3]&0xfe == 0xfa {
		return 4, false
	}
	if len(code) > 0 && (code[0] == 0x90 || code[0] == 0xcc) {
		return 1, true
	}
	in, err := x86asm.Decode(code, 64)
	if err != nil {
		return 0, false
	}
	if in.Op == x86asm.NOP {
		return in.Len, true
	}
	if in.Op == x86asm.XCHG && in.Args[0] == in.Args[1] {
		return in.Len, true // 66 90: xchg %ax,%ax
	}
	return 0, false
}

// dropSlotsBelow forgets the saves that now lie below the stack pointer: a
// later call may overwrite them, so their registers' values are unknown.
func dropSlotsBelow(st *frameState) {
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
