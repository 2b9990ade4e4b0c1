package arch

// Regs is a register file indexed by DWARF register number, with a bit per
// register saying whether its value is known. A register the kernel did not
// save, or that CFI marks undefined, is unknown: it has no value, not a zero.
//
// The zero Regs has every register unknown. Regs is a plain value: copying it
// copies the registers, and it never allocates.
type Regs struct {
	val   [MaxRegs]uint64
	known uint64
}

// Get returns the value of DWARF register n and whether it is known.
func (r *Regs) Get(n int) (uint64, bool) {
	if uint(n) >= MaxRegs || r.known&(1<<uint(n)) == 0 {
		return 0, false
	}
	return r.val[n], true
}

// Known reports whether DWARF register n has a value.
func (r *Regs) Known(n int) bool {
	return uint(n) < MaxRegs && r.known&(1<<uint(n)) != 0
}

// Set gives DWARF register n the value v. Registers outside the tracked range
// are ignored.
func (r *Regs) Set(n int, v uint64) {
	if uint(n) >= MaxRegs {
		return
	}
	r.val[n] = v
	r.known |= 1 << uint(n)
}

// Unset marks DWARF register n unknown.
func (r *Regs) Unset(n int) {
	if uint(n) >= MaxRegs {
		return
	}
	r.val[n] = 0
	r.known &^= 1 << uint(n)
}

// Reset marks every register unknown.
func (r *Regs) Reset() { *r = Regs{} }

// KnownMask returns a bit mask with bit n set for each known register n.
func (r *Regs) KnownMask() uint64 { return r.known }

// Values returns the register values for bulk updates in place, as an
// unwinder's inner loop does. Writing through it does not change which
// registers are known: a caller that stores a value must mark the register
// known with SetKnownMask, and must store zero into a register it marks
// unknown (an unknown register holds zero, as after Unset).
func (r *Regs) Values() *[MaxRegs]uint64 { return &r.val }

// SetKnownMask replaces the set of known registers with mask (bit n for
// register n; bits at or above MaxRegs are ignored). It is the counterpart
// of KnownMask for bulk updates through Values: the values of registers
// outside mask must already be zero.
func (r *Regs) SetKnownMask(mask uint64) { r.known = mask & (1<<MaxRegs - 1) }
