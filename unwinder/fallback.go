package unwinder

import (
	"bytes"

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

// isSigreturn reports whether the code at link-time address addr of obj is a
// sigreturn trampoline.
func (u *Unwinder) isSigreturn(obj Object, addr uint64) bool {
	var buf [9]byte
	want := sigreturnAMD64
	if u.arch == arch.ARM64 {
		want = sigreturnARM64
	}
	n := obj.ReadCode(addr, buf[:len(want)])
	return n == len(want) && bytes.Equal(buf[:n], want)
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

// framePointer recovers the caller by following the frame pointer: the
// frame record at FP holds the caller's FP and the return address (x86_64:
// push %rbp after the call; arm64: stp x29, x30). lookup is the frame's
// address to look up in m (PC-1 for a return address).
func (u *Unwinder) framePointer(c *Cache, m *Mapping, lookup uint64, cur, next *arch.Regs, st *stepResult) {
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
		chainEnd(m, lookup, st, errZeroFramePointer)
		return
	}
	if !ok || fp < sp || fp&7 != 0 {
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

// chainEnd ends the walk at a frame without CFI whose fallback found the end
// of a chain (a zero frame pointer or return address) in mapping m: the
// outermost frame when m's object says the function at lookup begins a
// stack, otherwise a stop for want of unwind information, with err (or,
// when m has no object, errNoObject).
func chainEnd(m *Mapping, lookup uint64, st *stepResult, err error) {
	if o, ok := m.Object.(OutermostObject); ok && o.Outermost(lookup-m.Bias) {
		st.stop, st.err = StopOutermost, nil
		return
	}
	if m.Object == nil {
		err = errNoObject
	}
	st.stop, st.err = StopNoUnwindInfo, err
}
