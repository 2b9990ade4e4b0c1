package elfcache

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ustack/ustack/cfi"
)

// TestBoundSectionSizes gives each section of a real object a size of
// 1 TiB (and then 2^32-1) and checks that reading it fails with an error
// instead of allocating: section sizes, symbol tables and CFI included.
func TestBoundSectionSizes(t *testing.T) {
	orig, err := os.ReadFile(filepath.Join("..", "testdata", "objects", "x86_64", "vdso-dddf5758da86.so"))
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.NewFile(bytes.NewReader(orig))
	if err != nil {
		t.Fatal(err)
	}
	shoff := binary.LittleEndian.Uint64(orig[0x28:])
	shentsize := uint64(binary.LittleEndian.Uint16(orig[0x3a:]))
	for i, s := range ef.Sections {
		if s.Type == elf.SHT_NULL || s.Type == elf.SHT_NOBITS {
			continue
		}
		for _, huge := range []uint64{1 << 40, 1<<32 - 1} {
			data := append([]byte(nil), orig...)
			binary.LittleEndian.PutUint64(data[shoff+uint64(i)*shentsize+0x20:], huge) // sh_size
			var m0, m1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m0)
			if o, err := OpenBytes("crafted.so", data, Options{}); err == nil {
				var row cfi.Row
				o.FindRow(0x500, &row)
				o.Symbolize(0x500)
				o.SourceFrames(0x500, nil)
				o.Close()
			}
			runtime.ReadMemStats(&m1)
			if n := m1.TotalAlloc - m0.TotalAlloc; n > 16<<20 {
				t.Errorf("%s claiming %#x bytes: allocated %d bytes", s.Name, huge, n)
			}
		}
	}
}
