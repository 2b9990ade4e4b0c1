package jitdump

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dumpBuilder writes a jitdump by the specification's layout, field by
// field, independently of the reader's offsets.
type dumpBuilder struct {
	bo  binary.ByteOrder
	buf bytes.Buffer
}

func newDump(bo binary.ByteOrder, pid uint32) *dumpBuilder {
	d := &dumpBuilder{bo: bo}
	d.u32(Magic)
	d.u32(1)          // version
	d.u32(HeaderSize) // total_size
	d.u32(62)         // EM_X86_64
	d.u32(0)          // pad1
	d.u32(pid)
	d.u64(1000) // timestamp
	d.u64(0)    // flags
	return d
}

func (d *dumpBuilder) u32(v uint32) { _ = binary.Write(&d.buf, d.bo, v) }
func (d *dumpBuilder) u64(v uint64) { _ = binary.Write(&d.buf, d.bo, v) }

// record appends a record of id whose body is written by body; the size is
// patched in afterwards.
func (d *dumpBuilder) record(id uint32, ts uint64, body func()) {
	start := d.buf.Len()
	d.u32(id)
	d.u32(0)
	d.u64(ts)
	body()
	b := d.buf.Bytes()
	d.bo.PutUint32(b[start+4:], uint32(len(b)-start))
}

func (d *dumpBuilder) load(ts uint64, addr uint64, name string, code []byte, index uint64) {
	d.record(0, ts, func() {
		d.u32(7)
		d.u32(8)
		d.u64(addr)
		d.u64(addr)
		d.u64(uint64(len(code)))
		d.u64(index)
		d.buf.WriteString(name)
		d.buf.WriteByte(0)
		d.buf.Write(code)
	})
}

func (d *dumpBuilder) move(ts, old, new, size, index uint64) {
	d.record(1, ts, func() {
		d.u32(7)
		d.u32(8)
		d.u64(new)
		d.u64(old)
		d.u64(new)
		d.u64(size)
		d.u64(index)
	})
}

type line struct {
	addr uint64
	line uint32
	file string // "\xff" for "same as before"
}

func (d *dumpBuilder) debug(ts, addr uint64, lines []line) {
	d.record(2, ts, func() {
		d.u64(addr)
		d.u64(uint64(len(lines)))
		for _, l := range lines {
			d.u64(l.addr)
			d.u32(l.line)
			d.u32(0)
			d.buf.WriteString(l.file)
			d.buf.WriteByte(0)
		}
	})
}

func (d *dumpBuilder) unwind(ts uint64, eh, hdr []byte) {
	d.record(4, ts, func() {
		d.u64(uint64(len(eh) + len(hdr)))
		d.u64(uint64(len(hdr)))
		d.u64(0)
		d.buf.Write(eh)
		d.buf.Write(hdr)
		for d.buf.Len()%8 != 0 {
			d.buf.WriteByte(0) // padding, allowed after the data
		}
	})
}

func (d *dumpBuilder) bytes() []byte { return append([]byte(nil), d.buf.Bytes()...) }

// sampleDump is a dump with every record type, an unknown id and a close.
func sampleDump(bo binary.ByteOrder) []byte {
	d := newDump(bo, 4242)
	d.debug(2000, 0x7000, []line{{0x7000, 10, "fib.js"}, {0x7004, 11, "\xff"}})
	d.unwind(2000, []byte{1, 2, 3, 4, 5, 6, 7, 8}, []byte{9, 10, 11, 12})
	d.load(2001, 0x7000, "LazyCompile:*fib fib.js:1", []byte{0x55, 0x48, 0x89, 0xe5, 0xc3}, 1)
	d.record(99, 2002, func() { d.u64(0xdead) }) // an id of a later version
	d.move(2003, 0x7000, 0x9000, 5, 1)
	d.record(3, 2004, func() {})
	return d.bytes()
}

func readAll(t testing.TB, b []byte) ([]Record, error) {
	r, err := NewReader("jit-4242.dump", bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, err
	}
	var out []Record
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, rec)
	}
}

func TestReadEveryRecord(t *testing.T) {
	for _, bo := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		t.Run(bo.String(), func(t *testing.T) {
			b := sampleDump(bo)
			r, err := NewReader("jit-4242.dump", bytes.NewReader(b), int64(len(b)))
			require.NoError(t, err)
			h := r.Header()
			assert.Equal(t, bo, h.ByteOrder)
			assert.Equal(t, uint32(4242), h.PID)
			assert.Equal(t, uint32(62), h.ElfMach)
			assert.Equal(t, uint64(1000), h.Timestamp)
			recs, err := readAll(t, b)
			require.NoError(t, err)
			require.Len(t, recs, 6)
			assert.Equal(t, int64(HeaderSize), recs[0].Offset)

			dbg := recs[0].Debug
			require.NotNil(t, dbg)
			assert.Equal(t, uint64(0x7000), dbg.CodeAddr)
			assert.Equal(t, []DebugEntry{{Addr: 0x7000, Line: 10, File: "fib.js"}, {Addr: 0x7004, Line: 11, File: "fib.js"}}, dbg.Entries)

			u := recs[1].Unwind
			require.NotNil(t, u)
			assert.Equal(t, []byte{1, 2, 3, 4, 5, 6, 7, 8}, u.EHFrame())
			assert.Equal(t, []byte{9, 10, 11, 12}, u.EHFrameHdr())

			l := recs[2].Load
			require.NotNil(t, l)
			assert.Equal(t, uint64(2001), recs[2].Timestamp)
			assert.Equal(t, "LazyCompile:*fib fib.js:1", l.Name)
			assert.Equal(t, []byte{0x55, 0x48, 0x89, 0xe5, 0xc3}, l.Code)
			assert.Equal(t, uint64(0x7000), l.CodeAddr)
			assert.Equal(t, uint64(1), l.CodeIndex)
			assert.Equal(t, uint32(7), l.PID)
			assert.Equal(t, uint32(8), l.TID)

			assert.Equal(t, RecordType(99), recs[3].Type)
			assert.Nil(t, recs[3].Load)

			m := recs[4].Move
			require.NotNil(t, m)
			assert.Equal(t, CodeMove{PID: 7, TID: 8, VMA: 0x9000, OldCodeAddr: 0x7000, NewCodeAddr: 0x9000, CodeSize: 5, CodeIndex: 1}, *m)
			assert.Equal(t, CodeCloseType, recs[5].Type)
		})
	}
}

// TestDamage: a dump cut anywhere, or with a record's size made wrong,
// yields the records before the damage and an error naming the file and
// the damaged record's offset.
func TestDamage(t *testing.T) {
	b := sampleDump(binary.LittleEndian)
	good, err := readAll(t, b)
	require.NoError(t, err)
	for cut := HeaderSize; cut < len(b); cut++ {
		recs, err := readAll(t, b[:cut])
		whole := 0
		for _, r := range good {
			if r.Offset+int64(r.Size) <= int64(cut) {
				whole++
			}
		}
		require.Len(t, recs, whole, "cut at %d", cut)
		if whole < len(good) && good[whole].Offset < int64(cut) {
			var e *Error
			require.ErrorAs(t, err, &e, "cut at %d", cut)
			assert.Equal(t, "jit-4242.dump", e.File)
			assert.Equal(t, good[whole].Offset, e.Offset, "cut at %d: %v", cut, err)
		} else {
			require.NoError(t, err, "cut at %d", cut)
		}
	}

	// A size below the record header, and one past the end.
	for _, size := range []uint32{3, uint32(len(b))} {
		c := append([]byte(nil), b...)
		binary.LittleEndian.PutUint32(c[good[2].Offset+4:], size)
		recs, err := readAll(t, c)
		assert.Len(t, recs, 2)
		var e *Error
		require.ErrorAs(t, err, &e)
		assert.Equal(t, good[2].Offset, e.Offset)
		assert.Contains(t, e.Error(), "JIT_CODE_LOAD")
	}

	// A debug record claiming more entries than fit.
	c := append([]byte(nil), b...)
	binary.LittleEndian.PutUint64(c[good[0].Offset+16+8:], 1<<60)
	_, err = readAll(t, c)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nr_entry")

	// A load whose code_size swallows the name.
	c = append([]byte(nil), b...)
	binary.LittleEndian.PutUint64(c[good[2].Offset+16+24:], uint64(good[2].Size))
	_, err = readAll(t, c)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "code_size")
}

func TestNotJITDump(t *testing.T) {
	for _, b := range [][]byte{nil, []byte("\x7fELF"), []byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")} {
		_, err := NewReader("x.dump", bytes.NewReader(b), int64(len(b)))
		require.Error(t, err)
		assert.True(t, errors.Is(err, ErrNotJITDump), "%q: %v", b, err)
	}
	// The magic, then the file ends: not ErrNotJITDump, a short header.
	b := sampleDump(binary.LittleEndian)[:20]
	_, err := NewReader("x.dump", bytes.NewReader(b), int64(len(b)))
	require.Error(t, err)
	assert.False(t, errors.Is(err, ErrNotJITDump))
	assert.Contains(t, err.Error(), "cut short")
}

func TestIsMarkerPath(t *testing.T) {
	for path, want := range map[string]uint32{"/home/u/jit-15419.dump": 15419, "jit-1.dump": 1} {
		pid, ok := IsMarkerPath(path)
		assert.True(t, ok, path)
		assert.Equal(t, want, pid, path)
	}
	for _, path := range []string{"/tmp/jit-.dump", "/tmp/jit-12.dump.old", "/tmp/perf-12.map", "/tmp/jit-x1.dump", "/usr/lib/libc.so.6"} {
		_, ok := IsMarkerPath(path)
		assert.False(t, ok, path)
	}
}

// FuzzReader: no input crashes, hangs or allocates beyond its size, and
// every record returned lies inside the file.
func FuzzReader(f *testing.F) {
	f.Add(sampleDump(binary.LittleEndian))
	f.Add(sampleDump(binary.BigEndian))
	f.Add(sampleDump(binary.LittleEndian)[:100])
	f.Add([]byte("DTiJ"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := NewReader("fuzz.dump", bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		for n := 0; ; n++ {
			rec, err := r.Next()
			if err != nil {
				if err != io.EOF {
					var e *Error
					if !errors.As(err, &e) {
						t.Fatalf("error %v is not an *Error", err)
					}
				}
				return
			}
			if rec.Offset+int64(rec.Size) > int64(len(b)) || rec.Size < recordHeaderSize {
				t.Fatalf("record at %d of size %d outside a %d-byte file", rec.Offset, rec.Size, len(b))
			}
			if rec.Load != nil && uint64(len(rec.Load.Code)) != rec.Load.CodeSize {
				t.Fatalf("code of %d bytes, code_size %d", len(rec.Load.Code), rec.Load.CodeSize)
			}
			if rec.Unwind != nil {
				_ = rec.Unwind.EHFrame()
				_ = rec.Unwind.EHFrameHdr()
			}
		}
	})
}
