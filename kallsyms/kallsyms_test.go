package kallsyms

import (
	"os"
	"sort"
	"strconv"
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
	f.Add("ffffffff81000000 T a\nffffffff80000000\tt b [m]\n+1 T c\n")
	// Lines almost in the kernel's own shape (16 digits, space, type,
	// space), which the fast path must leave to the general one.
	f.Add("ffffffff8100000g T a\nffffffff81000000 \t a\nffffffff81000000 T  a\tb\nffffffff81000000 D a\nffffffff81000010 T \n ffffffff8100000 T c\n")
	f.Fuzz(func(t *testing.T, s string) {
		tab, err := Parse(strings.NewReader(s))
		if err != nil {
			return
		}
		tab.Lookup(0xffffffff81000000)
		// The fast parser keeps exactly what the plain one keeps.
		want := referenceParse(s)
		if len(tab.syms) != len(want) {
			t.Fatalf("%d symbols, reference %d", len(tab.syms), len(want))
		}
		for i := range want {
			if tab.syms[i] != want[i] {
				t.Fatalf("symbol %d: %+v, reference %+v", i, tab.syms[i], want[i])
			}
		}
	})
}

// referenceParse is the plain parser (strings.Fields, strconv, a full
// sort) that ParseBytes must agree with: the oracle for the fast one.
func referenceParse(text string) []Symbol {
	var syms []Symbol
	for _, line := range strings.Split(text, "\n") {
		// Fields are separated by ASCII blanks, as in the kernel's
		// format: a name may hold any other byte (strings.Fields would
		// also split at U+0085 or U+00A0, which no parser of the file
		// takes for a separator).
		f := strings.FieldsFunc(line, func(r rune) bool { return strings.ContainsRune(" \t\r\v\f", r) })
		if len(f) < 3 || len(f[1]) != 1 || !strings.ContainsRune("tTwW", rune(f[1][0])) {
			continue
		}
		if len(f[0]) > 16 || strings.HasPrefix(f[0], "+") || strings.HasPrefix(f[0], "-") {
			continue
		}
		addr, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			continue
		}
		s := Symbol{Addr: addr, Name: f[2]}
		if len(f) >= 4 {
			s.Module = strings.Trim(f[3], "[]")
		}
		syms = append(syms, s)
	}
	sort.SliceStable(syms, func(i, j int) bool { return syms[i].Addr < syms[j].Addr })
	var out []Symbol
	for _, s := range syms {
		if len(out) > 0 && out[len(out)-1].Addr == s.Addr {
			out[len(out)-1] = s
			continue
		}
		out = append(out, s)
	}
	return out
}

func realKallsyms(tb testing.TB) []byte {
	b, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		tb.Skipf("no /proc/kallsyms: %v", err)
	}
	if _, err := ParseBytes(b); err != nil {
		tb.Skipf("/proc/kallsyms: %v", err)
	}
	return b
}

// TestParseAgreesWithReference compares the fast parser with the plain
// one on this machine's kernel symbol table.
func TestParseAgreesWithReference(t *testing.T) {
	b := realKallsyms(t)
	tab, err := ParseBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	want := referenceParse(string(b))
	if len(tab.syms) != len(want) {
		t.Fatalf("%d symbols, reference parser %d", len(tab.syms), len(want))
	}
	for i := range want {
		if tab.syms[i] != want[i] {
			t.Fatalf("symbol %d: %+v, reference %+v", i, tab.syms[i], want[i])
		}
	}
	t.Logf("%d text symbols", len(want))
}

// BenchmarkParse parses this machine's /proc/kallsyms (read once).
func BenchmarkParse(b *testing.B) {
	text := realKallsyms(b)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseBytes(text); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseReference is the plain parser, for comparison.
func BenchmarkParseReference(b *testing.B) {
	text := string(realKallsyms(b))
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		referenceParse(text)
	}
}
