package elfcache

import (
	"debug/dwarf"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
)

// CallSite is one call instruction that DWARF describes with a
// DW_TAG_call_site (DWARF 5) or DW_TAG_GNU_call_site (DWARF 4) entry. All
// addresses are link-time addresses of the object.
type CallSite struct {
	// ReturnPC is the address just past the call or jump instruction
	// (DW_AT_call_return_pc, or DW_AT_low_pc of a GNU call site): the
	// return address a call pushes, and for a tail call the address gdb
	// gives the frame of the function that made it.
	ReturnPC uint64
	// Func is the entry of the function the call is in (the
	// DW_TAG_subprogram enclosing the call site, also when the call is
	// inside an inlined subroutine); 0 when the call site is in none.
	Func uint64
	// Target is the entry of the called function when DWARF gives it
	// directly: DW_AT_call_origin (DW_AT_abstract_origin) naming a
	// subprogram with an address. 0 otherwise.
	Target uint64
	// TargetName is the called function's linkage name (else its name)
	// when DW_AT_call_origin names a subprogram without an address, such
	// as the declaration of a function of another object; "" otherwise.
	TargetName string
	// TargetExpr is the address a DW_AT_call_target (or
	// DW_AT_GNU_call_site_target) gives when it is a constant (only
	// DW_OP_addr ADDR); 0 for an indirect call, whose target register
	// holds it. gdb evaluates call targets only in a live frame, so does
	// not follow these when it looks for tail calls, nor does resolve.
	TargetExpr uint64
	// Tail is set for a tail call (DW_AT_call_tail_call,
	// DW_AT_GNU_tail_call): a jump that leaves no return address.
	Tail bool
}

// Known reports whether the call's target is known from its origin: an
// address or a name. Calls whose target is a DW_AT_call_target
// expression (indirect ones, or TargetExpr) and call sites without any
// target are unknown.
func (c *CallSite) Known() bool { return c.Target != 0 || c.TargetName != "" }

// DWARF tags and attributes of call sites that debug/dwarf does not name.
const (
	tagGNUCallSite        dwarf.Tag  = 0x4109
	attrGNUCallSiteTarget dwarf.Attr = 0x2113
	attrGNUTailCall       dwarf.Attr = 0x2115
)

// callSites is an object's index of call sites. Its units are read one at
// a time, on the first query that needs one (a report touches few of an
// object's units; glibc's debug file has over a thousand), and kept; the
// function symbols by name are the Object's (FunctionNamed).
type callSites struct {
	lx     *lineIndex // the DWARF and its address-to-unit index
	obj    *Object
	units  []atomic.Pointer[cuCallSites]
	mu     sync.Mutex  // serializes parsing; guards err
	err    error       // the first unit that could not be read
	failed atomic.Bool // err is set
}

// cuCallSites is one unit's call sites and functions, immutable once built.
type cuCallSites struct {
	sites []CallSite // every call site with a return pc, by ReturnPC
	tails []CallSite // tail call sites by (Func, ReturnPC)
	funcs []funcSpan // function address ranges by lo
}

// funcSpan is one address range of a function: [lo, hi) belongs to the
// function whose entry is entry.
type funcSpan struct {
	lo, hi, entry uint64
}

// callSiteState is what an Object keeps of its call-site index.
type callSiteState struct {
	once sync.Once
	idx  *callSites
	err  error
	// names are the function symbols by name (FunctionNamed).
	namesOnce sync.Once
	names     *funcNames
}

// CallSiteAt returns the call site whose return address is ret (link-time).
// The call sites come from the DWARF (the object's own or its debug
// file's, split DWARF units from their .dwo or .dwp); each compilation
// unit's are read on the first query into it. Later queries do not
// allocate.
func (o *Object) CallSiteAt(ret uint64) (CallSite, bool) {
	x := o.callSiteIndex()
	if x == nil || ret == 0 {
		return CallSite{}, false
	}
	// The call instruction, just before ret, is in the unit.
	for _, ci := range x.lx.cusFor(ret - 1) {
		if ci < 0 {
			break
		}
		u := x.unit(ci)
		i := sort.Search(len(u.sites), func(i int) bool { return u.sites[i].ReturnPC >= ret })
		if i < len(u.sites) && u.sites[i].ReturnPC == ret {
			return u.sites[i], true
		}
	}
	return CallSite{}, false
}

// TailCallSites returns the tail call sites of the function whose entry is
// fn, by return address. The slice is the index's own: callers must not
// change it.
func (o *Object) TailCallSites(fn uint64) []CallSite {
	x := o.callSiteIndex()
	if x == nil {
		return nil
	}
	for _, ci := range x.lx.cusFor(fn) {
		if ci < 0 {
			break
		}
		t := x.unit(ci).tails
		i := sort.Search(len(t), func(i int) bool { return t[i].Func >= fn })
		j := i
		for j < len(t) && t[j].Func == fn {
			j++
		}
		if j > i {
			return t[i:j:j]
		}
	}
	return nil
}

// FunctionEntry returns the entry of the function (DW_TAG_subprogram) whose
// code contains the link-time address addr.
func (o *Object) FunctionEntry(addr uint64) (uint64, bool) {
	x := o.callSiteIndex()
	if x == nil {
		return 0, false
	}
	for _, ci := range x.lx.cusFor(addr) {
		if ci < 0 {
			break
		}
		f := x.unit(ci).funcs
		i := sort.Search(len(f), func(i int) bool { return f[i].lo > addr }) - 1
		// Ranges may nest (a GNU C nested function inside its parent):
		// the innermost starts last, its parent a few ranges before.
		for k := 0; i >= 0 && k < 8; i, k = i-1, k+1 {
			if addr < f[i].hi {
				return f[i].entry, true
			}
		}
	}
	return 0, false
}

// FunctionNamed returns the address of the function symbol called name
// (any alias, without its ELF version; a global before a local), from the
// object's .dynsym and its .symtab or its debug file's: gdb finds a call
// site's target that DWARF gives only by name (a declaration) among its
// minimal symbols the same way.
func (o *Object) FunctionNamed(name string) (uint64, bool) {
	if o.closed.Load() {
		return 0, false
	}
	st := &o.callSite
	st.namesOnce.Do(func() { st.names = o.functionNames() })
	if o.callSiteIndex() == nil {
		// No DWARF (a system library without its debug file): the
		// symbol tables still name its functions.
		return st.names.lookup(st.names.all, name)
	}
	if e, ok := st.names.lookup(st.names.dyn, name); ok {
		return e, true
	}
	return st.names.lookup(st.names.all, name)
}

// CallSitesError returns the first error met while reading call sites,
// naming the file and the offset in .debug_info; nil also when the object
// has no DWARF. It is cheap while there is none.
func (o *Object) CallSitesError() error {
	x := o.callSiteIndex()
	if x == nil {
		return o.callSite.err
	}
	if !x.failed.Load() {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.err
}

func (o *Object) callSiteIndex() *callSites {
	if o.closed.Load() {
		return nil
	}
	o.callSite.once.Do(func() {
		lx := o.lineIndex()
		if lx == nil {
			o.callSite.err = o.lineErr
			return
		}
		o.callSite.idx = &callSites{lx: lx, units: make([]atomic.Pointer[cuCallSites], len(lx.units))}
	})
	return o.callSite.idx
}

// unit returns unit ci's call sites, reading them on first use.
func (x *callSites) unit(ci int32) *cuCallSites {
	if u := x.units[ci].Load(); u != nil {
		return u
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if u := x.units[ci].Load(); u != nil {
		return u
	}
	u, err := x.parse(&x.lx.units[ci])
	if err != nil && x.err == nil {
		x.err = err
		x.failed.Store(true)
	}
	x.units[ci].Store(u)
	return u
}

// parse reads the call sites and functions of one unit; what was read
// before an error is kept. What parsing makes is kept in the SectionCache
// and read from there when it is (unitparsecache.go).
func (x *callSites) parse(s *cuSlot) (*cuCallSites, error) {
	x.lx.mu.Lock()
	kind, key := x.lx.unitEntry(cuSitesKind, s)
	x.lx.mu.Unlock()
	if key != nil {
		var u *cuCallSites
		if x.lx.owner.readUnitEntry(kind, key, func(b []byte) (ok bool) {
			u, ok = decodeCallSites(b, key)
			return ok
		}) {
			return u, nil
		}
	}
	u, keep, err := x.parseDWARF(s)
	if key != nil && keep && err == nil {
		x.lx.owner.storeDerived(kind, key, encodeCallSites(key, u))
	}
	return u, err
}

// parseDWARF is parse from the DWARF; keep says whether what it made may
// be kept: the unit was read alone, not from a split DWARF file.
func (x *callSites) parseDWARF(s *cuSlot) (u *cuCallSites, keep bool, err error) {
	path := x.lx.owner.path
	b := &callSiteBuilder{}
	defer func() {
		if r := recover(); r != nil {
			err = newErr(path, ".debug_info", int64(s.off), fmt.Errorf("malformed DWARF in unit: %v", r))
			keep = false
		}
		u = b.finish()
	}()
	// The line index's DWARF (and its lock: unitData may make it).
	x.lx.mu.Lock()
	defer x.lx.mu.Unlock()
	ux, r, base, err := x.lx.unitData(s)
	if err != nil {
		return nil, false, err
	}
	e, err := r.Next()
	if err != nil || e == nil {
		return nil, false, newErr(path, ".debug_info", int64(s.off), errors.Join(err, errors.New("no unit")))
	}
	inDWO := false // the unit's entries are in its .dwo (s.span is the skeleton's)
	if isSkeleton(e) {
		abs := *e
		abs.Offset += base
		dx, dr, split, dwo, err := ux.dwoOpen(&abs)
		if err != nil {
			// Said once, with the source frames' (SplitDWARFError).
			x.lx.splitFailed(s.off, err)
			return nil, false, nil
		}
		if dwo != nil {
			defer dwo.Close()
		}
		if !split.Children {
			return nil, false, nil
		}
		ux, r, base = dx, dr, 0
		path = "the split DWARF of " + path
		inDWO = true
	} else if !e.Children {
		return nil, !inDWO && ux != x.lx, nil
	}
	b.x = ux
	if !inDWO && ux != x.lx && base == dwarf.Offset(s.span.start) && s.span.end != 0 && !noUnitWalker {
		// The unit alone, little-endian: walked without debug/dwarf but
		// for the entries that matter.
		if b.readUnit(r, s.span, base) {
			return nil, !inDWO && ux != x.lx, nil
		}
		// Something the walk does not know: debug/dwarf reads it all
		// again, as before.
		unitWalkerFailed.Add(1)
		b.cu, b.last = cuCallSites{}, 0
		r.Seek(dwarf.Offset(s.span.die) - base)
		if _, err := r.Next(); err != nil {
			return nil, false, newErr(path, ".debug_info", int64(s.off), err)
		}
	}
	if err := b.read(r); err != nil {
		return nil, false, newErr(path, ".debug_info", int64(b.last+base), err)
	}
	return nil, !inDWO && ux != x.lx, nil
}

// readUnit does what read does with a unitWalker (unitwalk.go): debug/dwarf
// reads only the functions and call sites. It returns false, with what it
// read to be thrown away, when the walker failed.
func (b *callSiteBuilder) readUnit(r *dwarf.Reader, u unitSpan, base dwarf.Offset) bool {
	w, children, ok := newUnitWalker(r, b.x, u, base)
	if !ok || !children {
		return false
	}
	stack := []uint64{0} // the enclosing function's entry at each depth
	fn := uint64(0)
	for len(stack) > 0 {
		off, a, end := w.next()
		if end {
			return !w.failed // the unit ends (debug/dwarf's Next gives nil)
		}
		if a == nil {
			fn = stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			continue
		}
		inner := fn
		switch dwarf.Tag(a.tag) {
		case dwarf.TagSubprogram, dwarf.TagCallSite, tagGNUCallSite:
			e := w.entry(off, a)
			if e == nil {
				return false
			}
			b.last = e.Offset
			if e.Tag == dwarf.TagSubprogram {
				if entry := b.subprogram(e); entry != 0 {
					inner = entry
				}
			} else {
				b.callSite(e, fn, r.AddressSize())
			}
		}
		if !w.skip(a) {
			return false
		}
		if a.children {
			if len(stack) >= maxCallSiteDepth {
				return false
			}
			stack = append(stack, fn)
			fn = inner
		}
	}
	return true
}

type callSiteBuilder struct {
	x     *lineIndex
	cu    cuCallSites
	cache map[uint64][3]string
	last  dwarf.Offset // the last entry read
}

// read walks the entries below a unit's first one, keeping the enclosing
// function of each call site on a stack by depth.
func (b *callSiteBuilder) read(r *dwarf.Reader) error {
	stack := []uint64{0} // the enclosing function's entry at each depth
	fn := uint64(0)
	for len(stack) > 0 {
		e, err := r.Next()
		if err != nil {
			return err
		}
		if e == nil {
			return nil
		}
		if e.Tag == 0 {
			fn = stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			continue
		}
		if e.Offset <= b.last && b.last != 0 {
			return errors.New("entries do not advance")
		}
		b.last = e.Offset
		inner := fn
		switch e.Tag {
		case dwarf.TagSubprogram:
			if entry := b.subprogram(e); entry != 0 {
				inner = entry
			}
		case dwarf.TagCallSite, tagGNUCallSite:
			b.callSite(e, fn, r.AddressSize())
		}
		if e.Children {
			if len(stack) >= maxCallSiteDepth {
				return fmt.Errorf("entries nested more than %d deep", maxCallSiteDepth)
			}
			stack = append(stack, fn)
			fn = inner
		}
	}
	return nil
}

// maxCallSiteDepth bounds how deep entries nest.
const maxCallSiteDepth = 1 << 10

// subprogram records the ranges of a DW_TAG_subprogram and returns its
// entry, 0 when it has no code.
func (b *callSiteBuilder) subprogram(e *dwarf.Entry) uint64 {
	entry, rs := b.entryOf(e)
	for _, rg := range rs {
		if rg[1] > rg[0] {
			b.cu.funcs = append(b.cu.funcs, funcSpan{lo: rg[0], hi: rg[1], entry: entry})
		}
	}
	return entry
}

// entryOf returns a subprogram's entry (DW_AT_low_pc, else the start of its
// first range) and its ranges.
func (b *callSiteBuilder) entryOf(e *dwarf.Entry) (uint64, [][2]uint64) {
	rs, _ := b.x.ranges(e)
	if lo, ok := e.Val(dwarf.AttrLowpc).(uint64); ok && lo != 0 {
		return lo, rs
	}
	if len(rs) > 0 {
		return rs[0][0], rs
	}
	return 0, nil
}

// callSite records a call site inside the function whose entry is fn.
func (b *callSiteBuilder) callSite(e *dwarf.Entry, fn uint64, asize int) {
	ret, ok := e.Val(dwarf.AttrCallReturnPC).(uint64)
	if !ok {
		if ret, ok = e.Val(dwarf.AttrLowpc).(uint64); !ok {
			return
		}
	}
	site := CallSite{ReturnPC: ret, Func: fn}
	t1, _ := e.Val(dwarf.AttrCallTailCall).(bool)
	t2, _ := e.Val(attrGNUTailCall).(bool)
	site.Tail = t1 || t2
	origin, alt, ok := b.x.attrRef(e, dwarf.AttrCallOrigin, false)
	if !ok {
		origin, alt, ok = b.x.attrRef(e, dwarf.AttrAbstractOrigin, false)
	}
	switch {
	case ok:
		b.target(&site, origin, alt)
	default:
		expr, _ := e.Val(dwarf.AttrCallTarget).([]byte)
		if expr == nil {
			expr, _ = e.Val(attrGNUCallSiteTarget).([]byte)
		}
		site.TargetExpr = constantAddr(expr, asize)
	}
	b.cu.sites = append(b.cu.sites, site)
	if site.Tail && site.Func != 0 {
		b.cu.tails = append(b.cu.tails, site)
	}
}

// target fills in a call site's target from the subprogram its
// DW_AT_call_origin names: its entry when it has code, else, as gdb does
// for a declaration or an abstract instance, its name.
func (b *callSiteBuilder) target(site *CallSite, origin dwarf.Offset, alt bool) {
	oe := b.x.entryAt(origin, alt)
	if oe == nil {
		return
	}
	if !alt {
		if entry, _ := b.entryOf(oe); entry != 0 {
			site.Target = entry
			return
		}
	}
	if b.cache == nil {
		b.cache = map[uint64][3]string{}
	}
	n := b.x.resolveName(oe, b.cache, nil, 0, alt)
	site.TargetName = n[1]
	if site.TargetName == "" {
		site.TargetName = n[2]
	}
}

// constantAddr returns the address of a DWARF expression that is only
// DW_OP_addr ADDR, else 0.
func constantAddr(expr []byte, asize int) uint64 {
	const opAddr = 0x03
	if len(expr) != 1+asize || expr[0] != opAddr {
		return 0
	}
	switch asize {
	case 8:
		return binary.LittleEndian.Uint64(expr[1:])
	case 4:
		return uint64(binary.LittleEndian.Uint32(expr[1:]))
	}
	return 0
}

// finish sorts what was read.
func (b *callSiteBuilder) finish() *cuCallSites {
	u := &b.cu
	sort.Slice(u.sites, func(i, j int) bool { return u.sites[i].ReturnPC < u.sites[j].ReturnPC })
	sort.Slice(u.tails, func(i, j int) bool {
		if u.tails[i].Func != u.tails[j].Func {
			return u.tails[i].Func < u.tails[j].Func
		}
		return u.tails[i].ReturnPC < u.tails[j].ReturnPC
	})
	sort.Slice(u.funcs, func(i, j int) bool { return u.funcs[i].lo < u.funcs[j].lo })
	return u
}
