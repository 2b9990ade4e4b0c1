package perfdata

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/internal/testprog"
)

var testFiles = []string{"dwarf", "pipe"}

func loadDump(t *testing.T, name string) []*dumpRec {
	f, err := os.Open(filepath.Join("testdata", name+".dump.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	return parseDump(t, z)
}

// TestTestdata compares the committed files with perf's committed dumps.
func TestTestdata(t *testing.T) {
	for _, name := range testFiles {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("testdata", name+".data")
			dump := loadDump(t, name)
			n, ns := compareWithDump(t, path, dump)
			if ns == 0 {
				t.Fatal("no samples")
			}
			t.Logf("%s: %d records, %d samples match perf script -D", name, n, ns)
			hdr, err := os.ReadFile(filepath.Join("testdata", name+".header"))
			if err != nil {
				t.Fatal(err)
			}
			r, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for { // consume pipe-mode header records
				if _, err := r.Next(); err != nil {
					if err != io.EOF {
						t.Fatal(err)
					}
					break
				}
			}
			compareHeader(t, path, r.Session(), string(hdr))
			if r.Session().Arch() != arch.AMD64 {
				t.Errorf("arch %v", r.Session().Arch())
			}
		})
	}
}

// record runs perf record with args writing to a file in a temp dir (in
// perf's pipe mode when pipe is set), and skips the test if perf cannot
// record here.
func record(t *testing.T, pipe bool, args ...string) string {
	out := filepath.Join(t.TempDir(), "perf.data")
	if pipe {
		return testprog.RecordPipe(t, out, args...)
	}
	return testprog.Record(t, out, args...)
}

// perfDump returns perf script -D's records of path and perf report
// --header-only's header.
func perfDump(t *testing.T, path string) ([]*dumpRec, string) {
	out := testprog.Script(t, path, "-D")
	hdr := testprog.Output(t, testprog.PerfCommand(t, "report", "--header-only", "-i", path))
	return parseDump(t, strings.NewReader(out)), hdr
}

const busy = `i=0; while [ $i -lt 5000 ]; do i=$((i+1)); done`

func checkLive(t *testing.T, path string) *Session {
	dump, hdr := perfDump(t, path)
	n, ns := compareWithDump(t, path, dump)
	t.Logf("%d records, %d samples match perf script -D", n, ns)
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for {
		if _, err := r.Next(); err != nil {
			if err != io.EOF {
				t.Fatal(err)
			}
			break
		}
	}
	compareHeader(t, path, r.Session(), hdr)
	return r.Session()
}

func TestLiveDwarf(t *testing.T) {
	p := record(t, false, "-e", "cpu-clock", "-c", "100000", "--call-graph", "dwarf,4096", "--", "sh", "-c", busy)
	s := checkLive(t, p)
	if s.Attrs[0].SampleStackUser != 4096 || s.Attrs[0].SampleRegsUser != arch.AMD64.PerfMask() && s.Arch() == arch.AMD64 {
		t.Errorf("attr %+v", s.Attrs[0])
	}
}

func TestLiveTracepoint(t *testing.T) {
	testprog.Perf(t)
	testprog.NeedTracefs(t, "syscalls/sys_enter_close")
	p := record(t, false, "-e", "syscalls:sys_enter_close", "--call-graph", "dwarf,1024", "--", "sh", "-c", "cat /etc/hostname; cat /etc/hostname")
	s := checkLive(t, p)
	if s.Attrs[0].Name != "syscalls:sys_enter_close" {
		t.Errorf("name %q", s.Attrs[0].Name)
	}
	// Tracepoint samples carry RAW data.
	r, _ := Open(p)
	defer r.Close()
	raw := 0
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		if s, ok := rec.(*Sample); ok && len(s.Raw) > 0 {
			raw++
		}
	}
	if raw == 0 {
		t.Error("no tracepoint sample had RAW data")
	}
}

func TestLiveTwoEvents(t *testing.T) {
	p := record(t, false, "-e", "cpu-clock", "-e", "task-clock", "-c", "200000", "--call-graph", "dwarf,1024", "--", "sh", "-c", busy)
	s := checkLive(t, p)
	if len(s.Attrs) != 2 || s.Attrs[0].Name != "cpu-clock" || s.Attrs[1].Name != "task-clock" {
		t.Fatalf("attrs %v", s.Attrs)
	}
	// Every sample maps to one of the attrs by id.
	r, _ := Open(p)
	defer r.Close()
	per := map[string]int{}
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		if s, ok := rec.(*Sample); ok {
			if s.Attr == nil {
				t.Fatalf("sample at %#x has no attr (id %d)", s.Offset, s.ID)
			}
			per[s.EventName]++
		}
	}
	if per["cpu-clock"] == 0 || per["task-clock"] == 0 {
		t.Errorf("samples per event %v", per)
	}
	// perf's own attribution.
	out := testprog.Script(t, p, "-F", "event")
	want := map[string]int{}
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSuffix(strings.TrimSpace(l), ":"); l != "" {
			want[l]++
		}
	}
	if want["cpu-clock"] != per["cpu-clock"] || want["task-clock"] != per["task-clock"] {
		t.Errorf("samples per event %v, perf script %v", per, want)
	}
}

func TestLivePipe(t *testing.T) {
	testprog.Perf(t)
	testprog.NeedTracefs(t, "syscalls/sys_enter_close")
	p := record(t, true, "-e", "syscalls:sys_enter_close", "-e", "cpu-clock", "-c", "100000", "--call-graph", "dwarf,1024", "--", "sh", "-c", busy+"; cat /etc/hostname")
	s := checkLive(t, p)
	if !s.Pipe || len(s.Attrs) != 2 {
		t.Fatalf("pipe %v attrs %d", s.Pipe, len(s.Attrs))
	}
	// The same stream through NewReader from a plain io.Reader.
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(io.MultiReader(bytes.NewReader(data)))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		_, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no records")
	}
}

// readAll returns clones of every record and the final error.
func readAll(r *Reader) ([]Record, error) {
	var out []Record
	for {
		rec, err := r.Next()
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return out, err
		}
		out = append(out, rec.Clone())
	}
}

// TestTruncation cuts the committed files at many offsets: the reader must
// return a prefix of the intact records then an error naming an offset.
func TestTruncation(t *testing.T) {
	for _, name := range testFiles {
		data, err := os.ReadFile(filepath.Join("testdata", name+".data"))
		if err != nil {
			t.Fatal(err)
		}
		full, err := NewFileReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		all, err := readAll(full)
		if err != nil {
			t.Fatal(err)
		}
		ends := map[int64]bool{}
		for _, rec := range all {
			h := rec.Header()
			end := h.Offset + int64(h.Size)
			if a, ok := rec.(*Auxtrace); ok {
				end += int64(a.AuxSize)
			}
			ends[end] = true
		}
		cuts := 0
		for cut := 0; cut < len(data); cut += 1 + cut/97 {
			cuts++
			b := data[:cut]
			r, err := NewFileReader(bytes.NewReader(b), int64(len(b)))
			if err != nil {
				var fe *FormatError
				if !errors.As(err, &fe) {
					t.Fatalf("cut %d: open error %v is not a FormatError", cut, err)
				}
				continue
			}
			got, err := readAll(r)
			if len(got) > len(all) {
				t.Fatalf("cut %d: %d records, more than the %d intact ones", cut, len(got), len(all))
			}
			for i, rec := range got {
				h, w := rec.Header(), all[i].Header()
				if h.Offset != w.Offset || h.Type != w.Type || h.Size != w.Size || h.Time != w.Time {
					t.Fatalf("cut %d: record %d differs: %+v vs %+v", cut, i, *h, *w)
				}
			}
			if err == nil {
				// Only a pipe stream cut at a record boundary ends cleanly.
				if !r.Session().Pipe || !ends[int64(cut)] && cut != pipeHeaderSize {
					t.Fatalf("cut %d: no error after %d records", cut, len(got))
				}
				continue
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("cut %d: error %v is not a FormatError", cut, err)
			}
			if fe.Offset < 0 || fe.Offset > int64(len(data)) {
				t.Fatalf("cut %d: error offset %#x", cut, fe.Offset)
			}
		}
		t.Logf("%s: %d cuts, %d records intact", name, cuts, len(all))
	}
}

// TestDamagedSize checks records whose size field lies: reading resumes
// at the next record, every record after the damaged one is read, and
// the damage is named by its offset.
func TestDamagedSize(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "dwarf.data"))
	if err != nil {
		t.Fatal(err)
	}
	full, _ := NewFileReader(bytes.NewReader(data), int64(len(data)))
	all, _ := readAll(full)
	victim := all[len(all)/2].Header()
	for _, size := range []uint16{0, 4, 7, 0xffff} {
		b := bytes.Clone(data)
		le.PutUint16(b[victim.Offset+6:], size)
		r, err := NewFileReader(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := readAll(r)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if len(got) != len(all)-1 {
			t.Errorf("size %d: %d records read, want the %d undamaged ones", size, len(got), len(all)-1)
		}
		for i, rec := range got {
			want := all[i]
			if i >= len(all)/2 {
				want = all[i+1]
			}
			if rec.Header().Offset != want.Header().Offset {
				t.Fatalf("size %d: record %d at %#x, want %#x", size, i, rec.Header().Offset, want.Header().Offset)
			}
		}
		d := r.Damages()
		next := all[len(all)/2+1].Header().Offset
		if len(d) != 1 || d[0].Offset != victim.Offset || d[0].Resume != next || d[0].Skipped() != next-victim.Offset {
			t.Errorf("size %d: damage %v, want one at %#x resuming at %#x", size, d, victim.Offset, next)
		}
	}
}

// TestUnfinishedHeader: perf record writes the file header as it starts,
// its feature bits set, and the data size (and the feature sections after
// the data) only as it ends. Killed, it leaves data size 0, the bits set
// and no section: perf script reads nothing ("Was the 'perf record'
// command properly terminated?"), and ustack took the first record for a
// feature table ("feature section ... exceeds file size"), 0 samples.
// Such a file (dwarf.data cut after its data, its data size zeroed) now
// gives every record of the data, then an error that says what happened.
func TestUnfinishedHeader(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "dwarf.data"))
	if err != nil {
		t.Fatal(err)
	}
	full, err := NewFileReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	want, err := readAll(full)
	if err != nil {
		t.Fatal(err)
	}
	s := full.Session()
	killed := bytes.Clone(data[:s.DataOffset+s.DataSize])
	le.PutUint64(killed[48:], 0)
	r, err := NewFileReader(bytes.NewReader(killed), int64(len(killed)))
	if err != nil {
		t.Fatalf("the unfinished header is refused: %v", err)
	}
	got, err := readAll(r)
	if err == nil || !strings.Contains(err.Error(), "the header was never finished") {
		t.Errorf("after the records: %v; want an error saying the header was never finished", err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d records, want the intact file's %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Header().Type != want[i].Header().Type || got[i].Header().Offset != want[i].Header().Offset {
			t.Fatalf("record %d: %v at %#x, want %v at %#x", i, got[i].Header().Type, got[i].Header().Offset, want[i].Header().Type, want[i].Header().Offset)
		}
	}
}
