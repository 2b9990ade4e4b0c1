package cfi

import (
	"fmt"
	"sync"

	"github.com/ustack/ustack/arch"
)

// Kind says which section format a Section holds.
type Kind uint8

// The CFI section formats.
const (
	EHFrame    Kind = iota + 1 // .eh_frame (GNU/LSB format)
	DebugFrame                 // .debug_frame (DWARF format)
)

// String returns the section name conventionally used for the format.
func (k Kind) String() string {
	switch k {
	case EHFrame:
		return ".eh_frame"
	case DebugFrame:
		return ".debug_frame"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Section is the bytes of one CFI section and the link-time address at which
// it is loaded (0 for a non-allocated .debug_frame).
type Section struct {
	Name string // for error messages: ".eh_frame", "libc.so.6:.debug_frame", ...
	Data []byte
	Addr uint64
}

// Sections are the CFI sections of one object. Any may be empty.
type Sections struct {
	EHFrame    Section
	EHFrameHdr Section
	DebugFrame Section
	// TextAddr and DataAddr are the bases of DW_EH_PE_textrel and
	// DW_EH_PE_datarel pointers in .eh_frame (datarel in .eh_frame_hdr is
	// relative to .eh_frame_hdr itself).
	TextAddr, DataAddr uint64
}

// Options bound the work done per lookup. Zero values select defaults.
type Options struct {
	// MaxInstructions bounds the CFA instructions interpreted per lookup
	// (default DefaultMaxInstructions, 100000: cc1 of GCC 12 has an FDE of
	// 13361 instructions, so the 10000 first planned is too few).
	MaxInstructions int
	// MaxStateStack bounds the depth of DW_CFA_remember_state (default 64).
	MaxStateStack int
}

// Default bounds used when Options fields are zero.
const (
	DefaultMaxInstructions = 100000
	DefaultMaxStateStack   = 64
)

// maxCandidates bounds how many search-table entries before the one found by
// binary search are tried, for zero-length, overlapping or broken FDEs.
const maxCandidates = 4

// Table finds unwind rows for the program counters of one object. It is safe
// for concurrent use.
type Table struct {
	arch     arch.Arch
	maxInsns int
	maxStack int

	eh, df       frameSection
	hasEH, hasDF bool
	hdr          ehHdr
	useHdr       bool
	ehIdx, dfIdx sortedIndex

	pool sync.Pool // of *scratch
}

// scratch is the per-lookup working storage that does not fit in a Row.
type scratch struct {
	init  [arch.MaxRegs]Rule // register rules after the CIE's initial instructions
	stack []savedState       // DW_CFA_remember_state stack, grown up to maxStack
}

type savedState struct {
	cfa      Rule
	regs     [arch.MaxRegs]Rule
	raSigned bool
}

// NewTable prepares lookups in the given sections. It does little work up
// front: it checks the .eh_frame_hdr header; FDEs are decoded on demand. The
// sections' bytes are retained and must not be modified.
func NewTable(a arch.Arch, s Sections, opts Options) (*Table, error) {
	if a != arch.AMD64 && a != arch.ARM64 {
		return nil, fmt.Errorf("cfi: unsupported architecture %v", a)
	}
	t := &Table{arch: a, maxInsns: opts.MaxInstructions, maxStack: opts.MaxStateStack}
	if t.maxInsns <= 0 {
		t.maxInsns = DefaultMaxInstructions
	}
	if t.maxStack <= 0 {
		t.maxStack = DefaultMaxStateStack
	}
	name := func(n, def string) string {
		if n == "" {
			return def
		}
		return n
	}
	ps := a.PtrSize()
	if len(s.EHFrame.Data) > 0 {
		t.hasEH = true
		t.eh = frameSection{name: name(s.EHFrame.Name, ".eh_frame"), data: s.EHFrame.Data, addr: s.EHFrame.Addr,
			eh: true, textAddr: s.TextAddr, dataAddr: s.DataAddr, ptrSize: ps}
		t.hdr, t.useHdr = parseEHFrameHdr(s.EHFrameHdr, s.EHFrame, ps)
	}
	if len(s.DebugFrame.Data) > 0 {
		t.hasDF = true
		t.df = frameSection{name: name(s.DebugFrame.Name, ".debug_frame"), data: s.DebugFrame.Data,
			addr: s.DebugFrame.Addr, ptrSize: ps}
	}
	t.pool.New = func() any { return new(scratch) }
	return t, nil
}

// Lookup fills row with the unwind row for link-time address pc. It searches
// .eh_frame first, then .debug_frame. It returns ErrNoFDE when no FDE covers
// pc, or an error naming the section and offset when the CFI is malformed
// (a *FormatError). It allocates nothing.
func (t *Table) Lookup(pc uint64, row *Row) error {
	var firstErr error
	if t.hasEH {
		found, err := t.lookupIn(&t.eh, pc, row)
		if found {
			return err
		}
		firstErr = err
	}
	if t.hasDF {
		found, err := t.lookupIn(&t.df, pc, row)
		if found {
			return err
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		return firstErr
	}
	return ErrNoFDE
}

// lookupIn searches one section. found reports that an FDE covers pc; err is
// then the result of interpreting it. When nothing is found, err is the
// first decoding error met, if any.
func (t *Table) lookupIn(s *frameSection, pc uint64, row *Row) (found bool, err error) {
	var f fde
	var c cie
	if s.eh && t.useHdr {
		i := t.hdr.search(pc)
		for k := 0; i >= 0 && k < maxCandidates; i, k = i-1, k+1 {
			off := t.hdr.fdeAddr(i) - s.addr
			if off >= uint64(len(s.data)) {
				if err == nil {
					err = fmt.Errorf("cfi: .eh_frame_hdr entry %d: FDE address %#x outside %s: %w",
						i, t.hdr.fdeAddr(i), s.name, &FormatError{Section: s.name, Offset: int64(off), Msg: "FDE outside section"})
				}
				continue
			}
			if e := s.parseFDE(int(off), &f, &c); e != nil {
				if err == nil {
					err = e
				}
				continue
			}
			if pc >= f.start && pc < f.end {
				return true, t.run(s, &f, &c, pc, row)
			}
		}
		return false, err
	}
	x := &t.ehIdx
	if !s.eh {
		x = &t.dfIdx
	}
	x.once.Do(func() { x.build(s) })
	i := x.search(pc)
	for k := 0; i >= 0 && k < maxCandidates; i, k = i-1, k+1 {
		if e := s.parseFDE(int(x.entries[i].off), &f, &c); e != nil {
			if err == nil {
				err = e
			}
			continue
		}
		if pc >= f.start && pc < f.end {
			return true, t.run(s, &f, &c, pc, row)
		}
	}
	return false, err
}

// run interprets the CIE's initial instructions and the FDE's instructions up
// to pc.
func (t *Table) run(s *frameSection, f *fde, c *cie, pc uint64, row *Row) error {
	sc := t.pool.Get().(*scratch)
	*row = Row{}
	// Field by field: a composite literal was built aside and copied into
	// it, a store-forwarding stall on every row looked up.
	var it interp
	it.s, it.c, it.f, it.row, it.sc, it.pc, it.loc = s, c, f, row, sc, pc, f.start
	it.budget, it.arch, it.maxStack, it.inCIE = t.maxInsns, t.arch, t.maxStack, true
	err := it.exec(c.insnStart, c.insnEnd)
	if err == nil && !it.done {
		sc.init = row.Regs
		it.inCIE = false
		err = it.exec(f.insnStart, f.insnEnd)
	}
	t.pool.Put(sc)
	if err != nil {
		return err
	}
	if !it.done {
		row.Start, row.End = it.loc, f.end
	}
	switch row.CFA.Kind {
	case RuleCFAOffset, RuleCFAExpression:
	default:
		return s.err(f.off, "FDE defines no CFA rule")
	}
	row.RA = uint16(c.ra)
	row.Signal = c.signal
	row.BKey = c.bkey
	row.FDEStart = f.start
	row.Exprs = s.data
	return nil
}
