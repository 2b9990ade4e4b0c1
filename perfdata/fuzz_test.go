package perfdata

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"reflect"
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
	defer func(size int) { chunkBytes = size }(chunkBytes)
	chunkBytes = 4096
	f.Fuzz(func(t *testing.T, data []byte) {
		open := func() (*Reader, error) { return NewFileReader(bytes.NewReader(data), int64(len(data))) }
		drain(t, open)
		// Read in (small) chunks, the records and the errors are those of
		// the buffered reader, damaged input included.
		want, wantErr := fuzzRecords(open, false)
		got, gotErr := fuzzRecords(open, true)
		if wantErr != gotErr || len(want) != len(got) {
			t.Fatalf("in chunks: %d records, error %q; buffered: %d, %q", len(got), gotErr, len(want), wantErr)
		}
		for i := range want {
			if !reflect.DeepEqual(want[i], got[i]) {
				t.Fatalf("record %d in chunks: %+v; buffered: %+v", i, got[i], want[i])
			}
		}
	})
}

// fuzzRecords returns copies of the records a Sorter gives, the reader in
// chunks or buffered, releasing each sample once copied.
func fuzzRecords(open func() (*Reader, error), chunked bool) ([]Record, string) {
	r, err := open()
	if err != nil {
		return nil, err.Error()
	}
	if chunked && !r.s.Pipe {
		r.free = make(chan *chunk, freeChunks)
	}
	s := NewSorter(r, 4096)
	var out []Record
	for len(out) < 1<<16 {
		rec, err := s.Next()
		if err != nil {
			if err == io.EOF {
				return out, ""
			}
			return out, err.Error()
		}
		out = append(out, rec.Clone())
		if smp, ok := rec.(*Sample); ok {
			smp.Release()
		}
	}
	return out, "many"
}

func FuzzPipeReader(f *testing.F) {
	seed(f, "pipe.data", 1024, 6144, 12288)
	f.Fuzz(func(t *testing.T, data []byte) {
		drain(t, func() (*Reader, error) { return NewReader(io.MultiReader(bytes.NewReader(data))) })
	})
}
