package elfcache

import (
	"testing"
)

// BenchmarkSymbolize looks up addresses spread over libc's functions.
func BenchmarkSymbolize(b *testing.B) {
	needFile(b, libcAMD64)
	o, err := Open(libcAMD64, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	syms := o.Symbols()
	addrs := make([]uint64, 4096)
	for i := range addrs {
		s := syms[(i*7919)%len(syms)]
		addrs[i] = s.Addr + s.Size/2
	}
	b.ReportAllocs()
	b.ResetTimer()
	var hits int
	for i := 0; i < b.N; i++ {
		if _, _, ok := o.Symbolize(addrs[i&4095]); ok {
			hits++
		}
	}
	if hits != b.N {
		b.Fatalf("%d of %d found", hits, b.N)
	}
}

// TestSymbolizeAllocs checks that Symbolize allocates nothing once the
// table is built.
func TestSymbolizeAllocs(t *testing.T) {
	needFile(t, libcAMD64)
	o := mustOpen(t, libcAMD64, Options{})
	o.Symbolize(0)
	syms := o.Symbols()
	a := syms[len(syms)/2].Addr + 1
	if n := testing.AllocsPerRun(100, func() { o.Symbolize(a) }); n != 0 {
		t.Errorf("Symbolize allocates %v times", n)
	}
}

// BenchmarkBuildSymtab builds libc's symbol table (its debug file's
// .symtab merged with .dynsym), as the first Symbolize of a report does.
func BenchmarkBuildSymtab(b *testing.B) {
	o, owner := openLibcSymtab(b)
	cands, err := owner.readSymtab(".symtab", nil)
	if err != nil {
		b.Fatal(err)
	}
	if cands, err = o.readSymtab(".dynsym", cands); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d candidates", len(cands))
	buf := make([]candidate, len(cands))
	b.ReportAllocs()
	for b.Loop() {
		copy(buf, cands)
		buildSymtab(buf)
	}
}

// BenchmarkBuildFuncNames builds libc's index of function names (its
// .dynsym and its debug file's .symtab), as the first FunctionNamed of a
// report does without a section cache.
func BenchmarkBuildFuncNames(b *testing.B) {
	o, owner := openLibcSymtab(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := buildFuncNames(o, owner); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadSymtab reads libc's function symbols (its debug file's
// .symtab, then .dynsym) into candidates, the first half of building its
// symbol table.
func BenchmarkReadSymtab(b *testing.B) {
	o, owner := openLibcSymtab(b)
	b.ReportAllocs()
	for b.Loop() {
		cands, err := owner.readSymtab(".symtab", nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err = o.readSymtab(".dynsym", cands); err != nil {
			b.Fatal(err)
		}
	}
}

// openLibcSymtab opens libc and returns it with the object whose .symtab
// is read (its debug file when there is one); both close when b ends.
func openLibcSymtab(b *testing.B) (o, owner *Object) {
	needFile(b, libcAMD64)
	o, err := Open(libcAMD64, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { o.Close() })
	owner = o
	if d := o.DebugFile(); d != nil {
		owner = d
	}
	return o, owner
}
