package unwinder

import (
	"encoding/binary"
	"strings"

	"github.com/ustack/ustack/arch"
)

// A call through a bad function pointer (NULL, freed memory, a corrupted
// vtable) faults on fetching its first instruction: the thread's exact PC
// lies in no code, and no CFI says how to unwind from there. The call has
// only just happened, so every register still holds the caller's value at
// the call but the two the call changed: x86_64's pushed the return
// address (at the SP), arm64's put it in x30. A tail call's jump to a bad
// address leaves there the return address of the function that jumped
// (whose frame is gone, as a tail call's). gdb takes that return address
// without looking; badCall takes it only where the instruction before it
// is a call.

// badCall recovers the caller of a frame whose exact PC (the first frame's,
// or one a signal interrupted) lies in no code, or fails. It returns the
// return address and the caller's SP.
func (u *Unwinder) badCall(space *AddressSpace, cur *arch.Regs, w *window, sp, pacMask uint64) (ra, callerSP uint64, ok bool) {
	switch u.arch {
	case arch.AMD64:
		v, ms := w.read8(sp)
		if ms != MemOK {
			return 0, 0, false
		}
		ra, callerSP = v, sp+8
	case arch.ARM64:
		lr, known := cur.Get(arch.ARM64_X30)
		if !known {
			return 0, 0, false
		}
		ra, callerSP = lr&^pacMask, sp
	default:
		return 0, 0, false
	}
	j := space.Find(ra)
	if j < 0 {
		return 0, 0, false
	}
	if call, known := u.callBefore(space.Mapping(j), ra); !call || !known {
		return 0, 0, false
	}
	return ra, callerSP, true
}

// callBefore reports whether the instruction before ra, an address in
// mapping m, is a call (any call: amd64CallsTo's, arm64Call's); known is
// false when m's object cannot show the code there.
func (u *Unwinder) callBefore(m *Mapping, ra uint64) (call, known bool) {
	if m.Object == nil || ra-m.Bias < 8 || ra < m.Start {
		return false, false
	}
	var code [8]byte
	if m.Object.ReadCode(ra-m.Bias-8, code[:]) != len(code) {
		return false, false
	}
	switch u.arch {
	case arch.AMD64:
		return amd64CallsTo(code, ra, 0, nil), true
	case arch.ARM64:
		return arm64Call(binary.LittleEndian.Uint32(code[4:])), true
	}
	return false, false
}

// callsFunction reports whether the instruction before return address ra
// calls the function whose first instruction is at run-time address
// target: the proof the frameless and prologue steps ask of a return
// address they found. x86_64: a call rel32 to it, or to a jump to it (a
// thunk such as musl's __syscall_cp, jmp __syscall_cp_c; after an
// endbr64), or a call through a register that cur says still holds it
// (amd64CallsTo); arm64: a bl to it, or a blr, whose target no register
// shows any more. ra's code is read from its own mapping in space (or m,
// the callee's, without one).
func (u *Unwinder) callsFunction(space *AddressSpace, m *Mapping, ra, target uint64, cur *arch.Regs) bool {
	code, cm, ok := codeBefore(space, m, ra)
	if !ok {
		return false
	}
	switch u.arch {
	case arch.AMD64:
		if amd64CallsTo(code, ra, target, cur) || loaderCall(code, ra, target, m, cur) {
			return true
		}
		if code[3] != 0xe8 {
			return false
		}
		thunk := ra + uint64(int64(int32(binary.LittleEndian.Uint32(code[4:]))))
		tm := mappingAt(space, cm, thunk)
		var jmp [9]byte
		if tm == nil || tm.Object == nil || thunk < tm.Start || thunk-tm.Bias > thunk || tm.Object.ReadCode(thunk-tm.Bias, jmp[:]) < 5 {
			return false
		}
		at, b := thunk, jmp[:]
		if b[0] == 0xf3 && b[1] == 0x0f && b[2] == 0x1e && b[3] == 0xfa { // endbr64
			at, b = at+4, b[4:]
		}
		switch b[0] {
		case 0xe9: // jmp rel32
			return at+5+uint64(int64(int32(binary.LittleEndian.Uint32(b[1:])))) == target
		case 0xeb: // jmp rel8
			return at+2+uint64(int64(int8(b[1]))) == target
		}
		return importCall(tm, thunk, mappingAt(space, m, target), target)
	case arch.ARM64:
		insn := binary.LittleEndian.Uint32(code[4:])
		if insn&0xfc000000 != 0x94000000 { // not bl
			return arm64Call(insn) // blr and the authenticating forms
		}
		if DirectCall(arch.ARM64, code[:], ra, target) {
			return true
		}
		// bl NAME@plt: the stub, after a bti c where the PLT has
		// them, is the function's import.
		thunk := ra - 4 + uint64(int64(int32(insn<<6)>>6)*4)
		tm := mappingAt(space, cm, thunk)
		var first [4]byte
		if tm == nil || tm.Object == nil || thunk < tm.Start || thunk-tm.Bias > thunk || tm.Object.ReadCode(thunk-tm.Bias, first[:]) != 4 {
			return false
		}
		if binary.LittleEndian.Uint32(first[:]) == 0xd503245f { // bti c
			thunk += 4
		}
		return importCall(tm, thunk, mappingAt(space, m, target), target)
	}
	return false
}

// codeBefore returns the 8 bytes of code before return address ra, read
// from ra's own mapping in space (m without one), and that mapping; ok is
// false where ra is in no executable mapping with an Object, or too near
// its start, or the code cannot be read.
func codeBefore(space *AddressSpace, m *Mapping, ra uint64) (code [8]byte, cm *Mapping, ok bool) {
	cm = mappingAt(space, m, ra)
	if cm == nil || !cm.Exec || cm.Object == nil || ra < cm.Start+8 || ra >= cm.End || cm.Bias > ra || ra-cm.Bias < 8 {
		return code, nil, false
	}
	if cm.Object.ReadCode(ra-cm.Bias-8, code[:]) != len(code) {
		return code, nil, false
	}
	return code, cm, true
}

// SymbolObject is implemented by an Object that names the function symbol
// holding a link-time address (elfcache names a PLT stub "name@plt").
type SymbolObject interface {
	Symbolize(addr uint64) (name string, offset uint64, ok bool)
}

// importCall reports whether the stub at runtime address thunk, in mapping
// tm, is the PLT entry of the function that begins at runtime address
// target, in mapping fm: the stub's symbol is "NAME@plt" and the function's
// is NAME (versions aside). The stub jumps through its GOT slot, which a
// recording does not hold, but the dynamic linker filled it by that name.
func importCall(tm *Mapping, thunk uint64, fm *Mapping, target uint64) bool {
	if fm == nil || tm.Object == nil || fm.Object == nil || target < fm.Bias {
		return false
	}
	ts, ok1 := tm.Object.(SymbolObject)
	fs, ok2 := fm.Object.(SymbolObject)
	if !ok1 || !ok2 {
		return false
	}
	stub, off, ok := ts.Symbolize(thunk - tm.Bias)
	if !ok || off != 0 {
		return false
	}
	name, found := strings.CutSuffix(stub, "@plt")
	if !found {
		return false
	}
	fn, off, ok := fs.Symbolize(target - fm.Bias)
	return ok && off == 0 && baseName(fn) == baseName(name)
}

// baseName is a symbol's name without its version (NAME@VERSION,
// NAME@@VERSION).
func baseName(s string) string {
	if i := strings.IndexByte(s, '@'); i > 0 {
		return s[:i]
	}
	return s
}

// mappingAt returns the mapping of space holding addr (nil for none), or m
// without a space.
func mappingAt(space *AddressSpace, m *Mapping, addr uint64) *Mapping {
	if space == nil {
		return m
	}
	j := space.Find(addr)
	if j < 0 {
		return nil
	}
	return space.Mapping(j)
}

// enteredAt returns the row at return address ra, in mapping m, where ra is
// the first instruction of a function with CFI (its FDE begins there) that
// no call precedes: the function was not called but returned into, at its
// entry. makecontext does that: the function it starts a coroutine with
// returns to the first instruction of glibc's __start_context, which
// sets the next context or exits (gdb, looking at ra-1 as at every return
// address, finds nothing and shows "??"; the frame-pointer fallback
// followed the frame pointer getcontext saved, into the frames of the code
// that made the context). Execution goes on at ra itself, so ra's row says
// how to unwind from there, as for a signal trampoline's 'S' FDE. It
// returns nil otherwise: ra-1 is then the call site of a real return
// address, or nothing proves the entry.
func (u *Unwinder) enteredAt(c *Cache, m *Mapping, ra uint64) *rowEntry {
	if ra < m.Start || ra >= m.End {
		return nil
	}
	if call, known := u.callBefore(m, ra); call || !known {
		return nil
	}
	e := c.fullRow(m.Object, ra-m.Bias)
	if e.err != nil || e.row.FDEStart != ra-m.Bias || e.pltEntered {
		return nil
	}
	return e
}

// amd64CallsTo reports whether the 8 bytes before return address ra end
// with a call: call rel32 (e8), or an indirect call (ff /2) whose ModRM,
// SIB and displacement end exactly at ra. With regs, only a call that went
// to target: call rel32 to it, or through a register that holds it (with
// or without a REX.B prefix before the opcode: either reading will do);
// through memory its target cannot be checked, and it does not count.
func amd64CallsTo(code [8]byte, ra, target uint64, regs *arch.Regs) bool {
	if code[3] == 0xe8 && (regs == nil || DirectCall(arch.AMD64, code[:], ra, target)) {
		return true
	}
	// The opcode's offset k in code for each length 8-k of ModRM and
	// what follows it: 1 (register or [reg]) to 6 ([reg+disp32] with
	// a SIB byte).
	for k := 1; k <= 6; k++ {
		if code[k] != 0xff {
			continue
		}
		modrm := code[k+1]
		if modrm>>3&7 != 2 || modrmLen(modrm, code[min(k+2, 7)]) != 7-k {
			continue
		}
		if regs == nil {
			return true
		}
		if modrm>>6 != 3 {
			continue // through memory
		}
		hw := int(modrm & 7)
		if regHolds(regs, amd64HWReg[hw], target) || code[k-1]&0xf1 == 0x41 && regHolds(regs, amd64HWReg[hw+8], target) {
			return true
		}
	}
	return false
}

// InitFiniObject is implemented by an Object that reads the code pointers
// its dynamic loader calls: the slots of its .preinit_array, .init_array
// and .fini_array sections (elfcache's).
type InitFiniObject interface {
	// InitFiniEntry returns the link-time address the file holds in the
	// 8-byte slot at link-time address addr of one of those arrays, and
	// false where addr is no such slot.
	InitFiniEntry(addr uint64) (uint64, bool)
}

// loaderCall reports whether the call before return address ra (its 8
// bytes, code) read its target from a slot of the init or fini arrays of
// m's object that holds target, the function's first instruction in m: the
// dynamic loader calls constructors and destructors so (glibc's
// _dl_call_fini: call *(%rbx), %rbx at the slot; call_init: call
// *(%rcx)). The slot's address is the call's memory operand, computed from
// the registers regs holds (the callee's: those the call read are the
// caller's still where the callee has not written them; a register it
// changed points elsewhere, and proves nothing). The arrays are read-only
// once relocated (RELRO), each slot the file's link-time address plus the
// object's load bias. A RIP-relative operand (-fno-plt's call through a
// GOT slot) is the caller's GOT, which the file does not fill: no proof.
func loaderCall(code [8]byte, ra, target uint64, m *Mapping, regs *arch.Regs) bool {
	o, ok := m.Object.(InitFiniObject)
	if !ok || regs == nil || target < m.Bias {
		return false
	}
	for k := 1; k <= 6; k++ {
		ea, ok := amd64CallOperand(code, k, regs)
		if !ok || ea < m.Bias {
			continue
		}
		if v, ok := o.InitFiniEntry(ea - m.Bias); ok && v+m.Bias == target {
			return true
		}
	}
	return false
}

// amd64CallOperand returns the address an indirect call through memory
// (ff /2), whose opcode is at code[k] and whose ModRM, SIB and
// displacement end at the end of code, reads its target from, computed
// from regs; a byte 0x40-0x4f before the opcode is taken as its REX prefix.
// ok is false for another instruction, a call through a register, a
// RIP-relative operand, or a register regs does not know.
func amd64CallOperand(code [8]byte, k int, regs *arch.Regs) (uint64, bool) {
	if code[k] != 0xff {
		return 0, false
	}
	modrm := code[k+1]
	mod, rm := modrm>>6, modrm&7
	if modrm>>3&7 != 2 || mod == 3 || mod == 0 && rm == 5 || modrmLen(modrm, code[min(k+2, 7)]) != 7-k {
		return 0, false
	}
	var rex byte
	if code[k-1]&0xf0 == 0x40 {
		rex = code[k-1]
	}
	var ea uint64
	at := k + 2
	base := int(rm) | int(rex&1)<<3
	if rm == 4 {
		sib := code[at]
		at++
		if idx := int(sib>>3&7) | int(rex>>1&1)<<3; idx != 4 {
			v, ok := regs.Get(amd64HWReg[idx])
			if !ok {
				return 0, false
			}
			ea = v << (sib >> 6)
		}
		base = int(sib&7) | int(rex&1)<<3
		if mod == 0 && sib&7 == 5 {
			base = -1 // no base: a disp32
			mod = 2
		}
	}
	if base >= 0 {
		v, ok := regs.Get(amd64HWReg[base])
		if !ok {
			return 0, false
		}
		ea += v
	}
	switch mod {
	case 1:
		ea += uint64(int64(int8(code[at])))
	case 2:
		ea += uint64(int64(int32(binary.LittleEndian.Uint32(code[at:]))))
	}
	return ea, true
}

// modrmLen returns how many bytes a ModRM byte and what follows it (SIB,
// displacement) take in 64-bit mode, given the byte after it (the SIB byte
// when there is one).
func modrmLen(modrm, sib byte) int {
	mod, rm := modrm>>6, modrm&7
	switch {
	case mod == 3:
		return 1
	case mod == 0 && rm == 5:
		return 5 // [rip+disp32]
	case mod == 0 && rm == 4 && sib&7 == 5:
		return 6 // SIB, no base: disp32
	}
	n := 1
	if rm == 4 {
		n++ // SIB
	}
	switch mod {
	case 1:
		n++
	case 2:
		n += 4
	}
	return n
}

// amd64HWReg maps the instruction encoding's register numbers (rax, rcx,
// rdx, rbx, rsp, rbp, rsi, rdi, r8..r15) to the DWARF numbers arch.Regs
// uses.
// r8..r15 are DWARF's 8..15 too.
var amd64HWReg = [16]int{
	arch.AMD64_RAX, arch.AMD64_RCX, arch.AMD64_RDX, arch.AMD64_RBX,
	arch.AMD64_RSP, arch.AMD64_RBP, arch.AMD64_RSI, arch.AMD64_RDI,
	arch.AMD64_R8, arch.AMD64_R8 + 1, arch.AMD64_R8 + 2, arch.AMD64_R8 + 3,
	arch.AMD64_R8 + 4, arch.AMD64_R8 + 5, arch.AMD64_R8 + 6, arch.AMD64_R15,
}

// regHolds reports whether register n is known to hold v.
func regHolds(regs *arch.Regs, n int, v uint64) bool {
	x, ok := regs.Get(n)
	return ok && x == v
}

// DirectCall reports whether the instruction that ends at return address
// ra is a direct call to target: call rel32 on x86_64, bl on arm64. before
// holds the code just before ra (its last 5 bytes on x86_64, 4 on arm64
// are read).
func DirectCall(a arch.Arch, before []byte, ra, target uint64) bool {
	t, ok := CallTarget(a, before, ra)
	return ok && t == target
}

// CallTarget returns the target of the direct call that ends at return
// address ra (call rel32 on x86_64, bl on arm64), before as for
// DirectCall; false when the instruction there is not one.
func CallTarget(a arch.Arch, before []byte, ra uint64) (uint64, bool) {
	switch a {
	case arch.AMD64:
		if len(before) < 5 {
			return 0, false
		}
		c := before[len(before)-5:]
		if c[0] != 0xe8 {
			return 0, false
		}
		return ra + uint64(int64(int32(binary.LittleEndian.Uint32(c[1:])))), true
	case arch.ARM64:
		if len(before) < 4 {
			return 0, false
		}
		insn := binary.LittleEndian.Uint32(before[len(before)-4:])
		if insn&0xfc000000 != 0x94000000 { // bl imm26
			return 0, false
		}
		return ra - 4 + uint64(int64(int32(insn<<6)>>6)*4), true
	}
	return 0, false
}

// arm64Call reports whether insn is a call: bl, blr, blraa, blrab,
// blraaz or blrabz.
func arm64Call(insn uint32) bool {
	return insn&0xfc000000 == 0x94000000 || // bl imm26
		insn&0xfffffc1f == 0xd63f0000 || // blr xn
		insn&0xfffff800 == 0xd73f0800 || // blraa, blrab xn, xm
		insn&0xfffff81f == 0xd63f081f // blraaz, blrabz xn
}

// FunctionObject is implemented by an Object that knows where the function
// holding an address begins (by its symbol table).
type FunctionObject interface {
	Object
	// FunctionStart returns the link-time address of the first
	// instruction of the function holding link-time address addr.
	FunctionStart(addr uint64) (uint64, bool)
}

// framelessReturn steps out of an x86_64 frame without CFI that has pushed
// nothing (a leaf, or glibc's clone3 and clone from their system call on,
// whose CFI ends before it on purpose): its return address is still the
// word at its SP. It takes that word only where it returns into the same
// mapping and the instruction before it is a call to the first instruction
// of the function holding the frame (a direct call, or one through a
// register that still holds that address), as gdb finds a frameless
// function's return address by its prologue.
func (u *Unwinder) framelessReturn(c *Cache, m *Mapping, lookup uint64, cur, next *arch.Regs, st *stepResult) bool {
	fo, ok := m.Object.(FunctionObject)
	if !ok {
		return false
	}
	start, ok := fo.FunctionStart(lookup - m.Bias)
	if !ok {
		return false
	}
	sp, ok := cur.Get(arch.AMD64_RSP)
	if !ok {
		return false
	}
	ra, ms := c.win.read8(sp)
	if ms != MemOK || !u.callsFunction(st.space, m, ra, start+m.Bias, cur) {
		return false
	}
	if lookup-m.Bias != start && c.returnsInto(m, ra, start) {
		// A recursion's return address, maybe stale (see
		// prologueStep); at the function's first instruction it is
		// the return address.
		return false
	}
	*next = *cur
	next.Set(arch.AMD64_RIP, ra)
	next.Set(arch.AMD64_RSP, sp+8)
	st.cfa = sp + 8
	st.method = MethodFrameless
	return true
}
