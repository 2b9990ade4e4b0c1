package kallsyms

import (
	"strings"
	"testing"
)

const sample = `0000000000000000 A fixed_percpu_data
ffffffff81000000 T _stext
ffffffff81000000 T startup_64
ffffffff81001000 t __pfx_helper
ffffffff81001010 t helper
ffffffff81001010 T helper_alias
ffffffff81002000 D some_data
ffffffffc0001000 t mod_func	[ext4]
garbage line
`

func TestLookup(t *testing.T) {
	tab, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		addr   uint64
		name   string
		off    uint64
		module string
	}{
		{0xffffffff81000005, "startup_64", 5, ""}, // the last alias listed
		{0xffffffff81001010, "helper_alias", 0, ""},
		{0xffffffff81001fff, "helper_alias", 0xfef, ""},
		{0xffffffff81002010, "helper_alias", 0x1000, ""}, // data symbols are not text
		{0xffffffffc0001004, "mod_func", 4, "ext4"},
	}
	for _, c := range cases {
		s, off, ok := tab.Lookup(c.addr)
		if !ok || s.Name != c.name || off != c.off || s.Module != c.module {
			t.Errorf("Lookup(%#x) = %+v+%#x %v; want %s+%#x [%s]", c.addr, s, off, ok, c.name, c.off, c.module)
		}
	}
	if _, _, ok := tab.Lookup(0x1000); ok {
		t.Errorf("address below every symbol resolved")
	}
	if _, err := Parse(strings.NewReader("0000000000000000 T a\n0000000000000000 t b\n")); err == nil {
		t.Errorf("zeroed table accepted")
	}
}

func FuzzParse(f *testing.F) {
	f.Add(sample)
	f.Fuzz(func(t *testing.T, s string) {
		tab, err := Parse(strings.NewReader(s))
		if err == nil {
			tab.Lookup(0xffffffff81000000)
		}
	})
}
