package resolve

import (
	"fmt"

	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/unwinder"
)

// Tail calls leave no frame: a function that ends in "jmp f" has gone from
// the stack by the time f runs, so unwinding f finds the return address of
// whoever called the function that jumped. gdb recovers those functions
// from DWARF's call sites (gdb/dwarf2/frame-tailcall.c and
// call_site_find_chain in gdb/dwarf2/loc.c), and so does the Symbolizer,
// by the same rules:
//
//   - the caller's return address must be the DW_AT_call_return_pc of a
//     call site whose target is known from its DW_AT_call_origin (a
//     subprogram with an address, or one named by a declaration and found
//     by name); a target given by a DW_AT_call_target expression gives
//     nothing, even a constant one, since gdb evaluates those only in a
//     live frame;
//   - when the target is the callee's function there is nothing to add;
//     else every chain of tail call sites leading from the target's
//     function to the callee's function is followed (no call site twice on
//     one chain), and any call site on the way whose target is unknown
//     gives nothing at all, as it makes gdb give up;
//   - of several chains only what all share is kept: the longest common
//     prefix (the functions nearest the caller) and the longest common
//     suffix (nearest the callee); when they share neither, nothing.
//
// Each function of the chain becomes a Frame of How "tailcall" whose PC is
// its tail call site's return PC (just past the jump), attributed to the
// jump (PC-1), as gdb's frame is. ustack searches the tail call sites of
// one object: the callee's, where a target found by name lies (a caller
// calling into a library through its PLT), or else the caller's. From the
// caller's object a chain may end in another object, the callee's, by a
// tail call through the PLT ("jmp pause@plt" ending waiter_leaf, the
// callee pause in libc): DWARF names that call's target by a declaration,
// which is the callee when the callee's object defines the name at the
// callee's entry (any alias: gdb's minimal symbol lookup). A chain that
// would go on through a third object is not followed (gdb would; ustack
// then shows nothing rather than part of it).

// HowTailCall is the How of a frame recovered from DWARF call sites: a
// function that tail-called its callee and so has no frame of its own on
// the stack.
const HowTailCall How = "tailcall"

const (
	// maxTailChain bounds a chain's length (gdb has no bound; chains of
	// tail calls longer than this are not found in practice).
	maxTailChain = 32
	// maxTailSteps bounds the call sites a search visits, so that a
	// function graph with many paths cannot make one frame expensive.
	maxTailSteps = 4096
)

// lastFrame is what the Symbolizer remembers of the physical frame it
// appended last: the callee of the next frame, if the next frame is its
// caller.
type lastFrame struct {
	space   *Space
	cfa     uint64 // the frame's CFA: its caller's SP
	mapping int32
	link    uint64 // its lookup address, link-time
}

// tailSearch is the Symbolizer's scratch state for the chain search.
type tailSearch struct {
	obj    *elfcache.Object
	callee uint64              // entry of the callee's function, in other if set, else in obj
	other  *elfcache.Object    // the callee's object when it is not obj
	chain  []elfcache.CallSite // the current path
	result []elfcache.CallSite // the first chain found
	// chainOther and resultOther say which sites of chain and result
	// lie in other (the rest of a chain once a tail call through the PLT
	// went there: hopped).
	chainOther, resultOther []bool
	hopped                  bool
	callers                 int // length of the common prefix
	callees                 int // length of the common suffix
	found                   bool
	failed                  bool // a target could not be resolved, or a bound was hit
	steps                   int
}

// remember notes fr, just appended, as the possible callee of the next
// frame.
func (z *Symbolizer) remember(s *Space, fr *unwinder.Frame, link uint64) {
	z.last = lastFrame{space: s, cfa: fr.CFA, mapping: fr.Mapping, link: link}
}

// callSite returns the target of the call site at obj's return address
// ret, its entry or its name, and whether the call site is known
// (CallSiteAt and Known), from z.sites or else from obj.
func (z *Symbolizer) callSite(obj *elfcache.Object, ret uint64) (target uint64, name string, known bool) {
	if z.sites == nil {
		z.sites = newTable[[siteSize]siteEntry]()
	}
	e := &z.sites[(ret*0x9e3779b97f4a7c15)>>(64-siteBits)]
	if e.obj != obj || e.ret != ret {
		site, ok := obj.CallSiteAt(ret)
		e.obj, e.ret, e.known = obj, ret, ok && site.Known()
		e.target, e.name = site.Target, site.TargetName
	}
	return e.target, e.name, e.known
}

// appendTailCalls appends the frames of the functions that tail calls left
// no frame of between the frame remembered last and fr, its caller.
func (z *Symbolizer) appendTailCalls(out []Frame, s *Space, fr *unwinder.Frame) []Frame {
	last := z.last
	z.last = lastFrame{}
	if s.noTailCall || last.space != s || last.cfa == 0 || last.cfa != fr.SP || fr.Flags&unwinder.FrameReturnAddress == 0 {
		return out
	}
	cm, lm := s.mapOf(int(fr.Mapping)), s.mapOf(int(last.mapping))
	if cm == nil || lm == nil || cm.obj == nil || lm.obj == nil {
		return out
	}
	siteTarget, siteName, known := z.callSite(cm.obj, fr.PC-cm.bias)
	s.checkCallSites(cm.obj)
	if !known {
		return out
	}
	if siteName != "" {
		// A direct call of the callee's function by its name needs no
		// name lookup.
		if name, off, ok := lm.obj.Symbolize(last.link); ok && Unversioned(name) == siteName {
			if e, ok := lm.obj.FunctionEntry(last.link); !ok || e == last.link-off {
				return out
			}
		}
	}
	// The object to search: where the target is.
	target, obj, mi := siteTarget, cm.obj, fr.Mapping
	if target == 0 {
		if e, ok := lm.obj.FunctionNamed(siteName); ok {
			target, obj, mi = e, lm.obj, last.mapping
		} else if e, ok := cm.obj.FunctionNamed(siteName); ok {
			target = e
		} else {
			return out
		}
	}
	callee, ok := lm.obj.FunctionEntry(last.link)
	if !ok {
		name, off, ok := lm.obj.Symbolize(last.link)
		if !ok || name == "" {
			return out
		}
		callee = last.link - off
	}
	t := &z.tail
	t.obj, t.callee, t.chain, t.result = obj, callee, t.chain[:0], t.result[:0]
	t.chainOther, t.resultOther, t.hopped = t.chainOther[:0], t.resultOther[:0], false
	t.other = nil
	if obj != lm.obj {
		// The callee is in another object: a chain can reach it only by
		// a tail call through the PLT, which DWARF gives by name.
		t.other = lm.obj
	} else if target == callee {
		return out
	}
	t.callers, t.callees, t.found, t.failed, t.steps = 0, 0, false, false, 0
	t.walk(target)
	s.checkCallSites(obj)
	if t.failed || !t.found || t.callers+t.callees == 0 {
		return out
	}
	// A site's mapping: the search's, or the callee's past a hop
	// through the PLT.
	at := func(i int) (int32, uint64) {
		if t.resultOther[i] {
			return last.mapping, lm.bias
		}
		return mi, s.mapOf(int(mi)).bias
	}
	n := len(t.result)
	for i := 0; i < t.callees; i++ {
		m, bias := at(n - 1 - i)
		out = z.appendTailFrame(out, s, m, t.result[n-1-i].ReturnPC+bias)
	}
	if t.callees != n {
		for i := t.callers - 1; i >= 0; i-- {
			m, bias := at(i)
			out = z.appendTailFrame(out, s, m, t.result[i].ReturnPC+bias)
		}
	}
	return out
}

// checkCallSites warns, once per object, when some of its call sites
// could not be read: tail call frames may then be missing.
func (s *Space) checkCallSites(o *elfcache.Object) {
	if err := o.CallSitesError(); err != nil && s.r != nil {
		s.r.warnOnce("callsites\x00"+o.Path(), fmt.Sprintf("%v: frames of tail calls there may be missing", err))
	}
}

// appendTailFrame appends the frame of a tail call site whose return PC is
// pc, in mapping mi: one frame, as gdb gives it, named after the innermost
// function at the jump (an inlined one where the jump is in inlined code).
func (z *Symbolizer) appendTailFrame(out []Frame, s *Space, mi int32, pc uint64) []Frame {
	if m := s.as.Find(pc - 1); m >= 0 {
		mi = int32(m)
	}
	fr := unwinder.Frame{PC: pc, Mapping: mi, Flags: unwinder.FrameReturnAddress}
	return z.appendFrames(out, s, &fr, HowTailCall, true)
}

// walk follows the tail call sites of the function whose entry is fn; it
// returns false when the search is over (it failed, or the chains found
// share nothing).
func (t *tailSearch) walk(fn uint64) bool {
	if len(t.chain) >= maxTailChain {
		t.failed = true
		return false
	}
	for _, site := range t.obj.TailCallSites(fn) {
		if t.steps++; t.steps > maxTailSteps {
			t.failed = true
			return false
		}
		if t.onChain(site.ReturnPC) {
			continue
		}
		target := site.Target
		reached, hop := false, uint64(0)
		if target == 0 && site.TargetName != "" {
			target, _ = t.obj.FunctionNamed(site.TargetName)
			if target == 0 && t.other != nil {
				// A tail call through the PLT ("jmp pause@plt"):
				// its target is the function of that name in the
				// callee's object, as gdb finds it among every
				// object's symbols: the callee itself, or a
				// function whose own tail calls lead there
				// (do_join's jmp pthread_join@plt, then glibc's
				// pthread_join's to __pthread_clockjoin_ex).
				e, ok := t.other.FunctionNamed(site.TargetName)
				reached = ok && e == t.callee
				if ok && !reached {
					hop = e
				}
			}
		}
		if target == 0 && !reached && hop == 0 {
			// gdb cannot follow an indirect tail call (nor one into
			// an object other than the callee's) and gives up.
			t.failed = true
			return false
		}
		t.chain = append(t.chain, site)
		t.chainOther = append(t.chainOther, t.hopped)
		var more bool
		switch {
		case reached || t.other == nil && target == t.callee:
			more = t.candidate()
		case hop != 0:
			// The rest of the chain is in the callee's object.
			obj, other := t.obj, t.other
			t.obj, t.other, t.hopped = other, nil, true
			more = t.walk(hop)
			t.obj, t.other, t.hopped = obj, other, false
		default:
			more = t.walk(target)
		}
		t.chain = t.chain[:len(t.chain)-1]
		t.chainOther = t.chainOther[:len(t.chainOther)-1]
		if !more {
			return false
		}
	}
	return true
}

func (t *tailSearch) onChain(ret uint64) bool {
	for i := range t.chain {
		if t.chain[i].ReturnPC == ret && t.chainOther[i] == t.hopped {
			return true
		}
	}
	return false
}

// sameSite reports whether result's site i is chain's site j.
func (t *tailSearch) sameSite(i, j int) bool {
	return t.result[i].ReturnPC == t.chain[j].ReturnPC && t.resultOther[i] == t.chainOther[j]
}

// candidate takes the current chain, which reaches the callee: the first
// is kept whole, later ones cut it to what they share with it. It returns
// false when nothing is shared any more.
func (t *tailSearch) candidate() bool {
	n := len(t.chain)
	if !t.found {
		t.found = true
		t.result = append(t.result[:0], t.chain...)
		t.resultOther = append(t.resultOther[:0], t.chainOther...)
		t.callers, t.callees = n, n
		return true
	}
	m := len(t.result)
	callers := min(t.callers, n)
	for i := 0; i < callers; i++ {
		if !t.sameSite(i, i) {
			callers = i
			break
		}
	}
	callees := min(t.callees, n)
	for i := 0; i < callees; i++ {
		if !t.sameSite(m-1-i, n-1-i) {
			callees = i
			break
		}
	}
	t.callers, t.callees = callers, callees
	return callers+callees > 0
}
