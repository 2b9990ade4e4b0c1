package perfdata

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// benchFile returns a perf.data to read: a fresh recording (a few MB of
// dwarf samples) when perf works here, else the small committed file.
func benchFile(b *testing.B) []byte {
	if perf, err := exec.LookPath("perf"); err == nil {
		out := filepath.Join(b.TempDir(), "bench.data")
		cmd := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-c", "50000", "--call-graph", "dwarf,8192",
			"-o", out, "--", "sh", "-c", `i=0; while [ $i -lt 40000 ]; do i=$((i+1)); done`)
		if cmd.Run() == nil {
			if data, err := os.ReadFile(out); err == nil {
				b.Logf("benchmark file: fresh recording, %d bytes", len(data))
				return data
			}
		}
	}
	data, err := os.ReadFile(filepath.Join("testdata", "dwarf.data"))
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("benchmark file: testdata/dwarf.data, %d bytes", len(data))
	return data
}

func BenchmarkReadSamples(b *testing.B) {
	data := benchFile(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	recs := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := NewFileReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			b.Fatal(err)
		}
		for {
			rec, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			if s, ok := rec.(*Sample); ok && len(s.Regs) > 100 {
				b.Fatal("regs")
			}
			recs++
		}
	}
	b.ReportMetric(float64(recs)/float64(b.N), "records/op")
}

// TestSampleAllocs checks that decoding a sample does not allocate once the
// reader's buffers have grown.
func TestSampleAllocs(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "dwarf.data"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewFileReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var off int64 = -1
	var body []byte
	var h RecordHeader
	for {
		rec, err := r.Next()
		if err != nil {
			t.Fatal("no sample with user regs")
		}
		if s, ok := rec.(*Sample); ok && len(s.Regs) > 0 && len(s.Callchain) > 0 {
			off = s.Offset
			body = bytes.Clone(r.RawRecord()[8:])
			h = RecordHeader{Type: s.Type, Misc: s.Misc, Size: s.Size, Offset: off}
			break
		}
	}
	n := testing.AllocsPerRun(100, func() {
		if _, err := r.decodeSample(h, body); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("decoding a sample allocates %v times", n)
	}
}
