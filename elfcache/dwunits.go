package elfcache

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The address-to-unit index of SourceFrames is built here without
// debug/dwarf: dwarf.New parses the abbreviation table of every unit of
// .debug_info up front (glibc's debug file has thousands), which took most
// of a small report's time before its first sample. scanUnits walks the unit
// headers, reads each unit's first entry with only the one abbreviation
// declaration it uses, and decodes that entry's DW_AT_low_pc, DW_AT_high_pc
// and DW_AT_ranges as debug/dwarf's Data.Ranges does; a unit's whole
// abbreviation table and entries are parsed (by debug/dwarf, over that unit
// alone: lineIndex.unitData) only when a lookup needs the unit. Only
// little-endian DWARF is read here; big-endian DWARF takes debug/dwarf's
// path over all units.

// unitSpan is one unit of .debug_info.
type unitSpan struct {
	start, die, end uint64 // header offset, first entry's offset, one past the unit
	abbrev          uint64 // offset of its abbreviation table in .debug_abbrev
	vers, asize     uint8
	dwarf64         bool
}

// scannedUnit is a compilation (or skeleton) unit and its address ranges.
type scannedUnit struct {
	unitSpan
	ranges [][2]uint64
}

const (
	tagCompileUnit  = 0x11
	tagSkeletonUnit = 0x4a

	atLowPC         = 0x11
	atHighPC        = 0x12
	atRanges        = 0x55
	atEntryPC       = 0x52
	atAddrBase      = 0x73
	atRnglistsBase  = 0x74
	formRefAddr     = 0x10
	formIndirect    = 0x16
	formImplicitCst = 0x21
)

// scanUnits returns the compilation and skeleton units of s.info with their
// address ranges. A unit whose header or first entry cannot be read is
// left out and the first such problem returned (with what was read of the
// others); a unit length running past the section ends the walk.
func scanUnits(s dwarfSecs) (units []scannedUnit, err error) {
	fail := func(off uint64, e error) {
		if err == nil {
			err = fmt.Errorf("unit at %#x: %w", off, e)
		}
	}
	info := s.info
	for off := uint64(0); off < uint64(len(info)); {
		b := &bufReader{b: info[off:]}
		length := uint64(b.u32())
		dwarf64 := false
		if length == 0xffffffff {
			length = b.u64()
			dwarf64 = true
		} else if length >= 0xfffffff0 {
			fail(off, fmt.Errorf("reserved unit length %#x", length))
			return units, err
		}
		hdr := uint64(len(info[off:]) - len(b.b))
		if b.bad || length > uint64(len(b.b)) {
			fail(off, errors.New("unit runs past the end of .debug_info"))
			return units, err
		}
		if length == 0 {
			off += hdr
			continue
		}
		u := unitSpan{start: off, end: off + hdr + length, dwarf64: dwarf64}
		off = u.end
		b.b = b.b[:length]
		vers := b.u16()
		if vers < 2 || vers > 5 {
			fail(u.start, fmt.Errorf("unsupported DWARF version %d", vers))
			continue
		}
		u.vers = uint8(vers)
		var utype uint8
		if vers >= 5 {
			utype = b.u8()
			u.asize = b.u8()
		}
		if dwarf64 {
			u.abbrev = b.u64()
		} else {
			u.abbrev = uint64(b.u32())
		}
		if vers < 5 {
			u.asize = b.u8()
		}
		switch utype {
		case 0x04, 0x05: // DW_UT_skeleton, DW_UT_split_compile: unit id
			b.u64()
		case 0x02, 0x06: // DW_UT_type, DW_UT_split_type: signature, type offset
			b.u64()
			if dwarf64 {
				b.u64()
			} else {
				b.u32()
			}
		}
		if b.bad {
			fail(u.start, errors.New("truncated unit header"))
			continue
		}
		u.die = u.end - uint64(len(b.b))
		cu, ok, e := firstEntry(s, u, b)
		if e != nil {
			fail(u.start, e)
			continue
		}
		if ok {
			units = append(units, cu)
		}
	}
	return units, err
}

// cuAttrs are the first entry's attributes that its ranges depend on.
type cuAttrs struct {
	low, high, entry           uint64
	lowOK, highOK, highIsConst bool
	entryOK                    bool
	ranges                     uint64 // offset, or index with rangesX
	rangesOK, rangesX          bool
	rangesPtr                  bool // sec_offset (DWARF 5 ClassRangeListPtr)
	addrBase, rnglistsBase     uint64
}

// firstEntry reads the first entry of u (b is positioned at it); ok is
// false when it is not a compilation or skeleton unit.
func firstEntry(s dwarfSecs, u unitSpan, b *bufReader) (cu scannedUnit, ok bool, err error) {
	code := b.uleb()
	if b.bad {
		return cu, false, errors.New("truncated first entry")
	}
	if code == 0 {
		return cu, false, nil
	}
	var tag uint64
	var specs []byte
	found := false
	if e := walkAbbrevs(s.abbrev, u.abbrev, func(c, t uint64, _ bool, sp []byte) bool {
		if c == code {
			tag, specs, found = t, sp, true
			return false
		}
		return true
	}); e != nil {
		return cu, false, e
	}
	if !found {
		return cu, false, fmt.Errorf("abbreviation %d not in the table at .debug_abbrev offset %#x", code, u.abbrev)
	}
	if tag != tagCompileUnit && tag != tagSkeletonUnit {
		return cu, false, nil
	}
	var a cuAttrs
	// Addresses given as indexes (addrx) wait for DW_AT_addr_base, which
	// may come later in the entry.
	var lowX, highX, entryX bool
	sp := &bufReader{b: specs}
	for {
		attr, form, implicit, more := sp.spec()
		if sp.bad {
			return cu, false, errors.New("truncated abbreviation")
		}
		if !more {
			break
		}
		if form == formIndirect {
			form = b.uleb()
		}
		v, class, e := readForm(b, form, u, implicit)
		if e != nil {
			return cu, false, e
		}
		switch attr {
		case atLowPC:
			a.low, a.lowOK, lowX = v, class == classAddr || class == classAddrX, class == classAddrX
		case atHighPC:
			switch class {
			case classAddr, classAddrX:
				a.high, a.highOK, highX = v, true, class == classAddrX
			case classConst:
				a.high, a.highOK, a.highIsConst = v, true, true
			default:
				a.highOK = false
			}
		case atEntryPC:
			a.entry, a.entryOK, entryX = v, class == classAddr || class == classAddrX, class == classAddrX
		case atRanges:
			a.ranges, a.rangesOK = v, class == classConst || class == classSecOff || class == classRngX
			a.rangesX, a.rangesPtr = class == classRngX, class == classSecOff
		case atAddrBase:
			if class == classConst || class == classSecOff {
				a.addrBase = v
			}
		case atRnglistsBase:
			if class == classConst || class == classSecOff {
				a.rnglistsBase = v
			}
		}
	}
	resolve := func(v *uint64, x bool, ok *bool) error {
		if !x || !*ok {
			return nil
		}
		if s.addr == nil {
			return errors.New("DW_FORM_addrx with no .debug_addr section")
		}
		var good bool
		*v, good = debugAddr(s.addr, u.vers, a.addrBase, *v, u.asize)
		if !good {
			return errors.New("address index outside .debug_addr")
		}
		return nil
	}
	for _, r := range []struct {
		v  *uint64
		x  bool
		ok *bool
	}{{&a.low, lowX, &a.lowOK}, {&a.high, highX, &a.highOK}, {&a.entry, entryX, &a.entryOK}} {
		if e := resolve(r.v, r.x, r.ok); e != nil {
			return cu, false, e
		}
	}
	cu.unitSpan = u
	cu.ranges = a.rangesOf(s, u)
	return cu, true, nil
}

// rangesOf returns the ranges as debug/dwarf's Data.Ranges gives them for
// the unit's entry: low_pc to high_pc, then the range list; nil when the
// range list cannot be read.
func (a *cuAttrs) rangesOf(s dwarfSecs, u unitSpan) [][2]uint64 {
	var ret [][2]uint64
	if a.lowOK && a.highOK {
		high := a.high
		if a.highIsConst {
			high = a.low + a.high
		}
		ret = append(ret, [2]uint64{a.low, high})
	}
	base := uint64(0)
	switch {
	case a.entryOK:
		base = a.entry
	case a.lowOK:
		base = a.low
	}
	if u.vers >= 5 && s.rnglists != nil {
		if !a.rangesOK || !a.rangesPtr && !a.rangesX {
			return ret
		}
		off := a.ranges
		if a.rangesX {
			var ok bool
			if off, ok = rnglistx(s.rnglists, a.rnglistsBase, off, u.dwarf64); !ok {
				return nil
			}
		}
		return rnglist(s, u, a.addrBase, base, off, ret)
	}
	if !a.rangesOK || a.rangesX || s.ranges == nil {
		return ret
	}
	if a.ranges > uint64(len(s.ranges)) {
		return nil
	}
	return dwarf4Ranges(s.ranges[a.ranges:], base, u.asize, ret)
}

// dwarf4Ranges reads the .debug_ranges list at the start of sec (DWARF 2
// to 4: pairs of addresses relative to base, or a base address selection)
// as debug/dwarf does, appending to ret.
func dwarf4Ranges(sec []byte, base uint64, asize uint8, ret [][2]uint64) [][2]uint64 {
	b := &bufReader{b: sec}
	for len(b.b) > 0 {
		lo, hi := b.addr(asize), b.addr(asize)
		if b.bad || lo == 0 && hi == 0 {
			break
		}
		if lo == ^uint64(0)>>(64-8*uint(asize)) {
			base = hi
		} else {
			ret = append(ret, [2]uint64{base + lo, base + hi})
		}
	}
	return ret
}

// rnglistx turns a DW_FORM_rnglistx index into a .debug_rnglists offset.
func rnglistx(rl []byte, base, idx uint64, dwarf64 bool) (uint64, bool) {
	w := uint64(4)
	if dwarf64 {
		w = 8
	}
	if idx > uint64(len(rl))/w {
		return 0, false
	}
	at := base + idx*w
	if at < base || at > uint64(len(rl)) || uint64(len(rl))-at < w {
		return 0, false
	}
	var v uint64
	if dwarf64 {
		v = binary.LittleEndian.Uint64(rl[at:])
	} else {
		v = uint64(binary.LittleEndian.Uint32(rl[at:]))
	}
	return base + v, base+v >= base
}

// rnglist reads the DWARF 5 range list at off, appending to ret; nil when
// it cannot be read to its end.
func rnglist(s dwarfSecs, u unitSpan, addrBase, base, off uint64, ret [][2]uint64) [][2]uint64 {
	if off > uint64(len(s.rnglists)) {
		return nil
	}
	b := &bufReader{b: s.rnglists[off:]}
	addr := func(idx uint64) (uint64, bool) { return debugAddr(s.addr, u.vers, addrBase, idx, u.asize) }
	for {
		op := b.u8()
		if b.bad {
			return nil
		}
		switch op {
		case 0: // DW_RLE_end_of_list
			return ret
		case 1: // DW_RLE_base_addressx
			v, ok := addr(b.uleb())
			if !ok || b.bad {
				return nil
			}
			base = v
		case 2: // DW_RLE_startx_endx
			i, j := b.uleb(), b.uleb()
			lo, ok1 := addr(i)
			hi, ok2 := addr(j)
			if !ok1 || !ok2 || b.bad {
				return nil
			}
			ret = append(ret, [2]uint64{lo, hi})
		case 3: // DW_RLE_startx_length
			i, n := b.uleb(), b.uleb()
			lo, ok := addr(i)
			if !ok || b.bad {
				return nil
			}
			ret = append(ret, [2]uint64{lo, lo + n})
		case 4: // DW_RLE_offset_pair
			lo, hi := b.uleb(), b.uleb()
			ret = append(ret, [2]uint64{base + lo, base + hi})
		case 5: // DW_RLE_base_address
			base = b.addr(u.asize)
		case 6: // DW_RLE_start_end
			lo, hi := b.addr(u.asize), b.addr(u.asize)
			ret = append(ret, [2]uint64{lo, hi})
		case 7: // DW_RLE_start_length
			lo, n := b.addr(u.asize), b.uleb()
			ret = append(ret, [2]uint64{lo, lo + n})
		}
		// Other opcodes are skipped, as by debug/dwarf.
	}
}

// debugAddr reads entry idx of .debug_addr from base.
func debugAddr(sec []byte, vers uint8, base, idx uint64, asize uint8) (uint64, bool) {
	if asize != 4 && asize != 8 || idx > uint64(len(sec)) {
		return 0, false
	}
	at := idx*uint64(asize) + base
	if at < base || at > uint64(len(sec)) || uint64(len(sec))-at < uint64(asize) {
		return 0, false
	}
	b := &bufReader{b: sec[at:]}
	return b.addr(asize), true
}

// Value classes readForm tells apart.
const (
	classOther = iota
	classAddr
	classAddrX // an index into .debug_addr
	classConst
	classSecOff
	classRngX
)

// readForm reads one attribute value of form from b; implicit is the
// abbreviation's DW_FORM_implicit_const value.
func readForm(b *bufReader, form uint64, u unitSpan, implicit uint64) (uint64, int, error) {
	offsz := uint64(4)
	if u.dwarf64 {
		offsz = 8
	}
	sized := func(n uint64) uint64 {
		switch n {
		case 1:
			return uint64(b.u8())
		case 2:
			return uint64(b.u16())
		case 4:
			return uint64(b.u32())
		case 8:
			return b.u64()
		}
		b.take(n)
		return 0
	}
	var v uint64
	class := classOther
	switch form {
	case 0x01: // addr
		if u.asize != 4 && u.asize != 8 {
			return 0, 0, fmt.Errorf("address size %d", u.asize)
		}
		v, class = b.addr(u.asize), classAddr
	case 0x1b: // addrx
		v, class = b.uleb(), classAddrX
	case 0x29, 0x2a, 0x2c: // addrx1, addrx2, addrx4
		v, class = sized(1<<(form-0x29)), classAddrX
	case 0x2b: // addrx3
		p := b.take(3)
		if p != nil {
			v = uint64(p[0]) | uint64(p[1])<<8 | uint64(p[2])<<16
		}
		class = classAddrX
	case 0x0b: // data1
		v, class = sized(1), classConst
	case 0x05, 0x06, 0x07: // data2, data4, data8
		v, class = sized(2<<(form-0x05)), classConst
	case 0x0d: // sdata
		v, class = b.sleb(), classConst
	case 0x0f: // udata
		v, class = b.uleb(), classConst
	case formImplicitCst:
		v, class = implicit, classConst
	case 0x1e: // data16
		b.take(16)
	case 0x17: // sec_offset
		v, class = sized(offsz), classSecOff
	case 0x23: // rnglistx
		v, class = b.uleb(), classRngX
	case 0x0c, 0x11: // flag, ref1
		b.take(1)
	case 0x12: // ref2
		b.take(2)
	case 0x13, 0x1c: // ref4, ref_sup4
		b.take(4)
	case 0x14, 0x20, 0x24: // ref8, ref_sig8, ref_sup8
		b.take(8)
	case 0x19: // flag_present
	case 0x15, 0x1a, 0x22: // ref_udata, strx, loclistx
		b.uleb()
	case 0x25, 0x26, 0x28: // strx1, strx2, strx4
		b.take(1 << (form - 0x25))
	case 0x27: // strx3
		b.take(3)
	case 0x08: // string
		b.cstr()
	case 0x0e, 0x1d, 0x1f, 0x1f20, 0x1f21: // strp, strp_sup, line_strp, GNU_ref_alt, GNU_strp_alt
		b.take(offsz)
	case formRefAddr:
		if u.vers <= 2 {
			b.take(uint64(u.asize))
		} else {
			b.take(offsz)
		}
	case 0x09, 0x18: // block, exprloc
		b.take(b.uleb())
	case 0x0a: // block1
		b.take(uint64(b.u8()))
	case 0x03: // block2
		b.take(uint64(b.u16()))
	case 0x04: // block4
		b.take(uint64(b.u32()))
	default:
		return 0, 0, fmt.Errorf("unknown attribute form %#x", form)
	}
	if b.bad {
		return 0, 0, errors.New("entry runs past the end of its unit")
	}
	// DWARF 2 and 3 give section offsets as data4 and data8.
	if class == classConst && u.vers < 4 && (form == 0x06 || form == 0x07) {
		class = classSecOff
	}
	return v, class, nil
}

// walkAbbrevs calls fn with each declaration of the abbreviation table at
// off (its code, tag, children flag and attribute specifications, which run
// to the end of abbrev) until fn returns false or the table ends. It is
// the index's inner loop (glibc's tables hold 1 MB), hence the plain
// indexing.
func walkAbbrevs(abbrev []byte, off uint64, fn func(code, tag uint64, children bool, specs []byte) bool) error {
	if off >= uint64(len(abbrev)) {
		return fmt.Errorf("abbreviation table offset %#x outside .debug_abbrev", off)
	}
	b := abbrev[off:]
	bad := errAbbrevPastEnd
	i := 0
	for {
		code, n := ulebAt(b, i)
		if n < 0 {
			return bad
		}
		if code == 0 {
			return nil
		}
		tag, n := ulebAt(b, n)
		if n < 0 || n >= len(b) {
			return bad
		}
		children := b[n] != 0
		i = n + 1
		specs := b[i:]
		for {
			// attr, form: both 0 ends the declaration.
			if i+1 < len(b) && b[i] == 0 && b[i+1] == 0 {
				i += 2
				break
			}
			var form uint64
			if i = skipLEB(b, i); i < 0 {
				return bad
			}
			if form, i = ulebAt(b, i); i < 0 {
				return bad
			}
			if form == formImplicitCst {
				if i = skipLEB(b, i); i < 0 {
					return bad
				}
			}
		}
		if !fn(code, tag, children, specs) {
			return nil
		}
	}
}

var errAbbrevPastEnd = errors.New("abbreviation table runs past the end of .debug_abbrev")

// ulebAt reads the unsigned LEB128 number at b[i:] and returns it and the
// index after it; the index is -1 when the number runs past the end.
func ulebAt(b []byte, i int) (uint64, int) {
	if i < len(b) && b[i] < 0x80 {
		return uint64(b[i]), i + 1
	}
	var v uint64
	for shift := uint(0); i < len(b); shift += 7 {
		c := b[i]
		i++
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		if c < 0x80 {
			return v, i
		}
	}
	return 0, -1
}

// skipLEB returns the index after the LEB128 number at b[i:], or -1.
func skipLEB(b []byte, i int) int {
	for ; i < len(b); i++ {
		if b[i] < 0x80 {
			return i + 1
		}
	}
	return -1
}

// refersAcrossUnits reports whether the abbreviation table at off has an
// attribute of form DW_FORM_ref_addr (a reference that may point into
// another unit, as dwz and LTO make) or DW_FORM_indirect (which could be
// one); true too when the table cannot be read, so that debug/dwarf's
// reading of all units decides.
func refersAcrossUnits(abbrev []byte, off uint64) bool {
	cross := false
	err := walkAbbrevs(abbrev, off, func(_, _ uint64, _ bool, specs []byte) bool {
		sp := &bufReader{b: specs}
		for {
			_, form, _, more := sp.spec()
			if !more {
				break
			}
			if form == formRefAddr || form == formIndirect {
				cross = true
				return false
			}
		}
		return true
	})
	return cross || err != nil
}

// sleb reads a signed LEB128 number.
func (r *bufReader) sleb() uint64 {
	var v uint64
	shift := uint(0)
	for {
		c := r.u8()
		if r.bad {
			return 0
		}
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			if c&0x40 != 0 && shift < 64 {
				v |= ^uint64(0) << shift
			}
			return v
		}
	}
}

// addr reads an address of size 4 or 8; other sizes set bad.
func (r *bufReader) addr(size uint8) uint64 {
	switch size {
	case 4:
		return uint64(r.u32())
	case 8:
		return r.u64()
	}
	r.bad = true
	return 0
}

// spec reads one attribute specification of an abbreviation declaration:
// attribute, form and, for DW_FORM_implicit_const, the value; more is
// false at the (0, 0) that ends the declaration and when bad.
func (r *bufReader) spec() (attr, form, implicit uint64, more bool) {
	attr, form = r.uleb(), r.uleb()
	if form == formImplicitCst {
		implicit = r.sleb()
	}
	return attr, form, implicit, !r.bad && (attr != 0 || form != 0)
}
