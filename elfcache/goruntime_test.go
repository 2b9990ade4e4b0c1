package elfcache

import (
	"debug/elf"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGoRuntimeLookups: what goruntime asks of a Go executable, checked
// against the go tool's own reading of the committed twins: the version
// (go version FILE), the functions and data symbols (go tool nm on the
// unstripped twin), the moduledata's ranges (the ELF sections they cover),
// the same from the stripped twin (no symbol table, no DWARF) except the
// data symbols.
func TestGoRuntimeLookups(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	full := mustOpen(t, goprogAMD64, Options{NoDebugFile: true})
	stripped := mustOpen(t, goprogStrippedAMD64, Options{NoDebugFile: true})
	out, err := exec.Command(goTool, "version", goprogAMD64).CombinedOutput()
	require.NoError(t, err, "%s", out)
	want := strings.Fields(strings.TrimSpace(string(out)))[1]
	nm, err := exec.Command(goTool, "tool", "nm", goprogAMD64).CombinedOutput()
	require.NoError(t, err, "%s", nm)
	syms := map[string]string{}
	for _, line := range strings.Split(string(nm), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			syms[f[2]] = f[0]
		}
	}
	ef, err := elf.Open(goprogAMD64)
	require.NoError(t, err)
	defer ef.Close()
	sec := func(name string) *elf.Section {
		s := ef.Section(name)
		require.NotNil(t, s, name)
		return s
	}
	for _, o := range []*Object{full, stripped} {
		v, err := o.GoVersion()
		require.NoError(t, err)
		require.Equal(t, want, v)
		entry, end, ok := o.GoFunction("runtime.forEachG")
		require.True(t, ok)
		require.Equal(t, syms["runtime.forEachG"], strconv.FormatUint(entry, 16))
		require.Greater(t, end, entry)
		_, _, ok = o.GoFunction("runtime.noSuchFunction")
		require.False(t, ok)
		m, ok := o.GoModule()
		require.True(t, ok)
		require.Equal(t, syms["runtime.firstmoduledata"], strconv.FormatUint(m.Addr, 16))
		require.Equal(t, sec(".bss").Addr, m.Bss)
		require.Equal(t, sec(".noptrbss").Addr, m.NoptrBss)
		require.Equal(t, sec(".data").Addr, m.Data)
		require.Equal(t, syms["runtime.types"], strconv.FormatUint(m.Types, 16))
	}
	a, _, ok := full.DataSymbol("runtime.allgs")
	require.True(t, ok)
	require.Equal(t, syms["runtime.allgs"], strconv.FormatUint(a, 16))
	_, _, ok = stripped.DataSymbol("runtime.allgs")
	require.False(t, ok)
	d, err := stripped.DWARF()
	require.NoError(t, err)
	require.Nil(t, d)
	d, err = full.DWARF()
	require.NoError(t, err)
	require.NotNil(t, d)

	c := mustOpen(t, "/bin/true", Options{NoDebugFile: true})
	_, err = c.GoVersion()
	require.ErrorContains(t, err, "no .go.buildinfo section")
}
