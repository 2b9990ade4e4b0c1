package unwinder_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/fixture"
	"github.com/ustack/ustack/unwinder"
)

func words(base uint64, n int) []byte {
	b := make([]byte, 8*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint64(b[8*i:], base+uint64(8*i))
	}
	return b
}

// failingReader fails every read, like a file that has become unreadable.
type failingReader struct{}

func (failingReader) ReadAt([]byte, int64) (int, error) { return 0, errors.New("unreadable") }

func TestSegments(t *testing.T) {
	file := bytes.NewReader(words(0xf000, 64)) // the mapped file: word i is 0xf000+8i
	segs, err := unwinder.NewSegments([]unwinder.Segment{
		// Given out of order: NewSegments sorts.
		{Addr: 0x3000, Size: 0x200, Data: words(0x3000, 4), File: file, FileOffset: 0x40},
		{Addr: 0x1000, Size: 0x100, Data: words(0x1000, 8)},
		{Addr: 0x1100, Size: 0x10, Data: words(0x1100, 2)}, // adjacent to the one before
		{Addr: 0x5000, Size: 0x100, Data: words(0x5000, 1), File: failingReader{}},
		{Addr: 0x9000, Size: 0}, // empty: dropped
	})
	require.NoError(t, err)
	cases := []struct {
		name string
		addr uint64
		want uint64
		st   unwinder.MemStatus
	}{
		{"in_data", 0x1008, 0x1008, unwinder.MemOK},
		{"last_word_of_data", 0x1038, 0x1038, unwinder.MemOK},
		{"beyond_data_in_segment", 0x1040, 0, unwinder.MemTruncated},
		{"straddles_data_end", 0x103c, 0, unwinder.MemTruncated},
		{"straddles_adjacent_segments", 0x10fc, 0, unwinder.MemTruncated}, // 0x10fc..0x1100 has no data
		{"next_segment", 0x1108, 0x1108, unwinder.MemOK},
		{"beyond_last_segment_end", 0x1110, 0, unwinder.MemOutside},
		{"gap", 0x2000, 0, unwinder.MemOutside},
		{"below_all", 0x10, 0, unwinder.MemOutside},
		{"above_all", 0xffff_ffff_ffff_fff8, 0, unwinder.MemOutside},
		// Beyond its data the segment reads the file: the byte at
		// 0x3000+i is at file offset 0x40+i.
		{"from_file", 0x3020, 0xf000 + 0x40 + 0x20, unwinder.MemOK},
		{"last_word_of_file", 0x31b8, 0xf000 + 0x1f8, unwinder.MemOK},
		{"beyond_file_end", 0x31c0, 0, unwinder.MemTruncated}, // file offset 0x200: the file has 0x200 bytes
		{"unreadable_file", 0x5008, 0, unwinder.MemTruncated},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, st := segs.ReadUint64(c.addr)
			assert.Equal(t, c.st, st)
			assert.Equal(t, c.want, v)
		})
	}

	// A word that starts in one segment's data and ends in the next's.
	segs2, err := unwinder.NewSegments([]unwinder.Segment{
		{Addr: 0x1000, Size: 8, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		{Addr: 0x1008, Size: 8, Data: []byte{9, 10, 11, 12, 13, 14, 15, 16}},
	})
	require.NoError(t, err)
	v, st := segs2.ReadUint64(0x1004)
	require.Equal(t, unwinder.MemOK, st)
	require.Equal(t, binary.LittleEndian.Uint64([]byte{5, 6, 7, 8, 9, 10, 11, 12}), v)
}

func TestNewSegmentsErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		segs []unwinder.Segment
		want string
	}{
		{"overlap", []unwinder.Segment{{Addr: 0x1000, Size: 0x100}, {Addr: 0x10f8, Size: 8}}, "overlap"},
		{"data_beyond_size", []unwinder.Segment{{Addr: 0x1000, Size: 4, Data: make([]byte, 8)}}, "more than its size"},
		{"wraps", []unwinder.Segment{{Addr: 0xffff_ffff_ffff_f000, Size: 0x2000}}, "wraps"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := unwinder.NewSegments(c.segs)
			require.Error(t, err)
			require.Contains(t, err.Error(), c.want)
		})
	}
}

func TestStackMemory(t *testing.T) {
	s := &unwinder.Stack{Addr: 0x7000, Data: words(0x7000, 4),
		Extra: []unwinder.Region{{Addr: 0x1000, Data: words(0x1000, 2)}}}
	for _, c := range []struct {
		addr uint64
		want uint64
		st   unwinder.MemStatus
	}{
		{0x7008, 0x7008, unwinder.MemOK},
		{0x7020, 0, unwinder.MemTruncated}, // above the snapshot: not captured
		{0x6ff8, 0, unwinder.MemOutside},   // below the stack pointer
		{0x1008, 0x1008, unwinder.MemOK},   // an extra region
		{0x1010, 0, unwinder.MemOutside},
	} {
		v, st := s.ReadUint64(c.addr)
		assert.Equal(t, c.st, st, "%#x", c.addr)
		assert.Equal(t, c.want, v, "%#x", c.addr)
	}
}

// opaqueMemory hides a Stack behind the Memory interface, so that Unwind
// cannot read it directly.
type opaqueMemory struct{ s *unwinder.Stack }

func (m opaqueMemory) ReadUint64(addr uint64) (uint64, unwinder.MemStatus) {
	return m.s.ReadUint64(addr)
}

// stackSegments describes a sample's captured memory as core-dump segments
// with the same meaning as the Stack: above the snapshot's start, memory
// exists up to the top of the address space but only the regions have data
// (a read without data is truncated); below it, only the regions exist.
func stackSegments(t testing.TB, s *unwinder.Stack) *unwinder.Segments {
	regions := append([]unwinder.Region{{Addr: s.Addr, Data: s.Data}}, s.Extra...)
	sort.Slice(regions, func(i, j int) bool { return regions[i].Addr < regions[j].Addr })
	var segs []unwinder.Segment
	for i, r := range regions {
		size := uint64(len(r.Data))
		if r.Addr >= s.Addr {
			end := ^uint64(0)
			if i+1 < len(regions) {
				end = regions[i+1].Addr
			}
			size = end - r.Addr
		}
		segs = append(segs, unwinder.Segment{Addr: r.Addr, Size: size, Data: r.Data})
	}
	m, err := unwinder.NewSegments(segs)
	require.NoError(t, err)
	return m
}

// TestMemoryImplementationsAgree unwinds every committed capture from its
// Stack (checked against gdb by TestFixtures), from the same memory as
// Segments, and through an opaque Memory that Unwind can only call: the
// frames and results must be the same.
func TestMemoryImplementationsAgree(t *testing.T) {
	eachPrepared(t, func(path string, p *fixture.Prepared) {
		for _, opts := range []unwinder.Options{{}, {NoFramePointer: true}} {
			u := unwinder.New(p.Arch, opts)
			var c unwinder.Cache
			want := make([]unwinder.Frame, 512)
			wantRes := u.Unwind(&c, p.Space, &p.Regs, &p.Stack, want)
			for _, m := range []struct {
				name string
				mem  unwinder.Memory
			}{
				{"segments", stackSegments(t, &p.Stack)},
				{"opaque", opaqueMemory{&p.Stack}},
			} {
				got := make([]unwinder.Frame, 512)
				res := u.Unwind(&c, p.Space, &p.Regs, m.mem, got)
				if !assert.Equal(t, wantRes, res, "%s %+v %s: result", path, opts, m.name) {
					continue
				}
				assert.Equal(t, want[:wantRes.Frames], got[:res.Frames], "%s %+v %s: frames", path, opts, m.name)
			}
		}
	})
}

// TestUnwindMemoryAllocs checks that unwinding through Segments and through
// an opaque Memory allocates nothing, as through a Stack.
func TestUnwindMemoryAllocs(t *testing.T) {
	f, err := fixture.Load(fixture.Dir() + "/fixtures/x86_64/signal_handler.json")
	require.NoError(t, err)
	cache := f.NewCache()
	defer cache.Close()
	p, err := f.Prepare(cache)
	require.NoError(t, err)
	u := unwinder.New(p.Arch, unwinder.Options{})
	frames := make([]unwinder.Frame, 64)
	var c unwinder.Cache
	for _, mem := range []unwinder.Memory{&p.Stack, stackSegments(t, &p.Stack), opaqueMemory{&p.Stack}} {
		res := u.Unwind(&c, p.Space, &p.Regs, mem, frames)
		require.Greater(t, res.Frames, 3)
		n := testing.AllocsPerRun(100, func() { u.Unwind(&c, p.Space, &p.Regs, mem, frames) })
		assert.Zero(t, n, "%T: allocations per unwind", mem)
	}
}

// TestStackEndingAtCFA unwinds every committed capture from a snapshot that
// ends exactly at one frame's CFA, in an allocation of its own of exactly
// that size (8192 bytes, a size the heap rounds nothing onto): the frame's
// save slots lie below its CFA, inside the snapshot, and the unwind must
// go on through it as from the whole stack, then stop truncated. The fast
// path once formed a pointer to the CFA itself, one past the end of the
// allocation, which Go forbids: under -race (checkptr) that was a fatal
// error, met on real recordings by report's tests.
func TestStackEndingAtCFA(t *testing.T) {
	const size = 8192
	eachPrepared(t, func(path string, p *fixture.Prepared) {
		u := unwinder.New(p.Arch, unwinder.Options{})
		var c unwinder.Cache
		want := make([]unwinder.Frame, 512)
		wantRes := u.Unwind(&c, p.Space, &p.Regs, &p.Stack, want)
		want = want[:wantRes.Frames]
		sp0 := want[0].SP
		checked := 0
		for k := 0; k+1 < len(want); k++ {
			cfa := want[k].CFA
			if cfa == 0 || cfa < size || cfa-size > sp0 || cfa <= p.Stack.Addr || cfa > p.Stack.Addr+uint64(len(p.Stack.Data)) {
				continue
			}
			st := unwinder.Stack{Addr: cfa - size, Data: make([]byte, size)}
			from := max(st.Addr, p.Stack.Addr)
			copy(st.Data[from-st.Addr:], p.Stack.Data[from-p.Stack.Addr:cfa-p.Stack.Addr])
			got := make([]unwinder.Frame, 512)
			var c2 unwinder.Cache
			res := u.Unwind(&c2, p.Space, &p.Regs, &st, got)
			name := fmt.Sprintf("%s: snapshot ending at frame %d's CFA %#x", filepath.Base(path), k, cfa)
			require.GreaterOrEqual(t, res.Frames, k+1, "%s: %v (%v)", name, res.Stop, res.Err)
			for i := 0; i <= k && i < res.Frames; i++ {
				require.Equal(t, want[i].PC, got[i].PC, "%s: frame %d", name, i)
				require.Equal(t, want[i].SP, got[i].SP, "%s: frame %d", name, i)
			}
			if res.Frames > k+1 {
				require.Equal(t, want[k+1].PC, got[k+1].PC, "%s: frame %d, the one the snapshot's last slots give", name, k+1)
			}
			if res.Stop == unwinder.StopOutermost {
				// Only where the CFI proves it without the memory
				// beyond (_start's undefined return address).
				require.Equal(t, unwinder.StopOutermost, wantRes.Stop, "%s: a cut stack called complete", name)
				require.Equal(t, len(want), res.Frames, "%s: a cut stack called complete", name)
			}
			checked++
		}
		if checked == 0 {
			t.Logf("%s: no frame's CFA within %d bytes of the first SP", filepath.Base(path), size)
		}
	})
}
