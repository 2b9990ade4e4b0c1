package perfdata

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func seed(f *testing.F, name string, sizes ...int) {
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		f.Fatal(err)
	}
	for _, n := range sizes {
		f.Add(data[:min(n, len(data))])
	}
}

// drain reads every record, clones some and runs the Sorter over a second
// reader, checking that nothing panics or loops.
func drain(t *testing.T, open func() (*Reader, error)) {
	r, err := open()
	if err != nil {
		return
	}
	for i := 0; ; i++ {
		rec, err := r.Next()
		if err != nil {
			break
		}
		if i%7 == 0 {
			rec.Clone()
		}
		if s, ok := rec.(*Sample); ok {
			SplitCallchain(s.Callchain)
			UserCallchain(s.Callchain)
			s.Stack()
		}
	}
	r, err = open()
	if err != nil {
		t.Fatalf("second open failed: %v", err)
	}
	s := NewSorter(r, 4096)
	for {
		if _, err := s.Next(); err != nil {
			break
		}
	}
}

func FuzzReader(f *testing.F) {
	seed(f, "dwarf.data", 2048, 6144, 1<<20)
	f.Fuzz(func(t *testing.T, data []byte) {
		drain(t, func() (*Reader, error) { return NewFileReader(bytes.NewReader(data), int64(len(data))) })
	})
}

func FuzzPipeReader(f *testing.F) {
	seed(f, "pipe.data", 1024, 6144, 12288)
	f.Fuzz(func(t *testing.T, data []byte) {
		drain(t, func() (*Reader, error) { return NewReader(io.MultiReader(bytes.NewReader(data))) })
	})
}
