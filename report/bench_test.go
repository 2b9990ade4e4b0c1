package report

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/perfdata"
)

// BenchmarkReport reports a recording end to end (read, unwind, symbolize
// with inline frames; no output) and gives the cost per sample:
// USTACK_BENCH_DATA names the recording (scripts/bench-report.sh makes
// small, medium and large ones), else perfdata's committed dwarf.data.
// Objects' debug sections come from a section cache filled before the
// timer starts (the warm case); the mapped and the buffered reader are
// measured apart.
func BenchmarkReport(b *testing.B) {
	path, sc := benchRecording(b)
	opts := Options{Kallsyms: "-", SectionCache: sc}
	for _, mode := range []struct {
		name string
		open func(string) (*perfdata.Reader, error)
	}{{"mapped", perfdata.OpenMapped}, {"buffered", perfdata.Open}} {
		b.Run(mode.name, func(b *testing.B) {
			once := func() int {
				r, err := mode.open(path)
				if err != nil {
					b.Fatal(err)
				}
				defer r.Close()
				frames := 0
				sum, err := Run(r, opts, func(s *Sample) error { frames += len(s.Frames); return nil })
				if err != nil {
					b.Fatal(err)
				}
				if frames == 0 {
					b.Fatal("no frames")
				}
				return sum.Samples
			}
			n := once() // fills the section cache
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				once()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/sample")
			b.ReportMetric(float64(n), "samples")
		})
	}
}

// benchRecording returns the recording a report benchmark reads
// (USTACK_BENCH_DATA, else perfdata's committed dwarf.data) and an empty
// section cache for it.
func benchRecording(b *testing.B) (string, *elfcache.SectionCache) {
	path := os.Getenv("USTACK_BENCH_DATA")
	if path == "" {
		path = filepath.Join("..", "perfdata", "testdata", "dwarf.data")
	}
	sc, err := elfcache.NewSectionCache(b.TempDir(), 0)
	if err != nil {
		b.Fatal(err)
	}
	return path, sc
}
