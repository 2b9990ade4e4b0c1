package elfcache

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
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
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not in PATH: cannot build the Go test program")
	}
	dir := t.TempDir()
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
		cmd.Dir = "../testdata/gen/src/goprog"
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+goarch, "CGO_ENABLED="+cgo, "GOFLAGS=", "GOTOOLCHAIN=local")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	return full, stripped
}

// TestGoRowsMatchDebugFrame checks the rows synthesized from a stripped
// binary's pcsp tables against the .debug_frame that Go's linker wrote
// into its unstripped twin, at every instruction of every function: same
// function start, CFA and return-address rule.
func TestGoRowsMatchDebugFrame(t *testing.T) {
	cases := []struct {
		name            string
		full, stripped  string
		goarch          string
		buildFlags      []string
		instructionSize uint64
	}{
		{name: "amd64_committed", full: goprogAMD64, stripped: goprogStrippedAMD64, instructionSize: 1},
		{name: "arm64_built", goarch: "arm64", instructionSize: 4},
		{name: "amd64_pie_built", goarch: "amd64", buildFlags: []string{"-buildmode=pie"}, instructionSize: 1},
		// runtime.text is not the start of .text: the C start files come
		// first, so the base must come from the moduledata.
		{name: "amd64_external_link_built", goarch: "amd64", buildFlags: []string{"-ldflags=-linkmode=external"}, instructionSize: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.full == "" {
				c.full, c.stripped = buildGoprog(t, c.goarch, c.buildFlags...)
			}
			full := mustOpen(t, c.full, Options{NoDebugFile: true})
			stripped := mustOpen(t, c.stripped, Options{NoDebugFile: true})
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
			checked, funcs, signalPCs := 0, 0, 0
			for i := 0; i < tab.nfunc; i++ {
				require.True(t, tab.function(i, &f))
				if f.entry == f.end {
					continue
				}
				if full.lookup(f.entry, &want) != nil {
					continue // Go writes no FDE for a few runtime stubs
				}
				funcs++
				for pc := f.entry; pc < f.end; pc += c.instructionSize {
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
					require.NoError(t, stripped.FindRow(pc, &got), "pc %#x", pc)
					checked++
					flag := f.flag
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
// (0x10 bytes, pcsp 8 throughout), the second marked as a top frame.
func goTestTable(ver int) []byte {
	le := binary.LittleEndian
	var names = []byte("main.f\x00main.g\x00")
	// pcsp tables: (zig-zag value delta, pc delta) pairs from value -1.
	zz := func(d int64) uint64 { return uint64(d<<1) ^ uint64(d>>63) }
	var pctab []byte
	pctab = append(pctab, 0) // offset 0 means "no table"
	fPCSP := len(pctab)
	pctab = binary.AppendUvarint(pctab, zz(1)) // -1 -> 0
	pctab = binary.AppendUvarint(pctab, 4)
	pctab = binary.AppendUvarint(pctab, zz(0x18))
	pctab = binary.AppendUvarint(pctab, 0x18)
	pctab = binary.AppendUvarint(pctab, zz(-0x18))
	pctab = binary.AppendUvarint(pctab, 4)
	pctab = append(pctab, 0)
	gPCSP := len(pctab)
	pctab = binary.AppendUvarint(pctab, zz(9))
	pctab = binary.AppendUvarint(pctab, 0x10)
	pctab = append(pctab, 0)

	// The layout: ftab field size, _func size and the offsets of entry,
	// nameOff, pcsp and flag in it; header words; magic.
	field, recSize, nameAt, pcspAt, flagAt, words, magic := 4, 44, 4, 16, 41, 8, uint32(goPCLN120)
	switch ver {
	case 118:
		recSize, flagAt, magic = 40, 37, goPCLN118
	case 116:
		field, recSize, nameAt, pcspAt, flagAt, words, magic = 8, 44, 8, 20, 41, 7, goPCLN116
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
	// pclntable: ftab (3 pairs) then two _func records.
	ftabSize := 3 * 2 * field
	ftab := make([]byte, ftabSize+2*recSize)
	fn := func(i int, entryOff uint64, nameOff, pcsp uint32, flag byte) {
		rec := ftabSize + i*recSize
		putField(ftab[2*i*field:], entry(entryOff))
		putField(ftab[(2*i+1)*field:], uint64(rec))
		putField(ftab[rec:], entry(entryOff))
		le.PutUint32(ftab[rec+nameAt:], nameOff)
		le.PutUint32(ftab[rec+pcspAt:], pcsp)
		ftab[rec+flagAt] = flag
	}
	fn(0, 0, 0, uint32(fPCSP), 0)
	fn(1, 0x20, 7, uint32(gPCSP), goFlagTopFrame)
	putField(ftab[4*field:], entry(0x30)) // end of the last function

	hdr := make([]byte, 8+words*8)
	le.PutUint32(hdr, magic)
	hdr[6], hdr[7] = 1, 8
	le.PutUint64(hdr[8:], 2) // nfunc
	off := uint64(len(hdr))
	first := words - 5 // the word of funcnameOffset
	put := func(word int, b []byte) {
		le.PutUint64(hdr[8+word*8:], off)
		off += uint64(len(b))
	}
	put(first, names)
	put(first+1, nil) // cutab
	put(first+2, nil) // filetab
	put(first+3, pctab)
	put(first+4, ftab)
	out := append(hdr, names...)
	out = append(out, pctab...)
	return append(out, ftab...)
}

// TestGoPCLNHandMade checks the parser against the tables goTestTable
// describes, in the three layouts.
func TestGoPCLNHandMade(t *testing.T) {
	for _, ver := range []int{116, 118, 120} {
		t.Run(strconv.Itoa(ver), func(t *testing.T) { checkHandMade(t, ver) })
	}
}

func checkHandMade(t *testing.T, ver int) {
	tab, err := parseGoPCLN(goTestTable(ver), 0x1000)
	require.NoError(t, err)
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
	o := &Object{arch: arch.AMD64, gopcln: tab}
	o.goOnce.Do(func() {})
	var row cfi.Row
	require.True(t, o.goRow(0x1008, &row))
	assert.Equal(t, cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.AMD64_RSP, Offset: 0x20}, row.CFA)
	assert.Equal(t, cfi.Rule{Kind: cfi.RuleOffset, Offset: -8}, row.Regs[arch.AMD64_RIP])
	require.True(t, o.goRow(0x1020, &row))
	assert.Equal(t, cfi.RuleUndefined, row.Regs[arch.AMD64_RIP].Kind)
	// arm64: x30 in the register at entry, at SP+0 once the frame exists.
	o = &Object{arch: arch.ARM64, gopcln: tab}
	o.goOnce.Do(func() {})
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
	good := goTestTable(120)
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

// FuzzGoPCLN parses arbitrary tables and decodes every function, name and
// pcsp table it claims: nothing may panic or run away.
func FuzzGoPCLN(f *testing.F) {
	for _, v := range []int{116, 118, 120} {
		f.Add(goTestTable(v))
	}
	if o, err := Open(goprogStrippedAMD64, Options{NoDebugFile: true}); err == nil {
		if data, err := o.sectionData(o.section(".gopclntab")); err == nil {
			f.Add(append([]byte(nil), data[:min(len(data), 4096)]...))
		}
		o.Close()
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tab, err := parseGoPCLN(data, 0x1000)
		if err != nil {
			return
		}
		var fn goFunc
		for i := 0; i < min(tab.nfunc, 256); i++ {
			if !tab.function(i, &fn) {
				continue
			}
			tab.funcName(&fn)
			for _, pc := range []uint64{fn.entry, fn.entry + (fn.end-fn.entry)/2, fn.end - 1} {
				if d, s, e, ok := tab.spDelta(&fn, pc); ok && (pc < s || pc >= e || e > fn.end) {
					t.Fatalf("pc %#x: delta %d for [%#x,%#x), function [%#x,%#x)", pc, d, s, e, fn.entry, fn.end)
				}
				if tab.find(pc, &fn) && (pc < fn.entry || pc >= fn.end) {
					t.Fatalf("find %#x gave [%#x,%#x)", pc, fn.entry, fn.end)
				}
			}
		}
	})
}

// BenchmarkGoRow finds the pcsp row of PCs spread over a stripped Go
// binary's functions, as the unwinder does for each frame on a cache miss.
func BenchmarkGoRow(b *testing.B) {
	o := mustOpen(b, goprogStrippedAMD64, Options{NoDebugFile: true})
	tab := o.goTable()
	require.NotNil(b, tab)
	var f goFunc
	pcs := make([]uint64, 4096)
	for i := range pcs {
		require.True(b, tab.function((i*7919)%tab.nfunc, &f))
		pcs[i] = f.entry + (f.end-f.entry)/2
	}
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
