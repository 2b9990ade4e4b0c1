package elfcache

import (
	"bytes"
	"cmp"
	"debug/elf"
	"encoding/binary"
	"slices"
	"strings"
	"unsafe"
)

// funcNames answers FunctionNamed: the function symbols of an object by
// name (without their ELF versions), in two sorted tables over one text:
// dyn those of .dynsym, all those of .dynsym and .symtab (the object's or
// else its debug file's). Where a name has several addresses a table keeps
// the one a map filled in symbol table order with the globals first would
// (a global before a local, then the first). Like the symbol table it is
// kept in the object's SectionCache, under the same fingerprint
// (symtabKey), and used mapped from there.
type funcNames struct {
	text     string
	dyn, all []nameEnt
}

// nameEnt is one name of a funcNames table: text[off:off+n].
type nameEnt struct {
	off, n uint32
	addr   uint64
}

const (
	funcNamesEntry   = "@funcnames-1"
	funcNamesMagic   = "USTKNAM1"
	funcNamesHdrSize = 32
	nameEntSize      = int(unsafe.Sizeof(nameEnt{}))
)

// lookup returns the address of name in table ents.
func (f *funcNames) lookup(ents []nameEnt, name string) (uint64, bool) {
	i, ok := slices.BinarySearchFunc(ents, name, func(e nameEnt, name string) int {
		return strings.Compare(f.text[e.off:e.off+e.n], name)
	})
	if !ok {
		return 0, false
	}
	return ents[i].addr, true
}

// functionNames returns o's funcNames, from its SectionCache when kept
// there, else built (and kept).
func (o *Object) functionNames() *funcNames {
	owner := o
	if s := o.section(".symtab"); s == nil || s.Type == elf.SHT_NOBITS {
		if d := o.DebugFile(); d != nil {
			owner = d
		}
	}
	c := o.opts.SectionCache
	var key []byte
	if c != nil && len(o.buildID) > 0 {
		key = o.symtabKey(owner, false)
		var f *funcNames
		if o.loadDerived(funcNamesEntry, key, func(b []byte) (ok bool) { f, ok = decodeFuncNames(b); return ok }) {
			return f
		}
	}
	f, err := buildFuncNames(o, owner)
	if key != nil && err == nil {
		if m := o.storeFuncNames(key, f); m != f {
			f = m
			o.dropSymtabs(owner)
		}
	}
	return f
}

// buildFuncNames reads o's .dynsym and owner's .symtab.
func buildFuncNames(o, owner *Object) (*funcNames, error) {
	cands, err := o.readSymtab(".dynsym", nil)
	ndyn := len(cands)
	var err2 error
	cands, err2 = owner.readSymtab(".symtab", cands)
	if err == nil {
		err = err2
	}
	size := 0
	for i := range cands {
		size += len(cands[i].name)
	}
	var text strings.Builder
	text.Grow(size)
	f := &funcNames{all: make([]nameEnt, 0, len(cands)), dyn: make([]nameEnt, 0, ndyn)}
	// Globals first, then locals, each in symbol table order: the
	// offsets in text follow that order, and sorting by name, then
	// offset, puts the one to answer first.
	for _, local := range []bool{false, true} {
		for i := range cands {
			c := &cands[i]
			if (c.bind == uint8(elf.STB_LOCAL)) != local || c.typ == uint8(elf.STT_NOTYPE) {
				continue
			}
			name := c.name
			if j := bytes.IndexByte(name, '@'); j > 0 {
				name = name[:j]
			}
			e := nameEnt{off: uint32(text.Len()), n: uint32(len(name)), addr: c.addr}
			text.Write(name)
			f.all = append(f.all, e)
			if i < ndyn {
				f.dyn = append(f.dyn, e)
			}
		}
	}
	f.text = text.String()
	f.dyn = f.sortUnique(f.dyn)
	f.all = f.sortUnique(f.all)
	return f, err
}

// sortUnique sorts ents by name and keeps the first of each name, the one
// that came first in text. (Sorting by name and then offset is the stable
// sort by name, in a third of its time: pdqsort rather than SymMerge.)
func (f *funcNames) sortUnique(ents []nameEnt) []nameEnt {
	slices.SortFunc(ents, func(a, b nameEnt) int {
		if c := strings.Compare(f.text[a.off:a.off+a.n], f.text[b.off:b.off+b.n]); c != 0 {
			return c
		}
		return cmp.Compare(a.off, b.off)
	})
	return slices.CompactFunc(ents, func(a, b nameEnt) bool {
		return f.text[a.off:a.off+a.n] == f.text[b.off:b.off+b.n]
	})
}

// The entry's contents, after the SectionCache's header, in the machine's
// byte order:
//
//	magic [8]byte "USTKNAM1"
//	order u32     byteOrderMark; then 4 bytes of padding
//	ndyn  u64
//	nall  u64
//	dyn   [ndyn]nameEnt
//	all   [nall]nameEnt
//	text  the rest
//
// storeFuncNames keeps f for key and returns the names to use from now
// on: the entry's, mapped, once written.
func (o *Object) storeFuncNames(key []byte, f *funcNames) *funcNames {
	hdr := derivedHeaderBytes(funcNamesMagic, 0, uint64(len(f.dyn)), uint64(len(f.all)))
	mapped := f
	o.storeMapped(funcNamesEntry, key, func(b []byte) (ok bool) {
		mapped, ok = decodeFuncNames(b)
		if !ok {
			mapped = f
		}
		return ok
	}, hdr, asBytes(f.dyn), asBytes(f.all), unsafe.Slice(unsafe.StringData(f.text), len(f.text)))
	return mapped
}

// decodeFuncNames reads an entry's contents, in place (b must be 8-byte
// aligned and stay mapped while the tables are used); tables whose counts
// or names do not fit are refused.
func decodeFuncNames(b []byte) (*funcNames, bool) {
	if !derivedHeader(b, funcNamesMagic, funcNamesHdrSize) {
		return nil, false
	}
	ne := binary.NativeEndian
	ndyn, nall := ne.Uint64(b[16:]), ne.Uint64(b[24:])
	rest := uint64(len(b) - funcNamesHdrSize)
	if ndyn > rest/uint64(nameEntSize) || nall > rest/uint64(nameEntSize) || (ndyn+nall)*uint64(nameEntSize) > rest {
		return nil, false
	}
	off := funcNamesHdrSize
	f := &funcNames{dyn: tableAt[nameEnt](b, &off, ndyn), all: tableAt[nameEnt](b, &off, nall)}
	text := b[off:]
	f.text = unsafe.String(unsafe.SliceData(text), len(text))
	for _, ents := range [2][]nameEnt{f.dyn, f.all} {
		for _, e := range ents {
			if uint64(e.off)+uint64(e.n) > uint64(len(text)) {
				return nil, false
			}
		}
	}
	return f, true
}
