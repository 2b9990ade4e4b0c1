package inflate

import (
	"math/bits"
	"sync"
)

// Table entries (uint32):
//
//	bits 0-4   bits the entry consumes (codeword length, or the primary
//	           index width for a subtable link)
//	bits 5-7   kind
//	bits 8-12  extra bits (length/distance), or a subtable's index width
//	bits 16-31 value: literal byte, length or distance base, subtable start
const (
	kLit = iota << 5
	kLen
	kEOB
	kSub
	kBad
	kindMask = 7 << 5
)

const (
	litBits  = 10
	distBits = 8
)

var lenBase = [29]uint16{3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258}
var lenExtra = [29]uint8{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0}
var distBase = [30]uint16{1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577}
var distExtra = [30]uint8{0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}

type (
	litTable  [1<<litBits + 288<<(15-litBits)]uint32 // primary and subtables
	distTable [1<<distBits + 32<<(15-distBits)]uint32
)

// decoder holds the tables, reused block after block.
type decoder struct {
	lit  litTable
	dist distTable
	code [128]uint32
	lens [288 + 32]uint8
}

// build fills t with the decoding table of the code lengths lens (symbols
// 0..len(lens)-1), primary index width pb; entry gives each symbol's
// entry (without its length bits). It returns false for an oversubscribed
// code, or an incomplete one other than a single one-bit code (what
// compress/flate accepts). A code longer than pb bits is found through
// its low pb bits' entry, a link to a subtable indexed by the following
// bits, as wide as the longest code needs.
func build(t []uint32, lens []uint8, pb uint, entry func(sym int) uint32) bool {
	var count [16]uint16
	for _, l := range lens {
		count[l]++
	}
	count[0] = 0
	left := 1
	maxLen := 0
	for l := 1; l <= 15; l++ {
		left <<= 1
		left -= int(count[l])
		if left < 0 {
			return false
		}
		if count[l] > 0 {
			maxLen = l
		}
	}
	for i := range t[:1<<pb] {
		t[i] = kBad
	}
	if maxLen == 0 {
		return true // no codes: every entry is bad
	}
	if left > 0 && !(maxLen == 1 && count[1] == 1) {
		// Incomplete: RFC 1951 allows only a single one-bit code.
		return false
	}
	var next [16]uint32
	code := uint32(0)
	for l := 1; l <= 15; l++ {
		code = (code + uint32(count[l-1])) << 1
		next[l] = code
	}
	subEnd := uint32(1 << pb)
	// Codes longer than pb: group by their low pb bits (reversed code);
	// each group gets a subtable as wide as its longest code needs.
	// Process in canonical order so groups are contiguous.
	type sub struct{ start, bits uint32 }
	var subs [1 << litBits]sub
	for sym, l := range lens {
		if l == 0 {
			continue
		}
		c := next[l]
		next[l]++
		rev := bits.Reverse32(c) >> (32 - uint(l))
		e := entry(sym)
		if uint(l) <= pb {
			for i := rev; i < 1<<pb; i += 1 << l {
				t[i] = e | uint32(l)
			}
			continue
		}
		p := rev & (1<<pb - 1)
		s := &subs[p]
		if s.bits == 0 {
			// Every subtable is as wide as the longest code needs;
			// shorter codes fill several of its entries.
			w := uint32(maxLen) - uint32(pb)
			s.start, s.bits = subEnd, w
			if int(subEnd)+1<<w > len(t) {
				return false
			}
			for i := subEnd; i < subEnd+1<<w; i++ {
				t[i] = kBad
			}
			subEnd += 1 << w
			t[p] = kSub | uint32(pb) | s.bits<<8 | s.start<<16
		}
		rest := rev >> pb
		rl := uint32(l) - uint32(pb)
		for i := rest; i < 1<<s.bits; i += 1 << rl {
			t[s.start+i] = e | rl
		}
	}
	return true
}

func litEntry(sym int) uint32 {
	switch {
	case sym < 256:
		return kLit | uint32(sym)<<16
	case sym == 256:
		return kEOB
	case sym < 286:
		i := sym - 257
		return kLen | uint32(lenExtra[i])<<8 | uint32(lenBase[i])<<16
	}
	return kBad
}

func distEntry(sym int) uint32 {
	if sym < 30 {
		return kLen | uint32(distExtra[sym])<<8 | uint32(distBase[sym])<<16
	}
	return kBad
}

func codeEntry(sym int) uint32 { return kLit | uint32(sym)<<16 }

var (
	fixed     sync.Once
	fixedLit  litTable
	fixedDist distTable
)

func buildFixed() {
	var l [288 + 32]uint8
	for i := range 288 {
		switch {
		case i < 144:
			l[i] = 8
		case i < 256:
			l[i] = 9
		case i < 280:
			l[i] = 7
		default:
			l[i] = 8
		}
	}
	for i := 288; i < 320; i++ {
		l[i] = 5
	}
	build(fixedLit[:], l[:288], litBits, litEntry)
	build(fixedDist[:], l[288:], distBits, distEntry)
}

var codeOrder = [19]uint8{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}
