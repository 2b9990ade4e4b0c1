package elfcache

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"unsafe"
)

// An object's symbol table, once built, is kept in its SectionCache (when
// it has one and the object a build-id) as an entry of its own, so that the
// next report maps it instead of reading, sorting and merging thousands of
// symbols again (glibc's debug file: 6,800 of them, 1.5 MB of heap). The
// entry is keyed by the build-id and checked against a fingerprint of
// everything the table is made from: the section headers of the object and
// of the file whose .symtab it used, and the length and checksum (srcSum) of
// each section read. A table built with an error is not kept.
// The entry's name ends in the fingerprint's checksum, so that the tables
// of one object read with and without its debug file are kept side by side.
const symtabEntry = "@symtab-1"

// derivedEntry is the name of the entry kind for key.
func derivedEntry(kind string, key []byte) string {
	return fmt.Sprintf("%s-%08x", kind, srcSum(key))
}

// The entry's contents, after the SectionCache's own header; numbers in
// the machine's byte order, syms and spans as they are in memory.
//
//	magic   [8]byte "USTKSYM3"
//	order   u32     0x01020304 in the writer's byte order
//	from    u8      the Origin of the symbols; then 3 bytes of padding
//	nsyms   u64
//	nspans  u64
//	nnames  u64     bytes of names
//	syms    [nsyms]symEntry
//	spans   [nspans]span
//	names   [nnames]byte
const (
	// symtabMagic is also in the entry's key: a new one whenever what
	// buildSymtab keeps changes (USTKSYM2: Go's "PKG(.text)" section
	// symbols lost to the functions at their addresses; USTKSYM3: the
	// roomed mark of symbols without a size), so that a table an older
	// ustack made is not taken for this one's.
	symtabMagic   = "USTKSYM3"
	symtabHdrSize = 40
	byteOrderMark = 0x01020304
	symEntrySize  = int(unsafe.Sizeof(symEntry{}))
	spanSize      = int(unsafe.Sizeof(span{}))
)

// isSymtabInput reports whether buildSymbols may read section s of the
// object itself: its symbol and string tables and relocations (which name
// PLT stubs), the stubs, MiniDebugInfo and a Go program's function table
// (in .rodata when stripped).
func isSymtabInput(s *elf.Section) bool {
	switch s.Type {
	case elf.SHT_SYMTAB, elf.SHT_DYNSYM, elf.SHT_STRTAB, elf.SHT_RELA, elf.SHT_REL:
		return true
	}
	return strings.HasPrefix(s.Name, ".plt") || strings.HasPrefix(s.Name, ".got") ||
		strings.Contains(s.Name, "gopclntab") || s.Name == ".rodata" || s.Name == ".gnu_debugdata"
}

// symtabKey returns the fingerprint of what buildSymbols makes o's table
// from, owner being the object whose .symtab it reads (o or its debug
// file) and mini whether it would look in MiniDebugInfo.
func (o *Object) symtabKey(owner *Object, mini bool) []byte {
	k := derivedKey(symtabMagic, byte(symEntrySize), byte(spanSize), byte(o.origin()), byte(owner.origin()))
	if mini {
		k = append(k, 1)
	}
	var strtab *elf.Section
	if s := owner.section(".symtab"); s != nil && int(s.Link) < len(owner.ef.Sections) {
		strtab = owner.ef.Sections[s.Link]
	}
	return fingerprint(k, []*Object{o, owner}, func(x *Object, s *elf.Section) bool {
		return (x == o && isSymtabInput(s)) || (x == owner && (s.Name == ".symtab" || s == strtab))
	})
}

// derivedKey starts the fingerprint of an entry of kind magic made on
// this machine, with the sizes of its tables' entries.
func derivedKey(magic string, sizes ...byte) []byte {
	k := make([]byte, 0, 1024)
	k = append(k, magic...)
	k = binary.NativeEndian.AppendUint32(k, byteOrderMark)
	return append(k, sizes...)
}

// fingerprint appends the section headers of each of objs (once) and the
// checksum of each of their sections that input accepts.
func fingerprint(k []byte, objs []*Object, input func(x *Object, s *elf.Section) bool) []byte {
	ne := binary.NativeEndian
	for i, x := range objs {
		if i > 0 && x == objs[i-1] {
			continue
		}
		k = append(k, 0xff)
		for _, s := range x.ef.Sections {
			k = append(k, s.Name...)
			k = append(k, 0)
			k = ne.AppendUint32(k, uint32(s.Type))
			k = ne.AppendUint64(k, uint64(s.Flags))
			k = ne.AppendUint64(k, s.Addr)
			k = ne.AppendUint64(k, s.Offset)
			k = ne.AppendUint64(k, s.FileSize)
			k = ne.AppendUint64(k, s.Size)
			k = ne.AppendUint32(k, s.Link)
		}
		for _, s := range x.ef.Sections {
			if input(x, s) {
				k = x.appendSectionSum(k, s)
			}
		}
	}
	return k
}

// appendSectionSum appends the checksum of section s's bytes in the file
// (its first and last srcSumSpan bytes, as srcSum reads them), or a
// marker when s is missing or has none.
func (o *Object) appendSectionSum(k []byte, s *elf.Section) []byte {
	if s == nil || s.Type == elf.SHT_NOBITS {
		return append(k, 0)
	}
	n := s.FileSize
	var sum uint32
	if n <= 2*srcSumSpan {
		b, err := o.src.bytes(s.Offset, n)
		if err != nil {
			return append(k, 1)
		}
		sum = srcSum(b)
	} else {
		head, err1 := o.src.bytes(s.Offset, srcSumSpan)
		tail, err2 := o.src.bytes(s.Offset+n-srcSumSpan, srcSumSpan)
		if err1 != nil || err2 != nil {
			return append(k, 1)
		}
		sum = srcSumEnds(head, tail)
	}
	k = append(k, 2)
	k = binary.NativeEndian.AppendUint64(k, n)
	return binary.NativeEndian.AppendUint32(k, sum)
}

// loadDerived maps o's entry of kind for key and gives its contents to
// decode; when decode takes them they stay mapped until o is closed.
func (o *Object) loadDerived(kind string, key []byte, decode func([]byte) bool) bool {
	return o.mapDerived(kind, key, decode, true)
}

// mapDerived is loadDerived; without checkData the entry's data is
// trusted without being read for its checksum (an entry storeDerived has
// just written).
func (o *Object) mapDerived(kind string, key []byte, decode func([]byte) bool, checkData bool) bool {
	data, unmap, ok := o.opts.SectionCache.getEntry(o.buildID, derivedEntry(kind, key), key, anySize, checkData)
	if !ok {
		return false
	}
	if !decode(data) {
		unmap()
		return false
	}
	o.cachedMu.Lock()
	o.cached = append(o.cached, unmap)
	o.cachedMu.Unlock()
	return true
}

// storeDerived keeps parts, one after the other, as o's entry of kind for
// key, and reports whether it was written.
func (o *Object) storeDerived(kind string, key []byte, parts ...[]byte) bool {
	rs := make([]io.Reader, len(parts))
	size := 0
	for i, p := range parts {
		rs[i] = bytes.NewReader(p)
		size += len(p)
	}
	return o.opts.SectionCache.putFrom(o.buildID, derivedEntry(kind, key), key, io.MultiReader(rs...), uint64(size))
}

// storeMapped is storeDerived for a table built on the heap, which the
// object would hold until it is closed: the entry written is mapped back
// and given to decode, so that a report that built the table holds it as
// the next one will, in the page cache instead of its heap (a large
// program's symbol tables are megabytes, which the garbage collector's
// headroom doubles). false when it was not written or not taken back:
// the caller keeps what it built.
func (o *Object) storeMapped(kind string, key []byte, decode func([]byte) bool, parts ...[]byte) bool {
	return o.storeDerived(kind, key, parts...) && o.mapDerived(kind, key, decode, false)
}

// derivedHeaderBytes is the header of an entry of kind magic: the magic,
// byteOrderMark, a byte of the kind's own at offset 12, then the counts as
// 8-byte numbers from offset 16.
func derivedHeaderBytes(magic string, b12 byte, counts ...uint64) []byte {
	h := make([]byte, 16+8*len(counts))
	copy(h, magic)
	binary.NativeEndian.PutUint32(h[8:], byteOrderMark)
	h[12] = b12
	for i, n := range counts {
		binary.NativeEndian.PutUint64(h[16+8*i:], n)
	}
	return h
}

// derivedHeader reports whether b starts as an entry of kind magic made on
// a machine of this byte order, and is aligned for the tables it holds.
func derivedHeader(b []byte, magic string, hdrSize int) bool {
	return len(b) >= hdrSize && string(b[:8]) == magic && binary.NativeEndian.Uint32(b[8:]) == byteOrderMark &&
		uintptr(unsafe.Pointer(unsafe.SliceData(b)))%8 == 0
}

// tableAt returns the n entries of type T at b[*off:], in place, and moves
// *off past them; the caller has checked that they fit.
func tableAt[T any](b []byte, off *int, n uint64) []T {
	if n == 0 {
		return nil
	}
	t := unsafe.Slice((*T)(unsafe.Pointer(&b[*off])), n)
	*off += int(n) * int(unsafe.Sizeof(*new(T)))
	return t
}

// asBytes is the memory of a slice of table entries.
func asBytes[T any](s []T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(*new(T))))
}

// decodeSymtab reads an entry's contents. Its syms and spans are the
// entry's bytes (which must be 8-byte aligned); a table whose counts or
// indexes do not fit is refused.
func decodeSymtab(b []byte) (*symtab, Origin, bool) {
	if !derivedHeader(b, symtabMagic, symtabHdrSize) {
		return nil, OriginNone, false
	}
	ne := binary.NativeEndian
	from := Origin(b[12])
	nsyms, nspans, nnames := ne.Uint64(b[16:]), ne.Uint64(b[24:]), ne.Uint64(b[32:])
	rest := uint64(len(b) - symtabHdrSize)
	if nsyms > rest/uint64(symEntrySize) || nspans > rest/uint64(spanSize) ||
		nsyms*uint64(symEntrySize)+nspans*uint64(spanSize)+nnames != rest || nsyms >= 1<<32 {
		return nil, OriginNone, false
	}
	off := symtabHdrSize
	t := &symtab{syms: tableAt[symEntry](b, &off, nsyms), spans: tableAt[span](b, &off, nspans)}
	t.names = string(b[off:])
	for i := range t.syms {
		s := &t.syms[i]
		if uint64(s.nameOff)+uint64(s.nameLen) > nnames {
			return nil, OriginNone, false
		}
	}
	for i := range t.spans {
		if uint64(t.spans[i].sym) >= nsyms || t.spans[i].start >= t.spans[i].end {
			return nil, OriginNone, false
		}
	}
	return t, from, true
}

// storeSymtab keeps t for key and returns the table to use from now on:
// the entry's, mapped, once written.
func (o *Object) storeSymtab(key []byte, t *symtab, from Origin) *symtab {
	hdr := derivedHeaderBytes(symtabMagic, byte(from), uint64(len(t.syms)), uint64(len(t.spans)), uint64(len(t.names)))
	mapped := t
	if !o.storeMapped(symtabEntry, key, func(b []byte) bool {
		m, mfrom, ok := decodeSymtab(b)
		if ok = ok && mfrom == from; ok {
			mapped = m
		}
		return ok
	}, hdr, asBytes(t.syms), asBytes(t.spans), unsafe.Slice(unsafe.StringData(t.names), len(t.names))) {
		return t
	}
	return mapped
}
