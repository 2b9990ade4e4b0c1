package report

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"strings"
	"testing"
	"time"

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
func scanRecords(t *testing.T, data []byte) ([]damageRecord, int64) {
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
		out.sum, out.runErr = Run(r, Options{Kallsyms: "-", SymFS: symfsForDamage, Jobs: 2, NoInline: true}, func(s *Sample) error {
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
}

func loadDamageFixture(t *testing.T) *damageFixture {
	t.Helper()
	data, err := os.ReadFile(damagedData)
	if err != nil {
		t.Fatal(err)
	}
	f := &damageFixture{data: data}
	f.recs, f.dataEnd = scanRecords(t, data)
	f.dataOff = f.recs[0].off
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
