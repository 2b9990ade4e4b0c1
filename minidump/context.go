package minidump

import (
	"fmt"

	"github.com/ustack/ustack/arch"
)

// Register context layouts.
const (
	// CONTEXT_AMD64: ContextFlags at 0x30, EFlags at 0x44, Rax..R15 from
	// 0x78 in Windows' order, Rip at 0xf8; 1232 bytes in all.
	amd64ContextSize  = 1232
	amd64ContextFlags = 0x00100000
	amd64FlagsOffset  = 0x30
	amd64EFlags       = 0x44
	amd64Rax          = 0x78
	amd64Rip          = 0xf8
	amd64Control      = 0x1
	amd64Integer      = 0x2
	amd64FullFlags    = amd64ContextFlags | 0xb // control, integer, floating point

	// arm64, as Crashpad and today's Breakpad write it (Windows'
	// CONTEXT_ARM64): 32-bit flags, 32-bit cpsr, then x0..x30, sp, pc;
	// then the floating point and debug registers: 912 bytes in all.
	arm64ContextSize  = 912
	arm64ContextFlags = 0x00400000
	arm64FullFlags    = arm64ContextFlags | 0x7
	// Breakpad's older arm64 layout: 64-bit flags, then x0..x30, sp, pc,
	// then a 32-bit cpsr (packed to 4 bytes).
	arm64OldContextFlags = 0x80000000
	arm64OldCPSR         = 8 + 33*8
)

// amd64Order is the DWARF register of each 8-byte slot from Rax on:
// Rax, Rcx, Rdx, Rbx, Rsp, Rbp, Rsi, Rdi, R8..R15.
var amd64Order = [16]int{0, 2, 1, 3, 7, 6, 4, 5, 8, 9, 10, 11, 12, 13, 14, 15}

// context decodes a thread context by its flags; off is its file offset.
func (d *Dump) context(b []byte, off int64) (a arch.Arch, regs arch.Regs, pstate, flags uint64, err error) {
	want := d.Arch
	if len(b) >= 4 {
		f := le.Uint32(b)
		switch {
		case f&0xffffff00 == arm64ContextFlags:
			want = arch.ARM64
		case f&arm64OldContextFlags != 0 && len(b) >= arm64OldCPSR+4:
			return decodeARM64Old(b)
		}
	}
	if want == arch.Unknown && len(b) >= amd64FlagsOffset+4 && le.Uint32(b[amd64FlagsOffset:])&0xffffff00 == amd64ContextFlags {
		want = arch.AMD64
	}
	switch want {
	case arch.AMD64:
		if len(b) < amd64Rip+8 {
			return 0, regs, 0, 0, fmt.Errorf("x86_64 context has %d bytes, want %d", len(b), amd64ContextSize)
		}
		f := le.Uint32(b[amd64FlagsOffset:])
		if f&0xffffff00 != amd64ContextFlags {
			return 0, regs, 0, 0, fmt.Errorf("context flags %#x at offset %#x are not CONTEXT_AMD64's (%#x)", f, off+amd64FlagsOffset, amd64ContextFlags)
		}
		for i, r := range amd64Order {
			regs.Set(r, le.Uint64(b[amd64Rax+8*i:]))
		}
		regs.Set(arch.AMD64_RIP, le.Uint64(b[amd64Rip:]))
		return arch.AMD64, regs, uint64(le.Uint32(b[amd64EFlags:])), uint64(f), nil
	case arch.ARM64:
		if len(b) < 8+33*8 {
			return 0, regs, 0, 0, fmt.Errorf("arm64 context has %d bytes, want %d", len(b), arm64ContextSize)
		}
		f := le.Uint32(b)
		if f&0xffffff00 != arm64ContextFlags {
			return 0, regs, 0, 0, fmt.Errorf("context flags %#x are not arm64's (%#x, or Breakpad's old %#x)", f, arm64ContextFlags, arm64OldContextFlags)
		}
		for r := 0; r <= arch.ARM64_PC; r++ {
			regs.Set(r, le.Uint64(b[8+8*r:]))
		}
		return arch.ARM64, regs, uint64(le.Uint32(b[4:])), uint64(f), nil
	}
	return 0, regs, 0, 0, fmt.Errorf("context of %d bytes (flags %#x) is neither x86_64's nor arm64's", len(b), firstWord(b))
}

func decodeARM64Old(b []byte) (arch.Arch, arch.Regs, uint64, uint64, error) {
	var regs arch.Regs
	for r := 0; r <= arch.ARM64_PC; r++ {
		regs.Set(r, le.Uint64(b[8+8*r:]))
	}
	return arch.ARM64, regs, uint64(le.Uint32(b[arm64OldCPSR:])), le.Uint64(b), nil
}

func firstWord(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return le.Uint32(b)
}

// appendContext appends the context of regs in the layout of a, as Write
// writes it.
func appendContext(out []byte, a arch.Arch, regs *arch.Regs, pstate uint64) []byte {
	switch a {
	case arch.AMD64:
		b := make([]byte, amd64ContextSize)
		le.PutUint32(b[amd64FlagsOffset:], amd64FullFlags)
		le.PutUint32(b[amd64EFlags:], uint32(pstate))
		for i, r := range amd64Order {
			v, _ := regs.Get(r)
			le.PutUint64(b[amd64Rax+8*i:], v)
		}
		v, _ := regs.Get(arch.AMD64_RIP)
		le.PutUint64(b[amd64Rip:], v)
		// MxCsr and the FXSAVE area's MXCSR: their reset value, so that
		// a debugger that restores them sees something sane.
		le.PutUint32(b[0x34:], 0x1f80)
		le.PutUint32(b[0x100+24:], 0x1f80)
		return append(out, b...)
	default:
		b := make([]byte, arm64ContextSize)
		le.PutUint32(b, arm64FullFlags)
		le.PutUint32(b[4:], uint32(pstate))
		for r := 0; r <= arch.ARM64_PC; r++ {
			v, _ := regs.Get(r)
			le.PutUint64(b[8+8*r:], v)
		}
		return append(out, b...)
	}
}
