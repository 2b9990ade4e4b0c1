package arch

import (
	"strconv"
	"strings"
)

// Register names, both ways, for both numberings: DWARF's (the columns of
// Regs; RegName and RegByName, in the names gdb and the psABIs use) and
// perf's sample_regs_user bits (PerfRegName and PerfRegByName, in the names
// perf record --user-regs and perf script use).

// perfNamesAMD64 are perf's names of x86_64 sample_regs_user bits
// (tools/perf/arch/x86/util/perf_regs.c).
var perfNamesAMD64 = [...]string{"AX", "BX", "CX", "DX", "SI", "DI", "BP", "SP", "IP", "FLAGS",
	"CS", "SS", "DS", "ES", "FS", "GS", "R8", "R9", "R10", "R11", "R12", "R13", "R14", "R15"}

// RegByName returns the DWARF register number of a register named as
// RegName names it ("rbp", "rip", "x29", "sp", "pc"), case-insensitively;
// on arm64 "fp" and "lr" are x29 and x30 too.
func (a Arch) RegByName(name string) (int, bool) {
	name = strings.ToLower(name)
	if a == ARM64 {
		switch name {
		case "fp":
			return ARM64_X29, true
		case "lr":
			return ARM64_X30, true
		case "sp":
			return ARM64_SP, true
		case "pc":
			return ARM64_PC, true
		}
		if n, ok := numbered(name, "x", 30); ok {
			return n, true
		}
		if n, ok := numbered(name, "v", 31); ok {
			return 64 + n, true
		}
		return 0, false
	}
	if a != AMD64 {
		return 0, false
	}
	for n := 0; n <= AMD64_RIP; n++ {
		if a.RegName(n) == name {
			return n, true
		}
	}
	return 0, false
}

// numbered parses prefix followed by a decimal number in [0, max].
func numbered(s, prefix string, max int) (int, bool) {
	d, ok := strings.CutPrefix(s, prefix)
	if !ok || d == "" || (len(d) > 1 && d[0] == '0') {
		return 0, false
	}
	n, err := strconv.Atoi(d)
	if err != nil || n < 0 || n > max {
		return 0, false
	}
	return n, true
}

// PerfRegName returns perf's name of sample_regs_user bit b ("BP", "IP",
// "R12" on x86_64; "x0".."x29", "lr", "sp", "pc" on arm64), or "" for a
// bit perf does not define.
func (a Arch) PerfRegName(b int) string {
	switch a {
	case AMD64:
		if b >= 0 && b < len(perfNamesAMD64) {
			return perfNamesAMD64[b]
		}
	case ARM64:
		switch {
		case b >= 0 && b <= PerfRegARM64X29:
			return "x" + strconv.Itoa(b)
		case b == PerfRegARM64LR:
			return "lr"
		case b == PerfRegARM64SP:
			return "sp"
		case b == PerfRegARM64PC:
			return "pc"
		}
	}
	return ""
}

// PerfRegByName returns the sample_regs_user bit of a register named as
// perf names it, case-insensitively (perf record --user-regs=BP,SP,IP).
func (a Arch) PerfRegByName(name string) (int, bool) {
	for b := 0; b < 64; b++ {
		n := a.PerfRegName(b)
		if n == "" {
			break
		}
		if strings.EqualFold(n, name) {
			return b, true
		}
	}
	return 0, false
}
