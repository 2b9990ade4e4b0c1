package elfcache

import (
	"bytes"
	"context"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Debug files processed by dwz share DIEs and strings with a supplementary
// file (Debian installs them under /usr/lib/debug/.dwz/). The debug file
// names it in .gnu_debugaltlink (a file name and the supplementary file's
// build-id) or, in DWARF 5, .debug_sup (version, flag, file name,
// checksum), and refers into it with DW_FORM_GNU_ref_alt and
// DW_FORM_GNU_strp_alt (DW_FORM_ref_sup4/8 and DW_FORM_strp_sup in DWARF
// 5). debug/dwarf reads those forms as bare offsets; the names they lead
// to are resolved here.

// altLink is what a debug file says about its supplementary file.
type altLink struct {
	path     string
	buildID  []byte // from .gnu_debugaltlink; nil when unknown
	checksum []byte // from .debug_sup: the supplementary file's own .debug_sup must match
	section  string
}

// readAltLink reads .gnu_debugaltlink or .debug_sup; ok is false when the
// object has neither.
func (o *Object) readAltLink() (l altLink, ok bool, err error) {
	if s := o.section(".gnu_debugaltlink"); s != nil && s.Type != elf.SHT_NOBITS {
		data, err := o.sectionData(s)
		if err != nil {
			return l, false, err
		}
		i := bytes.IndexByte(data, 0)
		if i <= 0 {
			return l, false, newErr(o.path, s.Name, 0, errors.New("no NUL-terminated file name"))
		}
		l = altLink{path: string(data[:i]), section: s.Name}
		if id := data[i+1:]; len(id) > 0 {
			l.buildID = append([]byte(nil), id...)
		}
		return l, true, nil
	}
	if s := o.section(".debug_sup"); s != nil && s.Type != elf.SHT_NOBITS {
		data, err := o.sectionData(s)
		if err != nil {
			return l, false, err
		}
		if len(data) < 4 {
			return l, false, newErr(o.path, s.Name, 0, errors.New("truncated"))
		}
		if v := binary.LittleEndian.Uint16(data); v != 5 {
			return l, false, newErr(o.path, s.Name, 0, fmt.Errorf("version %d, want 5", v))
		}
		if data[2] != 0 {
			return l, false, nil // this is a supplementary file itself
		}
		name, sum, ok := parseSup(data)
		if !ok || name == "" {
			return l, false, newErr(o.path, s.Name, 3, errors.New("no file name and checksum"))
		}
		return altLink{path: name, checksum: sum, section: s.Name}, true, nil
	}
	return l, false, nil
}

// parseSup splits the body of .debug_sup after its version and flag: the
// NUL-terminated file name, the ULEB128 checksum length and the checksum.
func parseSup(data []byte) (name string, checksum []byte, ok bool) {
	rest := data[3:]
	i := bytes.IndexByte(rest, 0)
	if i < 0 {
		return "", nil, false
	}
	n, k := binary.Uvarint(rest[i+1:])
	if k <= 0 || n > 256 || uint64(len(rest[i+1+k:])) < n {
		return "", nil, false
	}
	return string(rest[:i]), append([]byte(nil), rest[i+1+k:i+1+k+int(n)]...), true
}

// supChecksum returns the checksum of a supplementary file's own
// .debug_sup (is_supplementary set), or nil.
func (o *Object) supChecksum() []byte {
	s := o.section(".debug_sup")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil
	}
	data, err := o.sectionData(s)
	if err != nil || len(data) < 4 || binary.LittleEndian.Uint16(data) != 5 || data[2] != 1 {
		return nil
	}
	_, sum, ok := parseSup(data)
	if !ok {
		return nil
	}
	return sum
}

// supplementary returns the supplementary (dwz) file of the debug object
// o, or nil when it has none; the error says why a file that o names was
// not found or not usable.
func (o *Object) supplementary() (*Object, error) {
	o.altOnce.Do(func() {
		if o.closed.Load() {
			return
		}
		l, ok, err := o.readAltLink()
		if err != nil || !ok {
			o.altErr = err
			return
		}
		o.alt = o.findAlt(l)
		o.held.alt.Store(o.alt)
		if o.alt == nil {
			id := ""
			if l.buildID != nil {
				id = " (build-id " + hex.EncodeToString(l.buildID) + ")"
			} else if l.checksum != nil {
				id = " (checksum " + hex.EncodeToString(l.checksum) + ")"
			}
			o.altErr = newErr(o.path, l.section, -1, fmt.Errorf("supplementary file %s%s not found", l.path, id))
		}
	})
	return o.alt, o.altErr
}

// findAlt looks for the supplementary file: at its recorded path (beneath
// SymFS, and with a /usr/lib/debug prefix replaced by each debug
// directory), next to the debug file, in .dwz/ of the debug file's and of
// each debug directory, by build-id in each debug directory, and last
// through Options.Fetcher. A candidate must carry the recorded build-id.
func (o *Object) findAlt(l altLink) *Object {
	var cands []string
	base := filepath.Base(l.path)
	if filepath.IsAbs(l.path) {
		if p, err := o.opts.symfsPath(l.path); err == nil {
			cands = append(cands, p)
		}
		if rest, ok := strings.CutPrefix(l.path, DefaultDebugDir+"/"); ok {
			cands = append(cands, o.opts.inDebugDirs(rest)...)
		}
	} else {
		cands = append(cands, filepath.Join(filepath.Dir(o.file), l.path))
	}
	// o.file is where the debug file was read from (already beneath SymFS).
	cands = append(cands, filepath.Join(filepath.Dir(o.file), base), filepath.Join(filepath.Dir(o.file), ".dwz", base))
	cands = append(cands, o.opts.inDebugDirs(filepath.Join(".dwz", base))...)
	if h := hex.EncodeToString(l.buildID); len(h) >= 4 {
		cands = append(cands, o.opts.inDebugDirs(filepath.Join(".build-id", h[:2], h[2:]+".debug"))...)
	}
	for _, p := range cands {
		if p == o.file {
			continue
		}
		if a := o.openAlt(p, l); a != nil {
			return a
		}
	}
	if o.opts.Fetcher != nil && len(l.buildID) > 0 {
		if p, err := o.opts.Fetcher.Fetch(context.Background(), l.buildID, "debuginfo"); err == nil && p != "" {
			if a := o.openAlt(p, l); a != nil {
				a.fetched = true
				return a
			}
		}
	}
	return nil
}

func (o *Object) openAlt(p string, l altLink) *Object {
	src, _, err := openSource(p, o.opts.NoMmap)
	if err != nil {
		return nil
	}
	a, err := newObject(p, p, src, o.opts, true)
	if err != nil {
		src.close()
		return nil
	}
	// A supplementary file may hold only shared strings.
	if l.buildID != nil && !bytes.Equal(a.buildID, l.buildID) || a.section(".debug_info") == nil && a.section(".debug_str") == nil ||
		l.checksum != nil && !bytes.Equal(a.supChecksum(), l.checksum) {
		a.Close()
		return nil
	}
	return a
}

// altDWARF is the supplementary file's DWARF as lineIndex uses it.
type altDWARF struct {
	d   *dwarf.Data // nil when the file holds only strings
	str []byte
}

// altRef is the bit that marks supplementary-file offsets in the name cache.
const altRef = 1 << 62

// attrString returns the string attribute a of e: a string of the file
// itself, or one of the supplementary file's .debug_str (strp_alt,
// strp_sup), which debug/dwarf leaves as an offset.
func (x *lineIndex) attrString(e *dwarf.Entry, a dwarf.Attr) (string, bool) {
	f := e.AttrField(a)
	if f == nil {
		return "", false
	}
	if s, ok := f.Val.(string); ok {
		return s, true
	}
	var off uint64
	switch v := f.Val.(type) {
	case int64: // DW_FORM_GNU_strp_alt (ClassStringAlt)
		if f.Class != dwarf.ClassStringAlt || v < 0 {
			return "", false
		}
		off = uint64(v)
	case uint32: // DW_FORM_strp_sup
		off = uint64(v)
	case uint64:
		off = v
	default:
		return "", false
	}
	if x.alt == nil || off >= uint64(len(x.alt.str)) {
		return "", false
	}
	s := x.alt.str[off:]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		return string(s[:i]), true
	}
	return "", false
}

// attrRef returns the entry that reference attribute a of e points to,
// in the file itself or in the supplementary file (ref_alt, ref_sup4/8),
// and the offset that identifies it (altRef set for the supplementary
// file's).
func (x *lineIndex) attrRef(e *dwarf.Entry, a dwarf.Attr, inAlt bool) (off dwarf.Offset, alt, ok bool) {
	f := e.AttrField(a)
	if f == nil {
		return 0, false, false
	}
	switch v := f.Val.(type) {
	case dwarf.Offset:
		return v, inAlt, true // a reference within the same file
	case int64: // DW_FORM_GNU_ref_alt (ClassReferenceAlt)
		if f.Class == dwarf.ClassReferenceAlt && v >= 0 && !inAlt {
			return dwarf.Offset(v), true, true
		}
	case uint32: // DW_FORM_ref_sup4
		if !inAlt {
			return dwarf.Offset(v), true, true
		}
	case uint64: // DW_FORM_ref_sup8
		if !inAlt && v <= 0xffffffff {
			return dwarf.Offset(v), true, true
		}
	}
	return 0, false, false
}
