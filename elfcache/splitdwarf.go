package elfcache

import (
	"debug/dwarf"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
)

// Split DWARF (-gsplit-dwarf): the executable keeps a skeleton unit per
// compilation unit, with its address ranges, DW_AT_stmt_list into the
// executable's .debug_line, the name of the unit's .dwo file and its
// compilation directory, and the functions and inlined calls live in the
// .dwo (or in a .dwp package of many .dwo files), tied to the skeleton by
// an 8-byte DWO id. Line rows come from the skeleton as for any unit; the
// scopes are read from the .dwo here. Two forms exist:
//
//   - DWARF 5 (gcc 11 and later by default): a DW_TAG_skeleton_unit with
//     DW_AT_dwo_name and DW_AT_addr_base, the id in both unit headers
//     (DW_UT_skeleton, DW_UT_split_compile). The .dwo's addresses are
//     indexes into the executable's .debug_addr from the skeleton's
//     addr_base, and its string and range list indexes count from the end
//     of the .dwo sections' headers (a split unit has no bases of its
//     own), so the sections are handed to debug/dwarf from those points.
//
//   - DWARF 4, the GNU extension DWARF 5 standardized (-gdwarf-4
//     -gsplit-dwarf, gcc and clang): a DW_TAG_compile_unit skeleton with
//     DW_AT_GNU_dwo_name, DW_AT_GNU_dwo_id (also on the .dwo's unit),
//     DW_AT_GNU_addr_base and DW_AT_GNU_ranges_base. The .dwo uses
//     DW_FORM_GNU_addr_index and DW_FORM_GNU_str_index, which are
//     DW_FORM_addrx and DW_FORM_strx under other numbers and which
//     debug/dwarf does not know: the .dwo's abbreviation table is handed
//     to it with those forms renumbered (gnuForms). Its
//     .debug_str_offsets.dwo has no header; its DW_AT_ranges are offsets
//     into the executable's .debug_ranges from the skeleton's
//     ranges_base, with the skeleton's base address (gnuRanges).
//
// A .dwp package has a unit index of version 5 or, for DWARF 4 units,
// version 2 (see dwpPackage).

// skeleton is what a skeleton unit says about its split unit.
type skeleton struct {
	name, compDir string
	id            uint64
	addrBase      int64  // into the executable's .debug_addr
	rangesBase    int64  // DWARF 4: into the executable's .debug_ranges
	base          uint64 // DWARF 4: the unit's base address for .debug_ranges
}

// GNU split DWARF attributes and forms (DWARF 4), which debug/dwarf does
// not name.
const (
	attrGNUDwoName    dwarf.Attr = 0x2130
	attrGNUDwoID      dwarf.Attr = 0x2131
	attrGNURangesBase dwarf.Attr = 0x2132
	attrGNUAddrBase   dwarf.Attr = 0x2133
	formGNUAddrIndex             = 0x1f01
	formGNUStrIndex              = 0x1f02
	formAddrx                    = 0x1b
	formStrx                     = 0x1a
)

// isSkeleton reports whether the first entry e of a unit is a split
// unit's skeleton: DWARF 5's DW_TAG_skeleton_unit, or a compilation unit
// naming a GNU .dwo.
func isSkeleton(e *dwarf.Entry) bool {
	return e.Tag == dwarf.TagSkeletonUnit || e.Tag == dwarf.TagCompileUnit && e.Val(attrGNUDwoName) != nil
}

// skeletonOf reads the skeleton unit e.
func (x *lineIndex) skeletonOf(e *dwarf.Entry) (skeleton, error) {
	var sk skeleton
	sk.compDir, _ = x.attrString(e, dwarf.AttrCompDir)
	if e.Tag == dwarf.TagSkeletonUnit {
		name, ok := x.attrString(e, dwarf.AttrDwoName)
		if !ok || name == "" {
			return sk, errors.New("skeleton unit without DW_AT_dwo_name")
		}
		id, ok := x.skeletonID(e.Offset)
		if !ok {
			return sk, fmt.Errorf("skeleton unit at %#x: no DWO id in its header", e.Offset)
		}
		sk.name, sk.id = name, id
		sk.addrBase, _ = e.Val(dwarf.AttrAddrBase).(int64)
		return sk, nil
	}
	name, ok := x.attrString(e, attrGNUDwoName)
	if !ok || name == "" {
		return sk, errors.New("DW_AT_GNU_dwo_name is not a string")
	}
	id, ok := e.Val(attrGNUDwoID).(int64)
	if !ok {
		return sk, fmt.Errorf("skeleton unit of %s without DW_AT_GNU_dwo_id", name)
	}
	sk.name, sk.id = name, uint64(id)
	sk.addrBase, _ = e.Val(attrGNUAddrBase).(int64)
	sk.rangesBase, _ = e.Val(attrGNURangesBase).(int64)
	// The base address of range lists, as for any DWARF 4 unit (gdb:
	// some gcc versions give DW_AT_entry_pc).
	if v, ok := e.Val(dwarf.AttrEntrypc).(uint64); ok {
		sk.base = v
	} else if v, ok := e.Val(dwarf.AttrLowpc).(uint64); ok {
		sk.base = v
	}
	return sk, nil
}

// dwoOpen finds and reads the .dwo file of the skeleton unit e. It returns
// a lineIndex over the .dwo's DWARF (for parseScopes) and a reader
// positioned after the split unit's entry; the caller closes dwo (nil
// when the unit came from the object's .dwp package, which stays open).
// When no file has the unit, the error names the files looked at and
// what they hold.
func (x *lineIndex) dwoOpen(e *dwarf.Entry) (dx *lineIndex, r *dwarf.Reader, split *dwarf.Entry, dwo *Object, err error) {
	sk, err := x.skeletonOf(e)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	var tried []string
	dwp, dwpErr := x.owner.dwpFile()
	if dwp != nil {
		if row, ok := dwp.find(sk.id); ok {
			dx, r, split, err := x.dwoData(dwp.o, sk, dwp.sectionsOf(row))
			if err != nil {
				return nil, nil, nil, nil, err
			}
			x.owner.usedSplit(dwp.o.file)
			return dx, r, split, nil, nil
		}
		tried = append(tried, dwp.path()+" (not in its index)")
	} else if dwpErr != nil {
		tried = append(tried, dwpErr.Error())
	}
	// The path the skeleton names is one of the profiled machine's, so
	// under Options.SymFS; for moved builds, the file next to the object
	// whose DWARF this is (the executable or its debug file) too, where
	// it was found on this machine.
	opts := x.owner.opts
	opts.NoDebugFile = true
	var cands []string
	named := sk.name
	if !filepath.IsAbs(named) && sk.compDir != "" {
		named = filepath.Join(sk.compDir, named)
	}
	if filepath.IsAbs(named) {
		if p, err := opts.symfsPath(named); err == nil {
			cands = append(cands, p)
		} else {
			tried = append(tried, fmt.Sprintf("%s (%v)", named, err))
		}
	}
	cands = append(cands, filepath.Join(filepath.Dir(x.owner.file), filepath.Base(sk.name)))
	var mismatch *dwoMismatch
	seen := map[string]bool{}
	for _, p := range cands {
		if seen[p] {
			continue
		}
		seen[p] = true
		src, _, err := openSource(p, opts.NoMmap)
		if err != nil {
			tried = append(tried, p)
			continue
		}
		o, err := newObject(p, p, src, opts, true)
		if err != nil {
			src.close()
			tried = append(tried, err.Error())
			continue
		}
		dx, r, split, err := x.dwoData(o, sk, func(name string) ([]byte, error) {
			s := o.section(".debug_" + name + ".dwo")
			if s == nil {
				return nil, nil
			}
			return o.sectionData(s)
		})
		if err != nil {
			o.Close()
			if m := (*dwoMismatch)(nil); errors.As(err, &m) {
				if mismatch == nil {
					mismatch = m
				}
				tried = append(tried, fmt.Sprintf("%s (DWO id %#x)", p, m.got))
				continue
			}
			return nil, nil, nil, nil, err
		}
		x.owner.usedSplit(p)
		return dx, r, split, o, nil
	}
	if mismatch != nil {
		return nil, nil, nil, nil, fmt.Errorf("split DWARF file %s has DWO id %#x, the skeleton unit expects %#x (the .dwo was rebuilt after linking?); looked at %s",
			mismatch.path, mismatch.got, sk.id, strings.Join(tried, ", "))
	}
	return nil, nil, nil, nil, fmt.Errorf("split DWARF file %s (DWO id %#x) not found; looked for %s", sk.name, sk.id, strings.Join(tried, ", "))
}

// usedSplit notes that a split unit's DWARF was read from file (a .dwo or
// the .dwp package), for Sources.SplitDWARF.
func (o *Object) usedSplit(file string) {
	o.splitMu.Lock()
	defer o.splitMu.Unlock()
	if o.splitUsed == nil {
		o.splitUsed = map[string]bool{}
	}
	o.splitUsed[file] = true
}

// splitFiles returns the files usedSplit noted, sorted.
func (o *Object) splitFiles() []string {
	o.splitMu.Lock()
	defer o.splitMu.Unlock()
	return slices.Sorted(maps.Keys(o.splitUsed))
}

// dwoMismatch is the error of a .dwo whose unit is not the skeleton's.
type dwoMismatch struct {
	path      string
	got, want uint64
}

func (m *dwoMismatch) Error() string {
	return fmt.Sprintf("%s: DWO id %#x, want %#x", m.path, m.got, m.want)
}

// skeletonID reads the DWO id from the DWARF 5 header of the skeleton unit
// whose first entry is at off: the 8 bytes before the entry.
func (x *lineIndex) skeletonID(off dwarf.Offset) (uint64, bool) {
	info, _ := x.owner.dwarfSection("info")
	if off < 20 || uint64(off) > uint64(len(info)) {
		return 0, false
	}
	h := info[off-20:]
	if binary.LittleEndian.Uint16(h[4:]) != 5 || h[6] != 0x04 { // DW_UT_skeleton
		return 0, false
	}
	return binary.LittleEndian.Uint64(h[12:]), true
}

// dwoData builds the DWARF of the .dwo object o (or of one unit's part of
// the .dwp package o) for the skeleton sk; sec returns the contents of
// .debug_NAME.dwo. The split unit's own header says which form it is.
func (x *lineIndex) dwoData(o *Object, sk skeleton, sec func(name string) ([]byte, error)) (*lineIndex, *dwarf.Reader, *dwarf.Entry, error) {
	var b [5][]byte
	for i, n := range []string{"info", "abbrev", "str", "str_offsets", "rnglists"} {
		var err error
		if b[i], err = sec(n); err != nil {
			return nil, nil, nil, err
		}
	}
	info, abbrev, str, strOff, rng := b[0], b[1], b[2], b[3], b[4]
	le := binary.LittleEndian
	if len(info) < 11 || le.Uint32(info) >= 0xfffffff0 {
		return nil, nil, nil, newErr(o.path, ".debug_info.dwo", 0, errors.New("no 32-bit DWARF unit header"))
	}
	gnu := false
	switch v := le.Uint16(info[4:]); {
	case v == 5:
		// unit_length, version 5, DW_UT_split_compile, address size,
		// abbrev offset, DWO id.
		if len(info) < 20 || info[6] != 0x05 {
			return nil, nil, nil, newErr(o.path, ".debug_info.dwo", 0, errors.New("not a DWARF 5 split compilation unit"))
		}
		if id := le.Uint64(info[12:]); id != sk.id {
			return nil, nil, nil, &dwoMismatch{o.path, id, sk.id}
		}
	case v >= 2 && v <= 4:
		// unit_length, version, abbrev offset, address size.
		gnu = true
		var err error
		if abbrev, err = gnuForms(abbrev, uint64(le.Uint32(info[6:]))); err != nil {
			return nil, nil, nil, newErr(o.path, ".debug_abbrev.dwo", int64(le.Uint32(info[6:])), err)
		}
	default:
		return nil, nil, nil, newErr(o.path, ".debug_info.dwo", 4, fmt.Errorf("unit of DWARF version %d", v))
	}
	d, err := dwarf.New(abbrev, nil, nil, info, nil, nil, nil, str)
	if err != nil {
		return nil, nil, nil, newErr(o.path, ".debug_info.dwo", -1, err)
	}
	// Indexes count from the end of each section's 32-bit DWARF 5 header;
	// DWARF 4's sections have none.
	add := func(name string, data []byte, hdr int) error {
		if gnu {
			hdr = 0
		}
		if len(data) < hdr {
			return nil
		}
		if err := d.AddSection(name, data[hdr:]); err != nil {
			return newErr(o.path, name+".dwo", -1, err)
		}
		return nil
	}
	addr, _ := x.owner.dwarfSection("addr")
	if sk.addrBase < 0 || sk.addrBase > int64(len(addr)) {
		return nil, nil, nil, newErr(x.owner.path, ".debug_addr", sk.addrBase, errors.New("skeleton's addr_base outside the section"))
	}
	if err := add(".debug_addr", addr[sk.addrBase:], 0); err != nil {
		return nil, nil, nil, err
	}
	if err := add(".debug_str_offsets", strOff, 8); err != nil {
		return nil, nil, nil, err
	}
	if !gnu {
		if err := add(".debug_rnglists", rng, 12); err != nil {
			return nil, nil, nil, err
		}
	}
	r := d.Reader()
	split, err := r.Next()
	if err != nil || split == nil || split.Tag != dwarf.TagCompileUnit {
		return nil, nil, nil, newErr(o.path, ".debug_info.dwo", 0, errors.Join(err, errors.New("no split compilation unit")))
	}
	dx := &lineIndex{owner: o, d: d}
	if gnu {
		if id, ok := split.Val(attrGNUDwoID).(int64); ok && uint64(id) != sk.id {
			return nil, nil, nil, &dwoMismatch{o.path, uint64(id), sk.id}
		}
		ranges, _ := x.owner.dwarfSection("ranges")
		if sk.rangesBase < 0 || sk.rangesBase > int64(len(ranges)) {
			return nil, nil, nil, newErr(x.owner.path, ".debug_ranges", sk.rangesBase, errors.New("skeleton's GNU_ranges_base outside the section"))
		}
		dx.gnu = &gnuRanges{sec: ranges[sk.rangesBase:], base: sk.base, asize: info[10]}
	}
	return dx, r, split, nil
}

// gnuForms returns a copy of the abbreviation section abbrev in which the
// table at off has DW_FORM_GNU_addr_index and DW_FORM_GNU_str_index
// replaced by DW_FORM_addrx and DW_FORM_strx: the same unsigned LEB128
// index, written in as many bytes (a padded LEB128 number) so that no
// offset moves.
func gnuForms(abbrev []byte, off uint64) ([]byte, error) {
	if off >= uint64(len(abbrev)) {
		return nil, fmt.Errorf("abbreviation table offset %#x outside .debug_abbrev.dwo", off)
	}
	out := append([]byte(nil), abbrev...)
	b := out[off:]
	i := 0
	for {
		code, n := ulebAt(b, i)
		if n < 0 {
			return nil, errAbbrevPastEnd
		}
		if code == 0 {
			return out, nil
		}
		if i = skipLEB(b, n); i < 0 || i >= len(b) { // tag
			return nil, errAbbrevPastEnd
		}
		i++ // children
		for {
			attr, j := ulebAt(b, i)
			if j < 0 {
				return nil, errAbbrevPastEnd
			}
			form, k := ulebAt(b, j)
			if k < 0 {
				return nil, errAbbrevPastEnd
			}
			i = k
			if attr == 0 && form == 0 {
				break
			}
			var to byte
			switch form {
			case formGNUAddrIndex:
				to = formAddrx
			case formGNUStrIndex:
				to = formStrx
			case formImplicitCst:
				if i = skipLEB(b, i); i < 0 {
					return nil, errAbbrevPastEnd
				}
				continue
			default:
				continue
			}
			// The form took k-j >= 2 bytes: to, then continuation bytes.
			b[j] = to | 0x80
			for p := j + 1; p < k-1; p++ {
				b[p] = 0x80
			}
			b[k-1] = 0
		}
	}
}

// gnuRanges is how a DWARF 4 split unit's DW_AT_ranges are read: offsets
// into the executable's .debug_ranges from the skeleton's ranges_base
// (sec starts there), with the skeleton's base address.
type gnuRanges struct {
	sec   []byte
	base  uint64
	asize uint8
}

// ranges returns the address ranges of e, an entry of x's DWARF, as
// debug/dwarf's Data.Ranges does (low_pc to high_pc, then the range list),
// reading a DWARF 4 split unit's range lists as gnuRanges says.
func (x *lineIndex) ranges(e *dwarf.Entry) ([][2]uint64, error) {
	g := x.gnu
	if g == nil {
		return x.d.Ranges(e)
	}
	var ret [][2]uint64
	low, lowOK := e.Val(dwarf.AttrLowpc).(uint64)
	if f := e.AttrField(dwarf.AttrHighpc); f != nil && lowOK {
		switch v := f.Val.(type) {
		case uint64:
			ret = append(ret, [2]uint64{low, v})
		case int64:
			ret = append(ret, [2]uint64{low, low + uint64(v)})
		}
	}
	off, ok := e.Val(dwarf.AttrRanges).(int64)
	if !ok {
		return ret, nil
	}
	if off < 0 || off > int64(len(g.sec)) {
		return ret, fmt.Errorf("range list offset %#x outside .debug_ranges", off)
	}
	return dwarf4Ranges(g.sec[off:], g.base, g.asize, ret), nil
}

// A .dwp package (made by llvm-dwp, or binutils' dwp) holds the .dwo
// sections of many units, concatenated, with .debug_cu_index saying which
// part of each section belongs to which DWO id: a header (version 5, or 2
// for the GNU DWARF 4 extension; section count, unit count, slot count),
// a hash table of ids and row numbers, the section ids of the columns, and
// a row of offsets and a row of sizes per unit.

// The DW_SECT column ids. Versions 2 and 5 number INFO, ABBREV, LINE and
// STR_OFFSETS alike; version 2 has no range lists (its 8 is
// DW_SECT_MACRO): a DWARF 4 unit's are in the executable.
const (
	dwSectInfo       = 1
	dwSectAbbrev     = 3
	dwSectLine       = 4
	dwSectStrOffsets = 6
	dwSectRnglists   = 8 // version 5 only
)

// dwpPackage is an open .dwp file and its parsed unit index.
type dwpPackage struct {
	o              *Object
	version        uint16
	slots          uint32
	sigs, rows     []byte // slots*8 and slots*4 bytes
	cols           []uint32
	offsets, sizes []byte // units*len(cols)*4 bytes each
	units          uint32
	sections       map[uint32][]byte // by DW_SECT id: the whole section
	str            []byte
}

// dwpFile returns the object's .dwp package (FILE.dwp next to the file,
// or with a .debug suffix replaced), opening it on first use; nil when
// there is none, and then the error of a package that could not be read.
func (o *Object) dwpFile() (*dwpPackage, error) {
	o.dwpOnce.Do(func() {
		if o.closed.Load() {
			return
		}
		cands := []string{o.file + ".dwp"}
		if base, ok := strings.CutSuffix(o.file, ".debug"); ok {
			cands = append(cands, base+".dwp")
		}
		opts := o.opts
		opts.NoDebugFile = true
		for _, p := range cands {
			src, _, err := openSource(p, opts.NoMmap)
			if err != nil {
				continue
			}
			d, err := newObject(p, p, src, opts, true)
			if err != nil {
				src.close()
				o.dwpErr = err
				continue
			}
			pkg, err := parseDWP(d)
			if err == nil {
				o.dwp = pkg
				o.held.dwp.Store(pkg.o)
				return
			}
			o.dwpErr = err
			d.Close()
		}
	})
	return o.dwp, o.dwpErr
}

// parseDWP reads the unit index of the package d.
func parseDWP(d *Object) (*dwpPackage, error) {
	s := d.section(".debug_cu_index")
	if s == nil {
		return nil, newErr(d.path, "", -1, errors.New("no .debug_cu_index"))
	}
	b, err := d.sectionData(s)
	if err != nil {
		return nil, err
	}
	p, err := parseDWPIndex(d.path, b)
	if err != nil {
		return nil, err
	}
	p.o = d
	for id, n := range p.sectionNames() {
		if s := d.section(".debug_" + n + ".dwo"); s != nil {
			data, err := d.sectionData(s)
			if err != nil {
				return nil, err
			}
			p.sections[id] = data
		}
	}
	if s := d.section(".debug_str.dwo"); s != nil {
		if p.str, err = d.sectionData(s); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// sectionNames returns the names (.debug_NAME.dwo) of the columns read,
// by DW_SECT id.
func (p *dwpPackage) sectionNames() map[uint32]string {
	m := map[uint32]string{dwSectInfo: "info", dwSectAbbrev: "abbrev", dwSectLine: "line", dwSectStrOffsets: "str_offsets"}
	if p.version == 5 {
		m[dwSectRnglists] = "rnglists"
	}
	return m
}

// parseDWPIndex parses the contents b of .debug_cu_index of the package
// at path.
func parseDWPIndex(path string, b []byte) (*dwpPackage, error) {
	bad := func(off int, msg string) error { return newErr(path, ".debug_cu_index", int64(off), errors.New(msg)) }
	le := binary.LittleEndian
	if len(b) < 16 {
		return nil, bad(0, "truncated header")
	}
	if v := le.Uint16(b); v != 5 && v != 2 {
		return nil, bad(0, fmt.Sprintf("version %d", v))
	}
	ncol, units, slots := le.Uint32(b[4:]), le.Uint32(b[8:]), le.Uint32(b[12:])
	if ncol == 0 || ncol > 16 || slots == 0 || slots&(slots-1) != 0 || units > slots {
		return nil, bad(4, fmt.Sprintf("%d columns, %d units, %d slots", ncol, units, slots))
	}
	need := 16 + uint64(slots)*12 + uint64(ncol)*4 + 2*uint64(units)*uint64(ncol)*4
	if need > uint64(len(b)) {
		return nil, bad(16, fmt.Sprintf("tables need %#x bytes, the section has %#x", need, len(b)))
	}
	p := &dwpPackage{version: le.Uint16(b), slots: slots, units: units, sections: map[uint32][]byte{}}
	at := uint64(16)
	take := func(n uint64) []byte { r := b[at : at+n]; at += n; return r }
	p.sigs = take(uint64(slots) * 8)
	p.rows = take(uint64(slots) * 4)
	colb := take(uint64(ncol) * 4)
	for i := uint32(0); i < ncol; i++ {
		p.cols = append(p.cols, le.Uint32(colb[4*i:]))
	}
	p.offsets = take(uint64(units) * uint64(ncol) * 4)
	p.sizes = take(uint64(units) * uint64(ncol) * 4)
	return p, nil
}

// find returns the row (1-based) of the unit with the DWO id.
func (p *dwpPackage) find(id uint64) (uint32, bool) {
	le := binary.LittleEndian
	mask := uint64(p.slots - 1)
	h, step := id&mask, ((id>>32)&mask)|1
	for i := uint32(0); i < p.slots; i++ {
		row := le.Uint32(p.rows[4*h:])
		if row == 0 {
			return 0, false
		}
		if le.Uint64(p.sigs[8*h:]) == id {
			return row, row <= p.units
		}
		h = (h + step) & mask
	}
	return 0, false
}

// sectionsOf returns the section getter for row: each .debug_NAME.dwo
// sliced to the row's contribution (.debug_str.dwo is shared whole).
func (p *dwpPackage) sectionsOf(row uint32) func(string) ([]byte, error) {
	le := binary.LittleEndian
	return func(name string) ([]byte, error) {
		if name == "str" {
			return p.str, nil
		}
		var id uint32
		for i, n := range p.sectionNames() {
			if n == name {
				id = i
			}
		}
		if id == 0 {
			return nil, nil
		}
		for c, col := range p.cols {
			if col != id {
				continue
			}
			i := (uint64(row-1)*uint64(len(p.cols)) + uint64(c)) * 4
			off, size := uint64(le.Uint32(p.offsets[i:])), uint64(le.Uint32(p.sizes[i:]))
			data := p.sections[id]
			if off > uint64(len(data)) || size > uint64(len(data))-off {
				return nil, newErr(p.path(), ".debug_"+name+".dwo", int64(off), fmt.Errorf("unit contribution of %#x bytes past the end", size))
			}
			return data[off : off+size], nil
		}
		return nil, nil
	}
}

func (p *dwpPackage) path() string {
	if p.o == nil {
		return ""
	}
	return p.o.path
}
