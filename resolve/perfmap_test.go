package resolve

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParsePerfMap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perf-1.map")
	os.WriteFile(path, []byte("7f0000001000 20 first\n"+
		"0x7f0000002000 0x10 LambdaForm$MH/0x1234.invoke (with spaces)\n"+
		"garbage\n"+
		"7f0000001010 8 replaces_the_end_of_first\n"), 0o644)
	m, err := parsePerfMap(path)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		addr uint64
		name string
		off  uint64
		ok   bool
	}{
		{0x7f0000001000, "", 0, false}, // first was overlapped by a later entry
		{0x7f0000001014, "replaces_the_end_of_first", 4, true},
		{0x7f000000200f, "LambdaForm$MH/0x1234.invoke (with spaces)", 0xf, true},
		{0x7f0000002010, "", 0, false},
	}
	for _, c := range cases {
		name, off, ok := m.lookup(c.addr)
		if ok != c.ok || name != c.name || off != c.off {
			t.Errorf("lookup(%#x) = %q+%#x %v; want %q+%#x %v", c.addr, name, off, ok, c.name, c.off, c.ok)
		}
	}
}

// FuzzParsePerfMap: no perf map, however malformed, crashes the parser or
// yields an entry that is empty, wraps around or overlaps another.
func FuzzParsePerfMap(f *testing.F) {
	f.Add([]byte("7f0000001000 20 first\n0x7f0000002000 0x10 two words\n"))
	f.Add([]byte("ffffffffffffffff 2 wraps\n1 0 empty\n\n  \n10 10 a\n18 10 b\n"))
	f.Add([]byte("zz 10 x\n10 zz y\n10 10\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "perf-1.map")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		m, err := parsePerfMap(path)
		if err != nil {
			return
		}
		for i, s := range m.syms {
			if s.end <= s.start {
				t.Fatalf("entry %d: [%#x, %#x)", i, s.start, s.end)
			}
			if i > 0 && m.syms[i-1].end > s.start {
				t.Fatalf("entries %d and %d overlap", i-1, i)
			}
			if name, _, ok := m.lookup(s.start); !ok || name != s.name {
				t.Fatalf("lookup(%#x) = %q %v; want %q", s.start, name, ok, s.name)
			}
		}
	})
}
