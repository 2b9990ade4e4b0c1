package elfcache

import (
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
	"github.com/ustack/ustack/internal/testfiles"
)

// objdumpInsns returns the instructions objdump -d lists for a section:
// address and mnemonic with operands.
func objdumpInsns(t *testing.T, objdump, path, section string) (addrs []uint64, insns []string) {
	out := run(t, objdump, "-d", "-j", section, path)
	for _, line := range strings.Split(out, "\n") {
		f := strings.SplitN(line, "\t", 3)
		if len(f) < 3 || !strings.HasSuffix(f[0], ":") {
			continue
		}
		addrs = append(addrs, hexU(t, strings.TrimSpace(strings.TrimSuffix(f[0], ":"))))
		insns = append(insns, strings.TrimSpace(f[2]))
	}
	if len(addrs) == 0 {
		t.Fatalf("objdump listed no instructions in %s", section)
	}
	return addrs, insns
}

// TestPLTRowsAMD64 checks the synthesized PLT rows of x86_64 libc at every
// instruction of .plt and .plt.got against a simulation of the disassembly:
// each 16-byte stub starts with CFA=rsp+8 and every push adds 8.
func TestPLTRowsAMD64(t *testing.T) {
	needFile(t, libcAMD64)
	o := mustOpen(t, libcAMD64, Options{NoDebugFile: true})
	plts := o.PLTs()
	for _, sec := range []string{".plt", ".plt.got", ".plt.sec"} {
		r, ok := plts[sec]
		if !ok {
			continue
		}
		addrs, insns := objdumpInsns(t, "objdump", libcAMD64, sec)
		cfa := int64(8)
		for i, a := range addrs {
			if (a-r.Start)%16 == 0 {
				cfa = 8
			}
			var row cfi.Row
			if !o.pltRow(a, &row) {
				t.Fatalf("%s %#x: no row", sec, a)
			}
			if row.CFA.Kind != cfi.RuleCFAOffset || row.CFA.Reg != arch.AMD64_RSP || row.CFA.Offset != cfa {
				t.Errorf("%s %#x (%s): CFA %+v, want rsp+%d", sec, a, insns[i], row.CFA, cfa)
			}
			if ra := row.Regs[arch.AMD64_RIP]; ra.Kind != cfi.RuleOffset || ra.Offset != -8 || row.RA != arch.AMD64_RIP {
				t.Errorf("%s %#x: RA rule %+v", sec, a, ra)
			}
			if a < row.Start || a >= row.End || row.Start < r.Start || row.End > r.End {
				t.Errorf("%s %#x: row range [%#x, %#x) in section [%#x, %#x)", sec, a, row.Start, row.End, r.Start, r.End)
			}
			if strings.HasPrefix(insns[i], "push") {
				cfa += 8
			}
		}
	}
	var row cfi.Row
	if o.pltRow(o.text.Addr, &row) {
		t.Error("pltRow accepted a .text address")
	}
}

// TestPLTRowsARM64 checks arm64 libc's PLT rows: PLT0 pushes x16 and x30
// with its first instruction (stp x16, x30, [sp, #-16]!, as objdump shows),
// and the other stubs leave sp and x30 alone.
func TestPLTRowsARM64(t *testing.T) {
	needFile(t, libcARM64)
	needTool(t, "aarch64-linux-gnu-objdump")
	o := mustOpen(t, libcARM64, Options{NoDebugFile: true})
	r := o.PLTs()[".plt"]
	addrs, insns := objdumpInsns(t, "aarch64-linux-gnu-objdump", libcARM64, ".plt")
	if addrs[0] != r.Start || !strings.HasPrefix(insns[0], "stp\tx16, x30, [sp, #-16]!") {
		t.Fatalf("unexpected PLT0: %#x %q", addrs[0], insns[0])
	}
	pushed := false
	for i, a := range addrs {
		if a >= r.Start+32 {
			pushed = false
		}
		var row cfi.Row
		if !o.pltRow(a, &row) {
			t.Fatalf("%#x: no row", a)
		}
		wantOff := int64(0)
		if pushed {
			wantOff = 16
		}
		if row.CFA.Kind != cfi.RuleCFAOffset || row.CFA.Reg != arch.ARM64_SP || row.CFA.Offset != wantOff {
			t.Errorf("%#x (%s): CFA %+v, want sp+%d", a, insns[i], row.CFA, wantOff)
		}
		lr := row.Regs[arch.ARM64_X30]
		if pushed && (lr.Kind != cfi.RuleOffset || lr.Offset != -8 || row.Regs[16].Offset != -16) {
			t.Errorf("%#x: x30 rule %+v after the push", a, lr)
		}
		if !pushed && (lr.Kind != cfi.RuleRegister || lr.Reg != arch.ARM64_X30) {
			t.Errorf("%#x: x30 rule %+v", a, lr)
		}
		if row.RA != arch.ARM64_X30 || a < row.Start || a >= row.End {
			t.Errorf("%#x: RA %d range [%#x, %#x)", a, row.RA, row.Start, row.End)
		}
		if strings.HasPrefix(insns[i], "stp\tx16, x30, [sp, #-16]!") {
			pushed = true
		}
	}
}

// TestFindRowPLT checks FindRow in PLTs with the real CFI: x86_64 ld emits
// .eh_frame for .plt (with DW_CFA_def_cfa_expression), which takes
// precedence over the synthesized row; arm64 has none and gets the
// synthesized one.
func TestFindRowPLT(t *testing.T) {
	requireCFI(t)
	for _, so := range []struct {
		path string
		a    arch.Arch
	}{{libcAMD64, arch.AMD64}, {libcARM64, arch.ARM64}} {
		t.Run(so.a.String(), func(t *testing.T) {
			needFile(t, so.path)
			o := mustOpen(t, so.path, Options{NoDebugFile: true})
			r := o.PLTs()[".plt"]
			var row cfi.Row
			if err := o.FindRow(r.Start+0x18, &row); err != nil {
				t.Fatal(err)
			}
			var synth cfi.Row
			o.pltRow(r.Start+0x18, &synth)
			if so.a == arch.AMD64 && row.CFA.Kind != cfi.RuleCFAExpression {
				t.Errorf("CFA %+v, want the .eh_frame expression", row.CFA)
			}
			if so.a == arch.ARM64 && row.CFA != synth.CFA {
				t.Errorf("CFA %+v, want the synthesized %+v", row.CFA, synth.CFA)
			}
		})
	}
}

// TestFindRowEntries checks FindRow at the entry of a sample of each system
// library's functions: the CFA is the stack pointer as the call left it
// (rsp+8 with the return address at CFA-8 on x86_64, sp+0 on arm64).
func TestFindRowEntries(t *testing.T) {
	requireCFI(t)
	for _, so := range systemObjects {
		t.Run(strings.ReplaceAll(so.path, "/", "_"), func(t *testing.T) {
			needFile(t, so.path)
			o := mustOpen(t, so.path, Options{NoDebugFile: true})
			syms := o.Symbols()
			found, none := 0, 0
			for i := 0; i < len(syms); i += len(syms)/300 + 1 {
				s := syms[i]
				if strings.HasSuffix(s.Name, "@plt") {
					continue // PLT stubs have their own CFA expressions; see TestPLTRows
				}
				var row cfi.Row
				err := o.FindRow(s.Addr, &row)
				if err == cfi.ErrNoFDE {
					none++
					continue
				}
				if err != nil {
					t.Errorf("%s: %v", s.Name, err)
					continue
				}
				found++
				want := cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.AMD64_RSP, Offset: 8}
				if so.arch == arch.ARM64 {
					want = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.ARM64_SP}
				}
				if row.CFA != want || s.Addr < row.Start || s.Addr >= row.End {
					t.Errorf("%s at %#x: CFA %+v range [%#x, %#x)", s.Name, s.Addr, row.CFA, row.Start, row.End)
				}
			}
			if found == 0 || none > found/10 {
				t.Errorf("%d functions with rows, %d without", found, none)
			}
			t.Logf("%d functions with rows, %d without", found, none)
		})
	}
}

// TestPLTSymbols checks the synthetic name@plt symbols against objdump,
// which names PLT stubs from the same relocations.
func TestPLTSymbols(t *testing.T) {
	testfiles.MustUnpack(t, testfiles.Dir()) // a64_chain_O2_nofp is packed
	for _, path := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/aarch64-linux-gnu/lib/libc.so.6",
		"../testdata/objects/x86_64/plt_now", "../testdata/objects/x86_64/plt_lazy", "../testdata/objects/aarch64/a64_chain_O2_nofp"} {
		t.Run(strings.ReplaceAll(path, "/", "_"), func(t *testing.T) {
			needFile(t, path)
			objdump := "objdump"
			if strings.Contains(path, "aarch64") {
				objdump = "aarch64-linux-gnu-objdump"
			}
			out, err := exec.Command(objdump, "-d", "-j", ".plt", "-j", ".plt.sec", "-j", ".plt.got", path).Output()
			if err != nil {
				t.Skipf("%s: %v", objdump, err)
			}
			// Lines like "0000000000001030 <close@plt>:".
			re := regexp.MustCompile(`(?m)^([0-9a-f]+) <([^>+]+@plt)>:`)
			o := mustOpen(t, path, Options{NoDebugFile: true})
			n := 0
			for _, m := range re.FindAllStringSubmatch(string(out), -1) {
				addr, _ := strconv.ParseUint(m[1], 16, 64)
				want := m[2]
				if i := strings.Index(want, "@"); i >= 0 && strings.Count(want, "@") > 1 {
					want = want[:i] + "@plt" // objdump may print close@GLIBC_2.2.5@plt
				}
				name, off, ok := o.Symbolize(addr)
				if !ok || off != 0 || name != want {
					t.Errorf("%#x: got %q+%#x ok=%v; objdump %q", addr, name, off, ok, m[2])
				}
				n++
			}
			if n == 0 {
				t.Fatalf("objdump named no PLT stubs")
			}
			t.Logf("%d PLT stubs named as objdump names them", n)
		})
	}
}
