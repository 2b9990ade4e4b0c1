package elfcache

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"strings"
	"unsafe"
)

// The index of an object's compilation units (where each unit is in
// .debug_info and which addresses it covers: lineIndex.scan) is kept in
// its SectionCache like the symbol table (symcache.go), so that the next
// report does not walk the headers and first entries of every unit again
// (glibc's debug file has over a thousand, over 5.8 MB). Its fingerprint
// is the DWARF file's section headers and the checksums of the sections
// scanUnits reads. An index built with an error is not kept.
const (
	unitsEntry   = "@units-1"
	unitsMagic   = "USTKUNI1"
	unitsHdrSize = 32
)

// unitsKey returns the fingerprint of what scanUnits reads of o's DWARF.
func (o *Object) unitsKey() []byte {
	k := derivedKey(unitsMagic, byte(unsafe.Sizeof(unitSpan{})), byte(unsafe.Sizeof(cuRange{})))
	return fingerprint(k, []*Object{o}, func(_ *Object, s *elf.Section) bool {
		name := strings.TrimPrefix(strings.TrimPrefix(s.Name, ".z"), ".")
		switch name {
		case "debug_info", "debug_abbrev", "debug_ranges", "debug_rnglists", "debug_addr", "debug_str_offsets":
			return true
		}
		return false
	})
}

// loadUnits fills x's units, ranges and maxHi from the kept index for
// key, and says whether there was one.
func (x *lineIndex) loadUnits(key []byte) bool {
	return x.owner.loadDerived(unitsEntry, key, func(b []byte) bool {
		spans, rs, maxHi, ok := decodeUnits(b, len(x.secs.info), len(x.secs.abbrev))
		if !ok {
			return false
		}
		x.units = make([]cuSlot, len(spans))
		for i := range spans {
			x.units[i].off, x.units[i].span = dwarf.Offset(spans[i].die), spans[i]
		}
		x.rs, x.maxHi, x.mappedRanges = rs, maxHi, true
		return true
	})
}

// storeUnits keeps x's index for key.
//
// The entry's contents, after the SectionCache's header, in the machine's
// byte order:
//
//	magic  [8]byte "USTKUNI1"
//	order  u32     byteOrderMark; then 4 bytes of padding
//	nunits u64
//	nrs    u64
//	units  [nunits]unitSpan
//	rs     [nrs]cuRange, sorted
//	maxHi  [nrs]u64
func (x *lineIndex) storeUnits(key []byte) {
	hdr := derivedHeaderBytes(unitsMagic, 0, uint64(len(x.units)), uint64(len(x.rs)))
	spans := make([]unitSpan, len(x.units))
	for i := range x.units {
		spans[i] = x.units[i].span
	}
	x.owner.storeDerived(unitsEntry, key, hdr, asBytes(spans), asBytes(x.rs), asBytes(x.maxHi))
}

// decodeUnits reads an entry's contents, in place, for DWARF whose
// .debug_info and .debug_abbrev have the lengths given: an index whose
// units lie outside them, or whose ranges name no unit, is refused.
func decodeUnits(b []byte, infoLen, abbrevLen int) (spans []unitSpan, rs []cuRange, maxHi []uint64, ok bool) {
	if !derivedHeader(b, unitsMagic, unitsHdrSize) {
		return nil, nil, nil, false
	}
	ne := binary.NativeEndian
	nunits, nrs := ne.Uint64(b[16:]), ne.Uint64(b[24:])
	spanSize, rangeSize := uint64(unsafe.Sizeof(unitSpan{})), uint64(unsafe.Sizeof(cuRange{}))
	rest := uint64(len(b) - unitsHdrSize)
	if nunits > rest/spanSize || nrs > rest/(rangeSize+8) || nunits*spanSize+nrs*(rangeSize+8) != rest || nunits >= 1<<31 {
		return nil, nil, nil, false
	}
	off := unitsHdrSize
	spans = tableAt[unitSpan](b, &off, nunits)
	rs = tableAt[cuRange](b, &off, nrs)
	maxHi = tableAt[uint64](b, &off, nrs)
	for i := range spans {
		s := &spans[i]
		if s.start > s.die || s.die > s.end || s.end > uint64(infoLen) || s.abbrev > uint64(abbrevLen) {
			return nil, nil, nil, false
		}
	}
	for i := range rs {
		if rs[i].cu < 0 || uint64(rs[i].cu) >= nunits {
			return nil, nil, nil, false
		}
	}
	return spans, rs, maxHi, true
}
