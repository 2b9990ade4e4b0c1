// Package cfi reads DWARF call frame information (.eh_frame, .eh_frame_hdr and
// .debug_frame) and turns it into unwind rows: for a program counter, how to
// compute the canonical frame address (CFA) and how to recover each of the
// caller's registers. It also evaluates the DWARF expressions that CFI rules
// may contain.
//
// The package works on section bytes and their link-time addresses; it knows
// nothing of ELF files (package elfcache finds the sections) nor of how rows
// are applied to a stack (package unwinder does that).
//
// Data flow: NewTable indexes the sections lazily (the .eh_frame_hdr search
// table is used in place; a sorted index is built on first use when there is
// none, and for .debug_frame). Table.Lookup finds the FDE covering a PC, runs
// its CIE's initial instructions and its own instructions up to the PC, and
// fills a caller-owned Row. A Table is immutable once built and safe for
// concurrent use.
//
// Where to begin: NewTable over an object's sections, then Table.Lookup for
// a PC. Most users never call this package: elfcache builds the tables and
// the unwinder reads them.
package cfi
