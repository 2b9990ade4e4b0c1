package perfdata

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestLargeMappedRecording reads a recording many times the prefetcher's
// window (and the reader's drop step), mapped, and checks every record
// against what was written: the pages mapped ahead and dropped behind are
// the file's, in order, and Close stops the prefetching goroutine before
// the mapping goes.
func TestLargeMappedRecording(t *testing.T) {
	attr := &Attr{Type: TypeSoftware, SamplePeriod: 1, SampleType: SampleIdentifier | SampleTID | SampleTime,
		Flags: AttrSampleIDAll, Name: "cpu-clock"}
	path := filepath.Join(t.TempDir(), "large.data")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(f, []*Attr{attr}, &Features{Arch: "x86_64"})
	if err != nil {
		t.Fatal(err)
	}
	a := w.Attrs()[0]
	const n = 400_000 // about 22 MB of COMM records
	name := func(i int) string { return fmt.Sprintf("t%07d", i) }
	for i := 0; i < n; i++ {
		c := &Comm{RecordHeader: RecordHeader{Attr: a, SampleIDFields: SampleIDFields{Pid: uint32(i), Tid: uint32(i), Time: uint64(i)}},
			Pid: uint32(i), Tid: uint32(i), Comm: name(i)}
		if err := w.WriteComm(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() < 5*prefetchAhead {
		t.Fatalf("the recording is %d bytes: not several prefetch windows", st.Size())
	}
	r, err := OpenMapped(path)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Mapped() {
		t.Skip("the recording is not mapped here: nothing to prefetch")
	}
	i := 0
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		c, ok := rec.(*Comm)
		if !ok {
			continue
		}
		if c.Pid != uint32(i) || c.Comm != name(i) || c.Time != uint64(i) {
			t.Fatalf("record %d: pid %d comm %q time %d", i, c.Pid, c.Comm, c.Time)
		}
		i++
	}
	if i != n {
		t.Fatalf("%d COMM records read, %d written", i, n)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if r.pf.reqs != nil {
		t.Fatal("the prefetching goroutine outlived Close")
	}
}
