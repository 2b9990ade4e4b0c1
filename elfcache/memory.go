package elfcache

import (
	"debug/elf"
	"sync/atomic"
	"unsafe"

	"github.com/ustack/ustack/cfi"
)

// heldParts is what an Object keeps in memory beyond its mapped file, as
// HeldBytes counts it: the bytes it allocated (decompressed sections,
// the symbol table) and the parts built lazily, each stored once built.
type heldParts struct {
	heap  atomic.Int64 // decompressed sections, the symbol table, Go's line strings
	table atomic.Pointer[cfi.Table]
	lines atomic.Pointer[lineIndex]
	debug atomic.Pointer[Object] // the separate debug file
	alt   atomic.Pointer[Object] // the supplementary (dwz) file
	dwp   atomic.Pointer[Object] // the split DWARF package
}

// HeldBytes returns the memory the object holds on the Go heap, with its
// debug, supplementary and split DWARF package files: the sections it
// decompressed into memory (not those mapped from a SectionCache), its
// symbol table, a Go program's function and file names copied from its
// .gopclntab once its lines are asked for, the sorted index of a CFI table without .eh_frame_hdr,
// the ELF headers read when it was opened, and the line index with the
// compilation units parsed and kept
// (Options.LineCacheCUs). It is counted from the sizes of what the object
// keeps (slice capacities, struct sizes; the strings of parsed units by
// their lengths), not measured from the allocator; the call-site indexes,
// the debug/dwarf readings of big-endian DWARF and of the last four units
// read alone (lineIndex.recent) are not counted. The
// file itself is mapped, not held: MappedBytes. Safe for concurrent use;
// it grows as the object builds what lookups ask for.
func (o *Object) HeldBytes() int64 {
	n := o.headerBytes() + o.held.heap.Load()
	if t := o.held.table.Load(); t != nil {
		n += t.IndexBytes()
	}
	if x := o.held.lines.Load(); x != nil {
		n += x.held.Load()
	}
	for _, d := range [...]*Object{o.held.debug.Load(), o.held.alt.Load(), o.held.dwp.Load()} {
		if d != nil {
			n += d.HeldBytes()
		}
	}
	return n
}

// MappedBytes returns the size of the files the object maps into memory
// (its own, and its debug, supplementary and split DWARF package files):
// address space backed by the files, whose pages the kernel may drop, not
// the Go heap.
func (o *Object) MappedBytes() int64 {
	var n int64
	if o.src != nil && o.src.unmap != nil {
		n = o.src.size
	}
	for _, d := range [...]*Object{o.held.debug.Load(), o.held.alt.Load(), o.held.dwp.Load()} {
		if d != nil {
			n += d.MappedBytes()
		}
	}
	return n
}

// inflateHeld decompresses a section into memory and counts it held.
func (o *Object) inflateHeld(inflate func() ([]byte, error)) ([]byte, error) {
	data, err := inflate()
	if err == nil {
		o.held.heap.Add(int64(cap(data)))
	}
	return data, err
}

// heldBytes is the symbol table's size.
func (t *symtab) heldBytes() int64 {
	if t == nil {
		return 0
	}
	return int64(len(t.names)) + int64(cap(t.syms))*int64(unsafe.Sizeof(symEntry{})) +
		int64(cap(t.spans))*int64(unsafe.Sizeof(span{}))
}

// skeletonBytes is the size of the index of units, without parsed units.
func (x *lineIndex) skeletonBytes() int64 {
	n := int64(cap(x.units)) * int64(unsafe.Sizeof(cuSlot{}))
	if !x.mappedRanges { // else mapped from the SectionCache, not held
		n += int64(cap(x.rs))*int64(unsafe.Sizeof(cuRange{})) + int64(cap(x.maxHi))*8
	}
	return n
}

// heldBytes is the size of a parsed unit: its line rows, scopes and the
// strings it made.
func (cu *cuLines) heldBytes() int64 {
	if cu == nil {
		return 0
	}
	n := int64(cap(cu.rows))*int64(unsafe.Sizeof(lineRow{})) + int64(cap(cu.scopes))*int64(unsafe.Sizeof(scope{})) +
		int64(cap(cu.spans))*int64(unsafe.Sizeof(scopeSpan{})) + int64(cap(cu.files))*int64(unsafe.Sizeof(""))
	for _, f := range cu.files {
		n += int64(len(f))
	}
	for i := range cu.scopes {
		n += int64(len(cu.scopes[i].name) + len(cu.scopes[i].linkage))
	}
	return n
}

// Closed reports whether the object has been closed (by Close, or by its
// Cache to keep to a budget): it must not be used then.
func (o *Object) Closed() bool { return o.closed.Load() }

// headerBytes is what an open object holds from the start: the Object,
// debug/elf's reading of its section and program headers (with the
// section names), its PT_LOAD headers.
func (o *Object) headerBytes() int64 {
	n := int64(unsafe.Sizeof(*o)) + int64(cap(o.loads))*int64(unsafe.Sizeof(elf.ProgHeader{}))
	if o.ef != nil {
		n += int64(unsafe.Sizeof(*o.ef)) + int64(len(o.ef.Sections))*int64(unsafe.Sizeof(elf.Section{})) +
			int64(len(o.ef.Progs))*int64(unsafe.Sizeof(elf.Prog{}))
		for _, s := range o.ef.Sections {
			n += int64(len(s.Name))
		}
	}
	return n
}

// dropBuilt lets go of what a closed object built (tables, symbols,
// lines, decompressed sections), so that a closed object still reachable
// (a key of a per-worker cache, a symbolizer's memo) holds little. Each
// Once is passed first: a build never starts after, and one in progress
// has finished.
func (o *Object) dropBuilt() {
	o.symOnce.Do(func() {})
	o.syms = nil
	o.cfiOnce.Do(func() {})
	o.table = nil
	o.lineOnce.Do(func() {})
	o.lines = nil
	o.goOnce.Do(func() {})
	o.gopcln = nil
	o.callSite.once.Do(func() {})
	o.callSite.idx = nil
	o.callSite.namesOnce.Do(func() {})
	o.callSite.names = nil
	o.held.table.Store(nil)
	o.held.lines.Store(nil)
	o.held.heap.Store(0)
}
