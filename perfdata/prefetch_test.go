package perfdata

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// TestLargeMappedRecording reads a recording many times the prefetcher's
// window (and the reader's drop step), mapped, and checks every record
// against what was written: the pages mapped ahead and dropped behind are
// the file's, in order, the pages behind are dropped (by the prefetching
// goroutine), and Close stops the goroutine before the mapping goes.
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
		if i == n*3/4 {
			checkMappedRSS(t, r, st.Size())
		}
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

// checkMappedRSS checks, three quarters into the recording, that what of r's
// mapping is resident is about the prefetcher's window and the reader's
// drop lag, not everything read so far: the goroutine dropped the pages
// behind. It waits for the goroutine, which may be behind on a busy machine.
func checkMappedRSS(t *testing.T, r *Reader, size int64) {
	t.Helper()
	want := int64(prefetchAhead + dropLag + 2*dropStep)
	if size*3/4 < 2*want {
		t.Fatalf("the recording (%d bytes) is too small to tell dropped pages", size)
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(r.mm)))
	var rss int64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var ok bool
		rss, ok = mappingRSS(start)
		if !ok {
			// Only this check needs smaps: the records are still
			// checked to the end.
			t.Log("no /proc/self/smaps entry for the mapping here: resident set not checked")
			return
		}
		if rss <= want || time.Now().After(deadline) {
			break
		}
	}
	if rss > want {
		t.Errorf("%d KB of the mapping resident after reading %d KB; want at most %d KB", rss>>10, size*3/4>>10, want>>10)
	}
}

// mappingRSS returns the resident bytes of this process's mapping that starts
// at start, from /proc/self/smaps.
func mappingRSS(start uintptr) (int64, bool) {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, false
	}
	prefix := fmt.Sprintf("%x-", start)
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			in = strings.HasPrefix(line, prefix)
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			var kb int64
			if _, err := fmt.Sscanf(line, "Rss: %d kB", &kb); err != nil {
				return 0, false
			}
			return kb << 10, true
		}
	}
	return 0, false
}
