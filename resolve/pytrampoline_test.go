package resolve

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
	"github.com/ustack/ustack/procmaps"
)

// TestPyTrampolineRows: the rows of the trampoline, by hand from its code
// (Python/asm_trampoline.S): CFA rsp+8 at entry and at the ret, rsp+16
// between the sub and the add; the return address at CFA-8. Entries of
// another size or not named py:: get none.
func TestPyTrampolineRows(t *testing.T) {
	for _, cet := range []bool{false, true} {
		code := pyTrampolineBody
		if cet {
			code = append(append([]byte{}, endbr64...), pyTrampolineBody...)
		}
		n := uint64(len(code))
		m := &perfMap{python: true, syms: []perfMapSym{
			{start: 0x1000, end: 0x1000 + n, name: "py::f:x.py"},
			{start: 0x2000, end: 0x2000 + n + 1, name: "py::g:x.py"},
			{start: 0x3000, end: 0x3000 + n, name: "LazyCompile:h"},
		}}
		p := newPyTrampolines(m, code)
		require.NotNil(t, p)
		pre := n - uint64(len(pyTrampolineBody))
		want := map[uint64]int64{0: 8, pre: 8, pre + 3: 8, pre + 4: 16, pre + 6: 16, pre + 9: 16, pre + 10: 8}
		for off, cfa := range want {
			var row cfi.Row
			require.NoError(t, p.FindRow(0x1000+off, &row), "offset %d", off)
			assert.Equal(t, cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.AMD64_RSP, Offset: cfa}, row.CFA, "CFA at offset %d (endbr64 %v)", off, cet)
			assert.Equal(t, cfi.Rule{Kind: cfi.RuleOffset, Offset: -8}, row.Regs[arch.AMD64_RIP], "RA at offset %d", off)
			assert.True(t, row.Start <= 0x1000+off && 0x1000+off < row.End, "row [%#x,%#x) holds offset %d", row.Start, row.End, off)
		}
		var row cfi.Row
		for _, a := range []uint64{0x2000, 0x3000, 0x1000 + n, 0xfff} {
			assert.ErrorIs(t, p.FindRow(a, &row), cfi.ErrNoFDE, "%#x", a)
		}
		buf := make([]byte, 4)
		assert.Equal(t, 4, p.ReadCode(0x1000+pre, buf))
		assert.Equal(t, []byte{0x48, 0x83, 0xec, 0x08}, buf)
	}
	assert.Nil(t, newPyTrampolines(&perfMap{syms: []perfMapSym{{start: 1, end: 12, name: "LazyCompile:h"}}}, pyTrampolineBody), "no py:: entry")
}

// TestPyTrampolineWarning: a perf map naming Python trampolines in a
// process with no python object ustack can read warns, naming the map,
// that stacks stop at the first Python frame; with python 3.12's libpython
// mapped (when installed) the template is found and nothing is said.
func TestPyTrampolineWarning(t *testing.T) {
	dir := t.TempDir()
	mapPath := filepath.Join(dir, "perf-4242.map")
	require.NoError(t, os.WriteFile(mapPath, []byte("7f0000001000 b py::fib:/x.py\n"), 0o600))
	anon := Mapping{Map: procmaps.Map{Start: 0x7f0000001000, End: 0x7f0000002000, Exec: true, Path: "//anon"}}

	var warnings []string
	r := New(Options{PerfMapDir: dir, Warn: func(m string) { warnings = append(warnings, m) }})
	defer r.Close()
	r.NewSpace(4242, []Mapping{anon})
	require.Len(t, warnings, 1)
	assert.Contains(t, warnings[0], mapPath)
	assert.Contains(t, warnings[0], "stacks stop at the first Python frame")

	lib := "/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0"
	if _, err := os.Stat(lib); err != nil {
		t.Skipf("python 3.12 is not installed (%s): the template found is not checked", lib)
	}
	warnings = nil
	r2 := New(Options{PerfMapDir: dir, Warn: func(m string) { warnings = append(warnings, m) }})
	defer r2.Close()
	r2.NewSpace(4242, []Mapping{anon, {Map: procmaps.Map{Start: 0x7f1000000000, End: 0x7f1000400000, Exec: true, Path: lib}}})
	assert.Empty(t, warnings)
}
