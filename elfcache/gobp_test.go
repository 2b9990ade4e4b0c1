package elfcache

import (
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
	"github.com/ustack/ustack/internal/testfiles"
)

// TestGoVDSOCallRows: Go's runtime.nanotime1 moves SP onto the g0 stack,
// aligned, before it calls clock_gettime in the vDSO, and its CFI's
// SP-based CFA is wrong there. FindRow gives the CFA as %rbp+16 (the
// return address at CFA-8, %rbp at CFA-16) from the end of its MOVQ SP, BP
// to its POPQ BP, at its CALL AX among them, and in the system call path
// after its RET; at its first instruction, before PUSHQ BP, the CFA is
// still %rsp+8. The addresses are go tool objdump's.
func TestGoVDSOCallRows(t *testing.T) {
	testfiles.MustUnpack(t, testfiles.Dir())
	path := filepath.Join(testfiles.Dir(), "objects", "x86_64", "goprog")
	dis := run(t, "go", "tool", "objdump", "-s", `runtime\.nanotime1`, path)
	at := func(re string) uint64 {
		t.Helper()
		m := regexp.MustCompile(`(?m)^\s+\S+\s+0x([0-9a-f]+)\s+[0-9a-f]+\s+` + re).FindStringSubmatch(dis)
		if m == nil {
			t.Fatalf("no %q in go tool objdump's runtime.nanotime1:\n%s", re, dis)
		}
		v, err := strconv.ParseUint(m[1], 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	push, call, pop, syscall := at(`PUSHQ BP`), at(`CALL AX`), at(`POPQ BP`), at(`SYSCALL`)
	o := mustOpen(t, path, Options{})
	bp := cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.AMD64_RBP, Offset: 16}
	for _, c := range []struct {
		addr uint64
		bp   bool
	}{{push, false}, {call, true}, {call + 1, true}, {pop - 1, true}, {syscall, true}} {
		var row cfi.Row
		if err := o.FindRow(c.addr, &row); err != nil {
			t.Fatalf("%#x: %v", c.addr, err)
		}
		if got := row.CFA == bp; got != c.bp {
			t.Errorf("%#x: CFA %+v; want rbp+16: %v", c.addr, row.CFA, c.bp)
		}
		if c.bp && (row.Regs[arch.AMD64_RIP] != cfi.Rule{Kind: cfi.RuleOffset, Offset: -8} || row.Regs[arch.AMD64_RBP] != cfi.Rule{Kind: cfi.RuleOffset, Offset: -16}) {
			t.Errorf("%#x: rip %+v, rbp %+v; want CFA-8, CFA-16", c.addr, row.Regs[arch.AMD64_RIP], row.Regs[arch.AMD64_RBP])
		}
		if !(row.Start <= c.addr && c.addr < row.End) {
			t.Errorf("%#x: row [%#x, %#x)", c.addr, row.Start, row.End)
		}
	}
	if row := (cfi.Row{}); o.FindRow(push, &row) == nil && (row.CFA != cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.AMD64_RSP, Offset: 8}) {
		t.Errorf("at PUSHQ BP: CFA %+v; want rsp+8", row.CFA)
	}
}
