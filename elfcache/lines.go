package elfcache

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// DefaultLineCacheCUs is how many parsed compilation units an object keeps
// when Options.LineCacheCUs is 0.
const DefaultLineCacheCUs = 8192

// SourceFrame is one source-level frame at an address: an inlined call or
// the real function that contains it.
type SourceFrame struct {
	// Function is the display name, as addr2line -C and gdb show it: the
	// demangled linkage name when DWARF has one, else DW_AT_name.
	Function string
	// LinkageName is the raw (mangled) linkage name, or "" when DWARF has
	// only DW_AT_name (C, Go).
	LinkageName string
	// File is the source file, joined with its include and compilation
	// directories and cleaned (no "./" or "dir/.."); "" when unknown.
	File string
	// Line is the line in File; 0 when unknown.
	Line int
	// Inlined is true when this frame is the body of an inlined call; the
	// next frame in the slice is then the function it was inlined into.
	Inlined bool
}

// SourceFrames appends to out the source frames at the link-time address
// addr, innermost first, and returns the extended slice, with the meaning
// of `addr2line -f -i -C -e OBJ ADDR`: first the innermost inlined
// subroutine (or the function itself when nothing is inlined there) with
// the file and line of addr's line table row; then, for each inlined call,
// the function it was inlined into with the call site (DW_AT_call_file and
// DW_AT_call_line of the inlined call); the last frame is the real
// function (DW_TAG_subprogram) and has Inlined false.
//
// The DWARF is the object's own or else its separate debug file's
// (DebugFile). When addr has a line but no function in DWARF, one frame
// named after the symbol table's function is appended. When addr has no
// DWARF information at all, the frames come from a Go binary's pclntab
// (its pcfile, pcln and inline tree tables: Go binaries built with
// -ldflags='-s -w'), with Go's names and files as the DWARF Go's linker
// writes would give them; else out is returned unchanged (SourceError
// says whether DWARF could be read at all).
//
// The address-to-unit index is built on the first call; each compilation
// unit's line table and function ranges are parsed on the first lookup
// into it and cached (at most Options.LineCacheCUs units). Later lookups
// into a cached unit do not allocate beyond growing out. SourceFrames is
// safe for concurrent use.
func (o *Object) SourceFrames(addr uint64, out []SourceFrame) []SourceFrame {
	x := o.lineIndex()
	if x == nil {
		return o.goSourceFrames(addr, out)
	}
	for _, ci := range x.cusFor(addr) {
		if ci < 0 {
			break
		}
		cu := x.unit(ci)
		if cu == nil {
			continue
		}
		n := len(out)
		out = cu.frames(addr, out, o)
		if len(out) > n {
			return out
		}
	}
	return o.goSourceFrames(addr, out)
}

// SourceError returns the error met while reading the DWARF sections, if
// any, or else the first split DWARF .dwo file that a lookup could not
// read; for a Go binary without DWARF, why its pclntab's inline trees
// cannot be read. Nil also when the object simply has no DWARF.
func (o *Object) SourceError() error {
	x := o.lineIndex()
	if x == nil && o.lineErr == nil {
		return o.goLinesError()
	}
	if o.lineErr == nil && x != nil {
		// A split DWARF unit whose .dwo is missing, met by a lookup.
		x.mu.Lock()
		defer x.mu.Unlock()
		return x.dwoErr
	}
	return o.lineErr
}

func (o *Object) lineIndex() *lineIndex {
	if o.closed.Load() {
		return nil
	}
	o.lineOnce.Do(o.buildLineIndex)
	return o.lines
}

// lineIndex maps addresses to compilation units and caches parsed units.
type lineIndex struct {
	owner *Object // the object whose DWARF this is
	// d is debug/dwarf's reading of all units: made up front for
	// big-endian DWARF, else on first need by a unit that may refer into
	// others (dwz, LTO); other units are read from their own slice of
	// .debug_info (unitData). Under mu once the index is built.
	d                  *dwarf.Data
	dErr               error         // why d could not be made (under mu)
	perUnit            bool          // units were found by scanUnits
	mappedRanges       bool          // rs and maxHi are mapped from the SectionCache (unitcache.go)
	secs               dwarfSecs     // the raw sections
	alt                *altDWARF     // the supplementary (dwz) file's; nil when none
	line, lineStr, str []byte        // raw sections, for file names
	units              []cuSlot      // one per compilation unit, by offset
	rs                 []cuRange     // sorted by lo
	maxHi              []uint64      // maxHi[i] = max(rs[0..i].hi)
	max                int           // how many units may be parsed at once
	mu                 sync.Mutex    // serializes parsing and eviction
	live               []int32       // parsed units, for eviction
	dwoErr             error         // the first split DWARF unit whose .dwo could not be read (under mu)
	dwoFailed          atomic.Bool   // dwoErr is set
	gnu                *gnuRanges    // how a DWARF 4 split unit's (.dwo) range lists are read; nil for others
	clock              atomic.Int64  // use counter for LRU
	held               atomic.Int64  // bytes of the index and its parsed units (memory.go)
	unitsFP            []byte        // the fingerprint of the unit index (unitsKey), when it has a SectionCache
	unitKey            []byte        // the key its units' kept parsings share (unitparsecache.go; under mu)
	recent             [4]recentUnit // the units unitData read alone last (under mu)
	recentNext         int           // where in recent the next one goes
	abbrevs            *unitAbbrevs  // made by unitData for one unit: its abbreviations as unitWalker reads them, once walked
}

type cuSlot struct {
	off  dwarf.Offset // the unit's first entry
	span unitSpan     // where the unit is; zero when found by debug/dwarf
	cu   atomic.Pointer[cuLines]
	used atomic.Int64
}

type cuRange struct {
	lo, hi uint64
	cu     int32
}

func (o *Object) buildLineIndex() {
	defer func() {
		if r := recover(); r != nil {
			o.lines, o.lineErr = nil, newErr(o.path, ".debug_info", -1, fmt.Errorf("malformed DWARF: %v", r))
		}
	}()
	owner := o
	if s := o.section(".debug_info"); s == nil || s.Type == elf.SHT_NOBITS {
		if s = o.section(".zdebug_info"); s == nil || s.Type == elf.SHT_NOBITS {
			owner = o.DebugFile()
		}
	}
	if owner == nil {
		return
	}
	secs, err := owner.dwarfSections()
	if err != nil {
		o.lineErr = err
		return
	}
	if secs.info == nil {
		return
	}
	x := &lineIndex{owner: owner, secs: secs, max: o.opts.LineCacheCUs}
	x.line, x.lineStr, x.str = secs.line, secs.lineStr, secs.str
	if x.max <= 0 {
		x.max = DefaultLineCacheCUs
	}
	if a, err := owner.supplementary(); a != nil {
		ad, err := a.dwarfData()
		if err != nil {
			o.lineErr = err
		} else {
			x.alt = &altDWARF{d: ad}
			x.alt.str, _ = a.dwarfSection("str")
		}
	} else if err != nil {
		o.lineErr = err // names shared through dwz stay unknown
	}
	if littleEndianDWARF(secs.info) {
		x.perUnit = true
		if err := x.scan(); err != nil && o.lineErr == nil {
			o.lineErr = newErr(owner.path, ".debug_info", -1, err)
		}
		o.lines = x
		o.held.lines.Store(x)
		x.held.Add(x.skeletonBytes())
		return
	}
	x.d, err = newDWARF(owner.path, secs, secs.info)
	if err != nil {
		o.lineErr = err
		return
	}
	if err := x.index(); err != nil && o.lineErr == nil {
		o.lineErr = newErr(owner.path, ".debug_info", -1, err)
	}
	o.lines = x
	o.held.lines.Store(x)
	x.held.Add(x.skeletonBytes())
}

// dwarfSection returns the decompressed contents of .debug_NAME (or
// .zdebug_NAME).
func (o *Object) dwarfSection(name string) ([]byte, error) {
	s := o.section(".debug_" + name)
	if s == nil {
		s = o.section(".zdebug_" + name)
	}
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	return o.sectionData(s)
}

// dwarfSecs holds the raw (decompressed) DWARF sections of an object.
type dwarfSecs struct {
	abbrev, info, line, ranges, str     []byte
	addr, lineStr, strOffsets, rnglists []byte
}

// dwarfSections reads the object's DWARF sections; info is nil when it has
// none. Compressed sections are inflated concurrently (glibc's take tens
// of milliseconds, most of a first report's start-up).
func (o *Object) dwarfSections() (s dwarfSecs, err error) {
	if sec := o.section(".debug_info"); sec == nil || sec.Type == elf.SHT_NOBITS {
		if sec = o.section(".zdebug_info"); sec == nil || sec.Type == elf.SHT_NOBITS {
			return dwarfSecs{}, nil
		}
	}
	secs := []struct {
		name string
		p    *[]byte
	}{
		{"info", &s.info}, {"abbrev", &s.abbrev}, {"line", &s.line}, {"ranges", &s.ranges}, {"str", &s.str},
		{"addr", &s.addr}, {"line_str", &s.lineStr}, {"str_offsets", &s.strOffsets}, {"rnglists", &s.rnglists},
	}
	errs := make([]error, len(secs))
	var wg sync.WaitGroup
	for i, f := range secs {
		wg.Go(func() { *f.p, errs[i] = o.dwarfSection(f.name) })
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			return dwarfSecs{}, e // the first section's, in the order above
		}
	}
	return s, nil
}

// newDWARF hands the sections to debug/dwarf, with info (all of
// .debug_info, or one unit of it) as the units to read.
func newDWARF(path string, s dwarfSecs, info []byte) (*dwarf.Data, error) {
	d, err := dwarf.New(s.abbrev, nil, nil, info, s.line, nil, s.ranges, s.str)
	if err != nil {
		return nil, newErr(path, ".debug_info", -1, err)
	}
	for _, a := range []struct {
		name string
		b    []byte
	}{{".debug_addr", s.addr}, {".debug_line_str", s.lineStr}, {".debug_str_offsets", s.strOffsets}, {".debug_rnglists", s.rnglists}} {
		if a.b != nil {
			if err := d.AddSection(a.name, a.b); err != nil {
				return nil, newErr(path, a.name, -1, err)
			}
		}
	}
	return d, nil
}

// dwarfData opens the object's DWARF, all units; nil, nil when it has none.
func (o *Object) dwarfData() (*dwarf.Data, error) {
	s, err := o.dwarfSections()
	if err != nil || s.info == nil {
		return nil, err
	}
	return newDWARF(o.path, s, s.info)
}

// littleEndianDWARF reports whether the first unit header of .debug_info
// has a little-endian version number (as debug/dwarf decides byte order).
func littleEndianDWARF(info []byte) bool {
	v := 4
	if len(info) >= 4 && info[0] == 0xff && info[1] == 0xff && info[2] == 0xff && info[3] == 0xff {
		v = 12
	}
	return len(info) >= v+2 && info[v] != 0 && info[v+1] == 0
}

// scan builds the index with scanUnits.
func (x *lineIndex) scan() error {
	var key []byte
	if x.owner.opts.SectionCache != nil && len(x.owner.buildID) > 0 {
		key = x.owner.unitsKey()
		x.unitsFP = key
		if x.loadUnits(key) {
			return nil
		}
	}
	units, err := scanUnits(x.secs)
	// x.units must not grow once built: slots hold atomics.
	x.units = make([]cuSlot, len(units))
	for i := range units {
		u := &units[i]
		x.units[i].off, x.units[i].span = dwarf.Offset(u.die), u.unitSpan
		for _, rg := range u.ranges {
			if rg[1] > rg[0] {
				x.rs = append(x.rs, cuRange{lo: rg[0], hi: rg[1], cu: int32(i)})
			}
		}
	}
	x.sortRanges()
	if key != nil && err == nil {
		x.storeUnits(key)
		// Every unit's first entries were read for the index, kept now;
		// the units later parsed bring back the pages they need.
		x.owner.dropMapped(x.secs.info)
	}
	return err
}

// index finds every compilation unit and its address ranges with
// debug/dwarf, from the unit's own DW_AT_low_pc/high_pc/ranges.
func (x *lineIndex) index() error {
	var firstErr error
	r := x.d.Reader()
	// Corrupt DWARF can make debug/dwarf's reader revisit or crawl through
	// entries; the offsets of the entries seen here must grow, and there
	// cannot be more of them than bytes in .debug_info.
	budget := len(x.secs.info) + 1
	last := dwarf.Offset(0)
	type unit struct {
		off dwarf.Offset
		rs  [][2]uint64
	}
	var units []unit
	for n := 0; ; n++ {
		e, err := r.Next()
		if err != nil {
			firstErr = err
			break
		}
		if e == nil {
			break
		}
		if n > budget || (n > 0 && e.Offset <= last) {
			firstErr = fmt.Errorf("unit entries do not advance at offset %#x", e.Offset)
			break
		}
		last = e.Offset
		if e.Tag != dwarf.TagCompileUnit && e.Tag != dwarf.TagSkeletonUnit {
			r.SkipChildren()
			continue
		}
		rs, _ := x.d.Ranges(e)
		units = append(units, unit{e.Offset, rs})
		r.SkipChildren()
	}
	// x.units must not grow once built: slots hold atomics.
	x.units = make([]cuSlot, len(units))
	for i, u := range units {
		x.units[i].off = u.off
		for _, rg := range u.rs {
			if rg[1] > rg[0] {
				x.rs = append(x.rs, cuRange{lo: rg[0], hi: rg[1], cu: int32(i)})
			}
		}
	}
	x.sortRanges()
	return firstErr
}

// sortRanges orders x.rs and fills x.maxHi.
func (x *lineIndex) sortRanges() {
	sort.Slice(x.rs, func(i, j int) bool {
		if x.rs[i].lo != x.rs[j].lo {
			return x.rs[i].lo < x.rs[j].lo
		}
		return x.rs[i].cu < x.rs[j].cu
	})
	x.maxHi = make([]uint64, len(x.rs))
	var m uint64
	for i := range x.rs {
		m = max(m, x.rs[i].hi)
		x.maxHi[i] = m
	}
}

// unitData returns the DWARF to read the unit of slot s with, a reader
// positioned at its first entry, and what to add to the offsets of the
// entries read to get .debug_info offsets. A unit is read from its own
// slice of .debug_info (so that only its abbreviation table is parsed)
// unless it may refer into other units; then, as with big-endian DWARF,
// from debug/dwarf's reading of all units. Called under x.mu.
func (x *lineIndex) unitData(s *cuSlot) (*lineIndex, *dwarf.Reader, dwarf.Offset, error) {
	if !x.perUnit || refersAcrossUnits(x.secs.abbrev, s.span.abbrev) {
		if x.d == nil && x.dErr == nil {
			x.d, x.dErr = newDWARF(x.owner.path, x.secs, x.secs.info)
		}
		if x.d == nil {
			return nil, nil, 0, x.dErr
		}
		r := x.d.Reader()
		r.Seek(s.off)
		return x, r, 0, nil
	}
	for _, ru := range x.recent {
		if ru.slot == s {
			return ru.ux, ru.ux.d.Reader(), dwarf.Offset(s.span.start), nil
		}
	}
	unitsDecoded.Add(1)
	d, err := newDWARF(x.owner.path, x.secs, x.secs.info[s.span.start:s.span.end])
	if err != nil {
		return nil, nil, 0, err
	}
	ux := &lineIndex{owner: x.owner, d: d, alt: x.alt, line: x.line, lineStr: x.lineStr, str: x.str, secs: x.secs}
	x.recent[x.recentNext] = recentUnit{slot: s, ux: ux}
	x.recentNext = (x.recentNext + 1) % len(x.recent)
	return ux, d.Reader(), dwarf.Offset(s.span.start), nil
}

// unitsDecoded counts the units unitData read alone (tests check that a
// unit's lines and call sites share one reading).
var unitsDecoded atomic.Int64

// recentUnit is a unit unitData read from its own slice of .debug_info
// lately, kept so that the reading of its lines and scopes and that of its
// call sites, which follow each other, decode its header and abbreviation
// table once.
type recentUnit struct {
	slot *cuSlot
	ux   *lineIndex
}

// cusFor returns the units whose ranges contain addr, at most 4, with -1
// after the last; the array is returned by value so that nothing escapes.
func (x *lineIndex) cusFor(addr uint64) (res [4]int32) {
	for i := range res {
		res[i] = -1
	}
	rs := x.rs
	i := sort.Search(len(rs), func(i int) bool { return rs[i].lo > addr }) - 1
	n := 0
	for ; i >= 0 && x.maxHi[i] > addr && n < len(res); i-- {
		if addr < rs[i].hi {
			dup := false
			for _, c := range res[:n] {
				dup = dup || c == rs[i].cu
			}
			if !dup {
				res[n] = rs[i].cu
				n++
			}
		}
	}
	return res
}

// unit returns the parsed unit ci, parsing it on first use.
func (x *lineIndex) unit(ci int32) *cuLines {
	s := &x.units[ci]
	if cu := s.cu.Load(); cu != nil {
		s.used.Store(x.clock.Add(1))
		return cu
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if cu := s.cu.Load(); cu != nil {
		return cu
	}
	cu := x.parse(s)
	for len(x.live) >= x.max {
		old := 0
		for i := range x.live {
			if x.units[x.live[i]].used.Load() < x.units[x.live[old]].used.Load() {
				old = i
			}
		}
		x.held.Add(-x.units[x.live[old]].cu.Load().heldBytes())
		x.units[x.live[old]].cu.Store(nil)
		x.live[old] = x.live[len(x.live)-1]
		x.live = x.live[:len(x.live)-1]
	}
	s.used.Store(x.clock.Add(1))
	s.cu.Store(cu)
	x.held.Add(cu.heldBytes())
	x.live = append(x.live, ci)
	return cu
}

// cuLines is one parsed compilation unit: its line table and its function
// scopes. It is immutable once built.
type cuLines struct {
	files  []string
	rows   []lineRow   // sorted by address; see parseLines
	scopes []scope     // functions and inlined calls, parents first
	spans  []scopeSpan // disjoint, sorted: the innermost scope at each address
	err    error
}

type lineRow struct {
	addr uint64
	file uint32
	line uint32
	end  bool // end_sequence: addr is one past the sequence
}

type scope struct {
	name, linkage string
	entry         uint64 // the function's entry (low_pc, or its first range)
	parent        int32  // index in scopes; -1 for none
	inlined       bool
	// aliased: another subprogram of the unit has exactly this one's
	// ranges (the assembler writes one per label of a function:
	// glibc's __clone3, __GI___clone3 and clone3).
	aliased  bool
	callFile int32 // index in files; -1 for none
	callLine int32
}

type scopeSpan struct {
	lo, hi uint64
	scope  int32
}

// frames appends the frames at addr; nothing when the unit does not know
// addr.
func (cu *cuLines) frames(addr uint64, out []SourceFrame, o *Object) []SourceFrame {
	file, line, hasLine := cu.lineAt(addr)
	sp := cu.spans
	i := sort.Search(len(sp), func(i int) bool { return sp[i].lo > addr }) - 1
	if i < 0 || addr >= sp[i].hi {
		if !hasLine {
			return out
		}
		f := SourceFrame{File: file, Line: line}
		if name, _, ok := o.Symbolize(addr); ok {
			f.LinkageName = name
			f.Function = Demangle(name)
		}
		return append(out, f)
	}
	s := &cu.scopes[sp[i].scope]
	for {
		out = append(out, SourceFrame{Function: s.name, LinkageName: s.linkage, File: file, Line: line, Inlined: s.inlined})
		if !s.inlined || s.parent < 0 {
			if !s.inlined && s.aliased {
				// One of several names of the same code: the one
				// the symbol table's rules choose, as perf, gdb
				// and addr2line print glibc's clone3 (not the
				// first DIE's __clone3).
				if name, off, ok := o.Symbolize(addr); ok && addr-off == s.entry && cu.aliasNamed(s, name) {
					out[len(out)-1].Function = name
				}
				return out
			}
			if !s.inlined && s.linkage == "" {
				// A split part of a C function (f.cold, f.part.0: a
				// range of the function other than the one it is
				// entered by) is named after its ELF symbol, as by
				// addr2line and llvm-addr2line. A clone that is a
				// function of its own (f.constprop.0, f.isra.0,
				// entered at its own start) keeps its DWARF name.
				if name, off, ok := o.Symbolize(addr); ok && len(name) > len(s.name)+1 &&
					name[len(s.name)] == '.' && name[:len(s.name)] == s.name && addr-off != s.entry {
					out[len(out)-1].Function = name
				}
			}
			return out
		}
		file, line = "", int(s.callLine)
		if s.callFile >= 0 {
			file = cu.files[s.callFile]
		}
		s = &cu.scopes[s.parent]
	}
}

// lineAt returns the line table row for addr: the last row at or before
// addr, unless that ends a sequence.
func (cu *cuLines) lineAt(addr uint64) (string, int, bool) {
	rows := cu.rows
	lo, hi := 0, len(rows)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if rows[mid].addr <= addr {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 || rows[lo-1].end {
		return "", 0, false
	}
	r := &rows[lo-1]
	return cu.files[r.file], int(r.line), true
}

// parse reads one unit; a unit that cannot be read comes back empty with
// its error, so that it is not tried again. What parsing makes is kept in
// the SectionCache and read from there when it is (unitparsecache.go).
func (x *lineIndex) parse(s *cuSlot) *cuLines {
	kind, key := x.unitEntry(cuLinesKind, s)
	if key != nil {
		var cu *cuLines
		if x.owner.readUnitEntry(kind, key, func(b []byte) (ok bool) {
			cu, ok = decodeCULines(b, key)
			return ok
		}) {
			return cu
		}
	}
	cu, keep := x.parseDWARF(s)
	if key != nil && keep && cu.err == nil {
		x.owner.storeDerived(kind, key, encodeCULines(key, cu))
	}
	return cu
}

// parseDWARF is parse from the DWARF; keep says whether what it made may
// be kept: the unit was read alone, and is not a split DWARF skeleton.
func (x *lineIndex) parseDWARF(s *cuSlot) (cu *cuLines, keep bool) {
	off := s.off
	cu = &cuLines{}
	defer func() {
		if r := recover(); r != nil {
			cu, keep = &cuLines{err: fmt.Errorf("malformed DWARF in unit at %#x: %v", off, r)}, false
		}
	}()
	ux, r, base, err := x.unitData(s)
	if err != nil {
		cu.err = err
		return cu, false
	}
	e, err := r.Next()
	if err != nil || e == nil {
		cu.err = errors.Join(err, errors.New("no unit"))
		return cu, false
	}
	keep = ux != x && !isSkeleton(e)
	fileIdx := cu.parseLines(ux, e)
	if isSkeleton(e) {
		// Split DWARF: the scopes are in the unit's .dwo, whose
		// call_file numbers name the same files as the skeleton's line
		// table (gcc and clang write one file table to both). dwoOpen
		// finds a DWARF 5 skeleton's header by the entry's .debug_info
		// offset.
		abs := *e
		abs.Offset += base
		dx, dr, split, dwo, err := ux.dwoOpen(&abs)
		if err == nil {
			if dwo != nil {
				defer dwo.Close()
			}
			if split.Children {
				cu.parseScopes(dx, dr, fileIdx, hasClasses(split))
			}
			return cu, keep
		}
		cu.err = err
		x.splitFailed(off, err)
		// clang -fsplit-dwarf-inlining keeps the inlined calls in the
		// skeleton too.
	}
	if e.Children {
		if ux != x && base == dwarf.Offset(s.span.start) && !noUnitWalker {
			if w, _, ok := newUnitWalker(r, ux, s.span, base); ok {
				err := cu.err
				sw := &scopeWalker{w: w}
				cu.parseScopes(ux, sw, fileIdx, hasClasses(e))
				if !w.failed {
					return cu, keep
				}
				// Read again by debug/dwarf, from the unit's first entry.
				unitWalkerFailed.Add(1)
				cu.scopes, cu.spans, cu.err = nil, nil, err
				r.Seek(dwarf.Offset(s.span.die) - base)
				if _, err := r.Next(); err != nil {
					cu.err = err
					return cu, keep
				}
			}
		}
		cu.parseScopes(ux, r, fileIdx, hasClasses(e))
	}
	return cu, keep
}

// splitFailed records that the .dwo of the split unit at off could not be
// read, for SourceError and SplitDWARFError. Called under x.mu.
func (x *lineIndex) splitFailed(off dwarf.Offset, err error) {
	if x.dwoErr == nil {
		x.dwoErr = newErr(x.owner.path, ".debug_info", int64(off), err)
		x.dwoFailed.Store(true)
	}
}

// SplitDWARFError returns why the first split DWARF unit that a lookup
// (SourceFrames, or the call sites) met could not be read from its .dwo
// file or the .dwp package: not found (the error names the files looked
// at), or a DWO id that is not the skeleton's. Its functions and inlined
// calls are then missing; the lines still come from the skeleton. The
// error names the object and the skeleton unit's offset in .debug_info.
// Nil while there is none; cheap.
func (o *Object) SplitDWARFError() error {
	x := o.lineIndex()
	if x == nil || !x.dwoFailed.Load() {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.dwoErr
}

// hasClasses reports whether the unit's language (DW_AT_language) nests
// functions in classes, structs and unions, whose names qualify theirs:
// C++, Objective-C++, D.
func hasClasses(unit *dwarf.Entry) bool {
	switch lang, _ := unit.Val(dwarf.AttrLanguage).(int64); lang {
	case 0x4, 0x11, 0x13, 0x1a, 0x21, 0x2b: // C++, ObjC++, D, C++03, C++11, C++14
		return true
	}
	return false
}

// parseLines reads the unit's line table into cu.rows and cu.files and
// returns the map from the line table's file numbers to cu.files.
func (cu *cuLines) parseLines(x *lineIndex, e *dwarf.Entry) []int32 {
	// lineFileNames walks the whole header with every length and count
	// checked against the unit: debug/dwarf's LineReader trusts a DWARF 5
	// header's directory and file counts and allocates for them up front.
	var bfd []string
	if stmt, ok := e.Val(dwarf.AttrStmtList).(int64); ok {
		compDir, _ := x.attrString(e, dwarf.AttrCompDir)
		var sane bool
		if stmt >= 0 {
			bfd, sane = lineFileNames(x.line, x.lineStr, x.str, uint64(stmt), compDir)
		}
		if !sane {
			cu.err = fmt.Errorf("malformed line program header at .debug_line offset %#x", stmt)
			return nil
		}
	}
	lr, err := x.d.LineReader(e)
	if err != nil || lr == nil {
		cu.err = err
		return nil
	}
	files := lr.Files()
	idx := make([]int32, len(files))
	fileOf := make(map[*dwarf.LineFile]uint32, len(files))
	for i, f := range files {
		idx[i] = -1
		if f == nil {
			continue
		}
		name := f.Name
		if i < len(bfd) && (bfd[i] != "" || len(bfd) == len(files)) {
			name = bfd[i]
		}
		idx[i] = int32(len(cu.files))
		fileOf[f] = uint32(len(cu.files))
		cu.files = append(cu.files, name)
	}
	intern := func(f *dwarf.LineFile) uint32 {
		if i, ok := fileOf[f]; ok {
			return i
		}
		i := uint32(len(cu.files))
		name := ""
		if f != nil {
			name = f.Name
		}
		cu.files = append(cu.files, name)
		fileOf[f] = i
		return i
	}
	type seq struct{ start, end int }
	var seqs []seq
	start := 0
	var le dwarf.LineEntry
	for {
		if err := lr.Next(&le); err != nil {
			break
		}
		row := lineRow{addr: le.Address, file: intern(le.File), line: uint32(max(le.Line, 0)), end: le.EndSequence}
		// Of several rows at one address the last is used, as by addr2line.
		if n := len(cu.rows); n > start && cu.rows[n-1].addr == row.addr && !row.end && !cu.rows[n-1].end {
			cu.rows[n-1] = row
		} else {
			cu.rows = append(cu.rows, row)
		}
		if le.EndSequence {
			seqs = append(seqs, seq{start, len(cu.rows)})
			start = len(cu.rows)
		}
	}
	cu.rows = cu.rows[:start] // drop an unterminated sequence
	less := func(i, j int) bool { return cu.rows[seqs[i].start].addr < cu.rows[seqs[j].start].addr }
	if !sort.SliceIsSorted(seqs, less) {
		sort.SliceStable(seqs, less)
		rows := make([]lineRow, 0, len(cu.rows))
		for _, s := range seqs {
			rows = append(rows, cu.rows[s.start:s.end]...)
		}
		cu.rows = rows
	}
	// Sequences may still overlap (code discarded by the linker keeps its
	// rows at address 0); keep the rows ordered so the search works.
	if !sort.SliceIsSorted(cu.rows, func(i, j int) bool { return cu.rows[i].addr < cu.rows[j].addr }) {
		sort.SliceStable(cu.rows, func(i, j int) bool { return cu.rows[i].addr < cu.rows[j].addr })
	}
	cu.rows = append([]lineRow(nil), cu.rows...) // drop spare capacity
	return idx
}

const attrMIPSLinkageName dwarf.Attr = 0x2007

// parseScopes reads the unit's functions and inlined calls.
//
// A function DWARF gives no linkage name (gcc leaves it out for members of
// templates instantiated with local types, lambdas' operator()) is named as
// gdb names it: qualified by the namespaces and, where classes is set, the
// named classes, structs and unions it is declared in (none inside a
// function or an anonymous class). So the walk goes into those too, noting
// the qualifier of each function declared there (quals, by offset); names
// are resolved once it is over, since a declaration may follow its use.
func (cu *cuLines) parseScopes(x *lineIndex, r entrySource, fileIdx []int32, classes bool) {
	var rs []scopeRange
	names := make(map[uint64][3]string)
	quals := make(map[dwarf.Offset]string)
	var entries []*dwarf.Entry // the entry of each of cu.scopes
	type level struct {
		scope  int32  // innermost enclosing scope at this level
		depth  int32  // nesting of scopes
		prefix string // what qualifies the names declared at this level
	}
	stack := []level{{scope: -1}}
	for len(stack) > 0 {
		e, err := r.Next()
		if err != nil {
			cu.err = err
			break
		}
		if e == nil {
			break
		}
		if e.Tag == 0 {
			stack = stack[:len(stack)-1]
			continue
		}
		top := stack[len(stack)-1]
		switch e.Tag {
		case dwarf.TagSubprogram, dwarf.TagInlinedSubroutine:
			if top.prefix != "" && e.Tag == dwarf.TagSubprogram {
				quals[e.Offset] = top.prefix
			}
		case dwarf.TagLexDwarfBlock:
			if e.Children {
				stack = append(stack, top)
			}
			continue
		case dwarf.TagNamespace, dwarf.TagModule:
			if e.Children {
				in := top
				name, _ := e.Val(dwarf.AttrName).(string)
				if name == "" && e.Tag == dwarf.TagNamespace {
					name = "(anonymous namespace)"
				}
				in.prefix = qualified(top.prefix, name)
				stack = append(stack, in)
			}
			continue
		case dwarf.TagClassType, dwarf.TagStructType, dwarf.TagUnionType, dwarf.TagInterfaceType:
			if !classes || !e.Children {
				if e.Children {
					r.SkipChildren()
				}
				continue
			}
			// An anonymous class (a lambda's) qualifies nothing, as
			// in gdb.
			in := top
			in.prefix = ""
			if name, _ := e.Val(dwarf.AttrName).(string); name != "" {
				in.prefix = qualified(top.prefix, name)
			}
			stack = append(stack, in)
			continue
		default:
			if e.Children {
				r.SkipChildren()
			}
			continue
		}
		ranges, _ := x.ranges(e)
		var valid [][2]uint64
		for _, rg := range ranges {
			if rg[1] > rg[0] && rg[0] != 0 {
				valid = append(valid, rg)
			}
		}
		if len(valid) == 0 {
			// Declarations and abstract instances have no code; their
			// children do not either.
			if e.Children {
				r.SkipChildren()
			}
			continue
		}
		si := int32(len(cu.scopes))
		s := scope{parent: top.scope, callFile: -1, inlined: e.Tag == dwarf.TagInlinedSubroutine}
		if s.inlined {
			if v, ok := e.Val(dwarf.AttrCallFile).(int64); ok && v >= 0 && v < int64(len(fileIdx)) {
				s.callFile = fileIdx[v]
			}
			if v, ok := e.Val(dwarf.AttrCallLine).(int64); ok && v >= 0 && v < 1<<31 {
				s.callLine = int32(v)
			}
		}
		s.entry = valid[0][0]
		if lo, ok := e.Val(dwarf.AttrLowpc).(uint64); ok && lo != 0 {
			s.entry = lo
		}
		cu.scopes = append(cu.scopes, s)
		entries = append(entries, e)
		for _, rg := range valid {
			rs = append(rs, scopeRange{lo: rg[0], hi: rg[1], scope: si, depth: top.depth + 1})
		}
		if e.Children {
			// Names declared in a function are not qualified by it.
			stack = append(stack, level{scope: si, depth: top.depth + 1})
		}
	}
	for i, e := range entries {
		cu.scopes[i].name, cu.scopes[i].linkage = x.funcName(e, names, quals)
	}
	cu.markAliases(rs)
	cu.spans = innermostSpans(len(rs), func(i int) (uint64, uint64, int32, int32) {
		return rs[i].lo, rs[i].hi, rs[i].scope, rs[i].depth
	})
}

// scopeRange is one address range of a scope (cuLines.scopes[scope]),
// depth scopes deep.
type scopeRange struct {
	lo, hi uint64
	scope  int32
	depth  int32
}

// markAliases marks the outermost subprograms without a linkage name whose
// one range another such subprogram has too: names of one function.
func (cu *cuLines) markAliases(rs []scopeRange) {
	count := make(map[int32]int, len(cu.scopes))
	for _, r := range rs {
		count[r.scope]++
	}
	first := make(map[[2]uint64]int32)
	for _, r := range rs {
		s := &cu.scopes[r.scope]
		if s.inlined || s.parent >= 0 || s.linkage != "" || count[r.scope] != 1 {
			continue
		}
		k := [2]uint64{r.lo, r.hi}
		if f, ok := first[k]; ok {
			s.aliased, cu.scopes[f].aliased = true, true
			continue
		}
		first[k] = r.scope
	}
}

// aliasNamed reports whether name (without a symbol version) is the name
// of s or of a subprogram aliased to it (the same entry).
func (cu *cuLines) aliasNamed(s *scope, name string) bool {
	if i := strings.IndexByte(name, '@'); i >= 0 {
		name = name[:i]
	}
	for i := range cu.scopes {
		a := &cu.scopes[i]
		if a.aliased && a.entry == s.entry && a.name == name {
			return true
		}
	}
	return false
}

// innermostSpans turns n ranges (lo, hi, scope, depth) into disjoint sorted
// spans, each naming the deepest range covering it (the shorter one among
// equally deep ones).
func innermostSpans(n int, get func(int) (lo, hi uint64, scope, depth int32)) []scopeSpan {
	type ev struct {
		at    uint64
		start bool
		i     int32
	}
	evs := make([]ev, 0, 2*n)
	for i := 0; i < n; i++ {
		lo, hi, _, _ := get(i)
		evs = append(evs, ev{lo, true, int32(i)}, ev{hi, false, int32(i)})
	}
	sort.Slice(evs, func(a, b int) bool { return evs[a].at < evs[b].at })
	var active []int32
	var out []scopeSpan
	for k := 0; k < len(evs); {
		at := evs[k].at
		for ; k < len(evs) && evs[k].at == at; k++ {
			if evs[k].start {
				active = append(active, evs[k].i)
				continue
			}
			for j, a := range active {
				if a == evs[k].i {
					active = append(active[:j], active[j+1:]...)
					break
				}
			}
		}
		if len(active) == 0 || k == len(evs) {
			continue
		}
		best := active[0]
		bl, bh, _, bd := get(int(best))
		for _, a := range active[1:] {
			l, h, _, d := get(int(a))
			if d > bd || d == bd && h-l < bh-bl {
				best, bl, bh, bd = a, l, h, d
			}
		}
		_, _, sc, _ := get(int(best))
		next := evs[k].at
		if m := len(out); m > 0 && out[m-1].hi == at && out[m-1].scope == sc {
			out[m-1].hi = next
		} else {
			out = append(out, scopeSpan{lo: at, hi: next, scope: sc})
		}
	}
	return out
}

// funcName returns the display and linkage names of a subprogram or
// inlined call, following DW_AT_abstract_origin and DW_AT_specification as
// addr2line does: a linkage name anywhere on the chain wins over
// DW_AT_name. Resolved origins are cached in cache.
func (x *lineIndex) funcName(e *dwarf.Entry, cache map[uint64][3]string, quals map[dwarf.Offset]string) (display, linkage string) {
	n := x.resolveName(e, cache, quals, 0, false)
	return n[0], n[1]
}

// qualified returns name qualified by prefix ("" or "ns::C::").
func qualified(prefix, name string) string {
	if name == "" {
		return prefix
	}
	return prefix + name + "::"
}

// resolveName returns {display, linkage, name} for e, an entry of the
// supplementary file when inAlt is set; name is qualified by quals (the
// unit's, not the supplementary file's).
func (x *lineIndex) resolveName(e *dwarf.Entry, cache map[uint64][3]string, quals map[dwarf.Offset]string, depth int, inAlt bool) [3]string {
	var name, linkage string
	if v, ok := x.attrString(e, dwarf.AttrLinkageName); ok {
		linkage = v
	} else if v, ok := x.attrString(e, attrMIPSLinkageName); ok {
		linkage = v
	}
	qual := ""
	if !inAlt {
		qual = quals[e.Offset]
	}
	if v, ok := x.attrString(e, dwarf.AttrName); ok {
		name = qual + v
	}
	if linkage == "" && depth < 16 {
		ref, alt, ok := x.attrRef(e, dwarf.AttrAbstractOrigin, inAlt)
		if !ok {
			ref, alt, ok = x.attrRef(e, dwarf.AttrSpecification, inAlt)
		}
		if ok && (ref != e.Offset || alt != inAlt) {
			key := uint64(ref)
			if alt {
				key |= altRef
			}
			o, hit := cache[key]
			if !hit {
				if oe := x.entryAt(ref, alt); oe != nil {
					o = x.resolveName(oe, cache, quals, depth+1, alt)
				}
				if len(cache) < 1<<16 {
					cache[key] = o
				}
			}
			linkage = o[1]
			// The declaration's name is qualified by the class it
			// is in; a definition outside the class repeats the
			// bare name.
			if name == "" || qual == "" && o[2] != "" {
				name = o[2]
			}
			if linkage != "" {
				return [3]string{o[0], linkage, name}
			}
		}
	}
	display := name
	if linkage != "" {
		display = Demangle(linkage)
	}
	return [3]string{display, linkage, name}
}

// entryAt reads the entry at off (of the supplementary file's DWARF when
// alt is set), or nil.
func (x *lineIndex) entryAt(off dwarf.Offset, alt bool) *dwarf.Entry {
	d := x.d
	if alt {
		if x.alt == nil || x.alt.d == nil {
			return nil
		}
		d = x.alt.d
	}
	r := d.Reader()
	r.Seek(off)
	e, err := r.Next()
	if err != nil {
		return nil
	}
	return e
}
