package elfcache

import (
	"debug/dwarf"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Split DWARF (gcc -gsplit-dwarf, DWARF 5): the executable keeps a
// skeleton unit per compilation unit (DW_TAG_skeleton_unit: its address
// ranges, DW_AT_stmt_list into the executable's .debug_line, DW_AT_addr_base
// into its .debug_addr, DW_AT_dwo_name and DW_AT_comp_dir), and the
// functions and inlined calls live in the unit's .dwo file
// (.debug_info.dwo, .debug_abbrev.dwo, .debug_str.dwo,
// .debug_str_offsets.dwo, .debug_rnglists.dwo), tied to the skeleton by
// the 8-byte DWO id of both unit headers. Line rows come from the skeleton
// as for any unit; the scopes are read from the .dwo here. The .dwo's
// addresses are indexes into the executable's .debug_addr from the
// skeleton's addr_base, and its string and range list indexes count from
// the end of the .dwo sections' headers (a split unit has no bases of its
// own), so the sections are handed to debug/dwarf from those points.

// dwoOpen finds and reads the .dwo file of the skeleton unit e. It returns
// a lineIndex over the .dwo's DWARF (for parseScopes) and a reader
// positioned after the split unit's entry; the caller closes dwo (nil
// when the unit came from the object's .dwp package, which stays open).
func (x *lineIndex) dwoOpen(e *dwarf.Entry) (dx *lineIndex, r *dwarf.Reader, split *dwarf.Entry, dwo *Object, err error) {
	name, ok := x.attrString(e, dwarf.AttrDwoName)
	if !ok || name == "" {
		return nil, nil, nil, nil, errors.New("skeleton unit without DW_AT_dwo_name")
	}
	compDir, _ := x.attrString(e, dwarf.AttrCompDir)
	id, ok := x.skeletonID(e.Offset)
	if !ok {
		return nil, nil, nil, nil, fmt.Errorf("skeleton unit at %#x: no DWO id in its header", e.Offset)
	}
	if dwp := x.owner.dwpFile(); dwp != nil {
		if row, ok := dwp.find(id); ok {
			dx, r, split, err := x.dwoData(dwp.o, e, id, dwp.sectionsOf(row))
			if err == nil {
				return dx, r, split, nil, nil
			}
			return nil, nil, nil, nil, err
		}
	}
	var cands []string
	if filepath.IsAbs(name) {
		cands = append(cands, name)
	} else if compDir != "" {
		cands = append(cands, filepath.Join(compDir, name))
	}
	// Moved builds: next to the executable and next to its debug file.
	cands = append(cands, filepath.Join(filepath.Dir(x.owner.path), filepath.Base(name)))
	opts := x.owner.opts
	opts.NoDebugFile = true
	for _, c := range cands {
		p, err := opts.symfsPath(c)
		if err != nil {
			continue
		}
		src, _, err := openSource(p, opts.NoMmap)
		if err != nil {
			continue
		}
		o, err := newObject(p, p, src, opts, true)
		if err != nil {
			src.close()
			continue
		}
		dx, r, split, err := x.dwoData(o, e, id, func(name string) ([]byte, error) {
			s := o.section(".debug_" + name + ".dwo")
			if s == nil {
				return nil, nil
			}
			return o.sectionData(s)
		})
		if err != nil {
			o.Close()
			if errors.Is(err, errDWOMismatch) {
				continue
			}
			return nil, nil, nil, nil, err
		}
		return dx, r, split, o, nil
	}
	return nil, nil, nil, nil, fmt.Errorf("split DWARF file %s (DWO id %#x) not found", name, id)
}

var errDWOMismatch = errors.New("DWO id differs")

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
// the .dwp package o) for the skeleton e; sec returns the contents of
// .debug_NAME.dwo.
func (x *lineIndex) dwoData(o *Object, e *dwarf.Entry, id uint64, sec func(name string) ([]byte, error)) (*lineIndex, *dwarf.Reader, *dwarf.Entry, error) {
	var b [5][]byte
	for i, n := range []string{"info", "abbrev", "str", "str_offsets", "rnglists"} {
		var err error
		if b[i], err = sec(n); err != nil {
			return nil, nil, nil, err
		}
	}
	info, abbrev, str, strOff, rng := b[0], b[1], b[2], b[3], b[4]
	// The split unit's header: unit_length, version 5, DW_UT_split_compile,
	// address size, abbrev offset, DWO id.
	if len(info) < 20 || binary.LittleEndian.Uint16(info[4:]) != 5 || info[6] != 0x05 {
		return nil, nil, nil, newErr(o.path, ".debug_info.dwo", 0, errors.New("not a DWARF 5 split compilation unit"))
	}
	if binary.LittleEndian.Uint64(info[12:]) != id {
		return nil, nil, nil, errDWOMismatch
	}
	d, err := dwarf.New(abbrev, nil, nil, info, nil, nil, nil, str)
	if err != nil {
		return nil, nil, nil, newErr(o.path, ".debug_info.dwo", -1, err)
	}
	// Indexes count from the end of each section's 32-bit DWARF 5 header.
	add := func(name string, data []byte, hdr int) error {
		if len(data) < hdr {
			return nil
		}
		if err := d.AddSection(name, data[hdr:]); err != nil {
			return newErr(o.path, name+".dwo", -1, err)
		}
		return nil
	}
	addr, _ := x.owner.dwarfSection("addr")
	base, _ := e.Val(dwarf.AttrAddrBase).(int64)
	if base < 0 || base > int64(len(addr)) {
		return nil, nil, nil, newErr(x.owner.path, ".debug_addr", base, errors.New("skeleton's addr_base outside the section"))
	}
	if err := add(".debug_addr", addr[base:], 0); err != nil {
		return nil, nil, nil, err
	}
	if err := add(".debug_str_offsets", strOff, 8); err != nil {
		return nil, nil, nil, err
	}
	if err := add(".debug_rnglists", rng, 12); err != nil {
		return nil, nil, nil, err
	}
	r := d.Reader()
	split, err := r.Next()
	if err != nil || split == nil || split.Tag != dwarf.TagCompileUnit {
		return nil, nil, nil, newErr(o.path, ".debug_info.dwo", 0, errors.Join(err, errors.New("no split compilation unit")))
	}
	return &lineIndex{owner: o, d: d}, r, split, nil
}

// A .dwp package (made by llvm-dwp, or dwp) holds the .dwo sections of many
// units, concatenated, with .debug_cu_index saying which part of each
// section belongs to which DWO id: a header (version 5, or 2 for the GNU
// DWARF 4 extension; section count, unit count, slot count), a hash table
// of ids and row numbers, the section ids of the columns, and a row of
// offsets and a row of sizes per unit.

// The DW_SECT column ids of DWARF 5 (version 2 numbers DW_SECT_INFO..LINE
// alike).
const (
	dwSectInfo       = 1
	dwSectAbbrev     = 3
	dwSectLine       = 4
	dwSectStrOffsets = 6
	dwSectRnglists   = 8
)

// dwpPackage is an open .dwp file and its parsed unit index.
type dwpPackage struct {
	o              *Object
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
// there is none or it cannot be read.
func (o *Object) dwpFile() *dwpPackage {
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
				continue
			}
			if pkg, err := parseDWP(d); err == nil {
				o.dwp = pkg
				return
			}
			d.Close()
		}
	})
	return o.dwp
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
	names := map[uint32]string{dwSectInfo: "info", dwSectAbbrev: "abbrev", dwSectLine: "line",
		dwSectStrOffsets: "str_offsets", dwSectRnglists: "rnglists"}
	for id, n := range names {
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
	p := &dwpPackage{slots: slots, units: units, sections: map[uint32][]byte{}}
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
		id := map[string]uint32{"info": dwSectInfo, "abbrev": dwSectAbbrev, "line": dwSectLine,
			"str_offsets": dwSectStrOffsets, "rnglists": dwSectRnglists}[name]
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
