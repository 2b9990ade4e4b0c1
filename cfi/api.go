package cfi

// API CONTRACT (stubs; the cfi implementer replaces this file's bodies and
// may move the declarations into other files).

import (
	"errors"

	"github.com/ustack/ustack/arch"
)

// ErrNoFDE is returned by Table.Lookup when no FDE covers the program counter.
var ErrNoFDE = errors.New("cfi: no FDE covers the address")

// Kind says which section format a Section holds.
type Kind uint8

const (
	EHFrame    Kind = iota + 1 // .eh_frame (GNU/LSB format)
	DebugFrame                 // .debug_frame (DWARF format)
)

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
	MaxInstructions int // CFA instructions interpreted per lookup (default 10000)
	MaxStateStack   int // depth of DW_CFA_remember_state (default 64)
}

// Table finds unwind rows for the program counters of one object.
type Table struct{}

// NewTable prepares lookups in the given sections. It does little work up front.
func NewTable(a arch.Arch, s Sections, opts Options) (*Table, error) { panic("TODO") }

// Lookup fills row with the unwind row for link-time address pc.
// It returns ErrNoFDE when no FDE covers pc, or an error naming the section
// and offset when the CFI is malformed. It allocates nothing.
func (t *Table) Lookup(pc uint64, row *Row) error { panic("TODO") }

// Memory reads 8-byte little-endian words of the captured memory.
type Memory interface {
	ReadUint64(addr uint64) (uint64, bool)
}

// Eval evaluates a DWARF expression as CFI uses it, with regs giving the
// values for DW_OP_breg*, mem serving DW_OP_deref, and initial pushed first
// when push is true (the CFA, for DW_CFA_expression rules). It returns the
// value on top of the stack. At most maxSteps operations run (0: default 1000).
func Eval(a arch.Arch, expr []byte, regs *arch.Regs, mem Memory, initial uint64, push bool, maxSteps int) (uint64, error) {
	panic("TODO")
}
