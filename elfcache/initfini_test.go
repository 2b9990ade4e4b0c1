package elfcache

import (
	"debug/elf"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

// ctorSrc has a constructor and a destructor: with crtstuff's frame_dummy
// and __do_global_dtors_aux, two slots in each array.
const ctorSrc = `static volatile int sink;
__attribute__((constructor)) static void ini(void) { sink = 1; }
__attribute__((destructor)) static void fin(void) { sink = 2; }
int main(void) { return sink; }
`

// TestInitFiniEntry: the slots of a program's .init_array and .fini_array
// read as binutils' objdump -s shows their bytes (little-endian link-time
// addresses: ini and fin as nm names them, and crtstuff's); no other
// address is a slot. Stripped, the program names neither function, and
// the two are known to begin there (CallTarget, StartBefore: the
// unwinder's prologue analysis of a destructor without CFI sweeps from
// its first instruction).
func TestInitFiniEntry(t *testing.T) {
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "ctor.c", ctorSrc, "-O2", "-fno-asynchronous-unwind-tables")
	stripped := filepath.Join(dir, "ctor-stripped")
	testprog.Tool(t, "", "strip", "-o", stripped, bin)
	syms := map[string]uint64{}
	for _, line := range strings.Split(testprog.Tool(t, "", "nm", bin), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			v, err := strconv.ParseUint(f[0], 16, 64)
			require.NoError(t, err)
			syms[f[2]] = v
		}
	}
	require.NotZero(t, syms["ini"], "nm: ini")
	require.NotZero(t, syms["fin"], "nm: fin")

	ef, err := elf.Open(bin)
	require.NoError(t, err)
	defer ef.Close()
	for _, path := range []string{bin, stripped} {
		o, err := Open(path, Options{NoDebugFile: true})
		require.NoError(t, err)
		for _, name := range []string{".init_array", ".fini_array"} {
			s := ef.Section(name)
			require.NotNil(t, s, name)
			// objdump -s -j NAME: "ADDR WORD WORD ..." lines.
			var want []uint64
			for _, line := range strings.Split(testprog.Tool(t, "", "objdump", "-s", "-j", name, bin), "\n") {
				f := strings.Fields(line)
				if len(f) < 2 || len(f[0]) < 4 || !isHex(f[0]) {
					continue
				}
				for i := 1; i+1 < len(f) && i <= 4 && isHex(f[i]) && len(f[i]) == 8; i += 2 {
					lo, _ := strconv.ParseUint(swap32(f[i]), 16, 64)
					hi, _ := strconv.ParseUint(swap32(f[i+1]), 16, 64)
					want = append(want, hi<<32|lo)
				}
			}
			require.Len(t, want, int(s.Size/8), "objdump -s -j %s", name)
			for i, w := range want {
				got, ok := o.InitFiniEntry(s.Addr + uint64(8*i))
				assert.True(t, ok, "%s: %s slot %d", path, name, i)
				assert.Equal(t, w, got, "%s: %s slot %d", path, name, i)
			}
			if next := s.Addr + s.Size; !inArrays(ef, next) {
				_, ok := o.InitFiniEntry(next)
				assert.False(t, ok, "%s: past %s", path, name)
			}
			_, ok := o.InitFiniEntry(s.Addr + 4)
			assert.False(t, ok, "%s: a misaligned address in %s", path, name)
		}
		_, ok := o.InitFiniEntry(syms["main"])
		assert.False(t, ok, "%s: main's code is no slot", path)
		for _, fn := range []string{"ini", "fin"} {
			assert.True(t, o.CallTarget(syms[fn]), "%s: %s is known to begin a function", path, fn)
			start, ok := o.StartBefore(syms[fn] + 4)
			assert.True(t, ok)
			assert.Equal(t, syms[fn], start, "%s: the start before %s+4", path, fn)
		}
		require.NoError(t, o.Close())
	}
}

// inArrays reports whether addr lies in an init or fini array of f.
func inArrays(f *elf.File, addr uint64) bool {
	for _, s := range f.Sections {
		if (s.Type == elf.SHT_INIT_ARRAY || s.Type == elf.SHT_FINI_ARRAY || s.Type == elf.SHT_PREINIT_ARRAY) && addr >= s.Addr && addr < s.Addr+s.Size {
			return true
		}
	}
	return false
}

func isHex(s string) bool {
	_, err := strconv.ParseUint(s, 16, 64)
	return err == nil
}

// swap32 turns objdump's bytes of a little-endian word ("30630000") into
// its hex value ("00006330").
func swap32(s string) string {
	return s[6:8] + s[4:6] + s[2:4] + s[0:2]
}
