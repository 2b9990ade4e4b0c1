package unwinder

import (
	"unsafe"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
)

const (
	cacheWays = 2
	cacheSets = 256 // a power of two
	cacheBits = 8   // log2(cacheSets)
)

// cacheEntry is a cacheEntryData padded to a power-of-two size, so that
// indexing the cache is a shift rather than a multiplication on the path from
// one frame's PC to the next. (The array length goes negative, failing the
// build, if cacheEntryData outgrows the size.)
type cacheEntry struct {
	cacheEntryData
	_ [cacheEntrySize - unsafe.Sizeof(cacheEntryData{})]byte
}

const cacheEntrySize = 1024

type cacheEntryData struct {
	obj      Object
	addr     uint64 // the looked-up link-time address (exact key)
	err      error  // nil, cfi.ErrNoFDE or a CFI error
	explicit uint64 // bit r set when row.Regs[r] is not unspecified or same value

	// The compact form of the row, valid when flags&fastOK != 0: the CFA
	// is register cfaReg + cfaOff and rules[:nrules] are the explicit rules.
	flags  uint8
	arch   arch.Arch // the architecture the compact form is for
	cfaReg uint8
	raReg  uint8
	pcReg  uint8
	spReg  uint8
	nrules uint8
	noff   uint8 // rules[:noff] are the RuleOffset rules
	// raOff is the offset from the CFA of the saved return address when
	// flags has fastRAOff.
	raOff int32
	// offMask has bit r set for the column r of each of rules[:noff].
	offMask uint64
	// minOff and maxOff bound the offsets of rules[:noff], so that one
	// check can cover every stack read of the row.
	minOff, maxOff int32
	cfaOff         int64
	rules          [arch.MaxRegs]fastRule

	row cfi.Row
}

// Cache holds per-worker unwinding state: a set-associative cache of CFI rows
// keyed by object and address. It is not safe for concurrent use; give each
// goroutine its own. The zero Cache is ready to use. Objects used as cache
// keys must be comparable (pointer types).
type Cache struct {
	entries [cacheSets * cacheWays]cacheEntry
	recent  [cacheSets]uint8 // the way of each set used last
	mem     exprMemory
	regs    [2]arch.Regs // the current frame's and the caller's registers
	last    [2]int       // indexes of the mappings found last
}

// Reset empties the cache; call it when an Object may have changed.
func (c *Cache) Reset() {
	for i := range c.entries {
		c.entries[i] = cacheEntry{}
	}
	c.recent = [cacheSets]uint8{}
}

// iface is the layout of a non-empty interface value.
type iface struct {
	tab, data unsafe.Pointer
}

// sameObject reports whether a and b hold the same dynamic type and the same
// data word: for the pointer types that implement Object this is a == b,
// without the call to the runtime that comparing interfaces costs. (For other
// types equal words still imply equal values; unequal words only cost a
// cache miss.)
func sameObject(a, b *Object) bool {
	x := (*iface)(unsafe.Pointer(a))
	y := (*iface)(unsafe.Pointer(b))
	return x.tab == y.tab && x.data == y.data
}

// row returns the CFI row for link-time address addr in obj, from the cache
// or by asking the object. obj is not nil; a is the architecture to prepare
// the compact form for. (Unwind has this inlined by hand.)
func (c *Cache) row(a arch.Arch, obj Object, addr uint64) *cacheEntry {
	set := (addr * 0x9E3779B97F4A7C15) >> (64 - cacheBits)
	ways := (*[cacheWays]cacheEntry)(c.entries[set*cacheWays:])
	if e := &ways[0]; e.addr == addr && sameObject(&e.obj, &obj) {
		if c.recent[set] != 0 {
			c.recent[set] = 0
		}
		return e
	}
	if e := &ways[1]; e.addr == addr && sameObject(&e.obj, &obj) {
		if c.recent[set] != 1 {
			c.recent[set] = 1
		}
		return e
	}
	return c.rowMiss(a, obj, addr, set)
}

// rowMiss fills the way of set not used last with the row at addr.
//
//go:noinline
func (c *Cache) rowMiss(a arch.Arch, obj Object, addr, set uint64) *cacheEntry {
	w := c.recent[set] ^ 1 // replace the way not used last
	c.recent[set] = w
	e := &c.entries[set*cacheWays+uint64(w&1)]
	e.fill(a, obj, addr)
	return e
}

// fill asks obj for the row at addr and precomputes its compact form.
//
//go:noinline
func (e *cacheEntry) fill(a arch.Arch, obj Object, addr uint64) {
	e.obj = obj
	e.addr = addr
	e.err = obj.FindRow(addr, &e.row)
	e.explicit = 0
	e.flags = 0
	e.arch = arch.Unknown
	e.nrules = 0
	if e.err != nil {
		return
	}
	row := &e.row
	for r := range row.Regs {
		if k := row.Regs[r].Kind; k != cfi.RuleUnspecified && k != cfi.RuleSameValue {
			e.explicit |= 1 << uint(r)
		}
	}
	e.flags = e.compact(a)
	e.arch = a
}

// findMiss returns the index of the mapping containing addr when neither of
// the two mappings found last (c.last) holds it. Unwind tries those inline.
//
//go:noinline
func (c *Cache) findMiss(space *AddressSpace, addr uint64) int {
	i := space.Find(addr)
	if i >= 0 {
		c.last[0], c.last[1] = i, c.last[0]
	}
	return i
}
