package unwinder

import (
	"bytes"
	"encoding/binary"
	"strings"

	"github.com/ustack/ustack/arch"
)

// The sigreturn trampolines the kernel's signal delivery returns into. Their
// code is fixed by the kernel ABI, so they are recognised by their bytes even
// where libc gives them no CFI (musl, the arm64 vdso of some kernels,
// qemu-user's trampoline page).
var (
	// mov $15, %rax; syscall (rt_sigreturn): glibc's and musl's __restore_rt.
	sigreturnAMD64 = []byte{0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05}
	// mov x8, #139; svc #0: the arm64 vdso's __kernel_rt_sigreturn.
	sigreturnARM64 = []byte{0x68, 0x11, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4}
)

// sigreturnAt reports whether the code at pc, in mapping m, is a sigreturn
// trampoline, as gdb recognises one: the bytes are read from the mapping's
// object or, where it has none, from the memory the capture holds (a core
// dump's anonymous pages: qemu-user puts its trampoline in one, with no
// symbol and no CFI). readable says whether the code could be read at all.
func (u *Unwinder) sigreturnAt(c *Cache, m *Mapping, pc uint64) (found, readable bool) {
	var buf [16]byte
	want := sigreturnCode(u.arch)
	if m.Object != nil {
		if n := m.Object.ReadCode(pc-m.Bias, buf[:len(want)]); n == len(want) {
			return bytes.Equal(buf[:n], want), true
		}
	}
	if !m.Exec {
		// Code runs from executable memory: sigreturn's bytes on the
		// stack or the heap are data, not a trampoline; only the kernel's
		// marker can vouch for a signal frame there.
		return false, false
	}
	for i := 0; i < len(want); i += 8 {
		v, ms := c.win.read8(pc + uint64(i))
		if ms != MemOK {
			return false, false
		}
		binary.LittleEndian.PutUint64(buf[i:], v)
	}
	return bytes.Equal(buf[:len(want)], want), true
}

// sigreturnCode returns arch's sigreturn trampoline code.
func sigreturnCode(a arch.Arch) []byte {
	if a == arch.ARM64 {
		return sigreturnARM64
	}
	return sigreturnAMD64
}

// syscallBefore returns the length of the system call instruction that
// ends at pc in m's object (x86_64 syscall, arm64 svc #0), 0 for none: a
// thread sampled at a system call's entry (its tracepoint, or a timer
// while the kernel runs it) has its PC after that instruction.
func (u *Unwinder) syscallBefore(m *Mapping, pc uint64) uint64 {
	if m.Object == nil || pc < m.Bias+4 || pc < m.Start+4 {
		return 0
	}
	var code [4]byte
	if m.Object.ReadCode(pc-m.Bias-4, code[:]) != len(code) {
		return 0
	}
	switch u.arch {
	case arch.AMD64:
		if code[2] == 0x0f && code[3] == 0x05 {
			return 2
		}
	case arch.ARM64:
		if binary.LittleEndian.Uint32(code[:]) == 0xd4000001 {
			return 4
		}
	}
	return 0
}

// The kernel's own markers in the signal frame it writes, for a trampoline
// whose code is not in the capture at all.
//
// arm64: the first record of the sigcontext's __reserved area (at
// rt_sigframe offset 592) is the fpsimd_context, whose header is its magic
// FPSIMD_MAGIC and its size, 528.
//
// x86_64: the sigcontext's fpstate pointer (ucontext offset 224) points to
// the xsave area on the stack, whose software-reserved bytes (offset 464)
// start with FP_XSTATE_MAGIC1.
const (
	arm64FPSIMDHeader   = 528<<32 | 0x46508001
	arm64ReservedOff    = 592
	amd64FPStatePtrOff  = amd64SigcontextOff + 23*8
	amd64XStateMagicOff = 464
	amd64XStateMagic1   = 0x46505853
)

// signalMarker reports whether the stack at sp holds the signal frame the
// kernel writes (rt_sigframe on arm64, the ucontext after the popped
// return address on x86_64), by the markers above: the frame whose PC is
// an unreadable sigreturn trampoline is then taken for one. Without a
// marker nothing is assumed.
func (u *Unwinder) signalMarker(w *window, sp uint64) bool {
	if u.arch == arch.ARM64 {
		v, ms := w.read8(sp + arm64ReservedOff)
		return ms == MemOK && v == arm64FPSIMDHeader
	}
	fp, ms := w.read8(sp + amd64FPStatePtrOff)
	if ms != MemOK || fp < sp+amd64FPStatePtrOff || fp-sp > 1<<16 || fp&63 != 0 {
		return false
	}
	v, ms := w.read8(fp + amd64XStateMagicOff)
	return ms == MemOK && uint32(v) == amd64XStateMagic1
}

// sigFrameAbove reports whether the arm64 frame whose CFI ends the stack
// (its return address undefined), with canonical frame address cfa, is a
// signal handler's with the kernel's signal frame at its CFA, the SP the
// kernel gave the handler: Go's runtime.sigtramp marks itself so (its
// functions flagged TOPFRAME get an undefined link register in the CFI Go
// writes) though the interrupted code lies behind that signal frame. It
// is known by the kernel's own marker there (signalMarker); if so, regs
// becomes the interrupted context (restoreSignal's), whose PC is exact.
func (u *Unwinder) sigFrameAbove(w *window, cfa uint64, regs *arch.Regs) bool {
	if u.arch != arch.ARM64 || !u.signalMarker(w, cfa) {
		return false
	}
	var next arch.Regs
	base := cfa + arm64SigcontextOff
	for r := 0; r <= arch.ARM64_PC; r++ {
		v, ms := w.read8(base + uint64(8*r))
		if ms != MemOK {
			return false
		}
		next.Set(r, v)
	}
	*regs = next
	return true
}

// Offsets in the signal frame at the trampoline's stack pointer.
//
// x86_64: the handler's return popped pretcode, so SP points at the
// struct ucontext; uc_mcontext follows uc_flags, uc_link and uc_stack (40
// bytes), and its general registers are r8..r15, rdi, rsi, rbp, rbx, rdx,
// rax, rcx, rsp, rip.
//
// arm64: SP points at struct rt_sigframe: siginfo (128 bytes), then the
// ucontext whose uc_mcontext (16-byte aligned, after uc_flags, uc_link,
// uc_stack and the 128-byte signal mask area) starts at offset 304; it
// holds fault_address, then x0..x30, sp, pc.
const (
	amd64SigcontextOff = 40
	arm64SigcontextOff = 304 + 8
)

// amd64SigRegs lists, in sigcontext order, the DWARF register numbers.
var amd64SigRegs = [...]int{
	arch.AMD64_R8, arch.AMD64_R8 + 1, arch.AMD64_R8 + 2, arch.AMD64_R8 + 3,
	arch.AMD64_R8 + 4, arch.AMD64_R8 + 5, arch.AMD64_R8 + 6, arch.AMD64_R15,
	arch.AMD64_RDI, arch.AMD64_RSI, arch.AMD64_RBP, arch.AMD64_RBX,
	arch.AMD64_RDX, arch.AMD64_RAX, arch.AMD64_RCX, arch.AMD64_RSP, arch.AMD64_RIP,
}

// restoreSignal restores every register from the signal frame at the
// trampoline's stack pointer.
func (u *Unwinder) restoreSignal(c *Cache, cur, next *arch.Regs, st *stepResult) {
	next.Reset()
	sp, _ := cur.Get(u.arch.SP())
	st.cfa = sp
	if u.arch == arch.ARM64 {
		base := sp + arm64SigcontextOff
		for r := 0; r <= arch.ARM64_PC; r++ {
			v, ms := c.win.read8(base + uint64(8*r))
			if ms != MemOK {
				st.stop = memStop(ms)
				return
			}
			next.Set(r, v)
		}
		return
	}
	base := sp + amd64SigcontextOff
	for i, r := range amd64SigRegs {
		v, ms := c.win.read8(base + uint64(8*i))
		if ms != MemOK {
			st.stop = memStop(ms)
			return
		}
		next.Set(r, v)
	}
}

// linkRegister recovers the caller of an arm64 first frame without CFI: the
// return address is still in x30 and nothing has been pushed.
func (u *Unwinder) linkRegister(cur, next *arch.Regs, st *stepResult) {
	*next = *cur
	lr, ok := cur.Get(arch.ARM64_X30)
	if !ok {
		st.stop = StopUnknownRegister
		st.err = errLinkRegUnknown
		return
	}
	sp, _ := cur.Get(arch.ARM64_SP)
	st.cfa = sp
	st.method = MethodLinkRegister
	st.raFromRegister = true
	next.Set(arch.ARM64_PC, lr)
}

// linkRegisterUsable reports whether an arm64 first frame's x30 may be its
// return address: code that keeps a frame record reuses x30 once it saved
// it (OpenSSL's assembly: as data, zeroed, or holding the return address
// of the function's own last call), and there the link register step
// would end the stack (a zero return address, one outside code, a loop at
// the same PC) or repeat the function. x30 is not the return address
// where, PAC stripped, it is 0 in a function not known to begin a stack
// (where one is, 0 ends it: chainEnd), the PC itself, outside executable
// code (unless the kernel's signal frame marker lies at the SP: a return
// into a sigreturn trampoline the capture does not hold), or an earlier
// return address of the frame's own function (ownEarlierReturn). An
// unknown x30 is left to linkRegister to say so.
func (u *Unwinder) linkRegisterUsable(c *Cache, space *AddressSpace, m *Mapping, cur *arch.Regs, pc uint64) bool {
	lr, ok := cur.Get(arch.ARM64_X30)
	if !ok {
		return true
	}
	lr = u.arch.StripPAC(lr, u.opts.PACMask)
	switch {
	case lr == 0:
		return pc >= m.Bias && c.outermost(m, pc-m.Bias)
	case lr == pc:
		return false
	}
	lm := mappingAt(space, m, lr)
	if lm == nil || !lm.Exec {
		sp, ok := cur.Get(arch.ARM64_SP)
		return ok && u.signalMarker(&c.win, sp)
	}
	return !ownEarlierReturn(lm, m, lr, pc)
}

// ownEarlierReturn bounds how far before the PC ownEarlierReturn looks.
const ownEarlierReach = 4096

// ownEarlierReturn reports whether lr, in mapping lm, is a return address
// into the function of pc, in m, from a call it made earlier: it lies in
// the same object before pc, at most ownEarlierReach bytes, and the code
// between them holds nothing that ends a function (ret, b, br) and no
// address where one begins (a symbol's or a bl's target), so that the
// call returned into the code that now runs. A caller's return address
// lies in another function: one whose code ends before its callee's
// begins.
func ownEarlierReturn(lm, m *Mapping, lr, pc uint64) bool {
	if lm != m || m.Object == nil || lr >= pc || pc-lr > ownEarlierReach || lr < m.Bias || (pc-lr)%4 != 0 {
		return false
	}
	var code [ownEarlierReach]byte
	n := int(pc - lr)
	if m.Object.ReadCode(lr-m.Bias, code[:n]) != n {
		return false
	}
	for off := 0; off < n; off += 4 {
		insn := binary.LittleEndian.Uint32(code[off:])
		if insn&0xfc000000 == 0x14000000 || // b
			insn&0xfffffc1f == 0xd65f0000 || insn&0xfffffc1f == 0xd61f0000 || // ret xn, br xn
			insn == 0xd65f0bff || insn == 0xd65f0fff || // retaa, retab
			insn&0xfffff800 == 0xd71f0800 || insn&0xfffff81f == 0xd61f081f { // braa, brab; braaz, brabz
			return false
		}
		if off > 0 && knownStart(m.Object, lr-m.Bias+uint64(off)) {
			return false
		}
	}
	return !knownStart(m.Object, pc-m.Bias)
}

// ownRecordReach bounds how far above the SP an arm64 first frame's own
// frame record may lie (ownFrameRecord): the locals a function allocates
// below its record (stp x29, x30, [sp, #n] after sub sp, sp, #m).
const ownRecordReach = 1 << 16

// ownFrameRecord reports whether an arm64 first frame without CFI has
// stored its own frame record: x29 points at most ownRecordReach above the
// SP at a record whose saved x30 is x30 itself, as stp x29, x30, [sp, #-n]!;
// mov x29, sp leave it. A leaf that saved nothing has its caller's x29,
// whose record holds the caller's own return address, not the one into
// the caller (the same word only where a call site calls itself). Without
// the function's code (a missing object, JIT code without a perf map) the
// link register step would keep the frame's SP for the caller's, and the
// caller's CFI, applied there, would read the frame's record as its own:
// its return address again, then a stack word as a PC.
func ownFrameRecord(c *Cache, cur *arch.Regs) bool {
	fp, ok1 := cur.Get(arch.ARM64_X29)
	sp, ok2 := cur.Get(arch.ARM64_SP)
	lr, ok3 := cur.Get(arch.ARM64_X30)
	if !ok1 || !ok2 || !ok3 || lr == 0 || fp < sp || fp-sp > ownRecordReach || fp&7 != 0 {
		return false
	}
	saved, ms := c.win.read8(fp + 8)
	return ms == MemOK && saved == lr
}

// framePointer recovers the caller by following the frame pointer: the
// frame record at FP holds the caller's FP and the return address (x86_64:
// push %rbp after the call; arm64: stp x29, x30). lookup is the frame's
// address to look up in m (PC-1 for a return address). The step is a
// guess (st.fpGuess) unless setUp: framePointerSetUp showed the frame set
// up the frame pointer it follows.
func (u *Unwinder) framePointer(c *Cache, m *Mapping, lookup uint64, cur, next *arch.Regs, setUp bool, st *stepResult) {
	next.Reset()
	a := u.arch
	fp, ok := cur.Get(a.FP())
	sp, _ := cur.Get(a.SP())
	if ok && fp == 0 {
		// Both ABIs zero the frame pointer in the outermost frame
		// (_start, thread entry), but code built without frame
		// pointers may hold 0 in the register anywhere: the end of
		// the chain only where the function is known to begin a
		// stack.
		chainEnd(c, m, lookup, st, errZeroFramePointer)
		return
	}
	if !ok || fp < sp || fp&7 != 0 || fp-sp >= maxFrameRecordSpan {
		// Below the SP, misaligned, or too far above it to be on
		// the same stack (code without frame pointers keeps data
		// in the register: a sum, a hash): no frame record, rather
		// than one beyond the end of the snapshot (StopTruncated,
		// whose advice, a larger snapshot, would not help).
		st.stop = StopNoUnwindInfo
		st.err = errNoFramePointer
		return
	}
	callerFP, ms := c.win.read8(fp)
	if ms != MemOK {
		st.stop = memStop(ms)
		return
	}
	ra, ms := c.win.read8(fp + 8)
	if ms != MemOK {
		st.stop = memStop(ms)
		return
	}
	if !setUp && a == arch.AMD64 && notAfterCall(st.space, m, ra) {
		// The register held something else than a frame record
		// (code without frame pointers keeps data in it): what
		// it points at is no return address.
		st.stop = StopNoUnwindInfo
		st.err = errNoFramePointer
		return
	}
	// Only the frame record is known; the callee's other registers say
	// nothing reliable about the caller's.
	next.Set(a.FP(), callerFP)
	next.Set(a.PC(), ra)
	next.Set(a.SP(), fp+16)
	if a == arch.ARM64 {
		next.Set(arch.ARM64_X30, ra)
	}
	st.cfa = fp + 16
	st.method = MethodFramePointer
	st.fpGuess = !setUp
}

// maxFrameRecordSpan bounds how far above the SP a frame pointer may
// point and still be taken for a frame record on the same stack: 4 GiB,
// more than any thread's stack.
const maxFrameRecordSpan = 1 << 32

// notAfterCall reports whether x86_64 code shows that ra is no return
// address: the 8 bytes before it, readable in its mapping's object, end
// with no call, and no function begins at ra (where a frame would have
// returned into at its entry: makecontext's __start_context). Where the
// code cannot be read (JIT code a perf map names, a missing object),
// nothing is shown.
func notAfterCall(space *AddressSpace, m *Mapping, ra uint64) bool {
	cm := mappingAt(space, m, ra)
	if cm == nil || cm.Object == nil || ra < cm.Start+8 || ra >= cm.End || ra-cm.Bias < 8 {
		return false
	}
	var code [8]byte
	if cm.Object.ReadCode(ra-cm.Bias-8, code[:]) != len(code) {
		return false
	}
	return !amd64CallsTo(code, ra, 0, nil) && !functionStart(cm.Object, ra-cm.Bias)
}

// fpProloguePeek bounds how much of a function framePointerSetUp reads
// from its start for the instruction that sets up the frame pointer: a
// compiler puts it in the first few instructions (after endbr64 and the
// push of the old frame pointer); hand-written code that sets it up later
// than that is not shown to.
const fpProloguePeek = 512

// arm64Return reports whether insn ends an epilogue that restored the
// caller's frame pointer: ret, retaa, retab, or the autiasp, autibsp that
// authenticate the return address just before a ret.
func arm64Return(insn uint32) bool {
	switch insn {
	case 0xd65f03c0, 0xd65f0bff, 0xd65f0fff, 0xd50323bf, 0xd50323ff:
		return true
	}
	return false
}

// framePointerSetUp reports whether the frame at lookup (its address to
// look up in m: the PC, or a return address minus one) is shown to have
// set up the frame pointer the walk followed out of it, so that the frame
// record it points at is the frame's own and the step misses no frame:
// the object's symbols give the function's start (FunctionObject), and
// between that start and lookup lies the instruction that points the frame
// pointer at the frame record (x86_64 push %rbp then mov %rsp,%rbp; arm64 mov x29, sp or
// add x29, sp, #n), as gdb's prologue analysis finds it; and an exact PC
// (returnAddress false) is not at a return, past the epilogue that
// restored the caller's frame pointer. A function that never sets one up
// (hand-written code, code built without frame pointers and without CFI)
// leaves its caller's frame pointer in the register: following it lands on
// the caller's caller, a frame missing. Without symbols, nothing shows
// either way.
func (u *Unwinder) framePointerSetUp(m *Mapping, lookup uint64, returnAddress bool) bool {
	fo, ok := m.Object.(FunctionObject)
	if !ok || lookup < m.Bias {
		return false
	}
	addr := lookup - m.Bias
	start, ok := fo.FunctionStart(addr)
	if !ok || start > addr {
		return false
	}
	var code [fpProloguePeek]byte
	n := min(addr-start, fpProloguePeek)
	got := m.Object.ReadCode(start, code[:n])
	switch u.arch {
	case arch.AMD64:
		if !returnAddress {
			// At a ret (ret imm16, rep ret), or just after the
			// epilogue's pop %rbp or leave (a tail call's jmp
			// follows them), the frame is torn down. A byte before
			// the PC that only looks like one makes the step
			// unproven, never wrong.
			var at [3]byte
			k := 0
			if addr > start {
				k = m.Object.ReadCode(addr-1, at[:])
			}
			if k < 2 || at[0] == 0x5d || at[0] == 0xc9 || at[1] == 0xc3 || at[1] == 0xc2 || k == 3 && at[1] == 0xf3 && at[2] == 0xc3 {
				return false
			}
		}
		// push %rbp, then mov %rsp,%rbp (48 89 e5, or 48 8b ec): the
		// frame record. A mov %rsp,%rbp after other pushes or an
		// allocation (musl's raise keeps a pointer to its locals in
		// rbp) points at no frame record.
		c := code[:got]
		return bytes.Contains(c, []byte{0x55, 0x48, 0x89, 0xe5}) || bytes.Contains(c, []byte{0x55, 0x48, 0x8b, 0xec})
	case arch.ARM64:
		if !returnAddress {
			var at [4]byte
			if m.Object.ReadCode(addr, at[:]) != 4 || arm64Return(binary.LittleEndian.Uint32(at[:])) {
				return false
			}
		}
		for i := 0; i+4 <= got; i += 4 {
			// add x29, sp, #imm12 (mov x29, sp is #0).
			if binary.LittleEndian.Uint32(code[i:])&0xffc003ff == 0x910003fd {
				return true
			}
		}
	}
	return false
}

// OutermostObject is implemented by an Object that knows the functions where
// a stack begins: the program's entry point (_start), a thread's start in
// clone. Where an object has no CFI for such a function, the frame-pointer
// or link-register chain that ends there (a zero frame pointer or return
// address) is the complete stack (StopOutermost); anywhere else such an end
// proves nothing (StopNoUnwindInfo).
type OutermostObject interface {
	Object
	// Outermost reports whether the link-time address addr lies in a
	// function that begins a stack, one that has no caller.
	Outermost(addr uint64) bool
}

// baseFrame reports whether f, a frame whose caller's return address lies
// in no code (or past the captured stack), is a return into a function
// that begins a stack
// (OutermostObject): such a function calls only where the stack begins
// (clone's child calls the thread's function, _start calls
// __libc_start_main), so a frame returning into it is the stack's first,
// whatever its CFI finds above it (Go's runtime.clone leaves the word
// above the new thread's stack to chance).
//
// An exact PC (a frame returned into at its entry, as makecontext's
// __start_context is: enteredAt) is looked up as it is.
func baseFrame(c *Cache, space *AddressSpace, f *Frame) bool {
	if f.Mapping < 0 || int(f.Mapping) >= len(space.maps) {
		return false
	}
	m := &space.maps[f.Mapping]
	addr := f.PC - m.Bias
	if f.Flags&FrameReturnAddress != 0 {
		addr--
	}
	return c.outermost(m, addr)
}

// chainEnd ends the walk at a frame without CFI whose fallback found the end
// of a chain (a zero frame pointer or return address) in mapping m: the
// outermost frame when m's object says the function at lookup begins a
// stack, otherwise a stop for want of unwind information, with err (or,
// when m has no object, errNoObject).
func chainEnd(c *Cache, m *Mapping, lookup uint64, st *stepResult, err error) {
	if c.outermost(m, lookup-m.Bias) {
		st.stop, st.err = StopOutermost, nil
		return
	}
	if m.Object == nil {
		err = errNoObject
	}
	st.stop, st.err = StopNoUnwindInfo, err
}

// fileMapping reports whether a mapping of this name maps a file (a library
// the capture lacks, or whose file is another build), not memory a JIT
// writes its code into (anonymous memory, /dev/zero, a memfd, SysV shared
// memory), whose frames keep return addresses into the JIT's own code,
// past which a scan would skip to a runtime's frame: there the walk stops
// where the JIT left no frame pointer, which says what to do about it.
func fileMapping(name string) bool {
	if !strings.HasPrefix(name, "/") {
		return false
	}
	for _, p := range []string{"//", "/dev/", "/memfd:", "/anon_hugepage", "/SYSV"} {
		if strings.HasPrefix(name, p) {
			return false
		}
	}
	return true
}

// scanWords bounds the words scanStep reads above a frame's SP.
const scanWords = 1024

// scanStep is the last resort for a frame in a file's code the capture
// cannot show (m has no Object; fileMapping) whose frame pointer is
// unusable: the caller's return address is taken to be the first word
// above the frame's SP, within scanWords, that points just after a call
// (x86_64: call rel32 or an indirect call; arm64: bl, blr) in code that
// has CFI there, so that the walk can go on from it (MethodScan). The
// caller's SP is just above the word; its other registers are unknown.
// The step proves nothing (st.fpGuess). It leaves st as it is where no
// such word is found before the scan's bound or the end of the captured
// stack.
func (u *Unwinder) scanStep(c *Cache, m *Mapping, cur, next *arch.Regs, st *stepResult) {
	a := u.arch
	sp, ok := cur.Get(a.SP())
	if !ok || sp&7 != 0 {
		return
	}
	for i := uint64(0); i < scanWords; i++ {
		at := sp + 8*i
		w, ms := c.win.read8(at)
		if ms != MemOK {
			return
		}
		ra := a.StripPAC(w, u.opts.PACMask)
		if !u.afterCallWithCFI(c, st.space, m, ra) {
			continue
		}
		next.Reset()
		next.Set(a.PC(), ra)
		next.Set(a.SP(), at+8)
		if a == arch.ARM64 {
			next.Set(arch.ARM64_X30, ra)
		}
		st.stop, st.err = stopNone, nil
		st.cfa = at + 8
		st.method = MethodScan
		st.fpGuess = true
		return
	}
}

// afterCallWithCFI reports whether ra, a word found on the stack, is a
// return address scanStep may take: in an executable mapping with an
// Object, just after a call, with a CFI row at the call.
func (u *Unwinder) afterCallWithCFI(c *Cache, space *AddressSpace, m *Mapping, ra uint64) bool {
	code, cm, ok := codeBefore(space, m, ra)
	if !ok {
		return false
	}
	switch u.arch {
	case arch.AMD64:
		if !amd64CallsTo(code, ra, 0, nil) {
			return false
		}
	case arch.ARM64:
		if !arm64Call(binary.LittleEndian.Uint32(code[4:])) {
			return false
		}
	default:
		return false
	}
	return c.fullRow(cm.Object, ra-1-cm.Bias).err == nil
}
