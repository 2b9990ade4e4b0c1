package unwinder

import (
	"sort"

	"github.com/ustack/ustack/cfi"
)

// Object is what the unwinder needs from a mapped object file: its unwind
// rows and its instruction bytes. Addresses are link-time addresses (as in
// the object's symbol table), not runtime addresses. Package elfcache
// provides an implementation for ELF files; implementations must be safe for
// concurrent use.
type Object interface {
	// FindRow fills row with the unwind row for the link-time address addr.
	// It returns cfi.ErrNoFDE when the object has no unwind information
	// for addr.
	FindRow(addr uint64, row *cfi.Row) error
	// ReadCode copies the instruction bytes at link-time address addr into
	// buf and returns how many it copied (0 when addr is not in the object).
	ReadCode(addr uint64, buf []byte) int
}

// Mapping is one executable or data mapping of the process at the time of the
// sample.
type Mapping struct {
	// Start and End bound the runtime addresses [Start, End).
	Start, End uint64
	// Bias is the runtime address minus the link-time address for this
	// mapping's object: Object addresses are runtime address - Bias.
	Bias uint64
	// Exec is true when the mapping is executable.
	Exec bool
	// Object holds the object's unwind information; nil for anonymous
	// memory, JIT code and objects that could not be found.
	Object Object
	// Name is the file name or pseudo-name ("[vdso]") for reports.
	Name string
	// Tag is the caller's own reference for the mapping (for example an
	// index into its table of mapping details). NewAddressSpace keeps it
	// with the mapping through sorting and clipping, so a Frame's Mapping
	// leads back to it.
	Tag int
}

// AddressSpace is the memory map of a process at the time of a sample. Build
// it with NewAddressSpace; it is read-only afterwards and may be shared
// between goroutines.
type AddressSpace struct {
	maps []Mapping // sorted by Start, non-overlapping
}

// NewAddressSpace returns an address space holding a copy of maps, sorted by
// start address. Empty mappings are dropped; where mappings overlap, each is
// clipped to end where the next one starts.
func NewAddressSpace(maps []Mapping) *AddressSpace {
	ms := make([]Mapping, 0, len(maps))
	for _, m := range maps {
		if m.End <= m.Start {
			continue
		}
		ms = append(ms, m)
	}
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].Start < ms[j].Start })
	for i := 0; i+1 < len(ms); i++ {
		if ms[i].End > ms[i+1].Start {
			ms[i].End = ms[i+1].Start
		}
	}
	out := ms[:0]
	for _, m := range ms {
		if m.End > m.Start {
			out = append(out, m)
		}
	}
	return &AddressSpace{maps: out}
}

// Find returns the index of the mapping containing addr, or -1.
func (s *AddressSpace) Find(addr uint64) int {
	lo, hi := 0, len(s.maps)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if s.maps[mid].End <= addr {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < len(s.maps) && s.maps[lo].Start <= addr {
		return lo
	}
	return -1
}

// Mapping returns the mapping at index i, as returned by Find or recorded in
// a Frame.
func (s *AddressSpace) Mapping(i int) *Mapping { return &s.maps[i] }

// Len returns the number of mappings.
func (s *AddressSpace) Len() int { return len(s.maps) }
