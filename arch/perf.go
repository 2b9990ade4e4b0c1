package arch

// perf's sample_regs_user bit numbers (arch/x86/include/uapi/asm/perf_regs.h).
const (
	PerfRegX86AX = iota
	PerfRegX86BX
	PerfRegX86CX
	PerfRegX86DX
	PerfRegX86SI
	PerfRegX86DI
	PerfRegX86BP
	PerfRegX86SP
	PerfRegX86IP
	PerfRegX86FLAGS
	PerfRegX86CS
	PerfRegX86SS
	PerfRegX86DS
	PerfRegX86ES
	PerfRegX86FS
	PerfRegX86GS
	PerfRegX86R8
	// R9..R15 follow R8.
)

// perf's sample_regs_user bit numbers for arm64
// (arch/arm64/include/uapi/asm/perf_regs.h): X0..X28 are 0..28.
const (
	PerfRegARM64X29 = 29
	PerfRegARM64LR  = 30
	PerfRegARM64SP  = 31
	PerfRegARM64PC  = 32
)

// PerfMask returns the sample_regs_user mask that captures every register
// perf can deliver for user space and that unwinding may need: on x86_64
// 0xff0fff (AX..SS and R8..R15; DS, ES, FS and GS are not 64-bit user state),
// on arm64 X0..X28, X29, LR, SP and PC.
func (a Arch) PerfMask() uint64 {
	if a == ARM64 {
		return 1<<33 - 1
	}
	return 0xff0fff
}

// PerfToDWARF returns the DWARF register number of perf register bit b, or -1
// when the register has no DWARF column that unwinding uses (flags, segment
// registers).
func (a Arch) PerfToDWARF(b int) int {
	if a == ARM64 {
		if b >= 0 && b <= PerfRegARM64PC {
			return b // perf and DWARF number arm64 registers alike
		}
		return -1
	}
	switch {
	case b == PerfRegX86AX:
		return AMD64_RAX
	case b == PerfRegX86BX:
		return AMD64_RBX
	case b == PerfRegX86CX:
		return AMD64_RCX
	case b == PerfRegX86DX:
		return AMD64_RDX
	case b == PerfRegX86SI:
		return AMD64_RSI
	case b == PerfRegX86DI:
		return AMD64_RDI
	case b == PerfRegX86BP:
		return AMD64_RBP
	case b == PerfRegX86SP:
		return AMD64_RSP
	case b == PerfRegX86IP:
		return AMD64_RIP
	case b >= PerfRegX86R8 && b < PerfRegX86R8+8:
		return AMD64_R8 + (b - PerfRegX86R8)
	}
	return -1
}

// LoadPerf fills out from a perf sample's user registers: mask is the
// attribute's sample_regs_user and vals holds one value per set bit, in bit
// order, as PERF_SAMPLE_REGS_USER delivers them. Registers missing from the
// mask or from vals are left unknown. On x86_64 perf reports registers it did
// not save (callee-saved registers in NMI context) as all ones; pass
// poisonAllOnes to treat such values as unknown.
func (a Arch) LoadPerf(out *Regs, mask uint64, vals []uint64, poisonAllOnes bool) {
	out.Reset()
	i := 0
	for b := 0; b < 64 && mask>>uint(b) != 0; b++ {
		if mask&(1<<uint(b)) == 0 {
			continue
		}
		if i >= len(vals) {
			return
		}
		v := vals[i]
		i++
		n := a.PerfToDWARF(b)
		if n < 0 {
			continue
		}
		if poisonAllOnes && v == ^uint64(0) {
			continue
		}
		out.Set(n, v)
	}
}
