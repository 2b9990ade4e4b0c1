package elfcache

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"hash/crc64"
	"os"
	"strings"
	"sync"
)

// What a unit's parsing made (its lines, functions and inlined calls:
// cuLines; its call sites: cuCallSites) is kept in the object's
// SectionCache, an entry per unit and kind, so that the next report reads a
// few kilobytes instead of parsing the unit again (the small report's
// units took two fifths of its CPU time). Only units read alone
// (lineIndex.unitData's per-unit case) whose DWARF has no supplementary
// file and which are not split DWARF skeletons are kept, and only what
// was parsed without an error.
//
// The key is the fingerprint of the DWARF sections parsing reads (the
// object's section headers and those sections' checksums, as for the
// other tables: symcache.go, unitcache.go), the unit's offset, and the Go
// build ID of the running ustack: what parsing makes of the same bytes is
// the code's own choice, which a later ustack may make differently, so
// entries are never shared between builds. The
// entry is read into a reused buffer (nothing stays mapped; its checksum
// is computed on every read: it is a few kilobytes) and decoded onto the
// heap, and refused when any index, offset or order in it is not as
// parsing makes it.
const (
	cuLinesKind  = "@cu-1"
	cuSitesKind  = "@cs-1"
	cuLinesMagic = "USTKCUL1"
	cuSitesMagic = "USTKCUS1"
)

// selfBuildID is the Go build ID note of the running executable; nil when
// it cannot be read (then no unit is kept).
var selfBuildID = sync.OnceValue(func() []byte {
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	f, err := elf.Open(exe)
	if err != nil {
		return nil
	}
	defer f.Close()
	s := f.Section(".note.go.buildid")
	if s == nil {
		return nil
	}
	b, err := s.Data()
	if err != nil || len(b) == 0 || len(b) > 1024 {
		return nil
	}
	return b
})

var crcECMA = crc64.MakeTable(crc64.ECMA)

// unitKeyBase returns the part of the keys of x's units that all share,
// made on first use (under x.mu); nil when x's units are not kept.
func (x *lineIndex) unitKeyBase() []byte {
	if x.unitKey == nil {
		x.unitKey = []byte{}
		o := x.owner
		self := selfBuildID()
		if o.opts.SectionCache == nil || len(o.buildID) == 0 || x.alt != nil || !x.perUnit || self == nil || x.unitsFP == nil {
			return nil
		}
		// The unit index's fingerprint (the object's section headers,
		// the checksums of .debug_info, _abbrev, _ranges, _rnglists,
		// _addr and _str_offsets), and those of the other sections
		// parsing reads.
		k := derivedKey("USTKCU01", byte(lineRowSize), byte(cuScopeSize), byte(cuSiteSize))
		k = append(k, self...)
		k = append(k, x.unitsFP...)
		for _, s := range o.ef.Sections {
			switch strings.TrimPrefix(strings.TrimPrefix(s.Name, ".z"), ".") {
			case "debug_line", "debug_line_str", "debug_str":
				k = o.appendSectionSum(append(k, s.Name...), s)
			}
		}
		x.unitKey = k
	}
	if len(x.unitKey) == 0 {
		return nil
	}
	return x.unitKey
}

// unitEntry returns the entry kind and key of unit s's parsing of kind,
// or "" when it is not kept. Whether the unit refers to others, which
// makes parsing read it with all units and not keep it, is not asked
// here: an entry for the key was kept by a parsing that read the same
// bytes alone, and parsing says itself whether to keep what it made.
func (x *lineIndex) unitEntry(kind string, s *cuSlot) (string, []byte) {
	base := x.unitKeyBase()
	if base == nil || s.span.end == 0 {
		return "", nil
	}
	key := binary.NativeEndian.AppendUint64(append([]byte(nil), base...), uint64(s.off))
	return fmt.Sprintf("%s-%x", kind, uint64(s.off)), key
}

// readUnitEntry gives the contents of o's entry of kind for key, read
// into a reused buffer (decode copies what it keeps), to decode.
func (o *Object) readUnitEntry(kind string, key []byte, decode func([]byte) bool) bool {
	bp := unitEntryBufs.Get().(*[]byte)
	data, ok := o.opts.SectionCache.getRead(o.buildID, derivedEntry(kind, key), key, *bp)
	ok = ok && decode(data)
	if data != nil && cap(data) <= maxReadEntry {
		*bp = data[:0] // grown for this entry: the next reads it
	}
	unitEntryBufs.Put(bp)
	return ok
}

// unitEntryBufs are the buffers readUnitEntry reads entries into: on a VM
// where the first touch of a page of memory costs microseconds, a buffer
// reused is cheaper than one allocated for each entry.
var unitEntryBufs = sync.Pool{New: func() any { return new([]byte) }}

// Sizes of the records below.
const (
	lineRowSize = 24
	cuScopeSize = 40
	cuSiteSize  = 48
	cuSpanSize  = 24
	cuFileSize  = 8
)

// The header of both kinds: magic, byteOrderMark, 4 bytes of padding,
// the CRC-64 of the key (the entry's name and the SectionCache's header
// hold only 32 bits of it), then counts as 8-byte numbers.
const cuHdrFixed = 24

type unitRecs struct {
	b   []byte
	str strings.Builder
}

func (r *unitRecs) u64(v uint64) { r.b = binary.NativeEndian.AppendUint64(r.b, v) }
func (r *unitRecs) u32(v uint32) { r.b = binary.NativeEndian.AppendUint32(r.b, v) }

// strRef appends the offset and length of s in the string bytes.
func (r *unitRecs) strRef(s string) {
	r.u32(uint32(r.str.Len()))
	r.u32(uint32(len(s)))
	r.str.WriteString(s)
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func unitHeader(magic string, key []byte, counts ...uint64) []byte {
	h := make([]byte, 0, cuHdrFixed+8*len(counts))
	h = append(h, magic...)
	h = binary.NativeEndian.AppendUint32(h, byteOrderMark)
	h = append(h, 0, 0, 0, 0)
	h = binary.NativeEndian.AppendUint64(h, crc64.Checksum(key, crcECMA))
	for _, n := range counts {
		h = binary.NativeEndian.AppendUint64(h, n)
	}
	return h
}

// encodeCULines is cu's entry:
//
//	header  magic "USTKCUL1", counts nfiles nrows nscopes nspans nstr
//	files   [nfiles]{off, len u32}
//	rows    [nrows]{addr u64, file u32, line u32, end u8, 7 bytes 0}
//	scopes  [nscopes]{entry u64, name, linkage {off, len u32}, parent,
//	        callFile, callLine i32, flags u8 (1 inlined, 2 aliased), 3 bytes 0}
//	spans   [nspans]{lo, hi u64, scope i32, 4 bytes 0}
//	str     [nstr]byte
func encodeCULines(key []byte, cu *cuLines) []byte {
	r := &unitRecs{}
	for _, f := range cu.files {
		r.strRef(f)
	}
	for _, row := range cu.rows {
		r.u64(row.addr)
		r.u32(row.file)
		r.u32(row.line)
		r.b = append(r.b, boolByte(row.end), 0, 0, 0, 0, 0, 0, 0)
	}
	for _, s := range cu.scopes {
		r.u64(s.entry)
		r.strRef(s.name)
		r.strRef(s.linkage)
		r.u32(uint32(s.parent))
		r.u32(uint32(s.callFile))
		r.u32(uint32(s.callLine))
		r.b = append(r.b, boolByte(s.inlined)|boolByte(s.aliased)<<1, 0, 0, 0)
	}
	for _, sp := range cu.spans {
		r.u64(sp.lo)
		r.u64(sp.hi)
		r.u32(uint32(sp.scope))
		r.u32(0)
	}
	h := unitHeader(cuLinesMagic, key, uint64(len(cu.files)), uint64(len(cu.rows)), uint64(len(cu.scopes)), uint64(len(cu.spans)), uint64(r.str.Len()))
	return append(append(h, r.b...), r.str.String()...)
}

// unitDec reads an entry's records.
type unitDec struct {
	b   []byte
	off int
	str string
	bad bool
}

func (d *unitDec) u64() uint64 {
	v := binary.NativeEndian.Uint64(d.b[d.off:])
	d.off += 8
	return v
}

func (d *unitDec) u32() uint32 {
	v := binary.NativeEndian.Uint32(d.b[d.off:])
	d.off += 4
	return v
}

// byte01 reads a byte that must be 0 or 1 (a bool), or within mask.
func (d *unitDec) flags(mask byte) byte {
	v := d.b[d.off]
	d.off++
	if v&^mask != 0 {
		d.bad = true
	}
	return v
}

func (d *unitDec) skip(n int) { d.off += n }

func (d *unitDec) strRef() string {
	off, n := uint64(d.u32()), uint64(d.u32())
	if off+n > uint64(len(d.str)) {
		d.bad = true
		return ""
	}
	return d.str[off : off+n]
}

// openUnitEntry checks an entry's header for magic and key and that the
// records of the given sizes, as many as its counts say, and the string
// bytes (the last count) fill it exactly; it returns the counts and a
// decoder positioned at the first record, whose strings are one copy of
// the entry's string bytes.
func openUnitEntry(b []byte, magic string, key []byte, sizes ...uint64) ([]uint64, *unitDec, bool) {
	hdr := cuHdrFixed + 8*(len(sizes)+1)
	ne := binary.NativeEndian
	if len(b) < hdr || string(b[:8]) != magic || ne.Uint32(b[8:]) != byteOrderMark || ne.Uint64(b[16:]) != crc64.Checksum(key, crcECMA) {
		return nil, nil, false
	}
	counts := make([]uint64, len(sizes)+1)
	rest := uint64(len(b) - hdr)
	for i := range counts {
		counts[i] = ne.Uint64(b[cuHdrFixed+8*i:])
		if counts[i] > rest {
			return nil, nil, false
		}
	}
	need := counts[len(sizes)]
	for i, sz := range sizes {
		if counts[i] > (rest-need)/sz {
			return nil, nil, false
		}
		need += counts[i] * sz
	}
	if need != rest || counts[0] >= 1<<31 {
		return nil, nil, false
	}
	nstr := counts[len(sizes)]
	return counts[:len(sizes)], &unitDec{b: b[:len(b)-int(nstr)], off: hdr, str: string(b[len(b)-int(nstr):])}, true
}

// decodeCULines reads an entry encodeCULines made for key.
func decodeCULines(b []byte, key []byte) (*cuLines, bool) {
	counts, d, ok := openUnitEntry(b, cuLinesMagic, key, cuFileSize, lineRowSize, cuScopeSize, cuSpanSize)
	if !ok {
		return nil, false
	}
	nfiles, nrows, nscopes, nspans := counts[0], counts[1], counts[2], counts[3]
	if nrows >= 1<<31 || nscopes >= 1<<31 || nspans >= 1<<31 {
		return nil, false
	}
	cu := &cuLines{}
	if nfiles > 0 {
		cu.files = make([]string, nfiles)
	}
	for i := range cu.files {
		cu.files[i] = d.strRef()
	}
	if nrows > 0 {
		cu.rows = make([]lineRow, nrows)
	}
	for i := range cu.rows {
		row := &cu.rows[i]
		row.addr, row.file, row.line = d.u64(), d.u32(), d.u32()
		row.end = d.flags(1) != 0
		d.skip(7)
		if uint64(row.file) >= nfiles || i > 0 && row.addr < cu.rows[i-1].addr {
			return nil, false
		}
	}
	if nscopes > 0 {
		cu.scopes = make([]scope, nscopes)
	}
	for i := range cu.scopes {
		s := &cu.scopes[i]
		s.entry = d.u64()
		s.name, s.linkage = d.strRef(), d.strRef()
		s.parent, s.callFile, s.callLine = int32(d.u32()), int32(d.u32()), int32(d.u32())
		fl := d.flags(3)
		s.inlined, s.aliased = fl&1 != 0, fl&2 != 0
		d.skip(3)
		if s.parent < -1 || s.parent >= int32(i) || s.callFile < -1 || int64(s.callFile) >= int64(nfiles) || s.callLine < 0 {
			return nil, false
		}
	}
	if nspans > 0 {
		cu.spans = make([]scopeSpan, nspans)
	}
	for i := range cu.spans {
		sp := &cu.spans[i]
		sp.lo, sp.hi, sp.scope = d.u64(), d.u64(), int32(d.u32())
		d.skip(4)
		if sp.lo >= sp.hi || sp.scope < 0 || uint64(sp.scope) >= nscopes || i > 0 && sp.lo < cu.spans[i-1].hi {
			return nil, false
		}
	}
	return cu, !d.bad
}

// encodeCallSites is u's entry:
//
//	header  magic "USTKCUS1", counts nsites ntails nfuncs nstr
//	sites, tails  [n]{ReturnPC, Func, Target, TargetExpr u64,
//	        TargetName {off, len u32}, Tail u8, 7 bytes 0}
//	funcs   [nfuncs]{lo, hi, entry u64}
//	str     [nstr]byte
func encodeCallSites(key []byte, u *cuCallSites) []byte {
	r := &unitRecs{}
	for _, list := range [][]CallSite{u.sites, u.tails} {
		for _, c := range list {
			r.u64(c.ReturnPC)
			r.u64(c.Func)
			r.u64(c.Target)
			r.u64(c.TargetExpr)
			r.strRef(c.TargetName)
			r.b = append(r.b, boolByte(c.Tail), 0, 0, 0, 0, 0, 0, 0)
		}
	}
	for _, f := range u.funcs {
		r.u64(f.lo)
		r.u64(f.hi)
		r.u64(f.entry)
	}
	h := unitHeader(cuSitesMagic, key, uint64(len(u.sites)), uint64(len(u.tails)), uint64(len(u.funcs)), uint64(r.str.Len()))
	return append(append(h, r.b...), r.str.String()...)
}

// decodeCallSites reads an entry encodeCallSites made for key.
func decodeCallSites(b []byte, key []byte) (*cuCallSites, bool) {
	counts, d, ok := openUnitEntry(b, cuSitesMagic, key, cuSiteSize, cuSiteSize, cuSpanSize)
	if !ok {
		return nil, false
	}
	u := &cuCallSites{}
	read := func(n uint64) []CallSite {
		if n == 0 {
			return nil
		}
		list := make([]CallSite, n)
		for i := range list {
			c := &list[i]
			c.ReturnPC, c.Func, c.Target, c.TargetExpr = d.u64(), d.u64(), d.u64(), d.u64()
			c.TargetName = d.strRef()
			c.Tail = d.flags(1) != 0
			d.skip(7)
		}
		return list
	}
	u.sites, u.tails = read(counts[0]), read(counts[1])
	for i := 1; i < len(u.sites); i++ {
		if u.sites[i].ReturnPC < u.sites[i-1].ReturnPC {
			return nil, false
		}
	}
	for i := 1; i < len(u.tails); i++ {
		p, c := &u.tails[i-1], &u.tails[i]
		if c.Func < p.Func || c.Func == p.Func && c.ReturnPC < p.ReturnPC {
			return nil, false
		}
	}
	if counts[2] > 0 {
		u.funcs = make([]funcSpan, counts[2])
	}
	for i := range u.funcs {
		f := &u.funcs[i]
		f.lo, f.hi, f.entry = d.u64(), d.u64(), d.u64()
		if i > 0 && f.lo < u.funcs[i-1].lo {
			return nil, false
		}
	}
	return u, !d.bad
}
