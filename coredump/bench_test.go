package coredump_test

import (
	"testing"

	"github.com/ustack/ustack/coredump"
)

func benchFixture(b *testing.B, name string) *truth {
	for _, tr := range fixtures(b) {
		if tr.Arch+"/"+tr.Name == name {
			return tr
		}
	}
	b.Fatalf("no fixture %s", name)
	return nil
}

// BenchmarkReadUint64 reads the stack words of every thread: the unwinder's
// hot path through a core's memory. It must not allocate.
func BenchmarkReadUint64(b *testing.B) {
	tr := benchFixture(b, "x86_64/threads")
	c := tr.open(b)
	var addrs []uint64
	for _, th := range c.Threads {
		sp, _ := th.Regs.Get(c.Arch.SP())
		for k := uint64(0); k < 64; k++ {
			addrs = append(addrs, sp+8*k)
		}
	}
	mem := c.Memory()
	b.ReportAllocs()
	b.ResetTimer()
	var sum uint64
	for i := 0; i < b.N; i++ {
		for _, a := range addrs {
			v, _ := mem.ReadUint64(a)
			sum += v
		}
	}
	b.ReportMetric(float64(b.N*len(addrs))/b.Elapsed().Seconds(), "words/s")
	_ = sum
}

// BenchmarkParse decodes a 6-thread core already in memory (headers, notes,
// objects and their build-ids).
func BenchmarkParse(b *testing.B) {
	tr := benchFixture(b, "x86_64/threads")
	raw := rawCore(b, tr)
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for i := 0; i < b.N; i++ {
		if _, err := coredump.Parse(raw, "bench", &coredump.Options{NoMappedFiles: true}); err != nil {
			b.Fatal(err)
		}
	}
}
