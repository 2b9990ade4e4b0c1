package coredump_test

import (
	"path/filepath"
	"testing"

	"github.com/ustack/ustack/coredump"
	"github.com/ustack/ustack/internal/fixture"
)

// FuzzParse: no input crashes, hangs or exhausts memory in Parse or in any
// read of the Core it returns. Seeds: the headers and notes of each fixture
// core (its first 16 KiB) and a minimal header.
func FuzzParse(f *testing.F) {
	for _, tr := range fixtures(f) {
		raw := rawCore(f, tr)
		n := min(len(raw), 16<<10)
		f.Add(raw[:n])
	}
	f.Add([]byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x04\x00\x3e\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := coredump.Parse(data, "fuzz", &coredump.Options{NoMappedFiles: true})
		if err != nil {
			if c != nil {
				t.Fatal("Core and error both returned")
			}
			return
		}
		if len(c.Threads) == 0 {
			t.Fatal("a Core without threads")
		}
		exercise(c)
	})
}

// FuzzParseExecutable: the same for a core that lists no mapped files
// read with Options.Executable (an arm64 PIE fixture), whose auxiliary
// vector places it: seeded with a core that agrees with it.
func FuzzParseExecutable(f *testing.F) {
	const bias = 0xaaaaaaab0000
	notes := append(note("CORE", 1, arm64PRStatus(9, 6, [34]uint64{})), auxvNote(3, bias+0x40, 5, 9, 9, bias+0x680)...)
	f.Add(machineCore(183, notes, nil, []seg{{bias, 0x1000, 5, nil}}))
	exe := filepath.Join(fixture.Dir(), "objects", "aarch64", "a64_chain_O2_fp")
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := coredump.Parse(data, "fuzz", &coredump.Options{Executable: exe})
		if err != nil {
			if c != nil {
				t.Fatal("Core and error both returned")
			}
			return
		}
		exercise(c)
		c.Close()
	})
}
