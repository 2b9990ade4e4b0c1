package elfcache

import (
	"debug/elf"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzDemangle checks that Demangle and DemangleShort never panic, returns unmangled names
// unchanged and gives valid text.
func FuzzDemangle(f *testing.F) {
	for _, s := range []string{
		"main", "_Z3fooi", "_ZN3geo4PolyC2Ei", "_ZNKSt6vectorIiSaIiEE4sizeEv",
		"_ZN4core3fmt5write17h0123456789abcdefE", "_RNvCs1234_7mycrate3foo",
		"_ZN3std3sys9backtrace28__rust_begin_short_backtrace17h04278d78974f9046E", "_ZN3foo6a$u7b$b..c$XX17h0123456789abcdefE",
		"_ZSt4sortIN9__gnu_cxx17__normal_iteratorIPiSt6vectorIiSaIiEEEEEvT_S7_",
		"_Z1fIiEvT_.cold", "_Z", "_R", "_ZZ", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		for _, f := range []struct {
			name string
			fn   func(string) string
		}{{"Demangle", Demangle}, {"DemangleShort", DemangleShort}} {
			out := f.fn(name)
			if !strings.HasPrefix(name, "_Z") && !strings.HasPrefix(name, "_R") && out != name {
				t.Fatalf("%s(%q) = %q, want it unchanged", f.name, name, out)
			}
			if utf8.ValidString(name) && !utf8.ValidString(out) {
				t.Fatalf("%s(%q) = %q: invalid UTF-8", f.name, name, out)
			}
		}
	})
}

func TestDemangle(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"main", "main"},
		{"_Z3fooi", "foo(int)"},
		{"_ZNK3geo3VecIdE3dotERKS1_", "geo::Vec<double>::dot(geo::Vec<double> const&) const"},
		{"_ZN4core3fmt5write17h0123456789abcdefE", "core::fmt::write"},
		{"_RNvCs15kBYyAo9fc_7mycrate7example", "mycrate::example"},
		{"_Z3fooi.cold", "foo(int) [clone .cold]"},
		{"_Znotmangled(", "_Znotmangled("},
		{"foo.constprop.0", "foo.constprop.0"},
	} {
		if got := Demangle(c.in); got != c.want {
			t.Errorf("Demangle(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// dwarfDamage holds a C program built by gcc with DWARF 4 and with DWARF
// 5, the .debug_* sections of each build and the addresses to query, for
// fuzz targets that damage the DWARF and query the object.
type dwarfDamage struct {
	bins  [2][]byte
	secs  [2][]struct{ off, size uint64 }
	addrs [2][]uint64
}

// newDWARFDamage builds src (C, or C++ for a file ending in .cc) with
// gcc or g++ -O2 -g -gdwarf-4 and -gdwarf-5; addrs picks each build's
// addresses to query.
func newDWARFDamage(f *testing.F, file, src string, addrs func(*Object) []uint64) *dwarfDamage {
	cc := "gcc"
	if strings.HasSuffix(file, ".cc") {
		cc = "g++"
	}
	needTool(f, cc)
	dir := f.TempDir()
	d := &dwarfDamage{}
	for i, v := range []string{"4", "5"} {
		cfile := filepath.Join(dir, file)
		os.WriteFile(cfile, []byte(src), 0o644)
		out := filepath.Join(dir, "p"+v)
		run(f, cc, "-O2", "-g", "-gdwarf-"+v, "-o", out, cfile)
		data, err := os.ReadFile(out)
		if err != nil {
			f.Fatal(err)
		}
		d.bins[i] = data
		o, err := OpenBytes("seed", data, Options{})
		if err != nil {
			f.Fatal(err)
		}
		for _, s := range o.Sections() {
			if strings.HasPrefix(s.Name, ".debug_") && s.Type != elf.SHT_NOBITS {
				d.secs[i] = append(d.secs[i], struct{ off, size uint64 }{s.Offset, s.Size})
			}
		}
		d.addrs[i] = addrs(o)
		o.Close()
	}
	return d
}

// open returns build which&1 with patch written into its section
// secIdx (modulo their number) at off (modulo its size), opened, and the
// addresses to query; false when the damaged object does not open.
func (d *dwarfDamage) open(which, secIdx uint8, off uint32, patch []byte) (*Object, []uint64, bool) {
	w := int(which) & 1
	data := append([]byte(nil), d.bins[w]...)
	s := d.secs[w][int(secIdx)%len(d.secs[w])]
	if s.size > 0 {
		at := s.off + uint64(off)%s.size
		copy(data[at:min(s.off+s.size, at+uint64(len(patch)))], patch)
	}
	o, err := OpenBytes("fuzz", data, Options{MaxSectionSize: 1 << 24})
	if err != nil {
		return nil, nil, false
	}
	return o, d.addrs[w], true
}

// FuzzSourceFrames damages the DWARF sections of a small gcc -O2 -g
// program (each input names a section, an offset and bytes to write
// there) and checks that SourceFrames neither panics nor hangs.
func FuzzSourceFrames(f *testing.F) {
	fuzzSourceFrames(f, newDWARFDamage(f, "p.c", cInline, func(o *Object) []uint64 { return sampleAddrs(o, 64, nil) }))
}

// cxxScopes has what C++ functions are named by: namespaces (one
// anonymous), classes, a template over a lambda, whose instances gcc gives
// no linkage name.
const cxxScopes = `#include <algorithm>
#include <vector>
namespace outer { namespace {
struct K {
	int v;
	template <typename F> __attribute__((noinline)) int each(F f) { int s = 0; for (int i = 0; i < v; i++) s += f(i); return s; }
};
} }
int main(int c, char **) {
	std::vector<int> xs{3, 1, 2};
	outer::K k{c + 2};
	std::for_each(xs.begin(), xs.end(), [&](int x) { k.v += x; });
	return k.each([&](int i) { return i * c; });
}
`

// FuzzSourceFramesCxx is FuzzSourceFrames on a C++ program, whose
// functions are named after the namespaces and classes they are in.
func FuzzSourceFramesCxx(f *testing.F) {
	fuzzSourceFrames(f, newDWARFDamage(f, "p.cc", cxxScopes, func(o *Object) []uint64 { return sampleAddrs(o, 64, nil) }))
}

func fuzzSourceFrames(f *testing.F, d *dwarfDamage) {
	for k := 0; k < 8; k++ {
		f.Add(uint8(k&1), uint8(k), uint32(k*37), []byte{0xff, 0x7f, 0x80, 0})
	}
	f.Fuzz(func(t *testing.T, which, secIdx uint8, off uint32, patch []byte) {
		defer failIfSlow(10 * time.Second)()
		o, addrs, ok := d.open(which, secIdx, off, patch)
		if !ok {
			return
		}
		defer o.Close()
		var buf []SourceFrame
		for _, a := range addrs {
			buf = o.SourceFrames(a, buf[:0])
		}
		o.SourceError()
	})
}

// failIfSlow panics with every goroutine's stack when the fuzz input at
// hand takes longer than d; call the returned function when done.
func failIfSlow(d time.Duration) (stop func()) {
	tm := time.AfterFunc(d, func() {
		buf := make([]byte, 1<<16)
		panic("input hangs:\n" + string(buf[:runtime.Stack(buf, true)]))
	})
	return func() { tm.Stop() }
}
