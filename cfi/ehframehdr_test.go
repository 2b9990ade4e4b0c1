package cfi

import (
	"encoding/binary"
	"math/rand"
	"sync"
	"testing"
)

// hdrOf returns an ehHdr over a search table of the given initial
// locations (relative to the header's address, 0x10000), with the FDE
// addresses their indexes.
func hdrOf(starts []int32) ehHdr {
	table := make([]byte, 8*len(starts))
	for i, s := range starts {
		binary.LittleEndian.PutUint32(table[8*i:], uint32(s))
		binary.LittleEndian.PutUint32(table[8*i+4:], uint32(i))
	}
	return ehHdr{table: table, count: len(starts), addr: 0x10000, firstsOnce: new(sync.Once)}
}

// TestEHHdrSearch checks the two-level search of .eh_frame_hdr's table
// against a scan of every entry: the last entry whose initial location is
// at most the PC, -1 before the first, for tables of every size around the
// strides' edges and runs of equal locations (zero-length FDEs) across
// them; and that a table out of order gives an index in range.
func TestEHHdrSearch(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for _, n := range []int{0, 1, 2, hdrStride - 1, hdrStride, 2 * hdrStride, 2*hdrStride + 1, 3*hdrStride - 1, 3 * hdrStride, 3*hdrStride + 1, 1000, 5000} {
		starts := make([]int32, n)
		loc := int32(-0x8000) // below the header, as .text often is
		for i := range starts {
			if r.Intn(8) != 0 {
				loc += int32(1 + r.Intn(64))
			}
			starts[i] = loc
		}
		h := hdrOf(starts)
		want := func(pc uint64) int {
			i := -1
			for j, s := range starts {
				if h.addr+uint64(int64(s)) <= pc {
					i = j
				}
			}
			return i
		}
		var pcs []uint64
		for _, s := range starts {
			a := h.addr + uint64(int64(s))
			pcs = append(pcs, a-1, a, a+1)
		}
		pcs = append(pcs, 0, h.addr-0x9000, h.addr+0x100000, ^uint64(0))
		for _, pc := range pcs {
			if got, w := h.search(pc), want(pc); got != w {
				t.Fatalf("%d entries: search(%#x) = %d, want %d", n, pc, got, w)
			}
		}
		// Out of order: any index, never past the table.
		r.Shuffle(len(starts), func(i, j int) { starts[i], starts[j] = starts[j], starts[i] })
		h = hdrOf(starts)
		for _, pc := range pcs {
			if got := h.search(pc); got < -1 || got >= n {
				t.Fatalf("%d entries out of order: search(%#x) = %d", n, pc, got)
			}
		}
	}
}
