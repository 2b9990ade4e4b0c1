package cfi

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// indexEntry is one FDE of a sorted index.
type indexEntry struct {
	pc  uint64 // FDE initial location
	off uint32 // offset of the FDE in its section
}

// sortedIndex is built lazily, on first use, for a section without a usable
// .eh_frame_hdr table.
type sortedIndex struct {
	once    sync.Once
	entries []indexEntry
	err     error        // the first malformed entry that stopped the walk, if any
	bytes   atomic.Int64 // the entries' size, once built (Table.IndexBytes)
}

// build walks every entry of s, recording the FDEs that cover a non-empty
// range. FDEs that fail to decode are left out; a length that cannot be
// trusted ends the walk.
func (x *sortedIndex) build(s *frameSection) {
	var c cie
	lastCIE := -1
	var entries []indexEntry
	off := 0
	for off < len(s.data) {
		e, err := s.readEntry(off)
		if err != nil {
			x.err = err
			break
		}
		if e.isTerm {
			if s.eh {
				break
			}
			off = e.end
			continue
		}
		if !e.isCIE && uint64(off) <= 0xffffffff {
			start, end, err := s.fdeRange(&e, &c, &lastCIE)
			if err == nil && end > start {
				entries = append(entries, indexEntry{pc: start, off: uint32(off)})
			}
		}
		off = e.end
	}
	slices.SortStableFunc(entries, func(a, b indexEntry) int { return cmp.Compare(a.pc, b.pc) })
	x.entries = slices.Clip(entries)
	x.bytes.Store(int64(cap(x.entries)) * int64(unsafe.Sizeof(indexEntry{})))
}

// search returns the index of the last entry whose pc is at most pc, or -1.
func (x *sortedIndex) search(pc uint64) int {
	lo, hi := 0, len(x.entries)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if x.entries[mid].pc <= pc {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo - 1
}

// IndexBytes returns the memory the table's sorted indexes hold, built
// lazily for sections without a usable .eh_frame_hdr; 0 before they are
// built. The section bytes the table reads are its caller's.
func (t *Table) IndexBytes() int64 {
	return t.ehIdx.bytes.Load() + t.dfIdx.bytes.Load()
}
