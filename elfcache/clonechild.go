package elfcache

import (
	"bytes"
	"encoding/binary"
	"slices"

	"golang.org/x/arch/x86/x86asm"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
	"github.com/ustack/ustack/internal/x86dec"
)

// The child side of a clone system call, where the kernel starts a thread,
// calls the thread's function and exits with its result: a frame
// returning there is the thread's first. Outermost knows such code by its
// symbol (stackBases: __clone, runtime.clone), which a stripped library
// may not have: musl's libc.so leaves __clone out of its dynamic symbols,
// and every thread of a musl program ended no_unwind_info at it. Where no
// symbol tells, cloneChild knows it by its instructions, from musl's
// src/thread/x86_64/clone.s and aarch64/clone.s:
//
//	x86_64: mov $56,%al (or %eax: clone; 435: clone3) ... syscall;
//	        test %eax,%eax; jnz (the parent returns) ... call *%r9;
//	        [return address] ... mov $60,%al (exit; 231: exit_group) ... syscall
//	arm64:  mov x8,#220 (or #435) ... svc #0; cbz x0 (or cbnz to the parent's
//	        ret) ... blr; [return address] mov x8,#93 (or #94) ... svc #0
//
// The call must follow the test on the path where the system call
// returned 0 (the child), and the exit must follow the return address with
// no branch between: a call the parent makes, or one whose return can go
// anywhere but exit, is not such code.

// syscallAMD64 is the syscall instruction's encoding.
var syscallAMD64 = []byte{0x0f, 0x05}

// cloneWindow is how far before a return address cloneChild looks for
// the clone system call, and after it for the exit.
const cloneWindow = 64

// cloneChild reports whether the link-time address ra is a return address
// on the child side of a clone system call (see above).
func (o *Object) cloneChild(ra uint64) bool {
	if v, ok := o.cloneSeen.Load(ra); ok {
		return v.(bool)
	}
	var yes bool
	switch o.arch {
	case arch.AMD64:
		yes = o.cloneChildAMD64(ra)
	case arch.ARM64:
		yes = o.cloneChildARM64(ra)
	default:
		return false
	}
	o.cloneSeen.Store(ra, yes)
	return yes
}

// cloneCode reads the cloneWindow bytes before link-time address ra and
// as many after it.
func (o *Object) cloneCode(ra uint64, code *[2 * cloneWindow]byte) bool {
	return ra >= cloneWindow && o.ReadCode(ra-cloneWindow, code[:]) == len(code)
}

func (o *Object) cloneChildAMD64(ra uint64) bool {
	var code [2 * cloneWindow]byte
	return o.cloneCode(ra, &code) && cloneChildAMD64(&code)
}

// cloneChildAMD64 is cloneChild for the code around a return address,
// which begins at code[cloneWindow].
func cloneChildAMD64(code *[2 * cloneWindow]byte) bool {
	before, after := code[:cloneWindow], code[cloneWindow:]
	// Most code has no system call on either side: it is turned away
	// before any decoding (Outermost asks at the end of many walks).
	if !bytes.Contains(before, syscallAMD64) || !bytes.Contains(after, syscallAMD64) {
		return false
	}
	// The first start whose instructions end at ra with a call is taken.
	for s := 0; ; s++ {
		var insts []x86asm.Inst
		if insts, s = decodeEndingAt(before, s); insts == nil {
			return false
		}
		if insts[len(insts)-1].Op == x86asm.CALL {
			return cloneBeforeAMD64(insts[:len(insts)-1]) && exitAfterAMD64(after)
		}
	}
}

// decodeEndingAt decodes code from the first start at or after from (and
// at least 16 bytes before its end) whose instructions end exactly at its
// end: decoding from a point before an instruction boundary falls into
// step within a few instructions. It returns them and that start, or nil.
func decodeEndingAt(code []byte, from int) ([]x86asm.Inst, int) {
	for s := from; s < len(code)-16; s++ {
		var insts []x86asm.Inst
		off := s
		for off < len(code) {
			in, err := x86dec.Decode(code[off:])
			if err != nil {
				break
			}
			insts = append(insts, in)
			off += in.Len
		}
		if off == len(code) && len(insts) > 0 {
			return insts, s
		}
	}
	return nil, 0
}

// sysnoAMD64 returns the number a mov of an immediate into %al, %eax or
// %rax sets, and whether in is one.
func sysnoAMD64(in x86asm.Inst) (int64, bool) {
	if in.Op != x86asm.MOV {
		return 0, false
	}
	switch in.Args[0] {
	case x86asm.AL, x86asm.EAX, x86asm.RAX:
	default:
		return 0, false
	}
	imm, ok := in.Args[1].(x86asm.Imm)
	return int64(imm), ok
}

// cloneBeforeAMD64 reports whether insts, the instructions before a call,
// hold a clone system call whose zero result (the child's) falls through
// to the call: the number set, the syscall, a test of %eax and a jnz/jne
// away, then no other branch.
func cloneBeforeAMD64(insts []x86asm.Inst) bool {
	sc := -1
	for i, in := range insts {
		if in.Op == x86asm.SYSCALL {
			sc = i
		}
	}
	if sc < 1 {
		return false
	}
	nr := int64(-1)
	for _, in := range insts[:sc] {
		if v, ok := sysnoAMD64(in); ok {
			nr = v
		}
	}
	if nr != 56 && nr != 435 {
		return false
	}
	rest := insts[sc+1:]
	if len(rest) < 2 || rest[0].Op != x86asm.TEST || (rest[0].Args[0] != x86asm.EAX && rest[0].Args[0] != x86asm.RAX) ||
		rest[0].Args[1] != rest[0].Args[0] || rest[1].Op != x86asm.JNE {
		return false
	}
	for _, in := range rest[2:] {
		if isBranchAMD64(in.Op) {
			return false
		}
	}
	return true
}

// exitAfterAMD64 reports whether code, from a return address on, sets the
// exit (or exit_group) system call's number and makes it with no branch
// before.
func exitAfterAMD64(code []byte) bool {
	nr := int64(-1)
	for off := 0; off < len(code); {
		in, err := x86dec.Decode(code[off:])
		if err != nil {
			return false
		}
		if in.Op == x86asm.SYSCALL {
			return nr == 60 || nr == 231
		}
		if isBranchAMD64(in.Op) {
			return false
		}
		if v, ok := sysnoAMD64(in); ok {
			nr = v
		}
		off += in.Len
	}
	return false
}

// isBranchAMD64 reports whether op may transfer control elsewhere than
// the next instruction.
func isBranchAMD64(op x86asm.Op) bool {
	switch op {
	case x86asm.CALL, x86asm.JMP, x86asm.RET, x86asm.LCALL, x86asm.LJMP, x86asm.LRET,
		x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JCXZ, x86asm.JE, x86asm.JECXZ, x86asm.JG,
		x86asm.JGE, x86asm.JL, x86asm.JLE, x86asm.JNE, x86asm.JNO, x86asm.JNP, x86asm.JNS, x86asm.JO,
		x86asm.JP, x86asm.JRCXZ, x86asm.JS, x86asm.LOOP, x86asm.LOOPE, x86asm.LOOPNE, x86asm.SYSCALL,
		x86asm.INT, x86asm.UD2, x86asm.HLT:
		return true
	}
	return false
}

func (o *Object) cloneChildARM64(ra uint64) bool {
	var code [2 * cloneWindow]byte
	return ra%4 == 0 && o.cloneCode(ra, &code) && cloneChildARM64(&code)
}

// cloneChildARM64 is cloneChild for the code around a return address,
// which begins at code[cloneWindow].
func cloneChildARM64(code *[2 * cloneWindow]byte) bool {
	w := func(i int) uint32 { return binary.LittleEndian.Uint32(code[4*i:]) }
	const n = cloneWindow / 4
	call := n - 1
	if w(call)&0xfffffc1f != 0xd63f0000 { // blr xN
		return false
	}
	sv := call - 1
	for sv >= 0 && w(sv) != 0xd4000001 { // svc #0
		sv--
	}
	if sv < 0 || sv+1 >= call {
		return false
	}
	nr := int64(-1)
	for j := 0; j < sv; j++ {
		if v, ok := movX8(w(j)); ok {
			nr = v
		}
	}
	if nr != 220 && nr != 435 {
		return false
	}
	// cbz x0 jumps to the child's code; cbnz x0 jumps away to the
	// parent's, the child's following it. From there to the blr, no
	// branch.
	child := -1
	switch c := w(sv + 1); c & 0xff00001f {
	case 0xb4000000: // cbz x0, label
		child = sv + 1 + int(int32(c<<8)>>13)
	case 0xb5000000: // cbnz x0
		child = sv + 2
	}
	if child <= sv+1 || child > call {
		return false
	}
	for j := child; j < call; j++ {
		if arm64Branch(w(j)) {
			return false
		}
	}
	// On from the return address: the exit's number into x8, then svc #0,
	// with no branch between.
	nr = -1
	for j := n; j < 2*n; j++ {
		insn := w(j)
		if v, ok := movX8(insn); ok {
			nr = v
			continue
		}
		if insn == 0xd4000001 {
			return nr == 93 || nr == 94
		}
		if arm64Branch(insn) {
			return false
		}
	}
	return false
}

// movX8 returns the immediate a movz x8/w8, #imm sets, and whether insn is
// one.
func movX8(insn uint32) (int64, bool) {
	if insn&0x7fe0001f == 0x52800008 { // movz w8/x8, #imm16 (hw 0)
		return int64(insn>>5) & 0xffff, true
	}
	return 0, false
}

// arm64Branch reports whether insn may transfer control elsewhere than
// the next instruction: b, bl, b.cond, cbz/cbnz, tbz/tbnz, br/blr/ret and
// their authenticating forms, svc.
func arm64Branch(insn uint32) bool {
	switch {
	case insn&0x7c000000 == 0x14000000: // b, bl
		return true
	case insn&0xff000010 == 0x54000000: // b.cond
		return true
	case insn&0x7e000000 == 0x34000000: // cbz, cbnz
		return true
	case insn&0x7e000000 == 0x36000000: // tbz, tbnz
		return true
	case insn&0xfe000000 == 0xd6000000: // br, blr, ret, eret and the authenticating forms
		return true
	case insn&0xffe0001f == 0xd4000001: // svc
		return true
	}
	return false
}

// CloneReturn reports whether the link-time address addr lies in the
// code a clone (or clone3) system call returns to, up to the branch its
// child takes, in code that begins a thread's stack:
//
//	x86_64: syscall; [test %rax,%rax; jl error;] jz thread_start
//	arm64:  svc #0; [cmp x0, #0;] b.eq thread_start (or cbz x0)
//
// The parent comes back there with the new thread's id, the child with 0
// (the system call's result register, rax or x0) and nothing above it:
// the kernel started it there on its new stack. The number the code sets
// for the system call must be clone's or clone3's, and each instruction
// between the call and addr one the child passes by (a test or compare of
// the result, a conditional branch it does not take). That the code
// begins a thread's stack (a fork's child returns on its parent's copied
// stack instead) is shown by its symbol (stackBases: glibc's clone and
// clone3, Go's runtime.clone) or, where none names it (glibc's clone3 is
// not among libc.so's dynamic symbols), by the branch the child takes:
// to code whose CFI marks its return address undefined (glibc's
// thread_start). It implements unwinder.ThreadStartObject.
func (o *Object) CloneReturn(addr uint64) bool {
	if v, ok := o.cloneReturnSeen.Load(addr); ok {
		return v.(bool)
	}
	yes := o.cloneReturn(addr)
	o.cloneReturnSeen.Store(addr, yes)
	return yes
}

func (o *Object) cloneReturn(addr uint64) bool {
	var code [2 * cloneWindow]byte
	if addr < cloneWindow || o.ReadCode(addr-cloneWindow, code[:]) != len(code) {
		return false
	}
	var ok bool
	var target uint64 // the child's branch target, 0 when not found
	switch o.arch {
	case arch.AMD64:
		ok, target = cloneReturnAMD64(&code, addr)
	case arch.ARM64:
		ok, target = cloneReturnARM64(&code, addr)
		ok = ok && addr%4 == 0
	}
	if !ok {
		return false
	}
	if name, _, named := o.Symbolize(addr); named && stackBases[name] {
		return true
	}
	var row cfi.Row
	return target != 0 && o.FindRow(target, &row) == nil && int(row.RA) < len(row.Regs) && row.Regs[row.RA].Kind == cfi.RuleUndefined
}

// cloneReturnAMD64 is CloneReturn for the code around addr, which begins
// at code[cloneWindow]; it also returns the target of the branch the
// child takes after addr (jz, and the other jumps taken with ZF set and
// SF, OF and CF clear), 0 if none follows the instructions it passes by.
func cloneReturnAMD64(code *[2 * cloneWindow]byte, addr uint64) (bool, uint64) {
	// The syscall is at most a test and a jl before addr.
	for k := 2; k <= 16; k++ {
		at := cloneWindow - k
		if code[at] != 0x0f || code[at+1] != 0x05 {
			continue
		}
		// Its number: the last mov into %eax in the instructions that
		// decode up to it from some start before.
		if !syscallNumberAMD64(code[:at], 56, 435) {
			continue
		}
		off, tested, reached := at+2, false, false
		for off < len(code) {
			reached = reached || off == cloneWindow
			in, err := x86dec.Decode(code[off:])
			if err != nil {
				break
			}
			if !childPassesAMD64(in, &tested) {
				if !reached {
					break
				}
				var target uint64
				if rel, isRel := in.Args[0].(x86asm.Rel); isRel && tested && childTakesAMD64(in.Op) {
					target = addr + uint64(off-cloneWindow+in.Len) + uint64(int64(rel))
				}
				return true, target
			}
			off += in.Len
		}
		if reached {
			return true, 0
		}
	}
	return false, 0
}

// childTakesAMD64 reports whether the conditional jump op is taken after
// a test that found 0 (ZF and PF set; SF, OF and CF clear).
func childTakesAMD64(op x86asm.Op) bool {
	switch op {
	case x86asm.JE, x86asm.JLE, x86asm.JGE, x86asm.JNS, x86asm.JBE, x86asm.JAE, x86asm.JNO:
		return true
	}
	return false
}

// syscallNumberAMD64 reports whether code, which ends where a syscall
// begins, sets %eax (%al, %rax) last to one of nrs.
func syscallNumberAMD64(code []byte, nrs ...int64) bool {
	insts, _ := decodeEndingAt(code, 0)
	for i := len(insts) - 1; i >= 0; i-- {
		if v, ok := sysnoAMD64(insts[i]); ok {
			return slices.Contains(nrs, v)
		}
		if isBranchAMD64(insts[i].Op) {
			return false
		}
	}
	return false
}

// childPassesAMD64 reports whether in, after a clone's syscall, is one the
// child (%rax 0) passes by to the next instruction: a test of %rax with
// itself or a compare with 0 (tested is set), or after one a branch not taken when it found 0
// (ZF set; SF, OF and CF clear).
func childPassesAMD64(in x86asm.Inst, tested *bool) bool {
	switch in.Op {
	case x86asm.TEST:
		*tested = (in.Args[0] == x86asm.EAX || in.Args[0] == x86asm.RAX) && in.Args[1] == in.Args[0]
		return *tested
	case x86asm.CMP: // cmp $0, %rax (Go's runtime.clone)
		*tested = (in.Args[0] == x86asm.EAX || in.Args[0] == x86asm.RAX) && in.Args[1] == x86asm.Imm(0)
		return *tested
	case x86asm.JNE, x86asm.JL, x86asm.JS, x86asm.JG, x86asm.JO, x86asm.JB, x86asm.JA:
		return *tested
	}
	return false
}

// cloneReturnARM64 is CloneReturn for the code around addr, which begins
// at code[cloneWindow]; it also returns the target of the branch the
// child takes after addr (cbz x0, b.eq and the other conditions true after
// a compare that found 0), 0 if none follows the instructions it passes by.
func cloneReturnARM64(code *[2 * cloneWindow]byte, addr uint64) (bool, uint64) {
	w := func(i int) uint32 { return binary.LittleEndian.Uint32(code[4*i:]) }
	const n = cloneWindow / 4
	for sv := n - 1; sv >= n-4; sv-- {
		if w(sv) != 0xd4000001 { // svc #0
			continue
		}
		nr := int64(-1)
		for j := sv - 1; j >= 0; j-- {
			if v, ok := movX8(w(j)); ok {
				nr = v
				break
			}
			if arm64Branch(w(j)) {
				break
			}
		}
		if nr != 220 && nr != 435 {
			return false, 0
		}
		compared := false
		for j := sv + 1; j < 2*n; j++ {
			insn := w(j)
			if childPassesARM64(insn, &compared) {
				continue
			}
			if j < n {
				return false, 0
			}
			pc := addr + uint64(4*(j-n))
			switch {
			case insn&0xff00001f == 0xb4000000 || insn&0xff00001f == 0x34000000: // cbz x0; cbz w0
				return true, pc + uint64(int64(int32(insn<<8)>>13)*4)
			case insn&0xff000010 == 0x54000000 && compared:
				switch insn & 0xf {
				case 0x0, 0x2, 0x5, 0x7, 0x9, 0xa, 0xd: // eq, hs, pl, vc, ls, ge, le
					return true, pc + uint64(int64(int32(insn<<8)>>13)*4)
				}
			}
			return true, 0
		}
		return true, 0
	}
	return false, 0
}

// childPassesARM64 reports whether insn, after a clone's svc, is one the
// child (x0 0) passes by to the next instruction: cmp x0, #0 (compared is
// set), cbnz x0, or after that compare a conditional branch not taken when
// it found 0 (Z and C set, N and V clear: b.ne, b.lo, b.mi, b.vs, b.hi,
// b.lt, b.gt).
func childPassesARM64(insn uint32, compared *bool) bool {
	switch {
	case insn == 0xf100001f || insn == 0x7100001f: // cmp x0, #0; cmp w0, #0
		*compared = true
		return true
	case insn&0xff00001f == 0xb5000000 || insn&0xff00001f == 0x35000000: // cbnz x0; cbnz w0
		return true
	case insn&0xff000010 == 0x54000000 && *compared:
		switch insn & 0xf { // the condition
		case 0x1, 0x3, 0x4, 0x6, 0x8, 0xb, 0xc:
			return true
		}
	}
	return false
}
