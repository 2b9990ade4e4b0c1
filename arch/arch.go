package arch

import "fmt"

// Arch identifies a machine architecture.
type Arch uint8

// The architectures ustack unwinds.
const (
	Unknown Arch = iota
	AMD64        // x86_64
	ARM64        // aarch64
)

// MaxRegs is the number of DWARF register columns that Regs tracks. It covers
// x86_64 columns 0..16 (16 is the return address column, rip) and arm64
// columns 0..32 (x0..x30, sp, pc).
const MaxRegs = 33

// DWARF register numbers for x86_64 (System V psABI, figure 3.36).
const (
	AMD64_RAX = 0
	AMD64_RDX = 1
	AMD64_RCX = 2
	AMD64_RBX = 3
	AMD64_RSI = 4
	AMD64_RDI = 5
	AMD64_RBP = 6
	AMD64_RSP = 7
	AMD64_R8  = 8
	AMD64_R12 = 12
	AMD64_R15 = 15
	AMD64_RIP = 16 // the return address column
)

// DWARF register numbers for arm64 (DWARF for the Arm 64-bit architecture).
const (
	ARM64_X0  = 0
	ARM64_X29 = 29 // frame pointer
	ARM64_X30 = 30 // link register
	ARM64_SP  = 31
	ARM64_PC  = 32
	// ARM64_RASignState is the pseudo-register that DW_CFA_AARCH64_negate_ra_state
	// toggles; it is not a column of Regs.
	ARM64_RASignState = 34
)

// String returns the conventional name of the architecture.
func (a Arch) String() string {
	switch a {
	case AMD64:
		return "x86_64"
	case ARM64:
		return "aarch64"
	}
	return fmt.Sprintf("arch(%d)", uint8(a))
}

// Parse returns the Arch named by s, accepting the names used by uname, perf's
// HEADER_ARCH, Go and ELF tools.
func Parse(s string) (Arch, error) {
	switch s {
	case "x86_64", "amd64", "x86-64", "x64":
		return AMD64, nil
	case "aarch64", "arm64":
		return ARM64, nil
	}
	return Unknown, fmt.Errorf("arch: unknown architecture %q", s)
}

// PC returns the DWARF column that holds the program counter of a frame.
// On x86_64 this is the return address column, rip.
func (a Arch) PC() int {
	if a == ARM64 {
		return ARM64_PC
	}
	return AMD64_RIP
}

// SP returns the DWARF number of the stack pointer.
func (a Arch) SP() int {
	if a == ARM64 {
		return ARM64_SP
	}
	return AMD64_RSP
}

// FP returns the DWARF number of the frame pointer (rbp, x29).
func (a Arch) FP() int {
	if a == ARM64 {
		return ARM64_X29
	}
	return AMD64_RBP
}

// RA returns the DWARF column that compilers use as the return address column
// in CIEs: rip (16) on x86_64, the link register x30 on arm64.
func (a Arch) RA() int {
	if a == ARM64 {
		return ARM64_X30
	}
	return AMD64_RIP
}

// NumRegs returns how many DWARF columns, starting at 0, are meaningful for a
// frame of this architecture.
func (a Arch) NumRegs() int {
	if a == ARM64 {
		return 33
	}
	return 17
}

// PtrSize returns the size of a pointer in bytes.
func (a Arch) PtrSize() int { return 8 }

// HasLinkRegister reports whether calls leave the return address in a
// register rather than on the stack.
func (a Arch) HasLinkRegister() bool { return a == ARM64 }

// RegName returns the conventional name of DWARF register n, such as "rbp" or "x29".
func (a Arch) RegName(n int) string {
	if a == ARM64 {
		switch {
		case n >= 0 && n <= 30:
			return fmt.Sprintf("x%d", n)
		case n == ARM64_SP:
			return "sp"
		case n == ARM64_PC:
			return "pc"
		case n == ARM64_RASignState:
			return "ra_sign_state"
		case n >= 64 && n <= 95:
			return fmt.Sprintf("v%d", n-64)
		}
		return fmt.Sprintf("r%d", n)
	}
	names := [...]string{"rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
		"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip"}
	if n >= 0 && n < len(names) {
		return names[n]
	}
	return fmt.Sprintf("r%d", n)
}
