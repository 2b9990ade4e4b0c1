package elfcache

import (
	"debug/dwarf"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
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
// positioned after the split unit's entry; the caller closes dwo.
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
		dx, r, split, err := x.dwoData(o, e, id)
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

// dwoData builds the DWARF of the .dwo object o for the skeleton e.
func (x *lineIndex) dwoData(o *Object, e *dwarf.Entry, id uint64) (*lineIndex, *dwarf.Reader, *dwarf.Entry, error) {
	sec := func(name string) ([]byte, error) {
		s := o.section(".debug_" + name + ".dwo")
		if s == nil {
			return nil, nil
		}
		return o.sectionData(s)
	}
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
