package elfcache

import (
	"debug/dwarf"
	"sync/atomic"
)

// unitWalker walks the entries of one unit of .debug_info (little-endian,
// held alone in its own dwarf.Data: lineIndex.unitData's usual case) with
// the unit's abbreviation table, reading only their codes and skipping
// their attributes, so that the many entries a walk has no use for (types,
// variables, parameters: most of a unit) cost no allocation; debug/dwarf's
// reader r is moved (Seek, Next) to read just the entries that are wanted.
// A walker that meets what it does not read (a form readForm does not know,
// a damaged entry) fails, and the caller walks the unit with debug/dwarf as
// before: both walks see the same entries.
type unitWalker struct {
	r    *dwarf.Reader
	base dwarf.Offset // the unit's offset in .debug_info: r's offsets are from it
	u    unitSpan
	p    bufReader
	*unitAbbrevs
	failed bool
}

// unitAbbrevs is a unit's abbreviation table as the walker reads it;
// made once for the unit (lineIndex.abbrevs), read-only after.
type unitAbbrevs struct {
	dense  []unitAbbrev // by code, while codes are small
	sparse map[uint64]unitAbbrev
	forms  []abbrevForm // every declaration's, one after another
}

// unitAbbrev is one abbreviation declaration; its attributes' forms,
// decoded once, are unitWalker.forms[lo:hi].
type unitAbbrev struct {
	tag      uint64
	children bool
	lo, hi   int32
}

type abbrevForm struct{ form, implicit uint64 }

const noAbbrev = ^uint64(0)

// noUnitWalker turns the walker off: units are read by debug/dwarf alone
// (tests compare the two); unitWalkerFailed counts the units the walker
// gave back to debug/dwarf.
var (
	noUnitWalker     = false
	unitWalkerFailed atomic.Int64
)

// newUnitWalker returns a walker of the unit that ux (made by unitData
// for that unit alone) reads, positioned after the unit's first entry,
// which r has read, and whether that entry has children; ok is false when
// the unit cannot be walked this way.
func newUnitWalker(r *dwarf.Reader, ux *lineIndex, u unitSpan, base dwarf.Offset) (w *unitWalker, children, ok bool) {
	secs := ux.secs
	if u.end == 0 || u.end > uint64(len(secs.info)) || u.die >= u.end || base != dwarf.Offset(u.start) {
		return nil, false, false
	}
	if ux.abbrevs == nil {
		if ux.abbrevs = readUnitAbbrevs(secs, u); ux.abbrevs == nil {
			return nil, false, false
		}
	}
	w = &unitWalker{r: r, base: base, u: u, p: bufReader{b: secs.info[u.die:u.end]}, unitAbbrevs: ux.abbrevs}
	_, a, end := w.next()
	if end || a == nil || !w.skip(a) {
		return nil, false, false
	}
	return w, a.children, true
}

// readUnitAbbrevs decodes the abbreviation table of unit u; nil when it
// cannot be read.
func readUnitAbbrevs(secs dwarfSecs, u unitSpan) *unitAbbrevs {
	t := &unitAbbrevs{}
	if err := walkAbbrevs(secs.abbrev, u.abbrev, func(code, tag uint64, children bool, specs []byte) bool {
		a := unitAbbrev{tag: tag, children: children, lo: int32(len(t.forms))}
		sp := &bufReader{b: specs}
		for {
			_, form, implicit, more := sp.spec()
			if !more {
				break
			}
			t.forms = append(t.forms, abbrevForm{form, implicit})
		}
		a.hi = int32(len(t.forms))
		if code < 1<<12 {
			for uint64(len(t.dense)) <= code {
				t.dense = append(t.dense, unitAbbrev{tag: noAbbrev})
			}
			t.dense[code] = a
		} else {
			if t.sparse == nil {
				t.sparse = map[uint64]unitAbbrev{}
			}
			t.sparse[code] = a
		}
		return true
	}); err != nil {
		return nil
	}
	return t
}

// next reads the next entry's code: its offset and abbreviation (nil for
// the null entry that ends a list of children); end at the unit's end or
// when the walker failed.
func (w *unitWalker) next() (off uint64, a *unitAbbrev, end bool) {
	if w.failed || len(w.p.b) == 0 {
		return 0, nil, true
	}
	off = w.u.end - uint64(len(w.p.b))
	code := w.p.uleb()
	if w.p.bad {
		w.failed = true
		return 0, nil, true
	}
	if code == 0 {
		return off, nil, false
	}
	if code < uint64(len(w.dense)) {
		if d := &w.dense[code]; d.tag != noAbbrev {
			return off, d, false
		}
	} else if d, ok := w.sparse[code]; ok {
		return off, &d, false
	}
	w.failed = true
	return 0, nil, true
}

// skip reads past the attributes of the entry whose code next read.
func (w *unitWalker) skip(a *unitAbbrev) bool {
	for _, f := range w.forms[a.lo:a.hi] {
		form := f.form
		if form == formIndirect {
			form = w.p.uleb()
		}
		if _, _, err := readForm(&w.p, form, w.u, f.implicit); err != nil {
			w.failed = true
			return false
		}
	}
	if w.p.bad {
		w.failed = true
	}
	return !w.failed
}

// entry has debug/dwarf read the entry at off (whose code next read) and
// checks that it is the one the walker sees.
func (w *unitWalker) entry(off uint64, a *unitAbbrev) *dwarf.Entry {
	w.r.Seek(dwarf.Offset(off) - w.base)
	e, err := w.r.Next()
	if err != nil || e == nil || e.Offset != dwarf.Offset(off)-w.base || uint64(e.Tag) != a.tag || e.Children != a.children {
		w.failed = true
		return nil
	}
	return e
}

// entrySource is what parseScopes reads entries from: debug/dwarf's
// reader, or a scopeWalker.
type entrySource interface {
	Next() (*dwarf.Entry, error)
	SkipChildren()
}

// scopeWalker gives parseScopes a unit's entries as a dwarf.Reader would,
// with debug/dwarf reading only those whose attributes parseScopes reads
// (functions, inlined calls, namespaces, modules, classes); the others
// come as one reused entry with only their offset, tag and children flag.
// After the walker failed, Next says the unit ended (the caller sees
// w.failed and walks again with debug/dwarf).
type scopeWalker struct {
	w            *unitWalker
	lastChildren bool
	bare         dwarf.Entry
}

func (s *scopeWalker) Next() (*dwarf.Entry, error) {
	off, a, end := s.w.next()
	if end {
		s.lastChildren = false
		return nil, nil
	}
	if a == nil {
		s.lastChildren = false
		s.bare = dwarf.Entry{Offset: dwarf.Offset(off) - s.w.base}
		return &s.bare, nil
	}
	var e *dwarf.Entry
	switch dwarf.Tag(a.tag) {
	case dwarf.TagSubprogram, dwarf.TagInlinedSubroutine, dwarf.TagNamespace, dwarf.TagModule,
		dwarf.TagClassType, dwarf.TagStructType, dwarf.TagUnionType, dwarf.TagInterfaceType:
		if e = s.w.entry(off, a); e == nil {
			return nil, nil
		}
	default:
		s.bare = dwarf.Entry{Offset: dwarf.Offset(off) - s.w.base, Tag: dwarf.Tag(a.tag), Children: a.children}
		e = &s.bare
	}
	if !s.w.skip(a) {
		return nil, nil
	}
	s.lastChildren = a.children
	return e, nil
}

// SkipChildren skips the children of the entry Next returned last.
func (s *scopeWalker) SkipChildren() {
	if !s.lastChildren {
		return
	}
	s.lastChildren = false
	for depth := 1; depth > 0; {
		_, a, end := s.w.next()
		if end {
			return
		}
		if a == nil {
			depth--
			continue
		}
		if !s.w.skip(a) {
			return
		}
		if a.children {
			depth++
		}
	}
}
