package perfdata

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dirRecord is what the directory test compares of a record.
type dirRecord struct {
	typ  RecordType
	time uint64
	ip   uint64
}

// dirRecords reads r through a Sorter, leaving out FINISHED_ROUND, and
// returns its records and the error that ended them (nil for io.EOF).
func dirRecords(t *testing.T, r *Reader) ([]dirRecord, error) {
	t.Helper()
	s := NewSorter(r, 0)
	var out []dirRecord
	for {
		rec, err := s.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		h := rec.Header()
		if h.Type == RecordFinishedRound {
			continue
		}
		d := dirRecord{typ: h.Type, time: h.Time}
		if x, ok := rec.(*Sample); ok {
			d.ip, d.time = x.IP, x.Time
		}
		out = append(out, d)
	}
}

// TestDirectoryFormat lays the records of dwarf.data out as perf record
// --threads does: a data file with the header, attrs and features and no
// records, its samples in data.0 and its side-band records (MMAP2, COMM,
// FORK, EXIT) in data.1, so that a sample's mapping is read after it; an
// empty data.2, and a data.3 of garbage. Read through a Sorter, the
// directory gives the file's records in the file's own timestamp order,
// then data.3's error, under its name: its damage costs nothing else.
func TestDirectoryFormat(t *testing.T) {
	src := filepath.Join("testdata", "dwarf.data")
	r, err := Open(src)
	if err != nil {
		t.Fatal(err)
	}
	want, err := dirRecords(t, r)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()

	r, err = Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var samples, side []byte
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch rec.Header().Type {
		case RecordSample:
			samples = append(samples, r.RawRecord()...)
		case RecordMmap, RecordMmap2, RecordComm, RecordFork, RecordExit:
			side = append(side, r.RawRecord()...)
		}
	}
	if len(samples) == 0 || len(side) == 0 {
		t.Fatalf("%s: %d bytes of samples, %d of side-band records", src, len(samples), len(side))
	}
	dir := filepath.Join(t.TempDir(), "perf.data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	s := r.Session()
	feat := s.Features
	w, err := NewWriter(f, s.Attrs, &feat)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	garbage := make([]byte, 4096)
	for i := range garbage {
		garbage[i] = byte(i*7 + 3)
	}
	for name, b := range map[string][]byte{"data.0": samples, "data.1": side, "data.2": nil, "data.3": garbage} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	got, err := dirRecords(t, d)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "data.3")) {
		t.Errorf("the records end with %v: want data.3's damage", err)
	}
	var kept []dirRecord
	for _, x := range want {
		switch x.typ {
		case RecordSample, RecordMmap, RecordMmap2, RecordComm, RecordFork, RecordExit:
			kept = append(kept, x)
		}
	}
	if len(got) != len(kept) {
		t.Fatalf("the directory gives %d records, the file %d of those types", len(got), len(kept))
	}
	for i := range got {
		if got[i] != kept[i] {
			t.Fatalf("record %d: %+v, the file's %+v", i, got[i], kept[i])
		}
	}
}
