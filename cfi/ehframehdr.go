package cfi

import (
	"encoding/binary"
	"sync"
)

// ehHdr describes a usable .eh_frame_hdr binary search table: fdeCount
// entries of two DW_EH_PE_datarel|DW_EH_PE_sdata4 words (initial location,
// FDE address), relative to the address of .eh_frame_hdr.
type ehHdr struct {
	table []byte // fdeCount*8 bytes
	count int
	addr  uint64 // address of .eh_frame_hdr (the datarel base)

	// firsts holds the initial location of every hdrStride-th entry, made
	// at the first search of a table of more than two strides (once).
	// A search finds the stride in it (a few KB, which stay in the CPU's
	// caches) and then the entry among the stride's, which share four
	// cache lines: a search of a large program's whole table (cc1: 40,000
	// FDEs, 320 KB, mapped from the file) touches another line, often
	// another page, at each of its 16 steps.
	firsts     []uint64
	firstsOnce *sync.Once
}

// hdrStride is how many entries of the search table one entry of
// ehHdr.firsts stands for.
const hdrStride = 32

// parseEHFrameHdr checks the header of .eh_frame_hdr and returns its search
// table if it has the usual encoding and agrees with .eh_frame's address.
// It reports ok false when the table cannot be used in place.
func parseEHFrameHdr(hdr Section, eh Section, ptrSize int) (h ehHdr, ok bool) {
	d := hdr.Data
	if len(d) < 4 || d[0] != 1 {
		return h, false
	}
	ehPtrEnc, countEnc, tableEnc := d[1], d[2], d[3]
	r := reader{data: d, off: 4}
	b := ptrBases{secAddr: hdr.Addr, dataAddr: hdr.Addr}
	ehPtr, code := r.encodedPtr(ehPtrEnc, ptrSize, &b, true)
	if code != ptrOK || ehPtr != eh.Addr {
		return h, false
	}
	count, code := r.encodedPtr(countEnc, ptrSize, &b, true)
	if code != ptrOK {
		return h, false
	}
	if tableEnc != peDataRel|peSdata4 {
		return h, false
	}
	rest := uint64(len(d) - r.off)
	if count > rest/8 {
		return h, false
	}
	h.table = d[r.off : r.off+int(count)*8]
	h.count = int(count)
	h.addr = hdr.Addr
	h.firstsOnce = new(sync.Once)
	return h, true
}

// start returns the initial location of table entry i.
func (h *ehHdr) start(i int) uint64 {
	return h.addr + uint64(int64(int32(binary.LittleEndian.Uint32(h.table[i*8:]))))
}

// fdeAddr returns the address of the FDE of table entry i.
func (h *ehHdr) fdeAddr(i int) uint64 {
	return h.addr + uint64(int64(int32(binary.LittleEndian.Uint32(h.table[i*8+4:]))))
}

// search returns the index of the last entry whose initial location is at
// most pc, or -1. In a table out of order (a damaged file) it is some
// entry's index, or -1.
func (h *ehHdr) search(pc uint64) int {
	lo, hi := 0, h.count
	if h.count > 2*hdrStride {
		h.firstsOnce.Do(h.makeFirsts)
		// The first stride whose first entry lies past pc; the entry
		// sought is in the one before it, past its first entry (at
		// most pc) unless that is the one.
		f := h.firsts
		l, r := 0, len(f)
		for l < r {
			m := int(uint(l+r) >> 1)
			if f[m] <= pc {
				l = m + 1
			} else {
				r = m
			}
		}
		if l == 0 {
			return -1
		}
		lo = (l-1)*hdrStride + 1
		hi = min(lo-1+hdrStride, h.count)
	}
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if h.start(mid) <= pc {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo - 1
}

// makeFirsts fills h.firsts.
func (h *ehHdr) makeFirsts() {
	f := make([]uint64, 0, (h.count+hdrStride-1)/hdrStride)
	for i := 0; i < h.count; i += hdrStride {
		f = append(f, h.start(i))
	}
	h.firsts = f
}
