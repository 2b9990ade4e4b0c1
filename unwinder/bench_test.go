package unwinder_test

import (
	"path/filepath"
	"testing"

	"github.com/ustack/ustack/internal/fixture"
	"github.com/ustack/ustack/unwinder"
)

// benchFixture unwinds one committed capture repeatedly with a warm cache and
// reports the cost per frame: wall clock (ns/frame) and, where known, the
// process's CPU time (cpu-ns/frame), which a loaded machine inflates less.
//
// It takes turns with benchCaches Caches, which lie at different offsets in
// their pages: the unwinder stores the registers it restores into the
// Cache and loads the saved ones from the stack, and where the two
// addresses agree in their low 12 bits a load waits for the store (4K
// aliasing). One Cache would see that on every frame or on none, by the
// chance of where it was allocated: 8.4 or 10.8 ns a frame on arm64's
// fixture, 10.8 or 15.8 on the x86 signal one read as Segments. A tracer's
// Caches meet stacks at every offset; the benchmark averages over eight.
func benchFixture(b *testing.B, archName, name string) { benchFixtureMemory(b, archName, name, false) }

// benchFixtureMemory is benchFixture, reading the captured memory as
// core-dump Segments when segments is true.
func benchFixtureMemory(b *testing.B, archName, name string, segments bool) {
	f, err := fixture.Load(filepath.Join(fixture.Dir(), "fixtures", archName, name+".json"))
	if err != nil {
		b.Skip(err)
	}
	cache := f.NewCache()
	defer cache.Close()
	p, err := f.Prepare(cache)
	if err != nil {
		b.Fatal(err)
	}
	u := unwinder.New(p.Arch, unwinder.Options{})
	frames := make([]unwinder.Frame, 256)
	caches := make([]unwinder.Cache, benchCaches)
	var mem unwinder.Memory = &p.Stack
	if segments {
		mem = stackSegments(b, &p.Stack)
	}
	for i := range caches {
		res := u.Unwind(&caches[i], p.Space, &p.Regs, mem, frames) // warm up
		if res.Frames < 2 {
			b.Fatalf("only %d frames (%v)", res.Frames, res.Stop)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, cpuOK := processCPU()
	total := 0
	for i := 0; i < b.N; i++ {
		total += u.Unwind(&caches[i%benchCaches], p.Space, &p.Regs, mem, frames).Frames
	}
	cpu1, _ := processCPU()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(total), "ns/frame")
	b.ReportMetric(float64(total)/float64(b.N), "frames/op")
	if cpuOK {
		b.ReportMetric(float64(cpu1-cpu0)/float64(total), "cpu-ns/frame")
	}
}

// benchCaches is how many Caches benchFixture takes turns with.
const benchCaches = 8

func BenchmarkUnwindX86SyscallGCC(b *testing.B) { benchFixture(b, "x86_64", "syscall_gcc_O2") }
func BenchmarkUnwindX86Signal(b *testing.B)     { benchFixture(b, "x86_64", "signal_handler") }
func BenchmarkUnwindX86Recursion(b *testing.B)  { benchFixture(b, "x86_64", "recursion_truncated") }
func BenchmarkUnwindX86Go(b *testing.B)         { benchFixture(b, "x86_64", "go_program") }
func BenchmarkUnwindARM64Syscall(b *testing.B)  { benchFixture(b, "aarch64", "a64_syscall_O2_nofp") }
func BenchmarkUnwindARM64PAC(b *testing.B)      { benchFixture(b, "aarch64", "a64_pac") }
func BenchmarkUnwindARM64Recursion(b *testing.B) {
	benchFixture(b, "aarch64", "a64_recursion_truncated")
}

// The same captures read as a core dump's memory (Segments).
func BenchmarkUnwindSegmentsX86Signal(b *testing.B) {
	benchFixtureMemory(b, "x86_64", "signal_handler", true)
}
func BenchmarkUnwindSegmentsX86SyscallGCC(b *testing.B) {
	benchFixtureMemory(b, "x86_64", "syscall_gcc_O2", true)
}
