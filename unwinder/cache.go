package unwinder

import (
	"math/bits"
	"unsafe"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
)

// The row cache has two levels. The hot level, read on every frame, holds
// only the compact form of each row (fastRow, 256 bytes an entry with its
// key): 2 ways of 256 sets, 128 KiB. Programs whose stacks pass through more
// return addresses than that (a compiler: tens of thousands) would ask the
// Object again and again, at a microsecond a row; once the hot level has
// missed spillAfter times, a second level (2 ways of 8,192 sets, 1.4 MiB,
// allocated then, so small unwinds never touch it, and free of pointers, so
// the garbage collector never scans it) keeps the rows the hot level
// evicts, each packed into 64 bytes (spillRow). The full cfi.Row (some 600
// bytes) is needed only by the general step, for the rare rows that have
// no compact form and for addresses without CFI; a small direct-mapped side cache holds those,
// refilled from the Object on a miss.
const (
	cacheWays = 2
	cacheSets = 256 // a power of two
	cacheBits = 8   // log2(cacheSets)

	spillWays  = 2
	spillSets  = 8192 // the second level's sets; a power of two
	spillBits  = 13   // log2(spillSets)
	spillAfter = 4096 // hot-level misses before the second level is allocated

	rowSets = 32 // the side cache of full rows; a power of two
	rowBits = 5  // log2(rowSets)
)

// cacheEntry is a cacheEntryData padded to a power-of-two size, so that
// indexing the cache is a shift rather than a multiplication on the path from
// one frame's PC to the next. (The array length goes negative, failing the
// build, if cacheEntryData outgrows the size.)
type cacheEntry struct {
	cacheEntryData
	_ [cacheEntrySize - unsafe.Sizeof(cacheEntryData{})]byte
}

const cacheEntrySize = 256

// The entry is exactly cacheEntrySize bytes: a cacheEntryData of exactly
// that size would get a zero-length pad, which Go follows with padding of
// its own (a pointer to it must not point past the struct), and walkSimple
// indexes the entries by cacheEntrySize.
var _ [unsafe.Sizeof(cacheEntry{}) - cacheEntrySize]byte

type cacheEntryData struct {
	obj  Object
	addr uint64 // the looked-up link-time address (exact key)
	fastRow
}

// rowEntry is an entry of the side cache: the full row at a link-time
// address of an object, for the general step.
type rowEntry struct {
	obj      Object
	addr     uint64
	err      error  // nil, cfi.ErrNoFDE or a CFI error
	explicit uint64 // bit r set when row.Regs[r] is not unspecified or same value
	// pltEntered: the row's function was entered from arm64 PLT0 and its
	// CFA leaves out the pair PLT0 pushed (plt.go); the caller's SP is
	// CFA+16. Such rows have no compact form.
	pltEntered bool
	row        cfi.Row
}

// Cache holds per-worker unwinding state: a set-associative cache of CFI rows
// keyed by object and address, and the registers of the frames being
// stepped. It is not safe for concurrent use; give each goroutine its own.
// The zero Cache is ready to use. Objects used as cache keys must be
// comparable (pointer types). A Cache serves Unwinders of one architecture
// best: shared by two, it still gives the same frames, more slowly (every
// frame takes the general loop until Reset).
type Cache struct {
	entries [cacheSets * cacheWays]cacheEntry
	victim  [cacheSets]uint8 // the way of each set to replace: the one not used last (way 0 first)
	rows    [rowSets]rowEntry
	// spill is the second level (nil until the hot level has missed
	// spillAfter times, counted by misses); kept holds its objects, by
	// their interface words (an Object of a type that cannot be hashed
	// must not panic).
	spill *spillLevel
	kept  map[iface]Object
	// keptLast is the Object spilled last, known to be in kept: most
	// spills are of the same few objects, and a map lookup of the
	// interface words took 3% of a report's CPU.
	keptLast iface
	misses   int
	// sweeps keeps prologueStep's decodings of functions without CFI
	// (nil until the first).
	sweeps *sweepSet
	none   cacheEntry   // the entry of mappings without an Object: no row
	win    window       // the memory of the unwind in progress
	mem    exprMemory   // win as cfi.Memory
	regs   [2]arch.Regs // the current frame's and the caller's registers
	last   [2]int       // indexes of the mappings found last
	// ends holds outermost's last answers (see there).
	ends [endSets]endEntry
	// ready is false in a Cache never Reset (see Reset).
	ready bool
	// arch is the architecture every entry's compact form was compiled
	// for (arch.Unknown while there is none, archMixed once there were
	// two): walkSimple uses the entries only when it is its own, and
	// need not check each entry's.
	arch arch.Arch
}

// archMixed is Cache.arch once entries were compiled for two architectures.
const archMixed arch.Arch = 255

// Reset empties the cache; call it when an Object may have changed.
//
// A new Cache resets itself at its first miss, before it holds anything:
// writing every page of it first costs the kernel one fault a page, where
// the first access to each being a read would map the zero page, which the
// write that fills an entry must then copy (a second fault and, on a VM, a
// TLB shootdown across CPUs: a third of a small report's TLB flushes).
func (c *Cache) Reset() {
	c.ready = true
	for i := range c.entries {
		c.entries[i] = cacheEntry{}
	}
	c.victim = [cacheSets]uint8{}
	for i := range c.rows {
		c.rows[i] = rowEntry{}
	}
	c.resetSpill()
	c.sweeps = nil
	c.arch = arch.Unknown
	c.ends = [endSets]endEntry{}
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

func cacheSet(addr uint64) uint64 { return (addr * 0x9E3779B97F4A7C15) >> (64 - cacheBits) }

// row returns the compact row for link-time address addr in obj, from the
// cache or by asking the object. obj is not nil; a is the architecture to
// prepare the compact form for. (Unwind has this inlined by hand.)
func (c *Cache) row(a arch.Arch, obj Object, addr uint64) *cacheEntry {
	set := cacheSet(addr)
	ways := (*[cacheWays]cacheEntry)(c.entries[set*cacheWays:])
	if e := &ways[0]; e.addr == addr && sameObject(&e.obj, &obj) {
		if c.victim[set] != 1 {
			c.victim[set] = 1
		}
		return e
	}
	if e := &ways[1]; e.addr == addr && sameObject(&e.obj, &obj) {
		if c.victim[set] != 0 {
			c.victim[set] = 0
		}
		return e
	}
	return c.rowMiss(a, obj, addr, set)
}

// rowMiss fills the way of set not used last with the row at addr, from the
// second level or by asking the object.
//
//go:noinline
func (c *Cache) rowMiss(a arch.Arch, obj Object, addr, set uint64) *cacheEntry {
	if !c.ready {
		c.Reset()
	}
	if c.arch != a {
		if c.arch == arch.Unknown {
			c.arch = a
		} else {
			c.arch = archMixed
		}
	}
	w := c.victim[set] & 1 // the way not used last; way 0 of an empty set
	c.victim[set] = w ^ 1
	e := &c.entries[set*cacheWays+uint64(w)]
	e.obj = obj
	e.addr = addr
	sl := c.spill
	o := (*iface)(unsafe.Pointer(&obj))
	sset, tag := spillPlace(addr, uintptr(o.data))
	if sl != nil {
		i := sset * spillWays
		for w := range uint64(spillWays) {
			if sl.tags[i+w] != tag {
				continue
			}
			if x := &sl.ents[i+w]; x.addr == addr && x.tab == uintptr(o.tab) && x.data == uintptr(o.data) {
				e.fastRow.setFromSpill(&x.row)
				sl.victim[sset] = uint8(w ^ 1)
				return e
			}
		}
	} else if c.misses++; c.misses >= spillAfter {
		c.spill = new(spillLevel)
		clear(c.spill.tags[:]) // written first, as in Reset
	}
	c.compileRow(e, a, obj, addr)
	if sl != nil {
		c.spillRow(sl, sset, tag, e)
	}
	return e
}

// spillLevel is the second level: 2-way set-associative entries, each a
// row packed into a spillRow with its key, whose Object is kept as the
// words of its interface value, so that the level holds no pointers.
// Cache.kept keeps each such Object alive (the collector does not move
// objects), so that no other can come to have its words while the entry
// exists.
//
// Packed, the rows take 64 bytes of a fastRow's 224: the 10x bench
// recording's stacks pass through some 90,000 return addresses, and the
// 8,192 full rows the level held before (2 MiB) left 420,000 of the 1.07
// million misses of its hot level to be compiled again, against 253,000
// with these 16,384 (178,000 with 32,768, whose 3 MiB a worker took the
// report's resident set over 64 MB for 1% less CPU).
//
// A lookup reads the set's two tags (a hash of the key, 0 for an empty
// way) from an array of 64 KiB that mostly stays in the CPU's caches, and
// an entry, key and row together, only when its tag matches: a hit reads
// one entry of the 1.4 MiB, a miss none. Each page of entries is first
// touched by the write that fills it. (Read first, a fresh page is the
// kernel's zero page, which the write must then copy: two faults, and on
// a VM a TLB shootdown across CPUs.)
type spillLevel struct {
	tags   [spillSets * spillWays]uint32
	victim [spillSets]uint8 // the way of each set to replace
	ents   [spillSets * spillWays]spillEntry
}

type spillEntry struct {
	tab, data uintptr
	addr      uint64
	row       spillRow
}

// spillPlace returns the set of the second level where the row at
// link-time address addr of the object whose interface data word is data
// goes, and its tag there. The address is rotated before the
// multiplication, so that addresses a multiple of 16 apart (functions'
// starts) spread over all sets as consecutive numbers do.
func spillPlace(addr uint64, data uintptr) (set uint64, tag uint32) {
	h := bits.RotateLeft64(addr, -4) * 0x9E3779B97F4A7C15
	return h >> (64 - spillBits), uint32(h>>16) ^ uint32(data>>4) | 1
}

// maxKept bounds the objects the second level keeps alive: a long-lived
// Cache that has seen more (processes come and gone) starts it afresh.
const maxKept = 1024

// spillRow copies e, just compiled, into set sset of the second level sl
// with its tag, unless its row does not pack (spillRow.pack): it is then
// compiled again at its next miss.
func (c *Cache) spillRow(sl *spillLevel, sset uint64, tag uint32, e *cacheEntry) {
	w := uint64(sl.victim[sset] & 1)
	slot := sset*spillWays + w
	x := &sl.ents[slot]
	if !x.row.pack(&e.fastRow) {
		return // the way keeps its row
	}
	sl.victim[sset] = uint8(w ^ 1)
	o := *(*iface)(unsafe.Pointer(&e.obj))
	if o != c.keptLast {
		if _, ok := c.kept[o]; !ok {
			if len(c.kept) >= maxKept {
				c.resetSpill()
			}
			if c.kept == nil {
				c.kept = make(map[iface]Object)
			}
			c.kept[o] = e.obj
		}
		c.keptLast = o
	}
	x.tab, x.data, x.addr = uintptr(o.tab), uintptr(o.data), e.addr
	sl.tags[slot] = tag
}

// resetSpill empties the second level and lets its objects go.
func (c *Cache) resetSpill() {
	if c.spill != nil {
		clear(c.spill.tags[:])
	}
	clear(c.kept)
	c.keptLast = iface{}
}

// compileRow fills e's compact form with the row at addr in obj, compiled for
// a: no form (flags 0) when obj has no row there or the row has none.
func (c *Cache) compileRow(e *cacheEntry, a arch.Arch, obj Object, addr uint64) {
	r := c.fullRow(obj, addr)
	if r.err != nil || r.pltEntered {
		e.fastRow = fastRow{}
		return
	}
	e.compile(a, &r.row, r.explicit)
	if e.flags&fastSignal != 0 && addr+1 < r.row.End {
		// A trampoline's row found at a return address's lookup (PC-1)
		// that is the row at the PC too: the unwind need not look again.
		e.flags |= fastSignalNext
	}
}

// fullRow returns the full row at link-time address addr in obj, from the
// side cache or by asking the object.
func (c *Cache) fullRow(obj Object, addr uint64) *rowEntry {
	r := &c.rows[(addr*0x9E3779B97F4A7C15)>>(64-rowBits)]
	if r.addr == addr && sameObject(&r.obj, &obj) {
		return r
	}
	r.fill(obj, addr)
	return r
}

// fill asks obj for the row at addr.
//
//go:noinline
func (r *rowEntry) fill(obj Object, addr uint64) {
	r.obj = obj
	r.addr = addr
	r.err = obj.FindRow(addr, &r.row)
	r.explicit = 0
	r.pltEntered = false
	if r.err != nil {
		return
	}
	r.explicit = explicitRules(&r.row)
	r.pltEntered = pltEntered(obj, &r.row)
}

// explicitRules returns the mask of the columns of row whose rule is neither
// unspecified nor same value: the rules that change a register.
func explicitRules(row *cfi.Row) uint64 {
	var m uint64
	for r := range row.Regs {
		if k := row.Regs[r].Kind; k != cfi.RuleUnspecified && k != cfi.RuleSameValue {
			m |= 1 << uint(r)
		}
	}
	return m
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

// endEntry is an answer of an OutermostObject, kept by Cache.outermost: end
// is whether the function at link-time address addr of obj begins a stack.
type endEntry struct {
	obj  Object
	addr uint64
	end  bool
}

// endSets is how many answers Cache.outermost keeps; a power of two.
const endSets = 8

// outermost reports whether m's object says the function at link-time
// address addr begins a stack (OutermostObject), false where m has no such
// object. Walks ask at their last frame: every Go stack ends at
// runtime.goexit, and a capture's stacks cut short by its size end at a
// few hot places, where the object's answer (a symbol lookup, a name
// compared, the code around a clone read) cost a walk of 35 frames a
// tenth of its time. The answers are kept direct-mapped by address and
// object.
func (c *Cache) outermost(m *Mapping, addr uint64) bool {
	if m.Object == nil {
		return false
	}
	w := (*iface)(unsafe.Pointer(&m.Object))
	e := &c.ends[(addr^uint64(uintptr(w.data))>>4)&(endSets-1)]
	if e.obj != nil && e.addr == addr && sameObject(&e.obj, &m.Object) {
		return e.end
	}
	o, ok := m.Object.(OutermostObject)
	end := ok && o.Outermost(addr)
	e.obj, e.addr, e.end = m.Object, addr, end
	return end
}
