package elfcache

import (
	"encoding/binary"
	"path"
)

// lineFileNames reads the directory and file tables of the line program
// header at off in .debug_line and returns the file names as addr2line
// (BFD's concat_filename) spells them, indexed like
// dwarf.LineReader.Files: for DWARF 2-4 entry 0 is "" and entry k is the
// k-th file; for DWARF 5 entry k is file k. A relative name is joined with
// its directory and, when that is relative, with the compilation
// directory, with "/" and without cleaning the path. ok is false when the
// header cannot be read.
func lineFileNames(line, lineStr, str []byte, off uint64, compDir string) (names []string, ok bool) {
	defer func() {
		if recover() != nil {
			names, ok = nil, false
		}
	}()
	if off >= uint64(len(line)) {
		return nil, false
	}
	b := &bufReader{b: line[off:]}
	length := uint64(b.u32())
	dwarf64 := false
	if length == 0xffffffff {
		length = b.u64()
		dwarf64 = true
	}
	if length > uint64(len(b.b)) {
		return nil, false
	}
	b.b = b.b[:length]
	version := b.u16()
	if version < 2 || version > 5 {
		return nil, false
	}
	if version >= 5 {
		b.u8() // address_size
		b.u8() // segment_selector_size
	}
	if dwarf64 {
		b.u64()
	} else {
		b.u32()
	}
	b.u8() // minimum_instruction_length
	if version >= 4 {
		b.u8() // maximum_operations_per_instruction
	}
	b.u8() // default_is_stmt
	b.u8() // line_base
	b.u8() // line_range
	opBase := b.u8()
	for i := 1; i < int(opBase); i++ {
		b.u8()
	}
	if b.bad {
		return nil, false
	}
	type fileEnt struct {
		name string
		dir  uint64
	}
	var dirs []string
	var files []fileEnt
	if version < 5 {
		for !b.bad {
			s := b.cstr()
			if s == "" {
				break
			}
			dirs = append(dirs, s)
		}
		for !b.bad {
			s := b.cstr()
			if s == "" {
				break
			}
			d := b.uleb()
			b.uleb()
			b.uleb()
			files = append(files, fileEnt{s, d})
		}
	} else {
		readEntries := func(each func(path string, dir uint64)) {
			nfmt := int(b.u8())
			type fmtEnt struct{ ct, form uint64 }
			fmts := make([]fmtEnt, 0, nfmt)
			for i := 0; i < nfmt && !b.bad; i++ {
				fmts = append(fmts, fmtEnt{b.uleb(), b.uleb()})
			}
			n := b.uleb()
			if n > uint64(len(b.b)) {
				b.bad = true // each entry takes at least a byte
				return
			}
			for i := uint64(0); i < n && !b.bad; i++ {
				var path string
				var dir uint64
				for _, f := range fmts {
					s, v := b.form(f.form, dwarf64, lineStr, str)
					switch f.ct {
					case 1: // DW_LNCT_path
						path = s
					case 2: // DW_LNCT_directory_index
						dir = v
					}
				}
				if !b.bad {
					each(path, dir)
				}
			}
		}
		readEntries(func(p string, _ uint64) { dirs = append(dirs, p) })
		readEntries(func(p string, d uint64) { files = append(files, fileEnt{p, d}) })
	}
	if b.bad {
		return nil, false
	}
	join := func(f fileEnt) string {
		if f.name == "" {
			return ""
		}
		if isAbs(f.name) {
			return path.Clean(f.name)
		}
		// DWARF 5's directory 0 is the compilation directory itself
		// (DWARF 5 section 6.2.4), as DWARF 4's index 0 means it:
		// joining DW_AT_comp_dir to it again, as binutils 2.40 and
		// llvm-addr2line do, makes ./elf/./elf/dl-misc.c of glibc's
		// elf/dl-misc.c.
		base := compDir
		if version >= 5 && len(dirs) > 0 && dirs[0] != "" {
			base = dirs[0]
		}
		dir := base
		switch {
		case version < 5 && f.dir > 0 && f.dir <= uint64(len(dirs)):
			dir = dirs[f.dir-1]
		case version >= 5 && f.dir > 0 && f.dir < uint64(len(dirs)):
			dir = dirs[f.dir]
		}
		if dir != base && !isAbs(dir) && base != "" {
			dir = base + "/" + dir
		}
		if dir == "" {
			return path.Clean(f.name)
		}
		return path.Clean(dir + "/" + f.name)
	}
	if version < 5 {
		names = append(names, "")
	}
	for _, f := range files {
		names = append(names, join(f))
	}
	return names, true
}

func isAbs(p string) bool { return len(p) > 0 && p[0] == '/' }

// bufReader reads little-endian DWARF values; reading past the end sets
// bad and returns zeros.
type bufReader struct {
	b   []byte
	bad bool
}

func (r *bufReader) take(n uint64) []byte {
	if r.bad || n > uint64(len(r.b)) {
		r.bad = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *bufReader) u8() uint8 {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *bufReader) u16() uint16 {
	if v := r.take(2); v != nil {
		return binary.LittleEndian.Uint16(v)
	}
	return 0
}

func (r *bufReader) u32() uint32 {
	if v := r.take(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (r *bufReader) u64() uint64 {
	if v := r.take(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

func (r *bufReader) uleb() uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c := r.u8()
		if r.bad {
			return 0
		}
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		if c&0x80 == 0 {
			return v
		}
	}
}

func (r *bufReader) cstr() string {
	for i, c := range r.b {
		if c == 0 {
			s := string(r.b[:i])
			r.b = r.b[i+1:]
			return s
		}
	}
	r.bad = true
	return ""
}

// cstrAt returns the NUL-terminated string at off in sec.
func cstrAt(sec []byte, off uint64) string {
	if off >= uint64(len(sec)) {
		return ""
	}
	s := sec[off:]
	for i, c := range s {
		if c == 0 {
			return string(s[:i])
		}
	}
	return ""
}

// form reads one attribute value of a line header entry: strings for the
// string forms, numbers for the constant forms.
func (r *bufReader) form(form uint64, dwarf64 bool, lineStr, str []byte) (string, uint64) {
	off := func() uint64 {
		if dwarf64 {
			return r.u64()
		}
		return uint64(r.u32())
	}
	switch form {
	case 0x08: // DW_FORM_string
		return r.cstr(), 0
	case 0x1f: // DW_FORM_line_strp
		return cstrAt(lineStr, off()), 0
	case 0x0e: // DW_FORM_strp
		return cstrAt(str, off()), 0
	case 0x1d: // DW_FORM_strp_sup
		off()
		return "", 0
	case 0x0b, 0x11, 0x25: // data1, flag, strx1
		return "", uint64(r.u8())
	case 0x05, 0x26: // data2, strx2
		return "", uint64(r.u16())
	case 0x27: // strx3
		r.take(3)
		return "", 0
	case 0x06, 0x28: // data4, strx4
		return "", uint64(r.u32())
	case 0x07: // data8
		return "", r.u64()
	case 0x1e: // data16
		r.take(16)
		return "", 0
	case 0x0f, 0x1a: // udata, strx
		return "", r.uleb()
	case 0x0d: // sdata
		return "", r.uleb()
	case 0x09: // block
		r.take(r.uleb())
		return "", 0
	case 0x0a: // block1
		r.take(uint64(r.u8()))
		return "", 0
	case 0x03: // block2
		r.take(uint64(r.u16()))
		return "", 0
	case 0x04: // block4
		r.take(uint64(r.u32()))
		return "", 0
	}
	r.bad = true
	return "", 0
}
