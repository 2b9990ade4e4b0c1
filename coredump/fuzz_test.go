package coredump_test

import (
	"testing"

	"github.com/ustack/ustack/coredump"
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
