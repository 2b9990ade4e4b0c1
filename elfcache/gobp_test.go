package elfcache

import (
	"errors"
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
	at := func(re string) uint64 { v, _ := objdumpAt(t, dis, re); return v }
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

// TestGoVDSOCallRowsARM64: arm64's runtime.nanotime1 moves RSP onto the
// g0 stack, aligned, after its frame record (MOVD.W R30, -N(RSP); MOVD
// R29, -8(RSP); SUB $8, RSP, R29), and its CFI's SP-based CFA is wrong
// past the move. FindRow gives the CFA as x29+8+N (x30 at CFA-N, x29 at
// CFA-N-8), marked OtherStack, from the end of the SUB to the MOVD -8(RSP),
// R29 of its epilogue: at its calls to the vDSO and its SVC; at its first
// instruction the CFA is still SP-based. The addresses and N are go tool
// objdump's, in a program built here for arm64, unstripped and stripped.
func TestGoVDSOCallRowsARM64(t *testing.T) {
	full, stripped := buildGoprogWith(t, "", "arm64")
	// The twins' code is laid out alike (TestGoRowsMatchDebugFrame);
	// objdump reads the unstripped one's symbols.
	dis := run(t, "go", "tool", "objdump", "-s", `runtime\.nanotime1`, full)
	for _, path := range []string{full, stripped} {
		at := func(re string) (uint64, []string) { return objdumpAt(t, dis, re) }
		entry, n := at(`MOVD\.W R30, -(\d+)\(RSP\)`)
		size, err := strconv.ParseInt(n[0], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		call, _ := at(`CALL \(R2\)`)
		svc, _ := at(`SVC \$0`)
		restore, _ := at(`MOVD -8\(RSP\), R29`)
		o := mustOpen(t, path, Options{})
		fp := cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.ARM64_X29, Offset: 8 + size}
		for _, c := range []struct {
			addr uint64
			fp   bool
		}{{entry, false}, {call, true}, {svc, true}, {restore - 4, true}, {restore, false}} {
			var row cfi.Row
			if err := o.FindRow(c.addr, &row); err != nil {
				t.Fatalf("%s %#x: %v", path, c.addr, err)
			}
			if got := row.CFA == fp; got != c.fp || got != row.OtherStack {
				t.Errorf("%s %#x: CFA %+v, other stack %v; want x29+%d: %v", path, c.addr, row.CFA, row.OtherStack, 8+size, c.fp)
			}
			if c.fp && (row.Regs[arch.ARM64_X30] != cfi.Rule{Kind: cfi.RuleOffset, Offset: -size} || row.Regs[arch.ARM64_X29] != cfi.Rule{Kind: cfi.RuleOffset, Offset: -size - 8}) {
				t.Errorf("%s %#x: x30 %+v, x29 %+v; want CFA-%d, CFA-%d", path, c.addr, row.Regs[arch.ARM64_X30], row.Regs[arch.ARM64_X29], size, size+8)
			}
		}
	}
}

// objdumpAt returns the address of the first instruction of go tool
// objdump's listing dis that matches re, and re's submatches.
func objdumpAt(t *testing.T, dis, re string) (uint64, []string) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s+\S+\s+0x([0-9a-f]+)\s+[0-9a-f]+\s+` + re).FindStringSubmatch(dis)
	if m == nil {
		t.Fatalf("no %q in go tool objdump's listing:\n%s", re, dis)
	}
	v, err := strconv.ParseUint(m[1], 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v, m[2:]
}

// TestGoAlignCallRows: runtime.callCgoMmap, callCgoMunmap and
// callCgoSigaction align SP to 16 bytes (ANDQ $-0x10, SP) on the same
// stack before they call into C, and asmcgocall does so on its path for a
// caller already on the g0 stack; their CFI's SP-based CFA is 8 bytes off
// after an alignment that moved SP. FindRow gives the CFA as %rbp+16 (the
// return address at CFA-8, %rbp at CFA-16) after the alignment, at the
// call's return address, not marked OtherStack (the caller is on the same
// stack); at the first instruction the CFA is still %rsp+8. asmcgocall's
// call after its switch to the g0 stack stays a stack switch. The
// addresses are go tool objdump's.
func TestGoAlignCallRows(t *testing.T) {
	testfiles.MustUnpack(t, testfiles.Dir())
	path := filepath.Join(testfiles.Dir(), "objects", "x86_64", "goprog")
	o := mustOpen(t, path, Options{})
	bp := cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.AMD64_RBP, Offset: 16}
	check := func(fn string, push, call uint64, callLen int) {
		t.Helper()
		var row cfi.Row
		for _, a := range []uint64{call, call + uint64(callLen) - 1} {
			if err := o.FindRow(a, &row); err != nil {
				t.Fatalf("%s %#x: %v", fn, a, err)
			}
			if row.CFA != bp || row.OtherStack || (row.Regs[arch.AMD64_RIP] != cfi.Rule{Kind: cfi.RuleOffset, Offset: -8}) || (row.Regs[arch.AMD64_RBP] != cfi.Rule{Kind: cfi.RuleOffset, Offset: -16}) {
				t.Errorf("%s %#x: CFA %+v, rip %+v, rbp %+v, other stack %v; want rbp+16, CFA-8, CFA-16, same stack", fn, a, row.CFA, row.Regs[arch.AMD64_RIP], row.Regs[arch.AMD64_RBP], row.OtherStack)
			}
		}
		if err := o.FindRow(push, &row); err != nil || (row.CFA != cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.AMD64_RSP, Offset: 8}) {
			t.Errorf("%s at PUSHQ BP %#x: CFA %+v (%v); want rsp+8", fn, push, row.CFA, err)
		}
	}
	for _, fn := range []string{"runtime.callCgoMmap", "runtime.callCgoMunmap", "runtime.callCgoSigaction"} {
		dis := run(t, "go", "tool", "objdump", "-s", `^`+regexp.QuoteMeta(fn)+`(\.abi0)?$`, path)
		push, _ := objdumpAt(t, dis, `PUSHQ BP`)
		call, _ := objdumpAt(t, dis, `CALL AX`)
		check(fn, push, call, 2)
	}
	dis := run(t, "go", "tool", "objdump", "-s", `^runtime\.asmcgocall(\.abi0)?$`, path)
	push, _ := objdumpAt(t, dis, `PUSHQ BP`)
	calls := regexp.MustCompile(`(?m)^\s+\S+\s+0x([0-9a-f]+)\s+([0-9a-f]+)\s+CALL runtime\.asmcgocall_landingpad`).FindAllStringSubmatch(dis, -1)
	if len(calls) != 2 {
		t.Fatalf("asmcgocall: %d calls of asmcgocall_landingpad; want 2 (switched, on g0):\n%s", len(calls), dis)
	}
	addr := func(m []string) uint64 { v, _ := strconv.ParseUint(m[1], 16, 64); return v }
	var row cfi.Row
	if err := o.FindRow(addr(calls[0])+4, &row); !errors.Is(err, cfi.ErrStackSwitch) {
		t.Errorf("asmcgocall's call after its switch: %v; want a stack switch", err)
	}
	check("runtime.asmcgocall", push, addr(calls[1]), len(calls[1][2])/2)
}
