package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/procmaps"
	"github.com/ustack/ustack/report"
	"github.com/ustack/ustack/resolve"
)

// recorded is testdata/bench (record_test.go): the ring buffer records of
// one run of the static fixture and the maps to replay them in.
type recorded struct {
	events [][]byte
	maps   []procmaps.Map
}

func loadRecorded(t testing.TB) *recorded {
	t.Helper()
	f, err := os.Open(filepath.Join(benchDir, "events.gz"))
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	raw, err := io.ReadAll(zr)
	require.NoError(t, err)
	r := &recorded{}
	for off := 0; off < len(raw); {
		require.LessOrEqual(t, off+4, len(raw), "events.gz: a length cut short at offset %d", off)
		n := int(binary.LittleEndian.Uint32(raw[off:]))
		off += 4
		require.LessOrEqual(t, off+n, len(raw), "events.gz: record at offset %d runs past the end", off)
		r.events = append(r.events, raw[off:off+n])
		off += n
	}
	text, err := os.ReadFile(filepath.Join(benchDir, "maps"))
	require.NoError(t, err)
	exe, err := filepath.Abs(filepath.Join(benchDir, "chain"))
	require.NoError(t, err)
	r.maps, err = procmaps.Parse(filepath.Join(benchDir, "maps"), text)
	require.NoError(t, err)
	for i := range r.maps {
		if r.maps[i].Path == "chain" {
			r.maps[i].Path = exe
		}
	}
	return r
}

// newReplay returns a consumer of the recorded events writing format to w,
// and a function that closes what it opened.
func newReplay(t testing.TB, r *recorded, format string, w io.Writer) (*consumer, func()) {
	t.Helper()
	out, err := report.NewWriter(format, w, report.WriterOptions{Events: []string{"uprobe:chain:leaf", "syscalls:sys_enter_write"}})
	require.NoError(t, err)
	res := resolve.New(resolve.Options{})
	maps := func(pid uint32) ([]procmaps.Map, error) { return r.maps, nil }
	c := newConsumer([]string{"uprobe:chain:leaf", "syscalls:sys_enter_write"}, maxStackSize, maps,
		res, out, func(msg string) { t.Errorf("warning: %s", msg) })
	return c, func() { out.Close(); res.Close() }
}

// staticChain is the fixture's chain at leaf in its static build: the
// same functions as the dynamic one's (glibc 2.36's static start code
// names them alike).
var staticChain = []string{"leaf", "mid", "top", "main", "__libc_start_call_main", "__libc_start_main_impl", "_start"}

// TestReplayRecorded unwinds the recorded events without BPF: the uprobe
// events at leaf give the fixture's chain, the write(2) events glibc's
// write under it, every stack to its outermost frame.
func TestReplayRecorded(t *testing.T) {
	r := loadRecorded(t)
	require.Len(t, r.events, 32)
	var out bytes.Buffer
	c, done := newReplay(t, r, "json", &out)
	for _, ev := range r.events {
		require.NoError(t, c.handle(ev))
	}
	done()
	samples := testprogJSON(t, out.Bytes())
	require.Len(t, samples, 32)
	leaf, write := 0, 0
	for i, s := range samples {
		switch s.Event {
		case "uprobe:chain:leaf":
			leaf++
			assert.Equal(t, staticChain, symbols(s), "event %d", i)
		case "syscalls:sys_enter_write":
			write++
			syms := symbols(s)
			require.NotEmpty(t, syms)
			assert.Equal(t, "__libc_write", syms[0], "event %d: glibc's write(2) wrapper", i)
			assert.Equal(t, staticChain, syms[1:], "event %d", i)
		default:
			t.Errorf("event %d: unexpected event %q", i, s.Event)
		}
		assert.Equal(t, "outermost", s.Stop, "event %d", i)
	}
	assert.Equal(t, 16, leaf)
	assert.Equal(t, 16, write)
	assert.Equal(t, map[string]int{"outermost": 32}, c.summary(0).Stops)
}

// TestConsumerNoAllocs: once the maps are read and the buffers grown,
// unwinding, symbolizing and printing an event allocates nothing.
func TestConsumerNoAllocs(t *testing.T) {
	r := loadRecorded(t)
	c, done := newReplay(t, r, "text", io.Discard)
	defer done()
	for _, ev := range r.events {
		require.NoError(t, c.handle(ev))
	}
	i := 0
	allocs := testing.AllocsPerRun(200, func() {
		c.handle(r.events[i%len(r.events)])
		i++
	})
	assert.Zero(t, allocs, "allocations per event")
}

// BenchmarkConsumer feeds the recorded events through the consumer: decode,
// unwind over the stack copy, symbolize, print (text or JSON) to
// io.Discard. One op is one event.
func BenchmarkConsumer(b *testing.B) {
	r := loadRecorded(b)
	for _, format := range []string{"text", "json"} {
		b.Run(format, func(b *testing.B) {
			c, done := newReplay(b, r, format, io.Discard)
			defer done()
			for _, ev := range r.events {
				c.handle(ev)
			}
			frames := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c.handle(r.events[i%len(r.events)])
				frames += len(c.sample.Frames)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/event")
			b.ReportMetric(float64(frames)/b.Elapsed().Seconds(), "frames/s")
		})
	}
}

// FuzzDecodeEvent: no record crashes the decoder, and a decoded record's
// stack lies inside the record.
func FuzzDecodeEvent(f *testing.F) {
	// Records cut to a few stack bytes (their stack_len with them): the
	// fuzzer mutates small inputs far faster than 12 KiB ones.
	r := loadRecorded(f)
	for _, ev := range [][]byte{r.events[0], r.events[len(r.events)-1]} {
		small := append([]byte(nil), ev[:eventHeaderSize+64]...)
		binary.LittleEndian.PutUint32(small[32:], 64)
		f.Add(small)
	}
	f.Add(r.events[0][:eventHeaderSize])
	f.Add(r.events[0][:eventHeaderSize-1])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var e event
		if err := decodeEvent(b, &e); err != nil {
			return
		}
		if len(e.Stack) > len(b)-eventHeaderSize || len(e.Comm) > 16 {
			t.Fatalf("stack of %d bytes or comm of %d in a record of %d", len(e.Stack), len(e.Comm), len(b))
		}
		e.stackFromSP(maxStackSize)
	})
}

// TestMapsRefresh: maps read before the program's code was mapped are read
// again at the first PC outside them, once.
func TestMapsRefresh(t *testing.T) {
	r := loadRecorded(t)
	var early []procmaps.Map
	for _, m := range r.maps {
		if !m.Exec || filepath.Base(m.Path) != "chain" {
			early = append(early, m)
		}
	}
	require.Less(t, len(early), len(r.maps))
	calls := 0
	var out bytes.Buffer
	c, done := newReplay(t, r, "json", &out)
	c.readMaps = func(pid uint32) ([]procmaps.Map, error) {
		calls++
		if calls == 1 {
			return early, nil
		}
		return r.maps, nil
	}
	for _, ev := range r.events {
		require.NoError(t, c.handle(ev))
	}
	done()
	assert.Equal(t, 2, calls, "maps read at the first event and again for its PC")
	assert.Equal(t, map[string]int{"outermost": 32}, c.summary(0).Stops)
}

// TestMapsGone: a process whose maps cannot be read gets one warning and
// stacks that stop at the PC; its maps are not read again for the same PC.
func TestMapsGone(t *testing.T) {
	r := loadRecorded(t)
	calls := 0
	var warnings []string
	var out bytes.Buffer
	c, done := newReplay(t, r, "json", &out)
	c.warn = func(msg string) { warnings = append(warnings, msg) }
	c.readMaps = func(pid uint32) ([]procmaps.Map, error) {
		calls++
		return nil, os.ErrNotExist
	}
	for _, ev := range r.events {
		require.NoError(t, c.handle(ev))
	}
	done()
	require.Len(t, warnings, 1)
	assert.Contains(t, warnings[0], "cannot read its maps")
	// Once at the first event, once more for each of the two PCs (leaf's
	// entry and write's syscall).
	assert.Equal(t, 3, calls)
	assert.Equal(t, map[string]int{"no_mapping": 32}, c.summary(0).Stops)
}
