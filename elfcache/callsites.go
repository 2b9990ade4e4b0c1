package elfcache

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"sync"
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
	// subprogram with an address, or a DW_AT_call_target that is a
	// constant address (DW_OP_addr). 0 otherwise.
	Target uint64
	// TargetName is the called function's linkage name (else its name)
	// when DW_AT_call_origin names a subprogram without an address, such
	// as the declaration of a function of another object; "" otherwise.
	TargetName string
	// Tail is set for a tail call (DW_AT_call_tail_call,
	// DW_AT_GNU_tail_call): a jump that leaves no return address.
	Tail bool
}

// Known reports whether the call's target is known: an address or a name.
// Indirect calls (a DW_AT_call_target computed from registers) and call
// sites without any target are unknown.
func (c *CallSite) Known() bool { return c.Target != 0 || c.TargetName != "" }

// DWARF tags and attributes of call sites that debug/dwarf does not name.
const (
	tagGNUCallSite        dwarf.Tag  = 0x4109
	attrGNUCallSiteTarget dwarf.Attr = 0x2113
	attrGNUTailCall       dwarf.Attr = 0x2115
)

// callSites is an object's index of call sites and functions, immutable
// once built.
type callSites struct {
	sites []CallSite        // every call site with a return pc, by ReturnPC
	tails []CallSite        // tail call sites by (Func, ReturnPC)
	funcs []funcSpan        // function address ranges by lo
	names map[string]uint64 // entry of each function by linkage name, else name
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
}

// CallSiteAt returns the call site whose return address is ret (link-time).
// The index of call sites is built from the DWARF (the object's own or its
// debug file's) on first use; later calls do not allocate.
func (o *Object) CallSiteAt(ret uint64) (CallSite, bool) {
	x := o.callSiteIndex()
	if x == nil {
		return CallSite{}, false
	}
	i := sort.Search(len(x.sites), func(i int) bool { return x.sites[i].ReturnPC >= ret })
	if i < len(x.sites) && x.sites[i].ReturnPC == ret {
		return x.sites[i], true
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
	t := x.tails
	i := sort.Search(len(t), func(i int) bool { return t[i].Func >= fn })
	j := i
	for j < len(t) && t[j].Func == fn {
		j++
	}
	return t[i:j:j]
}

// FunctionEntry returns the entry of the function (DW_TAG_subprogram) whose
// code contains the link-time address addr.
func (o *Object) FunctionEntry(addr uint64) (uint64, bool) {
	x := o.callSiteIndex()
	if x == nil {
		return 0, false
	}
	f := x.funcs
	i := sort.Search(len(f), func(i int) bool { return f[i].lo > addr }) - 1
	// Ranges may nest (a GNU C nested function inside its parent): the
	// innermost starts last, its parent a few ranges before.
	for k := 0; i >= 0 && k < 8; i, k = i-1, k+1 {
		if addr < f[i].hi {
			return f[i].entry, true
		}
	}
	return 0, false
}

// FunctionNamed returns the address of the function called name: the
// symbol tables' (a global before a local; any alias, without its ELF
// version), else the entry of the function DWARF names so (its linkage
// name, else its name), an external one before a static one.
func (o *Object) FunctionNamed(name string) (uint64, bool) {
	x := o.callSiteIndex()
	if x == nil {
		return 0, false
	}
	e, ok := x.names[name]
	return e, ok
}

// CallSitesError returns the error met while building the call-site index,
// naming the file and the offset in .debug_info; nil also when the object
// has no DWARF.
func (o *Object) CallSitesError() error {
	o.callSiteIndex()
	return o.callSite.err
}

func (o *Object) callSiteIndex() *callSites {
	if o.closed.Load() {
		return nil
	}
	o.callSite.once.Do(func() {
		defer func() {
			if r := recover(); r != nil {
				o.callSite.idx, o.callSite.err = nil, newErr(o.path, ".debug_info", -1, fmt.Errorf("malformed DWARF: %v", r))
			}
		}()
		o.callSite.idx, o.callSite.err = o.buildCallSites()
	})
	return o.callSite.idx
}

// buildCallSites reads every unit of the DWARF the line index reads (the
// object's, else its debug file's, with names shared through a dwz file
// resolved in it). What was read before an error is kept.
func (o *Object) buildCallSites() (*callSites, error) {
	lx := o.lineIndex()
	if lx == nil {
		return nil, nil
	}
	d, err := newDWARF(lx.owner.path, lx.secs, lx.secs.info)
	if err != nil {
		return nil, err
	}
	x := &lineIndex{owner: lx.owner, d: d, alt: lx.alt, secs: lx.secs}
	b := callSiteBuilder{x: x, dies: map[dwarf.Offset]fnDIE{}, names: map[string]uint64{}, ext: map[string]bool{}}
	b.symbolNames(o)
	err = b.read()
	return b.finish(), err
}

// symbolNames enters the function symbols of the object's symbol tables
// (.dynsym, and .symtab of the object or else of its debug file) by name,
// the globals before the locals, as gdb looks up a call site's target by
// name among the minimal symbols: aliases included (libc's pthread_join is
// the function DWARF calls ___pthread_join). DWARF's names fill in the
// names no symbol has.
func (b *callSiteBuilder) symbolNames(o *Object) {
	var cands []candidate
	cands, _ = o.readSymtab(".dynsym", cands)
	owner := o
	if s := o.section(".symtab"); s == nil || s.Type == elf.SHT_NOBITS {
		if d := o.DebugFile(); d != nil {
			owner = d
		}
	}
	cands, _ = owner.readSymtab(".symtab", cands)
	for _, local := range []bool{false, true} {
		for i := range cands {
			c := &cands[i]
			if (c.bind == uint8(elf.STB_LOCAL)) != local || c.typ == uint8(elf.STT_NOTYPE) {
				continue
			}
			name := string(c.name)
			if j := strings.IndexByte(name, '@'); j > 0 {
				name = name[:j]
			}
			if _, dup := b.names[name]; !dup {
				b.names[name], b.ext[name] = c.addr, !local
			}
		}
	}
}

// fnDIE is what the builder keeps of a subprogram entry, for call sites
// that name it.
type fnDIE struct {
	entry uint64 // 0 when it has no address (a declaration, an abstract instance)
}

// pendingSite is a call site whose target entry is resolved once every
// subprogram has been read.
type pendingSite struct {
	site   CallSite
	origin dwarf.Offset
	alt    bool // origin is in the supplementary file
	hasRef bool
}

type callSiteBuilder struct {
	x       *lineIndex
	dies    map[dwarf.Offset]fnDIE
	names   map[string]uint64
	ext     map[string]bool // names[n] is an external function's
	pending []pendingSite
	funcs   []funcSpan
	cache   map[uint64][3]string
}

// read walks every entry of every unit, keeping the enclosing function of
// each call site on a stack by depth.
func (b *callSiteBuilder) read() error {
	r := b.x.d.Reader()
	budget := len(b.x.secs.info) + 1
	last := dwarf.Offset(0)
	var stack []uint64 // the enclosing function's entry at each depth
	fn := uint64(0)
	for n := 0; ; n++ {
		e, err := r.Next()
		if err != nil {
			return newErr(b.x.owner.path, ".debug_info", int64(last), err)
		}
		if e == nil {
			return nil
		}
		if n > budget || (n > 0 && e.Offset <= last && e.Tag != 0) {
			return newErr(b.x.owner.path, ".debug_info", int64(e.Offset), fmt.Errorf("entries do not advance"))
		}
		if e.Tag != 0 {
			last = e.Offset
		}
		switch e.Tag {
		case 0:
			if len(stack) > 0 {
				fn = stack[len(stack)-1]
				stack = stack[:len(stack)-1]
			}
			continue
		case dwarf.TagCompileUnit, dwarf.TagPartialUnit, dwarf.TagTypeUnit, dwarf.TagSkeletonUnit:
			stack, fn = stack[:0], 0
		case dwarf.TagSubprogram:
			if entry := b.subprogram(e); entry != 0 {
				if e.Children {
					stack = append(stack, fn)
					fn = entry
					continue
				}
			}
		case dwarf.TagCallSite, tagGNUCallSite:
			b.callSite(e, fn, r.AddressSize())
		}
		if e.Children {
			stack = append(stack, fn)
		}
		if len(stack) > 1<<12 {
			return newErr(b.x.owner.path, ".debug_info", int64(e.Offset), fmt.Errorf("entries nested more than %d deep", 1<<12))
		}
	}
}

// subprogram records a DW_TAG_subprogram and returns its entry, 0 when it
// has no code.
func (b *callSiteBuilder) subprogram(e *dwarf.Entry) uint64 {
	var entry uint64
	if lo, ok := e.Val(dwarf.AttrLowpc).(uint64); ok {
		entry = lo
	}
	rs, _ := b.x.d.Ranges(e)
	if entry == 0 && len(rs) > 0 {
		entry = rs[0][0]
	}
	b.dies[e.Offset] = fnDIE{entry: entry}
	if entry == 0 {
		return 0
	}
	for _, rg := range rs {
		if rg[1] > rg[0] {
			b.funcs = append(b.funcs, funcSpan{lo: rg[0], hi: rg[1], entry: entry})
		}
	}
	n := b.x.resolveName(e, b.cacheMap(), 0, false)
	name := n[1]
	if name == "" {
		name = n[2]
	}
	if name != "" {
		ext, _ := e.Val(dwarf.AttrExternal).(bool)
		if _, dup := b.names[name]; !dup || (ext && !b.ext[name]) {
			b.names[name], b.ext[name] = entry, ext
		}
	}
	return entry
}

// callSite records a call site inside the function whose entry is fn.
func (b *callSiteBuilder) callSite(e *dwarf.Entry, fn uint64, asize int) {
	ret, ok := e.Val(dwarf.AttrCallReturnPC).(uint64)
	if !ok {
		if ret, ok = e.Val(dwarf.AttrLowpc).(uint64); !ok {
			return
		}
	}
	p := pendingSite{site: CallSite{ReturnPC: ret, Func: fn}}
	t1, _ := e.Val(dwarf.AttrCallTailCall).(bool)
	t2, _ := e.Val(attrGNUTailCall).(bool)
	p.site.Tail = t1 || t2
	p.origin, p.alt, p.hasRef = b.x.attrRef(e, dwarf.AttrCallOrigin, false)
	if !p.hasRef {
		p.origin, p.alt, p.hasRef = b.x.attrRef(e, dwarf.AttrAbstractOrigin, false)
	}
	if !p.hasRef {
		expr, _ := e.Val(dwarf.AttrCallTarget).([]byte)
		if expr == nil {
			expr, _ = e.Val(attrGNUCallSiteTarget).([]byte)
		}
		p.site.Target = constantAddr(expr, asize)
	}
	if p.hasRef && p.alt {
		// A declaration shared through a dwz file: only its name can
		// lead to code.
		if oe := b.x.entryAt(p.origin, true); oe != nil {
			n := b.x.resolveName(oe, b.cacheMap(), 0, true)
			p.site.TargetName = n[1]
			if p.site.TargetName == "" {
				p.site.TargetName = n[2]
			}
		}
		p.hasRef = false
	}
	b.pending = append(b.pending, p)
}

func (b *callSiteBuilder) cacheMap() map[uint64][3]string {
	if b.cache == nil {
		b.cache = map[uint64][3]string{}
	}
	return b.cache
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

// finish resolves the call sites' targets and sorts the index.
func (b *callSiteBuilder) finish() *callSites {
	x := &callSites{names: b.names, funcs: b.funcs}
	for i := range b.pending {
		p := &b.pending[i]
		if p.hasRef {
			if d, ok := b.dies[p.origin]; ok && d.entry != 0 {
				p.site.Target = d.entry
			} else if oe := b.x.entryAt(p.origin, false); oe != nil {
				// gdb's rule: a target without an address (a
				// declaration, an abstract instance) is found by name.
				n := b.x.resolveName(oe, b.cacheMap(), 0, false)
				p.site.TargetName = n[1]
				if p.site.TargetName == "" {
					p.site.TargetName = n[2]
				}
			}
		}
		x.sites = append(x.sites, p.site)
		if p.site.Tail && p.site.Func != 0 {
			x.tails = append(x.tails, p.site)
		}
	}
	sort.Slice(x.sites, func(i, j int) bool { return x.sites[i].ReturnPC < x.sites[j].ReturnPC })
	sort.Slice(x.tails, func(i, j int) bool {
		if x.tails[i].Func != x.tails[j].Func {
			return x.tails[i].Func < x.tails[j].Func
		}
		return x.tails[i].ReturnPC < x.tails[j].ReturnPC
	})
	sort.Slice(x.funcs, func(i, j int) bool { return x.funcs[i].lo < x.funcs[j].lo })
	return x
}
