package elfcache

import (
	"testing"
)

func libcWithDWARF(b testing.TB, opts Options) *Object {
	needFile(b, libcAMD64)
	o, err := Open(libcAMD64, opts)
	if err != nil {
		b.Fatal(err)
	}
	if d := o.DebugFile(); d == nil || d.section(".debug_info") == nil {
		o.Close()
		b.Skip("no debug file with DWARF for libc (libc6-dbg)")
	}
	return o
}

// BenchmarkSourceFramesWarm looks up addresses spread over libc once all
// their units are parsed.
func BenchmarkSourceFramesWarm(b *testing.B) {
	o := libcWithDWARF(b, Options{})
	defer o.Close()
	addrs := sampleAddrs(o, 4096, nil)
	var buf []SourceFrame
	for _, a := range addrs {
		buf = o.SourceFrames(a, buf[:0])
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		buf = o.SourceFrames(addrs[i%len(addrs)], buf[:0])
	}
}

// BenchmarkSourceFramesColdUnit parses a unit for every lookup: the cache
// holds one unit and consecutive addresses are in different units.
func BenchmarkSourceFramesColdUnit(b *testing.B) {
	o := libcWithDWARF(b, Options{LineCacheCUs: 1})
	defer o.Close()
	addrs := sampleAddrs(o, 4096, nil)
	x := o.lineIndex()
	var spread []uint64
	last := int32(-1)
	for _, a := range addrs {
		if c := x.cusFor(a)[0]; c >= 0 && c != last {
			spread = append(spread, a)
			last = c
		}
	}
	var buf []SourceFrame
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		buf = o.SourceFrames(spread[i%len(spread)], buf[:0])
	}
}

// BenchmarkSourceFramesIndex opens libc and makes the first lookup: debug
// sections read and decompressed, unit index built, one unit parsed.
func BenchmarkSourceFramesIndex(b *testing.B) {
	o := libcWithDWARF(b, Options{})
	a := o.Symbols()[len(o.Symbols())/2].Addr
	o.Close()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		o, _ := Open(libcAMD64, Options{})
		o.SourceFrames(a, nil)
		o.Close()
	}
}

// TestSourceFramesAllocs checks that warm lookups do not allocate. (How
// long the first lookup into a fresh object takes is
// BenchmarkSourceFramesIndex's to measure: a time bound in a test depends
// on how busy the machine is.)
func TestSourceFramesAllocs(t *testing.T) {
	o := libcWithDWARF(t, Options{})
	defer o.Close()
	syms := o.Symbols()
	a := syms[len(syms)/2].Addr + 4
	buf := o.SourceFrames(a, nil)
	if len(buf) == 0 {
		t.Fatalf("no frames at %#x", a)
	}
	buf = make([]SourceFrame, 0, 16)
	if n := testing.AllocsPerRun(100, func() { buf = o.SourceFrames(a, buf[:0]) }); n != 0 {
		t.Errorf("warm SourceFrames allocates %v times", n)
	}
}
