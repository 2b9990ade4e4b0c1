package report

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/perfdata"
)

// The damaged-recording tests corrupt a small real perf.data systematically
// (truncation at every record boundary and at offsets inside records, bit
// flips with a fixed seed, zeroed 4 KiB blocks, record size fields that lie)
// and check that Run neither panics nor hangs, reports every sample that lies
// entirely before the damage exactly as it reports it from the intact file,
// and says where reading stopped.
//
// What "before the damage" means: a sample record that ends at or before the
// first damaged byte. Damage to the file header or the attribute section
// (before the data section) leaves nothing that must survive. Damage to the
// feature sections after the data (event names, build-ids) may legitimately
// change how samples are named, so there only the absence of a panic or hang
// is checked, plus that a truncation is reported.

const damagedData = "../perfdata/testdata/dwarf.data"

// damageRecord is one record of the intact file, in file order.
type damageRecord struct {
	off, end int64
	typ      perfdata.RecordType
	key      string // samples: time/tid/cpu
}

type damageRun struct {
	texts   []string          // every emitted sample's text, in order
	byKey   map[string]string // intact run only
	sum     *Summary
	openErr error // the header could not be read
	runErr  error
}

func sampleKey(time uint64, tid, cpu uint32) string {
	return fmt.Sprintf("%d/%d/%d", time, tid, cpu)
}

// scanRecords lists the records of an intact file and the end of its data.
func scanRecords(t testing.TB, data []byte) ([]damageRecord, int64) {
	t.Helper()
	r, err := perfdata.NewFileReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var recs []damageRecord
	var end int64
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		h := rec.Header()
		d := damageRecord{off: h.Offset, end: h.Offset + int64(h.Size), typ: h.Type}
		if s, ok := rec.(*perfdata.Sample); ok {
			d.key = sampleKey(s.Time, s.Tid, s.CPU)
		}
		recs = append(recs, d)
		end = d.end
	}
	return recs, end
}

// runDamaged reports data as `ustack report` would, with a time limit.
func runDamaged(t *testing.T, data []byte, what string) *damageRun {
	t.Helper()
	sections := testSections(t)
	done := make(chan *damageRun, 1)
	go func() {
		out := &damageRun{byKey: map[string]string{}}
		defer func() {
			if p := recover(); p != nil {
				out.runErr = fmt.Errorf("panic: %v", p)
				done <- out
			}
		}()
		r, err := perfdata.NewFileReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			out.openErr = err
			done <- out
			return
		}
		var names []string
		for _, a := range r.Session().Attrs {
			names = append(names, a.Name)
		}
		var buf bytes.Buffer
		tw := NewTextWriter(&buf, EventWidth(names), false)
		out.sum, out.runErr = Run(r, Options{Kallsyms: "-", SymFS: symfsForDamage, Jobs: 2, NoInline: true, SectionCache: sections, Cache: testCache(t, symfsForDamage)}, func(s *Sample) error {
			buf.Reset()
			if err := tw.Write(s); err != nil {
				return err
			}
			tw.Flush()
			text := buf.String()
			out.texts = append(out.texts, text)
			out.byKey[sampleKey(s.Time, s.Tid, s.CPU)] = text
			return nil
		})
		done <- out
	}()
	select {
	case out := <-done:
		if out.runErr != nil && strings.HasPrefix(out.runErr.Error(), "panic:") {
			t.Fatalf("%s: %v", what, out.runErr)
		}
		return out
	case <-time.After(testprog.Timeout):
		t.Fatalf("%s: report did not finish in %v", what, testprog.Timeout)
		return nil
	}
}

// symfsForDamage is where objects are looked for: the host's root, so that
// the stacks are unwound and symbolized as far as this machine allows; the
// comparison is between two runs on the same machine.
var symfsForDamage = ""

type damageFixture struct {
	data     []byte
	recs     []damageRecord
	dataOff  int64 // first record
	dataEnd  int64 // end of the last record
	clean    *damageRun
	nSamples int
	// nFeatures is the number of entries of the feature table at dataEnd.
	nFeatures int
}

func loadDamageFixture(t *testing.T) *damageFixture {
	t.Helper()
	return loadDamageFixtureFrom(t, damagedData)
}

func loadDamageFixtureFrom(t *testing.T, path string) *damageFixture {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f := &damageFixture{data: data}
	f.recs, f.dataEnd = scanRecords(t, data)
	f.dataOff = f.recs[0].off
	if int64(len(data)) >= 104 {
		for _, w := range [4]uint64{le64(data[72:]), le64(data[80:]), le64(data[88:]), le64(data[96:])} {
			f.nFeatures += bits.OnesCount64(w)
		}
	}
	f.clean = runDamaged(t, data, "intact")
	if f.clean.openErr != nil || f.clean.runErr != nil || f.clean.sum.DecodeError != nil {
		t.Fatalf("intact file: open %v, run %v, decode %v", f.clean.openErr, f.clean.runErr, f.clean.sum.DecodeError)
	}
	for _, r := range f.recs {
		if r.key != "" {
			f.nSamples++
			if _, ok := f.clean.byKey[r.key]; !ok {
				t.Fatalf("sample %s at %#x not reported from the intact file", r.key, r.off)
			}
		}
	}
	if f.nSamples == 0 || len(f.clean.texts) != f.nSamples {
		t.Fatalf("intact file: %d samples reported, %d recorded", len(f.clean.texts), f.nSamples)
	}
	return f
}

// check verifies a damaged run whose first damaged byte is at off: every
// sample that ends at or before off is reported exactly as from the intact
// file, in the same order. It returns how many intact samples it compared.
func (f *damageFixture) check(t *testing.T, got *damageRun, off int64, what string) (checked int) {
	t.Helper()
	if got.runErr != nil {
		t.Errorf("%s: Run failed instead of reporting a partial recording: %v", what, got.runErr)
		return
	}
	if off < f.dataOff || off >= f.dataEnd {
		return
	}
	if got.openErr != nil {
		t.Errorf("%s: damage in the data section at %#x, but the header was refused: %v", what, off, got.openErr)
		return
	}
	if got.sum.DecodeError != nil {
		var fe *perfdata.FormatError
		if !errors.As(got.sum.DecodeError, &fe) || fe.Offset < f.dataOff && fe.Offset != 0 {
			t.Errorf("%s: decode error does not name an offset in the data: %v", what, got.sum.DecodeError)
		}
	}
	next := 0 // position in got.texts
	for _, r := range f.recs {
		if r.key == "" {
			continue
		}
		if r.end > off {
			break
		}
		want := f.clean.byKey[r.key]
		for next < len(got.texts) && got.texts[next] != want {
			next++
		}
		if next == len(got.texts) {
			have := got.byKey[r.key]
			t.Errorf("%s: intact sample %s at %#x..%#x (damage at %#x) not reported as before.\nwant:\n%s\ngot:\n%s\nsummary: decode error %v",
				what, r.key, r.off, r.end, off, want, have, got.sum.DecodeError)
			return
		}
		next++
		checked++
	}
	return checked
}

// checkedSome fails the test when no intact sample was ever compared: the
// damage must not all have fallen where nothing is checked.
func checkedSome(t *testing.T, n int) {
	t.Helper()
	if n == 0 {
		t.Fatal("no intact sample was compared")
	}
	t.Logf("%d intact samples compared", n)
}

func TestDamagedTruncated(t *testing.T) {
	f := loadDamageFixture(t)
	var offs []int64
	for _, r := range f.recs {
		offs = append(offs, r.off)
	}
	// Inside records: a sample of offsets with a fixed seed, and every
	// byte of the first few records and of the header.
	rng := rand.New(rand.NewSource(1))
	for range 150 {
		offs = append(offs, f.dataOff+rng.Int63n(int64(len(f.data))-f.dataOff))
	}
	for o := int64(0); o < f.dataOff+200; o += 7 {
		offs = append(offs, o)
	}
	offs = append(offs, f.dataEnd, f.dataEnd+1, int64(len(f.data))-1)
	checked := 0
	for _, off := range offs {
		what := fmt.Sprintf("truncated at %#x", off)
		got := runDamaged(t, f.data[:off], what)
		checked += f.check(t, got, off, what)
		if got.openErr == nil && got.runErr == nil && got.sum.DecodeError == nil {
			t.Errorf("%s: no decode error for a truncated file", what)
		}
		if testing.Verbose() && got.sum != nil && got.sum.DecodeError != nil && off%64 == 0 {
			t.Logf("%s: %d samples; %v", what, len(got.texts), got.sum.DecodeError)
		}
	}
	checkedSome(t, checked)
}

func TestDamagedBitFlips(t *testing.T) {
	f := loadDamageFixture(t)
	rng := rand.New(rand.NewSource(6))
	checked := 0
	for range 300 {
		// Mostly in the data section, where samples must survive.
		off := f.dataOff + rng.Int63n(f.dataEnd-f.dataOff)
		if rng.Intn(5) == 0 {
			off = rng.Int63n(int64(len(f.data)))
		}
		bit := byte(1) << rng.Intn(8)
		data := bytes.Clone(f.data)
		data[off] ^= bit
		what := fmt.Sprintf("bit %#x flipped at %#x", bit, off)
		checked += f.check(t, runDamaged(t, data, what), off, what)
	}
	checkedSome(t, checked)
}

func TestDamagedZeroBlocks(t *testing.T) {
	f := loadDamageFixture(t)
	checked := 0
	for start := 0; start < len(f.data); start += 4096 {
		data := bytes.Clone(f.data)
		end := min(start+4096, len(data))
		clear(data[start:end])
		first := int64(start)
		for first < int64(end) && f.data[first] == 0 {
			first++
		}
		if first == int64(end) {
			continue
		}
		what := fmt.Sprintf("zeroed [%#x, %#x)", start, end)
		checked += f.check(t, runDamaged(t, data, what), first, what)
	}
	checkedSome(t, checked)
}

func TestDamagedLyingSize(t *testing.T) {
	f := loadDamageFixture(t)
	checked := 0
	for i, r := range f.recs {
		size := uint16(r.end - r.off)
		for _, lie := range []uint16{0, 1, 7, 8, size - 8, size + 8, size + 1, 0xffff} {
			if lie == size {
				continue
			}
			data := bytes.Clone(f.data)
			binary.LittleEndian.PutUint16(data[r.off+6:], lie)
			what := fmt.Sprintf("record %d (type %d) at %#x: size %d claims %d", i, r.typ, r.off, size, lie)
			got := runDamaged(t, data, what)
			checked += f.check(t, got, r.off, what)
		}
	}
	checkedSome(t, checked)
}

// TestDamagedSummary checks that the summary says where reading stopped.
func TestDamagedSummary(t *testing.T) {
	data, err := os.ReadFile(damagedData)
	if err != nil {
		t.Fatal(err)
	}
	_, dataEnd := scanRecords(t, data)
	got := runDamaged(t, data[:dataEnd-5], "truncated")
	if got.sum == nil || got.sum.DecodeError == nil {
		t.Fatalf("no decode error: %+v", got)
	}
	var fe *perfdata.FormatError
	if !errors.As(got.sum.DecodeError, &fe) {
		t.Fatalf("decode error %T %v is not a *perfdata.FormatError", got.sum.DecodeError, got.sum.DecodeError)
	}
	var buf bytes.Buffer
	got.sum.WriteSummary(&buf)
	if !strings.Contains(buf.String(), fmt.Sprintf("offset %#x", fe.Offset)) {
		t.Errorf("summary does not say where reading stopped (offset %#x):\n%s", fe.Offset, buf.String())
	}
}

// resyncRecordings are the real recordings damaged by TestDamagedResync.
var resyncRecordings = []string{damagedData, "../testdata/recordings/hello/perf.data"}

// resyncCase is one damage: the bytes [first, end) of the intact file were
// changed (or cut out, when cut is set).
type resyncCase struct {
	kind, what string
	data       []byte
	first, end int64
}

// resyncCases damages f three ways: record size fields that lie,
// overwritten runs of bytes and cut-out chunks, all in the data section.
func resyncCases(f *damageFixture) []resyncCase {
	var cases []resyncCase
	// Every record's size lies in a small file; in a larger one, every
	// few records' (the types in turn).
	step := max(1, len(f.recs)/12)
	for i, r := range f.recs {
		if i%step != 0 {
			continue
		}
		size := uint16(r.end - r.off)
		for _, lie := range []uint16{0, 7, size - 8, size + 8, size + 1, 2 * size, 0xffff} {
			if lie == size {
				continue
			}
			// A size that lands on a later record's start, swallowing
			// records of no checkable layout, cannot be told from a
			// true one.
			kind := "lying size"
			if lie%8 == 0 && lie > size && r.off+int64(lie) < f.dataEnd {
				kind = "lying size, aligned"
			}
			data := bytes.Clone(f.data)
			binary.LittleEndian.PutUint16(data[r.off+6:], lie)
			cases = append(cases, resyncCase{kind, fmt.Sprintf("record %d (type %d) at %#x: size %d claims %d", i, r.typ, r.off, size, lie),
				data, r.off + 6, r.off + 8})
		}
	}
	rng := rand.New(rand.NewSource(21))
	span := f.dataEnd - f.dataOff
	for range 30 {
		off := f.dataOff + rng.Int63n(span)
		n := min(1+rng.Int63n(256), f.dataEnd-off)
		data := bytes.Clone(f.data)
		switch rng.Intn(3) {
		case 0:
			rng.Read(data[off : off+n])
		case 1:
			clear(data[off : off+n])
		default:
			for i := off; i < off+n; i++ {
				data[i] = 0xff
			}
		}
		first := off
		for first < off+n && data[first] == f.data[first] {
			first++
		}
		if first == off+n {
			continue
		}
		cases = append(cases, resyncCase{"overwritten", fmt.Sprintf("%d bytes overwritten at %#x", n, off), data, first, off + n})
	}
	for range 20 {
		off := f.dataOff + rng.Int63n(span)
		n := min(1+rng.Int63n(512), f.dataEnd-off)
		data := append(bytes.Clone(f.data[:off]), f.data[off+n:]...)
		// The header stays true to the shorter file: the data section
		// and the feature sections after it moved by n bytes.
		binary.LittleEndian.PutUint64(data[48:], uint64(f.dataEnd-f.dataOff-n))
		for i := 0; i < f.nFeatures; i++ {
			e := f.dataEnd - n + 16*int64(i)
			binary.LittleEndian.PutUint64(data[e:], binary.LittleEndian.Uint64(data[e:])-uint64(n))
		}
		cases = append(cases, resyncCase{"cut", fmt.Sprintf("%d bytes cut at %#x", n, off), data, off, off + n})
	}
	return cases
}

// TestDamagedResync checks that reading resumes after damage in the middle
// of the data section: every sample of the intact file whose bytes lie
// wholly after the damage is reported as from the intact file, and the
// damage is named by its offset. It logs the figure printed/intact.
func TestDamagedResync(t *testing.T) {
	for _, path := range resyncRecordings {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f := loadDamageFixtureFrom(t, path)
			printed, intact := map[string]int{}, map[string]int{}
			var kinds []string
			for _, c := range resyncCases(f) {
				if _, ok := intact[c.kind]; !ok {
					kinds = append(kinds, c.kind)
				}
				got := runDamaged(t, c.data, c.what)
				if got.runErr != nil || got.openErr != nil {
					t.Errorf("%s: open %v, run %v", c.what, got.openErr, got.runErr)
					continue
				}
				f.check(t, got, c.first, c.what)
				// A damaged MMAP or COMM record changes how later samples
				// are named: then only that they are printed is checked.
				same := true
				for _, r := range f.recs {
					if r.off < c.end && r.end > c.first && r.key == "" && r.typ != perfdata.RecordFinishedRound {
						same = false
					}
				}
				lost := 0
				for _, r := range f.recs {
					if r.key == "" || r.off < c.end {
						continue
					}
					intact[c.kind]++
					text, ok := got.byKey[r.key]
					if ok {
						printed[c.kind]++
					}
					if !ok || same && text != f.clean.byKey[r.key] {
						lost++
					}
				}
				if lost > 0 {
					t.Errorf("%s: %d intact samples after the damage not reported as before; decode error %v, damage %v",
						c.what, lost, got.sum.DecodeError, got.sum.Damage)
				}
				if len(got.sum.Damage) == 0 && got.sum.DecodeError == nil && (c.kind == "lying size" || c.kind == "cut") {
					t.Errorf("%s: the damage is not reported", c.what)
				}
			}
			p, n := 0, 0
			for _, k := range kinds {
				t.Logf("%s: %s: %d of %d intact samples after the damage printed", path, k, printed[k], intact[k])
				p, n = p+printed[k], n+intact[k]
			}
			t.Logf("%s: %d of %d intact samples after the damage printed (%.1f%%)", path, p, n, 100*float64(p)/float64(n))
		})
	}
}

func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// TestDamagedResyncSummary checks that a damage skipped in the middle of the
// data is named in the summary: the offset of the record whose size lied,
// the bytes skipped and where reading resumed.
func TestDamagedResyncSummary(t *testing.T) {
	data, err := os.ReadFile(damagedData)
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := scanRecords(t, data)
	v := recs[len(recs)/2]
	next := recs[len(recs)/2+1].off
	binary.LittleEndian.PutUint16(data[v.off+6:], 0xffff)
	got := runDamaged(t, data, "lying size")
	if got.sum == nil || got.sum.DecodeError != nil || got.sum.Damaged != 1 {
		t.Fatalf("want one damage skipped, no decode error: %+v", got.sum)
	}
	var buf bytes.Buffer
	got.sum.WriteSummary(&buf)
	want := fmt.Sprintf("damaged data at offset %#x: ", v.off)
	skip := fmt.Sprintf("skipped %d bytes to the next valid record at %#x", next-v.off, next)
	if s := buf.String(); !strings.Contains(s, want) || !strings.Contains(s, skip) {
		t.Errorf("summary does not name the damage (%q ... %q):\n%s", want, skip, s)
	}
	// The JSON summary record says the same.
	buf.Reset()
	jw := NewJSONWriter(&buf, false)
	require.NoError(t, jw.WriteSummary(got.sum))
	require.NoError(t, jw.Flush())
	var rec struct {
		Summary struct {
			Damage []struct {
				Offset, Resume int64
				Error          string
			}
			DecodeError *string `json:"decode_error"`
		}
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &rec), buf.String())
	require.Len(t, rec.Summary.Damage, 1, buf.String())
	d := rec.Summary.Damage[0]
	assert.Equal(t, int64(v.off), d.Offset, "JSON damage offset")
	assert.Equal(t, int64(next), d.Resume, "JSON damage resume")
	assert.NotEmpty(t, d.Error)
	assert.Nil(t, rec.Summary.DecodeError)
}
