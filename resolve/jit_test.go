package resolve

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/cfi"
	"github.com/ustack/ustack/procmaps"
	"github.com/ustack/ustack/unwinder"
)

// jitRecord is one record of a test dump: id, timestamp and the body after
// the record header, laid out by the jitdump specification.
type jitRecord struct {
	id   uint32
	ts   uint64
	body []byte
}

func le64(b []byte, v ...uint64) []byte {
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	return b
}

// codeLoad is a JIT_CODE_LOAD body: pid, tid, vma, code_addr, code_size,
// code_index, the name and the code.
func codeLoad(addr uint64, name string, size int, index uint64) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 1)
	b = binary.LittleEndian.AppendUint32(b, 1)
	b = le64(b, addr, addr, uint64(size), index)
	b = append(append(b, name...), 0)
	return append(b, make([]byte, size)...)
}

// codeMove is a JIT_CODE_MOVE body.
func codeMove(from, to uint64, size int, index uint64) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 1)
	b = binary.LittleEndian.AppendUint32(b, 1)
	return le64(b, to, from, to, uint64(size), index)
}

// debugInfo is a JIT_CODE_DEBUG_INFO body with one line per address.
func debugInfo(addr uint64, lines map[uint64]uint32, order ...uint64) []byte {
	b := le64(nil, addr, uint64(len(order)))
	for _, a := range order {
		b = le64(b, a)
		b = binary.LittleEndian.AppendUint32(b, lines[a])
		b = binary.LittleEndian.AppendUint32(b, 0)
		b = append(b, "f.js\x00"...)
	}
	return b
}

func writeDump(t *testing.T, path string, recs []jitRecord) []byte {
	b := dumpBytes(recs)
	require.NoError(t, os.WriteFile(path, b, 0o600))
	return b
}

// dumpBytes lays out a dump: the 40-byte header, then the records.
func dumpBytes(recs []jitRecord) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 0x4A695444)
	for _, v := range []uint32{1, 40, 62, 0, 1} {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	b = le64(b, 0, 0)
	for _, r := range recs {
		b = binary.LittleEndian.AppendUint32(b, r.id)
		b = binary.LittleEndian.AppendUint32(b, uint32(16+len(r.body)))
		b = le64(b, r.ts)
		b = append(b, r.body...)
	}
	return b
}

// jitName symbolizes the PC pc (a first frame) in s: name, module, line.
func jitName(s *Space, pc uint64) (string, string, int) {
	fr := unwinder.Frame{PC: pc, Mapping: int32(s.AddressSpace().Find(pc))}
	out := NewSymbolizer().Append(nil, s, &fr, "context")
	f := out[len(out)-1]
	return f.Symbol, f.Module, f.Line
}

// TestJITDumpTimes: an address names the function loaded there at the
// sample's time (Space.At); a moved function is found at its new address
// with its lines; a damaged dump costs one warning and keeps what came
// before the damage; a missing one costs one warning, once.
func TestJITDumpTimes(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "jit-1.dump")
	recs := []jitRecord{
		{2, 10, debugInfo(0x1000, map[uint64]uint32{0x1000: 7, 0x1008: 8}, 0x1000, 0x1008)},
		{0, 10, codeLoad(0x1000, "LazyCompile:a f.js:1", 16, 1)},
		{0, 20, codeLoad(0x1000, "LazyCompile:b f.js:5", 16, 2)},
		{0, 25, codeLoad(0x5000, "LazyCompile:c f.js:9", 16, 3)}, // not over another: no new epoch
		{1, 30, codeMove(0x1000, 0x2000, 16, 2)},
		{0, 45, codeLoad(0x3000, "x", 16, 4)},
		{1, 50, codeMove(0x3000, 0x4000, 16, 4)},
		{0, 60, codeLoad(0x3000, "y", 16, 5)}, // over x's old place: x's end stays 50
		{3, 70, nil},
	}
	writeDump(t, marker, recs)
	var warnings []string
	r := New(Options{Warn: func(m string) { warnings = append(warnings, m) }})
	defer r.Close()
	maps := []Mapping{
		{Map: procmaps.Map{Start: 0x1000, End: 0x6000, Exec: true, Path: "//anon"}},
		{Map: procmaps.Map{Start: 0x7000, End: 0x8000, Exec: true, Path: marker}},
	}
	s := r.NewSpace(1, maps)
	assert.Empty(t, warnings)
	for _, c := range []struct {
		time, pc uint64
		name     string
		line     int
	}{
		{15, 0x1004, "LazyCompile:a f.js:1", 7},
		{15, 0x100a, "LazyCompile:a f.js:1", 8},
		{22, 0x1004, "LazyCompile:b f.js:5", 0},
		{22, 0x5004, "LazyCompile:c f.js:9", 0}, // loaded at 25, but nothing else held it before
		{35, 0x1004, "", 0},
		{35, 0x2004, "LazyCompile:b f.js:5", 0},
		{1 << 62, 0x2004, "LazyCompile:b f.js:5", 0},
		{47, 0x3004, "x", 0},
		{55, 0x3004, "y", 0}, // x left at 50; nothing else held it before y came
		{55, 0x4004, "x", 0},
		{65, 0x3004, "y", 0},
		{65, 0x4004, "x", 0},
	} {
		name, module, line := jitName(s.At(c.time), c.pc)
		assert.Equal(t, c.name, name, "%#x at %d", c.pc, c.time)
		assert.Equal(t, c.line, line, "%#x at %d", c.pc, c.time)
		if c.name != "" {
			assert.Equal(t, marker, module)
		}
	}
	// The Space NewSpace returns is the dump's last state.
	name, _, _ := jitName(s, 0x2004)
	assert.Equal(t, "LazyCompile:b f.js:5", name)
	assert.Same(t, s.At(35), s.At(36), "one Space per epoch")

	// Cut inside the move: the loads before it stay, one warning.
	damaged := filepath.Join(dir, "d", "jit-2.dump")
	require.NoError(t, os.MkdirAll(filepath.Dir(damaged), 0o700))
	cut := dumpBytes(recs[:5]) // up to the move of b, cut in its middle
	require.NoError(t, os.WriteFile(damaged, cut[:len(cut)-30], 0o600))
	maps[1].Path = damaged
	s = r.NewSpace(2, maps)
	require.Len(t, warnings, 1)
	assert.Contains(t, warnings[0], damaged)
	assert.Contains(t, warnings[0], "damaged")
	name, _, _ = jitName(s, 0x1004)
	assert.Equal(t, "LazyCompile:b f.js:5", name, "the load before the damage")

	// Missing: one warning naming the dump, for every Space of it.
	warnings = nil
	maps[1].Path = filepath.Join(dir, "gone", "jit-3.dump")
	r.NewSpace(3, maps)
	r.NewSpace(3, maps[:2])
	require.Len(t, warnings, 1)
	assert.True(t, strings.HasPrefix(warnings[0], maps[1].Path+": "), warnings[0])
	assert.Contains(t, warnings[0], "not found")
	assert.Contains(t, r.Missing(), maps[1].Path)
}

// FuzzReadJITDump: no dump crashes or hangs the reading of its functions,
// their CFI or the epochs; every function found answers lookups.
func FuzzReadJITDump(f *testing.F) {
	f.Add(dumpBytes([]jitRecord{
		{2, 10, debugInfo(0x1000, map[uint64]uint32{0x1000: 7}, 0x1000)},
		{4, 10, le64(nil, 8, 4, 0, 0x0102030405060708, 0x01020304)},
		{0, 10, codeLoad(0x1000, "a", 16, 1)},
		{0, 20, codeLoad(0x1008, "b", 16, 2)},
		{1, 30, codeMove(0x1008, 0x2000, 16, 2)},
	}))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, _ := readJITDump("fuzz.dump", strings.NewReader(string(b)), int64(len(b)))
		if d == nil {
			return
		}
		var row cfi.Row
		for e := 0; e <= len(d.bounds) && e < 8; e++ {
			for _, fn := range d.live(e) {
				_ = fn.FindRow(fn.start, &row)
				_ = fn.ReadCode(fn.end-1, make([]byte, 4))
				fn.line(fn.start)
			}
		}
	})
}

// BenchmarkSpaceAt: a sample's Space by its time, in a process whose
// jitdump reloaded code (one lookup per sample; no allocation once the
// epoch's Space is built).
func BenchmarkSpaceAt(b *testing.B) {
	dir := b.TempDir()
	marker := filepath.Join(dir, "jit-1.dump")
	var recs []jitRecord
	for i := 0; i < 100; i++ {
		recs = append(recs, jitRecord{0, uint64(10 * (i + 1)), codeLoad(0x1000+uint64(i%10)*0x100, "f", 64, uint64(i))})
	}
	require.NoError(b, os.WriteFile(marker, dumpBytes(recs), 0o600))
	r := New(Options{})
	defer r.Close()
	s := r.NewSpace(1, []Mapping{
		{Map: procmaps.Map{Start: 0x1000, End: 0x6000, Exec: true, Path: "//anon"}},
		{Map: procmaps.Map{Start: 0x7000, End: 0x8000, Exec: true, Path: marker}},
	})
	s.At(555)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if s.At(555+uint64(i&3)) == nil {
			b.Fatal("no space")
		}
	}
}

// TestJITDumpBadLines: a DEBUG_INFO whose entries fall outside its
// function's code (node 20 writes some with a freed file name, which
// misaligns the entries after it) gives no lines, and one warning; the
// function is still named.
func TestJITDumpBadLines(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "jit-1.dump")
	writeDump(t, marker, []jitRecord{
		{2, 10, debugInfo(0x1000, map[uint64]uint32{0x1000: 7, 0x9000: 8}, 0x1000, 0x9000)},
		{0, 10, codeLoad(0x1000, "f", 16, 1)},
		{2, 11, debugInfo(0x5000, map[uint64]uint32{0x2000: 3}, 0x2000)}, // for other code
		{0, 11, codeLoad(0x2000, "g", 16, 2)},
		{2, 12, debugInfo(0x3000, map[uint64]uint32{0x3000: 4, 0x3010: 5}, 0x3000, 0x3010)}, // 0x3010: at the end, kept
		{0, 12, codeLoad(0x3000, "h", 16, 3)},
	})
	var warnings []string
	r := New(Options{Warn: func(m string) { warnings = append(warnings, m) }})
	defer r.Close()
	s := r.NewSpace(1, []Mapping{
		{Map: procmaps.Map{Start: 0x1000, End: 0x4000, Exec: true, Path: "//anon"}},
		{Map: procmaps.Map{Start: 0x7000, End: 0x8000, Exec: true, Path: marker}},
	})
	for pc, want := range map[uint64]struct {
		name string
		line int
	}{0x1004: {"f", 0}, 0x2004: {"g", 0}, 0x3004: {"h", 4}} {
		name, _, line := jitName(s, pc)
		assert.Equal(t, want.name, name)
		assert.Equal(t, want.line, line, name)
	}
	require.Len(t, warnings, 1)
	assert.Contains(t, warnings[0], "DEBUG_INFO of 2 functions (the first: f)")
}
