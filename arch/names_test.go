package arch

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPerfRegNamesAsPerf: perf's own list of the x86_64 registers it can
// sample (perf record --user-regs=?) round-trips through PerfRegByName and
// PerfRegName, and each lands on the DWARF register of the same name.
func TestPerfRegNamesAsPerf(t *testing.T) {
	perf, err := exec.LookPath("perf")
	if err != nil {
		t.Skip("perf not installed (Debian package linux-perf)")
	}
	out, _ := exec.Command(perf, "record", "--user-regs=?").CombinedOutput()
	line, ok := strings.CutPrefix(strings.SplitN(string(out), "\n", 2)[0], "available registers: ")
	if !ok || !strings.Contains(line, "IP") {
		t.Skipf("perf record --user-regs=? printed no x86 register list (another architecture?): %q", out)
	}
	dwarf := map[string]string{"AX": "rax", "BX": "rbx", "CX": "rcx", "DX": "rdx", "SI": "rsi", "DI": "rdi",
		"BP": "rbp", "SP": "rsp", "IP": "rip", "R8": "r8", "R15": "r15"}
	for _, name := range strings.Fields(line) {
		b, ok := AMD64.PerfRegByName(strings.ToLower(name))
		if !ok || AMD64.PerfRegName(b) != name {
			t.Errorf("perf's %s: bit %d, named back %q", name, b, AMD64.PerfRegName(b))
			continue
		}
		if want, ok := dwarf[name]; ok {
			n := AMD64.PerfToDWARF(b)
			if AMD64.RegName(n) != want {
				t.Errorf("perf's %s is DWARF %d %q, want %s", name, n, AMD64.RegName(n), want)
			}
			if m, ok := AMD64.RegByName(want); !ok || m != n {
				t.Errorf("RegByName(%s) = %d, %v, want %d", want, m, ok, n)
			}
		}
	}
}

// TestRegNames: names by the psABIs (x86_64 figure 3.36; AAPCS64's DWARF
// numbering: x0-x30 are 0-30, sp 31, pc 32, v0-v31 64-95) and perf's
// arm64 names (arch/arm64/include/uapi/asm/perf_regs.h).
func TestRegNames(t *testing.T) {
	for _, c := range []struct {
		a    Arch
		name string
		n    int
	}{{AMD64, "rbp", 6}, {AMD64, "RSP", 7}, {AMD64, "rip", 16}, {AMD64, "r12", 12}, {AMD64, "rdx", 1},
		{ARM64, "x0", 0}, {ARM64, "x29", 29}, {ARM64, "fp", 29}, {ARM64, "lr", 30}, {ARM64, "sp", 31}, {ARM64, "pc", 32}, {ARM64, "v1", 65}} {
		if n, ok := c.a.RegByName(c.name); !ok || n != c.n {
			t.Errorf("%v RegByName(%q) = %d, %v; want %d", c.a, c.name, n, ok, c.n)
		}
	}
	for _, bad := range []string{"x31", "x01", "r16", "", "eax"} {
		if n, ok := AMD64.RegByName(bad); ok && bad != "" {
			t.Errorf("AMD64 RegByName(%q) = %d", bad, n)
		}
		if n, ok := ARM64.RegByName(bad); ok {
			t.Errorf("ARM64 RegByName(%q) = %d", bad, n)
		}
	}
	for b, want := range map[int]string{0: "x0", 28: "x28", 29: "x29", 30: "lr", 31: "sp", 32: "pc", 33: ""} {
		if got := ARM64.PerfRegName(b); got != want {
			t.Errorf("ARM64 PerfRegName(%d) = %q, want %q", b, got, want)
		}
		if want != "" {
			if got, ok := ARM64.PerfRegByName(strings.ToUpper(want)); !ok || got != b {
				t.Errorf("ARM64 PerfRegByName(%q) = %d", want, got)
			}
		}
	}
}
