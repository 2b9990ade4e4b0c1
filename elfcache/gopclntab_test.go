package elfcache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
)

const (
	goprogAMD64         = "../testdata/objects/x86_64/goprog"
	goprogStrippedAMD64 = "../testdata/objects/x86_64/goprog_stripped"
)

// buildGoprog builds testdata/gen/src/goprog for goarch (with the extra
// go build flags; an -ldflags=X among them is merged) twice, with and
// without -ldflags='-s -w', and returns both paths. External linking
// (-linkmode=external) builds with cgo.
func buildGoprog(t testing.TB, goarch string, extra ...string) (full, stripped string) {
	t.Helper()
	return buildGoprogWith(t, "", goarch, extra...)
}

// buildGoprogWith is buildGoprog with the Go toolchain of version
// toolchain (such as go1.21.13; "" for the local one), taken from the
// module cache: the test is skipped when it is not there (GOTOOLCHAIN=V go
// version fetches it through the module proxy).
func buildGoprogWith(t testing.TB, toolchain, goarch string, extra ...string) (full, stripped string) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not in PATH: cannot build the Go test program")
	}
	dir := t.TempDir()
	src, env := "../testdata/gen/src/goprog", []string{"GOTOOLCHAIN=local"}
	if toolchain != "" {
		// The source, with a go.mod the older toolchain accepts.
		src = filepath.Join(dir, "src")
		require.NoError(t, os.MkdirAll(src, 0o755))
		main, err := os.ReadFile("../testdata/gen/src/goprog/main.go")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(src, "main.go"), main, 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(src, "go.mod"), []byte("module ustackfixture/goprog\n\ngo 1.16\n"), 0o644))
		env = []string{"GOTOOLCHAIN=" + toolchain, "GOPROXY=off"}
		cmd := exec.Command(goTool, "version")
		cmd.Dir, cmd.Env = src, append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), toolchain+" ") {
			t.Skipf("Go toolchain %s not in the module cache (GOTOOLCHAIN=%s go version fetches it): %v %s", toolchain, toolchain, err, out)
		}
	}
	full, stripped = filepath.Join(dir, "goprog"), filepath.Join(dir, "goprog_stripped")
	for _, b := range []struct {
		out   string
		flags []string
	}{{full, nil}, {stripped, []string{"-s", "-w"}}} {
		ld := b.flags
		cgo := "0"
		args := []string{"build", "-trimpath", "-o", b.out}
		for _, e := range extra {
			if v, ok := strings.CutPrefix(e, "-ldflags="); ok {
				ld = append(ld, v)
				if strings.Contains(v, "-linkmode=external") {
					cgo = "1"
				}
				continue
			}
			args = append(args, e)
		}
		if len(ld) > 0 {
			args = append(args, "-ldflags="+strings.Join(ld, " "))
		}
		cmd := exec.Command(goTool, append(args, ".")...)
		cmd.Dir = src
		cmd.Env = append(append(os.Environ(), "GOOS=linux", "GOARCH="+goarch, "CGO_ENABLED="+cgo, "GOFLAGS="), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	return full, stripped
}

// goTwin is the Go test program built with and without -ldflags='-s -w':
// committed, or built for the test.
type goTwin struct {
	name           string
	full, stripped string // committed twins; "" to build them
	goarch         string
	buildFlags     []string
	toolchain      string // the Go version to build with; "" for the local one
}

var goTwins = []goTwin{
	{name: "amd64_committed", full: goprogAMD64, stripped: goprogStrippedAMD64, goarch: "amd64"},
	{name: "arm64_built", goarch: "arm64"},
	{name: "amd64_pie_built", goarch: "amd64", buildFlags: []string{"-buildmode=pie"}},
	// runtime.text is not the start of .text: the C start files come
	// first, so the base must come from the moduledata.
	{name: "amd64_external_link_built", goarch: "amd64", buildFlags: []string{"-ldflags=-linkmode=external"}},
	// The oldest toolchain the module proxy has (the 1.20 table layout):
	// its moduledata is in .noptrdata, not in .go.module.
	{name: "amd64_go1.21_built", goarch: "amd64", toolchain: goOldToolchain},
	{name: "arm64_go1.21_built", goarch: "arm64", toolchain: goOldToolchain},
}

// goOldToolchain is the older Go release the twins are also built with,
// when the module cache has it.
const goOldToolchain = "go1.21.13"

// open builds the twins if they are not committed and opens both.
func (c goTwin) open(t *testing.T) (full, stripped *Object) {
	t.Helper()
	if c.full == "" {
		c.full, c.stripped = buildGoprogWith(t, c.toolchain, c.goarch, c.buildFlags...)
	}
	return mustOpen(t, c.full, Options{NoDebugFile: true}), mustOpen(t, c.stripped, Options{NoDebugFile: true})
}

func (c goTwin) instructionSize() uint64 {
	if c.goarch == "arm64" {
		return 4
	}
	return 1
}

// TestGoRowsMatchDebugFrame checks the rows synthesized from a stripped
// binary's pcsp tables against the .debug_frame that Go's linker wrote
// into its unstripped twin, at every instruction of every function: same
// function start, CFA and return-address rule.
func TestGoRowsMatchDebugFrame(t *testing.T) {
	for _, c := range goTwins {
		t.Run(c.name, func(t *testing.T) {
			full, stripped := c.open(t)
			require.Nil(t, stripped.section(".debug_frame"), "stripped twin has .debug_frame")
			require.Nil(t, stripped.section(".symtab"), "stripped twin has .symtab")
			require.NoError(t, full.CFIError())
			require.True(t, stripped.HasGoPCLN(), "no pclntab: %v", stripped.GoPCLNError())
			tab := stripped.goTable()
			entryCFA := int64(8) // the CFA offset at entry: the pushed return address
			if c.goarch == "arm64" {
				entryCFA = 0
			}
			var f goFunc
			var want, got cfi.Row
			checked, funcs, signalPCs, switchPCs := 0, 0, 0, 0
			for i := 0; i < tab.nfunc; i++ {
				require.True(t, tab.function(i, &f))
				if f.entry == f.end {
					continue
				}
				if full.lookup(f.entry, &want) != nil {
					continue // Go writes no FDE for a few runtime stubs
				}
				funcs++
				for pc := f.entry; pc < f.end; pc += c.instructionSize() {
					if full.lookup(pc, &want) != nil {
						continue
					}
					if want.CFA.Offset < entryCFA {
						// A negative SP delta (runtime.debugCallV2's
						// tail, which moves SP past its frame): no row,
						// the unwinder's fallbacks decide.
						require.ErrorIs(t, stripped.FindRow(pc, &got), cfi.ErrNoFDE, "pc %#x", pc)
						continue
					}
					flag := f.flag
					if sw := switchAt(stripped, pc); sw != nil && sw.bpFrame {
						// Where a vDSO call moves SP, the CFA is the
						// frame pointer's, not .debug_frame's:
						// TestGoVDSOCallRows and TestGoVDSOCallRowsARM64.
						require.NoError(t, stripped.FindRow(pc, &got), "pc %#x", pc)
						fp := uint16(arch.AMD64_RBP)
						if c.goarch == "arm64" {
							fp = arch.ARM64_X29
						}
						if sw.cfaReg != 0 {
							fp = sw.cfaReg // racecall's %r12
						}
						require.Equal(t, fp, got.CFA.Reg, "pc %#x", pc)
						require.Equal(t, !sw.sameStack, got.OtherStack, "pc %#x", pc)
						continue
					} else if sw != nil {
						// Past a stack switch: TestGoStackSwitches.
						switchPCs++
						if !sw.outermost {
							require.ErrorIs(t, stripped.FindRow(pc, &got), cfi.ErrStackSwitch, "pc %#x", pc)
							continue
						}
						flag |= goFlagTopFrame
					}
					require.NoError(t, stripped.FindRow(pc, &got), "pc %#x", pc)
					checked++
					if goSignalEntry(tab.funcName(&f)) {
						// Unwound through to the sa_restorer, as amd64's
						// .debug_frame does; arm64's says undefined there,
						// so the rule must be the one of any other frame.
						flag &^= goFlagTopFrame
						signalPCs++
						if c.goarch == "arm64" {
							want.Regs[want.RA] = cfi.Rule{Kind: cfi.RuleOffset, Offset: -want.CFA.Offset}
							if want.CFA.Offset == 0 {
								want.Regs[want.RA] = cfi.Rule{Kind: cfi.RuleSameValue}
							}
						}
					}
					if !assert.Equal(t, want.FDEStart, got.FDEStart, "pc %#x function start", pc) ||
						!assert.Equal(t, want.CFA, got.CFA, "pc %#x CFA", pc) ||
						!assert.Equal(t, want.RA, got.RA, "pc %#x RA column", pc) ||
						!assert.Equal(t, raRule(want, flag), raRule(got, 0), "pc %#x RA rule", pc) {
						t.FailNow()
					}
					assert.True(t, got.Start <= pc && pc < got.End, "pc %#x outside row [%#x,%#x)", pc, got.Start, got.End)
				}
			}
			t.Logf("%d functions, %d PCs agree with .debug_frame (%d in signal entries)", funcs, checked, signalPCs)
			require.Greater(t, funcs, 1000)
			require.Greater(t, signalPCs, 0, "no PC of runtime.sigtramp was compared")
			require.Greater(t, switchPCs, 0, "no PC past a stack switch was compared")
		})
	}
}

// switchAt returns o's stack switch holding addr, or nil.
func switchAt(o *Object, addr uint64) *goSwitch {
	for i := range o.goSwitches {
		if o.goSwitches[i].Contains(addr) {
			return &o.goSwitches[i]
		}
	}
	return nil
}

// TestGoStackSwitches: past the switch to the g0 stack of Go's
// runtime.mcall, runtime.systemstack and runtime.morestack, the return
// address of the call that follows ends the stack (mcall: its return
// address undefined, the outermost frame) or the rows answer
// cfi.ErrStackSwitch (the caller is on the goroutine's stack), in the
// unstripped and the stripped twin, for every toolchain and architecture of
// goTwins; every instruction up to the switch keeps its row. Where the
// switch and the call are comes from Go's own disassembler (go tool
// objdump's text), not from the rows: the first move into SP (amd64 MOVQ
// 0x38(R14), SP; arm64 MOVD R0, RSP) and the first call after it.
func TestGoStackSwitches(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not in PATH: no go tool objdump")
	}
	for _, c := range goTwins {
		t.Run(c.name, func(t *testing.T) {
			full, stripped := c.open(t)
			for _, fn := range goSwitchFuncs {
				// Assembly functions are name.abi0 in the symbol table
				// objdump reads (Go 1.17 on), except ABIInternal ones
				// (mcall since Go 1.21).
				out, err := exec.Command(goTool, "tool", "objdump", "-s", "^"+strings.ReplaceAll(fn.name, ".", `\.`)+`(\.abi0)?$`, full.Path()).CombinedOutput()
				require.NoError(t, err, "go tool objdump: %s", out)
				type insn struct {
					addr uint64
					text string
				}
				var code []insn
				for _, line := range strings.Split(string(out), "\n") {
					f := strings.Split(strings.TrimSpace(line), "\t")
					f = slices.DeleteFunc(f, func(s string) bool { return s == "" })
					if len(f) < 4 || !strings.HasPrefix(f[1], "0x") {
						continue
					}
					a, err := strconv.ParseUint(f[1][2:], 16, 64)
					require.NoError(t, err, "%q", line)
					code = append(code, insn{a, strings.TrimSpace(f[3])})
				}
				spName := ", SP"
				if c.goarch == "arm64" {
					spName = ", RSP"
				}
				sw := slices.IndexFunc(code, func(i insn) bool {
					return strings.HasPrefix(i.text, "MOV") && strings.HasSuffix(i.text, spName)
				})
				if fn.end == endOfCode {
					// gogo: every instruction after the move is on the
					// goroutine's stack; runtime.gogo (since Go 1.17
					// a jump to gogo) moves nothing into SP.
					require.NotEmpty(t, code, "go tool objdump shows no %s:\n%s", fn.name, out)
					for _, o := range []*Object{full, stripped} {
						for k, i := range code {
							var r cfi.Row
							err := o.FindRow(i.addr, &r)
							if sw >= 0 && k > sw {
								assert.ErrorIs(t, err, cfi.ErrStackSwitch, "%s: %#x (%q) after %s's switch", o.Path(), i.addr, i.text, fn.name)
								continue
							}
							if assert.NoError(t, err, "%s: row at %#x (%q) of %s", o.Path(), i.addr, i.text, fn.name) && sw >= 0 {
								assert.True(t, r.End <= code[sw+1].addr, "%s: the row at %#x reaches past the switch, to %#x", o.Path(), i.addr, r.End)
							}
						}
					}
					if fn.name == "gogo" {
						require.Positive(t, sw, "no move into SP in %s:\n%s", fn.name, out)
					}
					continue
				}
				require.Positive(t, sw, "no move into SP in %s:\n%s", fn.name, out)
				call := sw + slices.IndexFunc(code[sw:], func(i insn) bool { return strings.HasPrefix(i.text, "CALL ") })
				require.Greater(t, call, sw, "no call after the switch in %s:\n%s", fn.name, out)
				require.Less(t, call+1, len(code), "nothing after the call in %s:\n%s", fn.name, out)
				ret := code[call+1].addr
				for _, o := range []*Object{full, stripped} {
					var r cfi.Row
					err := o.FindRow(ret-1, &r)
					if fn.outermost {
						require.NoError(t, err, "%s: row of %s's return address %#x", o.Path(), fn.name, ret)
						assert.Equal(t, cfi.RuleUndefined, r.Regs[r.RA].Kind, "%s: %s's return address %#x (after %q) ends the stack", o.Path(), fn.name, ret, code[call].text)
					} else {
						assert.ErrorIs(t, err, cfi.ErrStackSwitch, "%s: %s's return address %#x (after %q)", o.Path(), fn.name, ret, code[call].text)
					}
					if fn.end == endSwitchBack {
						// After the call the thread is on the g0 stack
						// up to the load of SP that switches back;
						// from there the CFI holds again.
						back := slices.IndexFunc(code[call+1:], func(i insn) bool {
							return strings.HasPrefix(i.text, "MOV") && strings.HasSuffix(i.text, spName)
						})
						require.GreaterOrEqual(t, back, 0, "no switch back after the call in %s:\n%s", fn.name, out)
						back += call + 1
						require.Less(t, back+1, len(code), "nothing after the switch back in %s:\n%s", fn.name, out)
						for _, i := range code[call+1 : back+1] {
							assert.ErrorIs(t, o.FindRow(i.addr, &r), cfi.ErrStackSwitch, "%s: %#x (%q) after %s's call, before it switches back", o.Path(), i.addr, i.text, fn.name)
						}
						after := code[back+1]
						if assert.NoError(t, o.FindRow(after.addr, &r), "%s: row at %#x (%q) after %s switched back", o.Path(), after.addr, after.text, fn.name) {
							assert.NotEqual(t, cfi.RuleUndefined, r.Regs[r.RA].Kind, "%s: %#x (%q) after the switch back keeps its caller", o.Path(), after.addr, after.text)
						}
					}
					for _, i := range code[:sw+1] {
						require.NoError(t, o.FindRow(i.addr, &r), "%s: row at %#x (%q) of %s", o.Path(), i.addr, i.text, fn.name)
						assert.NotEqual(t, cfi.RuleUndefined, r.Regs[r.RA].Kind, "%s: %#x (%q) before the switch keeps its caller", o.Path(), i.addr, i.text)
						assert.True(t, r.End <= code[sw+1].addr, "%s: the row at %#x reaches past the switch, to %#x", o.Path(), i.addr, r.End)
					}
				}
			}
		})
	}
}

// raRule normalizes the return address rule: Go's .debug_frame says
// same_value for x30 where the row leaves it unspecified, and knows no
// top frames (flag says the function is one: the row makes the RA
// undefined).
func raRule(r cfi.Row, flag uint8) cfi.Rule {
	ra := r.Regs[r.RA]
	if flag&goFlagTopFrame != 0 {
		return cfi.Rule{Kind: cfi.RuleUndefined}
	}
	if ra.Kind == cfi.RuleUnspecified {
		ra.Kind = cfi.RuleSameValue
	}
	return ra
}

// TestGoSymbolsMatchSymtab checks that the stripped binary names every
// function as the unstripped twin's .symtab does, at its entry and at its
// last byte.
func TestGoSymbolsMatchSymtab(t *testing.T) {
	full := mustOpen(t, goprogAMD64, Options{NoDebugFile: true})
	stripped := mustOpen(t, goprogStrippedAMD64, Options{NoDebugFile: true})
	require.NoError(t, stripped.SymbolsError())
	syms := full.Symbols()
	require.Greater(t, len(syms), 1000)
	n := 0
	for _, s := range syms {
		if s.Size == 0 {
			continue
		}
		for _, pc := range []uint64{s.Addr, s.Addr + s.Size - 1} {
			name, off, ok := stripped.Symbolize(pc)
			if s.Name == "runtime.text" || s.Name == "runtime.etext" || s.Name == "go:buildid" {
				continue // linker markers, not functions of the pclntab
			}
			if !assert.True(t, ok, "%s at %#x not found", s.Name, pc) {
				continue
			}
			// ELF symbols of assembly functions carry the ABI
			// (".abi0"), and Go's linker writes "·" as "." in
			// them; the pclntab has the names the runtime prints.
			want := strings.TrimSuffix(s.Name, ".abi0")
			assert.Equal(t, want, strings.ReplaceAll(name, "·", "."), "at %#x", pc)
			assert.Equal(t, pc-s.Addr, off, "offset of %#x in %s", pc, s.Name)
			n++
		}
	}
	t.Logf("%d addresses named alike", n)
	require.Greater(t, n, 2000)
	allocs := testing.AllocsPerRun(100, func() { stripped.Symbolize(syms[len(syms)/2].Addr) })
	assert.Zero(t, allocs, "Symbolize allocates")
}

// goTestTable builds a pclntab by hand in the layout of Go version ver
// (116, 118 or 120): two functions at text 0x1000 (main.f, 0x20 bytes:
// pcsp 0 for 4 bytes, 0x18 for 0x18 bytes, 0 for the last 4) and main.g
// (0x10 bytes, pcsp 8 throughout), the second marked as a top frame. main.f
// also has source lines and inlined calls (see goTestFrames); main.g has
// neither. It returns the table and the bytes of go:func.* at
// goTestGofunc, where main.f's inline tree is.
func goTestTable(ver int) (table, gofunc []byte) {
	le := binary.LittleEndian
	var names = []byte("main.f\x00main.g\x00main.h\x00main.k\x00")
	files := []byte("a.go\x00h.go\x00")
	cutab := le.AppendUint32(le.AppendUint32(nil, 0), 5) // CU 0: file 0 a.go, file 1 h.go
	// PC-value tables: (zig-zag value delta, pc delta) pairs from value -1.
	zz := func(d int64) uint64 { return uint64(d<<1) ^ uint64(d>>63) }
	pctab := []byte{0}                     // offset 0 means "no table"
	table1 := func(vals ...int64) uint32 { // value, pc count pairs
		off := uint32(len(pctab))
		prev := int64(-1)
		for i := 0; i < len(vals); i += 2 {
			pctab = binary.AppendUvarint(pctab, zz(vals[i]-prev))
			pctab = binary.AppendUvarint(pctab, uint64(vals[i+1]))
			prev = vals[i]
		}
		pctab = append(pctab, 0)
		return off
	}
	fPCSP := table1(0, 4, 0x18, 0x18, 0, 4)
	gPCSP := table1(8, 0x10)
	// main.f: a.go:10; main.h inlined at 0x1004 (h.go:30, 31; called
	// from the PC 0x1002); main.k inlined into main.h at 0x1010 (h.go:40;
	// called from 0x1008); a.go:12 again from 0x101c; the tables end at
	// 0x101e, before the padding up to main.g.
	fFile := table1(0, 4, 1, 0x18, 0, 2)
	fLine := table1(10, 4, 30, 4, 31, 8, 40, 0xc, 12, 2)
	fInl := table1(-1, 4, 0, 0xc, 1, 0xc, -1, 2)

	// The inline tree, at offset 8 of go:func.*: main.h (parent -1,
	// parentPc 2) and main.k (parent 0, parentPc 8).
	gofunc = make([]byte, 8, 64)
	for _, c := range []struct {
		parent         int16
		name, parentPC uint32
	}{{-1, 14, 2}, {0, 21, 8}} {
		if ver >= 120 { // funcID, 3 pad bytes, nameOff, parentPc, startLine
			gofunc = append(gofunc, 0, 0, 0, 0)
			gofunc = le.AppendUint32(le.AppendUint32(le.AppendUint32(gofunc, c.name), c.parentPC), 1)
		} else { // parent, funcID, pad, file, line, nameOff, parentPc
			gofunc = le.AppendUint16(gofunc, uint16(c.parent))
			gofunc = append(gofunc, 0, 0)
			gofunc = le.AppendUint32(le.AppendUint32(gofunc, 1), 99)
			gofunc = le.AppendUint32(le.AppendUint32(gofunc, c.name), c.parentPC)
		}
	}

	// The layout: ftab field size, _func size and the offsets in it;
	// header words; magic.
	field, funcSize, words, magic := 4, 44, 8, uint32(goPCLN120)
	nameAt, pcspAt, pcfileAt, pclnAt, npcdataAt, cuAt, flagAt, nfuncdataAt := 4, 16, 20, 24, 28, 32, 41, 43
	switch ver {
	case 118:
		funcSize, flagAt, nfuncdataAt, magic = 40, 37, 39, goPCLN118
	case 116:
		field, words, magic = 8, 7, goPCLN116
		nameAt, pcspAt, pcfileAt, pclnAt, npcdataAt, cuAt = 8, 20, 24, 28, 32, 36
	}
	putField := func(b []byte, v uint64) {
		if field == 4 {
			le.PutUint32(b, uint32(v))
		} else {
			le.PutUint64(b, v)
		}
	}
	entry := func(off uint64) uint64 { // 1.16 entries are absolute
		if ver == 116 {
			return 0x1000 + off
		}
		return off
	}
	hdrSize := 8 + words*8
	pclnOff := hdrSize + len(names) + len(cutab) + len(files) + len(pctab)
	// pclntable: ftab (3 pairs) then the _func records, each followed by
	// its pcdata and funcdata arrays.
	ftabSize := 3 * 2 * field
	ftab := make([]byte, ftabSize, ftabSize+256)
	type fn struct {
		entryOff              uint64
		nameOff, pcsp, pcfile uint32
		pcln                  uint32
		flag                  byte
		pcdata                []uint32
		nfuncdata             int
	}
	for i, f := range []fn{
		{0, 0, fPCSP, fFile, fLine, 0, []uint32{0, 0, fInl}, 4},
		{0x20, 7, gPCSP, 0, 0, goFlagTopFrame, nil, 0},
	} {
		for len(ftab)%8 != 0 {
			ftab = append(ftab, 0)
		}
		rec := len(ftab)
		putField(ftab[2*i*field:], entry(f.entryOff))
		putField(ftab[(2*i+1)*field:], uint64(rec))
		ftab = append(ftab, make([]byte, funcSize)...)
		putField(ftab[rec:], entry(f.entryOff))
		r := ftab[rec:]
		le.PutUint32(r[nameAt:], f.nameOff)
		le.PutUint32(r[pcspAt:], f.pcsp)
		le.PutUint32(r[pcfileAt:], f.pcfile)
		le.PutUint32(r[pclnAt:], f.pcln)
		le.PutUint32(r[npcdataAt:], uint32(len(f.pcdata)))
		le.PutUint32(r[cuAt:], 0)
		r[flagAt] = f.flag
		r[nfuncdataAt] = byte(f.nfuncdata)
		for _, p := range f.pcdata {
			ftab = le.AppendUint32(ftab, p)
		}
		for k := 0; k < f.nfuncdata; k++ {
			if ver == 116 { // 8-aligned addresses; 0 for none
				if k == 0 && (pclnOff+len(ftab))%8 != 0 {
					ftab = append(ftab, 0, 0, 0, 0)
				}
				v := uint64(0)
				if k == goFuncDataInlTree {
					v = goTestGofunc + 8
				}
				ftab = le.AppendUint64(ftab, v)
				continue
			}
			v := ^uint32(0) // offsets from go:func.*; ^0 for none
			if k == goFuncDataInlTree {
				v = 8
			}
			ftab = le.AppendUint32(ftab, v)
		}
	}
	putField(ftab[4*field:], entry(0x30)) // end of the last function

	hdr := make([]byte, hdrSize)
	le.PutUint32(hdr, magic)
	hdr[6], hdr[7] = 1, 8
	le.PutUint64(hdr[8:], 2)  // nfunc
	le.PutUint64(hdr[16:], 1) // nfiles
	off := uint64(len(hdr))
	first := words - 5 // the word of funcnameOffset
	put := func(word int, b []byte) {
		le.PutUint64(hdr[8+word*8:], off)
		off += uint64(len(b))
	}
	put(first, names)
	put(first+1, cutab)
	put(first+2, files)
	put(first+3, pctab)
	put(first+4, ftab)
	out := append(hdr, names...)
	out = append(out, cutab...)
	out = append(out, files...)
	out = append(out, pctab...)
	return append(out, ftab...), gofunc
}

// goTestGofunc is the address of go:func.* for goTestTable's tables.
const goTestGofunc = 0x8000

// goTestFrames are the source frames goTestTable's tables give at a few
// PCs, innermost first.
var goTestFrames = []struct {
	pc     uint64
	frames []SourceFrame
}{
	{0x1000, []SourceFrame{{Function: "main.f", File: "a.go", Line: 10}}},
	{0x1003, []SourceFrame{{Function: "main.f", File: "a.go", Line: 10}}},
	{0x1004, []SourceFrame{{Function: "main.h", File: "h.go", Line: 30, Inlined: true}, {Function: "main.f", File: "a.go", Line: 10}}},
	{0x1009, []SourceFrame{{Function: "main.h", File: "h.go", Line: 31, Inlined: true}, {Function: "main.f", File: "a.go", Line: 10}}},
	{0x1010, []SourceFrame{{Function: "main.k", File: "h.go", Line: 40, Inlined: true}, {Function: "main.h", File: "h.go", Line: 31, Inlined: true},
		{Function: "main.f", File: "a.go", Line: 10}}},
	{0x101b, []SourceFrame{{Function: "main.k", File: "h.go", Line: 40, Inlined: true}, {Function: "main.h", File: "h.go", Line: 31, Inlined: true},
		{Function: "main.f", File: "a.go", Line: 10}}},
	{0x101c, []SourceFrame{{Function: "main.f", File: "a.go", Line: 12}}},
	{0x101d, []SourceFrame{{Function: "main.f", File: "a.go", Line: 12}}},
	{0x101e, nil}, // padding
	// main.g has no pcfile and pcln tables.
	{0x1020, nil},
	{0x1030, nil},
}

// goTestObject returns an Object over goTestTable's tables.
func goTestObject(t testing.TB, ver int, a arch.Arch) *Object {
	table, gofunc := goTestTable(ver)
	tab, err := parseGoPCLN(table, 0x1000)
	require.NoError(t, err)
	tab.gofunc, tab.gofuncAddr = gofunc, goTestGofunc
	tab.path, tab.section = "handmade", ".gopclntab"
	o := &Object{arch: a, gopcln: tab}
	o.goOnce.Do(func() {})
	return o
}

// TestGoPCLNHandMade checks the parser against the tables goTestTable
// describes, in the three layouts.
func TestGoPCLNHandMade(t *testing.T) {
	for _, ver := range []int{116, 118, 120} {
		t.Run(strconv.Itoa(ver), func(t *testing.T) { checkHandMade(t, ver) })
	}
}

func checkHandMade(t *testing.T, ver int) {
	o := goTestObject(t, ver, arch.AMD64)
	tab := o.gopcln
	require.Equal(t, ver, tab.version)
	require.Equal(t, 2, tab.nfunc)
	var f goFunc
	type want struct {
		pc           uint64
		name         string
		delta        int64
		start, end   uint64
		found, known bool
	}
	for _, w := range []want{
		{pc: 0xfff},
		{pc: 0x1000, name: "main.f", delta: 0, start: 0x1000, end: 0x1004, found: true, known: true},
		{pc: 0x1003, name: "main.f", delta: 0, start: 0x1000, end: 0x1004, found: true, known: true},
		{pc: 0x1004, name: "main.f", delta: 0x18, start: 0x1004, end: 0x101c, found: true, known: true},
		{pc: 0x101f, name: "main.f", delta: 0, start: 0x101c, end: 0x1020, found: true, known: true},
		{pc: 0x1020, name: "main.g", delta: 8, start: 0x1020, end: 0x1030, found: true, known: true},
		{pc: 0x1030},
	} {
		found := tab.find(w.pc, &f)
		require.Equal(t, w.found, found, "pc %#x", w.pc)
		if !found {
			continue
		}
		assert.Equal(t, w.name, string(tab.funcName(&f)), "pc %#x", w.pc)
		d, s, e, ok := tab.spDelta(&f, w.pc)
		require.Equal(t, w.known, ok, "pc %#x", w.pc)
		assert.Equal(t, []uint64{uint64(w.delta), w.start, w.end}, []uint64{uint64(d), s, e}, "pc %#x", w.pc)
	}

	// The object-level row: amd64 CFA = rsp+delta+8, RA at CFA-8; the top
	// frame's RA undefined.
	var row cfi.Row
	require.True(t, o.goRow(0x1008, &row))
	assert.Equal(t, cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.AMD64_RSP, Offset: 0x20}, row.CFA)
	assert.Equal(t, cfi.Rule{Kind: cfi.RuleOffset, Offset: -8}, row.Regs[arch.AMD64_RIP])
	require.True(t, o.goRow(0x1020, &row))
	assert.Equal(t, cfi.RuleUndefined, row.Regs[arch.AMD64_RIP].Kind)
	// arm64: x30 in the register at entry, at SP+0 once the frame exists.
	o = goTestObject(t, ver, arch.ARM64)
	require.True(t, o.goRow(0x1000, &row))
	assert.Equal(t, cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.ARM64_SP, Offset: 0}, row.CFA)
	assert.Equal(t, cfi.RuleSameValue, row.Regs[arch.ARM64_X30].Kind)
	require.True(t, o.goRow(0x1004, &row))
	assert.Equal(t, cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.ARM64_SP, Offset: 0x18}, row.CFA)
	assert.Equal(t, cfi.Rule{Kind: cfi.RuleOffset, Offset: -0x18}, row.Regs[arch.ARM64_X30])
}

// TestGoPCLNErrors checks that damaged tables are refused with the offset
// of what is wrong.
func TestGoPCLNErrors(t *testing.T) {
	good, _ := goTestTable(120)
	for _, c := range []struct {
		name   string
		damage func([]byte)
		off    int64
	}{
		{"old magic", func(b []byte) { binary.LittleEndian.PutUint32(b, 0xfffffffb) }, 0},
		{"bad magic", func(b []byte) { binary.LittleEndian.PutUint32(b, 0x12345678) }, 0},
		{"quantum", func(b []byte) { b[6] = 3 }, 6},
		{"pointer size", func(b []byte) { b[7] = 4 }, 7},
		{"function count", func(b []byte) { binary.LittleEndian.PutUint64(b[8:], 1<<40) }, 8},
		{"pctab offset", func(b []byte) { binary.LittleEndian.PutUint64(b[8+6*8:], 1<<40) }, 8 + 6*8},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := append([]byte(nil), good...)
			c.damage(b)
			_, err := parseGoPCLN(b, 0x1000)
			var pe *pclnError
			require.True(t, errors.As(err, &pe), "error %v", err)
			assert.Equal(t, c.off, pe.off)
			assert.ErrorIs(t, err, errPCLN)
		})
	}
}

// FuzzGoPCLN parses arbitrary tables (with gofunc, arbitrary bytes of
// go:func.* where inline trees are) and decodes every function, name and
// pcsp table it claims, and the source frames at some of its PCs: nothing
// may panic or run away, rows stay in their function, and the frames end
// with the function containing the PC.
func FuzzGoPCLN(f *testing.F) {
	for _, v := range []int{116, 118, 120} {
		table, gofunc := goTestTable(v)
		f.Add(table, gofunc)
	}
	if o, err := Open(goprogStrippedAMD64, Options{NoDebugFile: true}); err == nil {
		if data, err := o.sectionData(o.section(".gopclntab")); err == nil {
			f.Add(append([]byte(nil), data[:min(len(data), 4096)]...), []byte(nil))
		}
		o.Close()
	}
	f.Fuzz(func(t *testing.T, data, gofunc []byte) {
		tab, err := parseGoPCLN(data, 0x1000)
		if err != nil {
			return
		}
		tab.gofunc, tab.gofuncAddr = gofunc, goTestGofunc
		o := &Object{arch: arch.AMD64, gopcln: tab}
		o.goOnce.Do(func() {})
		var fn, in goFunc
		var frames []SourceFrame
		for i := 0; i < min(tab.nfunc, 256); i++ {
			if !tab.function(i, &fn) {
				continue
			}
			name := string(tab.funcName(&fn))
			for _, pc := range []uint64{fn.entry, fn.entry + (fn.end-fn.entry)/2, fn.end - 1} {
				if d, s, e, ok := tab.spDelta(&fn, pc); ok && (pc < s || pc >= e || e > fn.end) {
					t.Fatalf("pc %#x: delta %d for [%#x,%#x), function [%#x,%#x)", pc, d, s, e, fn.entry, fn.end)
				}
				if !tab.find(pc, &in) {
					continue
				}
				if pc < in.entry || pc >= in.end {
					t.Fatalf("find %#x gave [%#x,%#x)", pc, in.entry, in.end)
				}
				frames = o.goSourceFrames(pc, frames[:0])
				if err := checkGoFrames(frames, string(tab.funcName(&in))); err != nil {
					t.Fatalf("pc %#x (%s): %v: %+v", pc, name, err, frames)
				}
			}
		}
	})
}

// checkGoFrames checks the shape of the source frames of one PC: none (no
// lines there), or the physical function (named phys) last and the others
// inlined, and no line without a file.
func checkGoFrames(frames []SourceFrame, phys string) error {
	if len(frames) == 0 {
		return nil
	}
	if len(frames) > maxGoInlineDepth+1 {
		return fmt.Errorf("%d frames", len(frames))
	}
	for i, f := range frames {
		if f.Inlined != (i < len(frames)-1) {
			return fmt.Errorf("frame %d of %d: inlined %v", i, len(frames), f.Inlined)
		}
		if f.Line != 0 && f.File == "" {
			return fmt.Errorf("frame %d: line %d without a file", i, f.Line)
		}
	}
	if last := frames[len(frames)-1]; last.Function != phys {
		return fmt.Errorf("last frame %q, function %q", last.Function, phys)
	}
	return nil
}

// goBenchPCs opens the committed stripped Go binary and picks 4096 PCs in
// the middle of functions spread over it.
func goBenchPCs(b *testing.B) (*Object, []uint64) {
	o := mustOpen(b, goprogStrippedAMD64, Options{NoDebugFile: true})
	tab := o.goTable()
	require.NotNil(b, tab)
	var f goFunc
	pcs := make([]uint64, 4096)
	for i := range pcs {
		require.True(b, tab.function((i*7919)%tab.nfunc, &f))
		pcs[i] = f.entry + (f.end-f.entry)/2
	}
	return o, pcs
}

// BenchmarkGoRow finds the pcsp row of PCs spread over a stripped Go
// binary's functions, as the unwinder does for each frame on a cache miss.
func BenchmarkGoRow(b *testing.B) {
	o, pcs := goBenchPCs(b)
	var row cfi.Row
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		o.FindRow(pcs[i&4095], &row)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/row")
}

// TestGoRowAllocs checks that rows from the pclntab allocate nothing.
func TestGoRowAllocs(t *testing.T) {
	o := mustOpen(t, goprogStrippedAMD64, Options{NoDebugFile: true})
	var row cfi.Row
	var pc uint64
	ok := false
	for _, s := range o.Symbols() {
		if s.Name == "main.c" {
			pc, ok = s.Addr+8, true
		}
	}
	require.True(t, ok)
	require.NoError(t, o.FindRow(pc, &row))
	assert.Zero(t, testing.AllocsPerRun(100, func() { o.FindRow(pc, &row) }))
}

// TestGoSourceFramesHandMade checks the source frames of goTestTable's
// tables, in the three layouts, against goTestFrames (worked out by hand
// from the tables' description).
func TestGoSourceFramesHandMade(t *testing.T) {
	for _, ver := range []int{116, 118, 120} {
		t.Run(strconv.Itoa(ver), func(t *testing.T) {
			o := goTestObject(t, ver, arch.AMD64)
			for _, w := range goTestFrames {
				assert.Equal(t, w.frames, o.goSourceFrames(w.pc, nil), "pc %#x", w.pc)
			}
			require.NoError(t, o.goLinesError())
			// Without go:func.*, a PC in inlined code has no line (it
			// would be the inlined body's, under the outer name).
			o.gopcln.gofunc = nil
			assert.Equal(t, []SourceFrame{{Function: "main.f"}}, o.goSourceFrames(0x1010, nil))
			assert.Equal(t, []SourceFrame{{Function: "main.f", File: "a.go", Line: 12}}, o.goSourceFrames(0x101c, nil))
		})
	}
}

// TestGoSourceFramesDamaged damages goTestTable's line tables one at a
// time: the lookup still names the function, and SourceError names the
// file, the section and the offset of the damaged table.
func TestGoSourceFramesDamaged(t *testing.T) {
	le := binary.LittleEndian
	for _, c := range []struct {
		name   string
		damage func(o *Object, rec []byte) int64 // the offset the error must name
		pc     uint64
		want   []SourceFrame
	}{
		{"cuOffset past cutab", func(o *Object, rec []byte) int64 {
			le.PutUint32(rec[o.gopcln.cuOffset:], 1000)
			return o.gopcln.cutabOff
		}, 0x1000, []SourceFrame{{Function: "main.f"}}},
		{"pcln past the table", func(o *Object, rec []byte) int64 {
			le.PutUint32(rec[o.gopcln.pcln:], uint32(len(o.gopcln.pctab)-1)) // the final 0: an empty table
			return o.gopcln.pctabOff + int64(len(o.gopcln.pctab)-1)
		}, 0x1000, []SourceFrame{{Function: "main.f"}}},
		{"inline tree entry out of range", func(o *Object, rec []byte) int64 {
			o.gopcln.gofunc = o.gopcln.gofunc[:len(o.gopcln.gofunc)-1] // main.k's entry cut short
			return int64(o.gopcln.pclnOff) + int64(le.Uint32(o.gopcln.ftab[o.gopcln.field:]))
		}, 0x1010, []SourceFrame{{Function: "main.f"}}},
		{"inline tree loop", func(o *Object, rec []byte) int64 {
			le.PutUint32(o.gopcln.gofunc[8+16+8:], 0x10) // main.k called from within itself
			return int64(o.gopcln.pclnOff) + int64(le.Uint32(o.gopcln.ftab[o.gopcln.field:]))
		}, 0x1010, append(slices.Repeat([]SourceFrame{{Function: "main.k", File: "h.go", Line: 40, Inlined: true}}, maxGoInlineDepth),
			SourceFrame{Function: "main.f", File: "h.go", Line: 40})},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := goTestObject(t, 120, arch.AMD64)
			var f goFunc
			require.True(t, o.gopcln.function(0, &f))
			off := c.damage(o, o.gopcln.funcdata[f.rec:])
			require.NoError(t, o.goLinesError())
			assert.Equal(t, c.want, o.goSourceFrames(c.pc, nil))
			var e *Error
			require.True(t, errors.As(o.goLinesError(), &e), "error %v", o.goLinesError())
			assert.Equal(t, "handmade", e.Path)
			assert.Equal(t, ".gopclntab", e.Section)
			assert.Equal(t, off, e.Offset)
			assert.ErrorIs(t, e, errPCLN)
			assert.Contains(t, e.Error(), `function "main.f" at 0x1000`)
			t.Log(e)
		})
	}
}
