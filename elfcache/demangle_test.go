package elfcache

import (
	"debug/elf"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

// rustNames is a Rust program whose legacy-mangled symbols carry the
// escapes (rustc mangles a crate's own symbols legacy-style by default;
// $LT$, $GT$, $u7b$, $u20$, $C$, ..) and the identifiers with
// leading underscores (std's __rust_begin_short_backtrace) Demangle must
// read as rustc-demangle does.
const rustNames = `
// black_box without std::hint (Rust 1.66), for older rustc.
#[inline(never)] fn black_box(x: u64) -> u64 { unsafe { std::ptr::read_volatile(&x) } }
trait Shape { fn area(&self) -> u64; }
struct Sq<T>(T);
impl<T: Copy + Into<u64>> Shape for Sq<T> {
    #[inline(never)] fn area(&self) -> u64 { let v: u64 = self.0.into(); v * v }
}
#[inline(never)] fn __two_leading(x: u64) -> u64 { black_box(x) + 1 }
#[inline(never)] fn _one_leading(x: u64) -> u64 { black_box(x) + 2 }
fn main() {
    let s: Vec<Box<dyn Shape>> = vec![Box::new(Sq(3u8)), Box::new(Sq(4u32))];
    let f = |k: u64| __two_leading(k) + _one_leading(k);
    let n: u64 = s.iter().map(|x| x.area()).map(f).sum();
    std::thread::spawn(move || println!("{}", n)).join().unwrap();
}
`

// TestDemangleRustLegacyMatchesCxxfilt demangles every legacy Rust symbol
// of a program rustc builds (the program's and std's) and compares each
// with c++filt's (binutils', by rustc-demangle's rules) without the hash,
// as gdb prints them; DemangleShort, what the report prints, too.
func TestDemangleRustLegacyMatchesCxxfilt(t *testing.T) {
	dir := t.TempDir()
	bin := testprog.BuildRust(t, dir, "names.rs", rustNames, "-C", "opt-level=1")
	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	syms, err := f.Symbols()
	require.NoError(t, err)
	var names []string
	seen := map[string]bool{}
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "_ZN") && regexp.MustCompile(`17h[0-9a-f]{16}E$`).MatchString(s.Name) && !seen[s.Name] {
			seen[s.Name] = true
			names = append(names, s.Name)
		}
	}
	require.NotEmpty(t, names, "%s: no legacy Rust symbols", bin)
	want := strings.Split(strings.TrimSuffix(testprog.Tool(t, "", "c++filt", names...), "\n"), "\n")
	require.Len(t, want, len(names), "c++filt printed one line per name")
	hash := regexp.MustCompile(`::h[0-9a-f]{16}$`)
	checked := map[string]bool{}
	for i, n := range names {
		w := hash.ReplaceAllString(want[i], "")
		if w == want[i] {
			t.Logf("c++filt kept %s as %s: not a Rust name to it", n, want[i])
			continue
		}
		assert.Equal(t, w, Demangle(n), "Demangle(%q)", n)
		assert.Equal(t, w, DemangleShort(n), "DemangleShort(%q)", n)
		for _, part := range []string{"__rust_begin_short_backtrace", "::__two_leading", "::_one_leading", "{{closure}}", " as "} {
			if strings.Contains(w, part) {
				checked[part] = true
			}
		}
	}
	for _, part := range []string{"__rust_begin_short_backtrace", "::__two_leading", "::_one_leading", "{{closure}}", " as "} {
		assert.True(t, checked[part], "no symbol of %s has %q: the test checks less than it should", bin, part)
	}
}

func TestDemangleRustLegacyCases(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"_ZN3std3sys9backtrace28__rust_begin_short_backtrace17h04278d78974f9046E", "std::sys::backtrace::__rust_begin_short_backtrace"},
		{"_ZN3std2rt10lang_start28_$u7b$$u7b$closure$u7d$$u7d$17h147f73aa2703ef75E", "std::rt::lang_start::{{closure}}"},
		{"_ZN70_$LT$alloc..vec..Vec$LT$T$C$A$GT$$u20$as$u20$core..ops..drop..Drop$GT$4drop17h0123456789abcdefE",
			"<alloc::vec::Vec<T,A> as core::ops::drop::Drop>::drop"},
		{"_ZN4core3ptr13drop_in_place17h0123456789abcdefE", "core::ptr::drop_in_place"},
		// An escape rustc-demangle does not know is left as it is.
		{"_ZN3foo6a$XX$b17h0123456789abcdefE", "foo::a$XX$b"},
		// Not Rust: the hash is not one (too few distinct digits), a
		// length runs past the end, no hash at all.
		{"_ZN3foo17h0000000000000000E", "foo::h0000000000000000"},
		{"_ZN3geo4PolyC2Ei", "geo::Poly::Poly(int)"},
	} {
		assert.Equal(t, c.want, Demangle(c.in), "Demangle(%q)", c.in)
	}
	// Without parameters, as perf prints C++ names (c++filt -p).
	for _, c := range []struct{ in, want string }{
		{"_ZN3app4deepIlLi0EEET_RKNS_3BoxIS1_EEi", "app::deep<long, 0>"},
		{"_ZNKSt8functionIFiiEEclEi", "std::function<int (int)>::operator()"},
		{"_Z3fooi.cold", "foo"},
		{"_ZN3std3sys9backtrace28__rust_begin_short_backtrace17h04278d78974f9046E", "std::sys::backtrace::__rust_begin_short_backtrace"},
		{"_RNvCs15kBYyAo9fc_7mycrate7example", "mycrate::example"},
		{"main", "main"},
	} {
		assert.Equal(t, c.want, DemangleShort(c.in), "DemangleShort(%q)", c.in)
	}
	for _, s := range []string{"_ZN99foo17h0123456789abcdefE", "_ZN17h0123456789abcdefE", "_ZN3f\xffo17h0123456789abcdefE"} {
		_, ok := demangleRustLegacy(s)
		assert.False(t, ok, "demangleRustLegacy(%q)", s)
	}
}
