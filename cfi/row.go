package cfi

import "github.com/ustack/ustack/arch"

// RuleKind says how a caller's register value is recovered in a frame.
type RuleKind uint8

// The register rules of DWARF 5 section 6.4.1.
const (
	// RuleUnspecified: CFI says nothing about the register. Unwinders treat
	// it as RuleSameValue.
	RuleUnspecified RuleKind = iota
	// RuleUndefined: the caller's value cannot be recovered. For the return
	// address column it marks the outermost frame.
	RuleUndefined
	// RuleSameValue: the caller's value is the value in this frame.
	RuleSameValue
	// RuleOffset: the value is saved in memory at CFA+Offset.
	RuleOffset
	// RuleValOffset: the value is CFA+Offset.
	RuleValOffset
	// RuleRegister: the value is in register Reg of this frame.
	RuleRegister
	// RuleExpression: the value is saved in memory at the address computed by
	// the expression Row.Expr(rule), evaluated with the CFA pushed first.
	RuleExpression
	// RuleValExpression: the value is the result of the expression, evaluated
	// with the CFA pushed first.
	RuleValExpression
	// RuleCFAOffset is used only for Row.CFA: CFA = register Reg + Offset.
	RuleCFAOffset
	// RuleCFAExpression is used only for Row.CFA: CFA = value of the
	// expression (nothing pushed first).
	RuleCFAExpression
)

var ruleNames = [...]string{"unspecified", "undefined", "same_value", "offset",
	"val_offset", "register", "expression", "val_expression", "cfa_offset", "cfa_expression"}

// String returns a short name for the rule kind.
func (k RuleKind) String() string {
	if int(k) < len(ruleNames) {
		return ruleNames[k]
	}
	return "rule?"
}

// Rule is one cell of an unwind row. It is 16 bytes and holds no pointers so
// that rows can be cached and copied cheaply.
type Rule struct {
	Kind RuleKind
	_    uint8
	// Reg is the register for RuleRegister and RuleCFAOffset.
	Reg uint16
	// ExprLen is the length in bytes of the expression for the expression
	// kinds; the expression starts at byte Offset of Row.Exprs.
	ExprLen uint32
	// Offset is the signed byte offset for RuleOffset, RuleValOffset and
	// RuleCFAOffset (already multiplied by the data alignment factor), and
	// the start of the expression in Row.Exprs for the expression kinds.
	Offset int64
}

// Row is the unwind row that applies to a range of program counters: the CFA
// rule and one rule per DWARF register column 0..arch.MaxRegs-1. Registers
// with higher numbers (vector registers) are not tracked.
type Row struct {
	// Start and End bound the link-time program counters [Start, End) to
	// which this row applies.
	Start, End uint64
	// CFA says how to compute the canonical frame address.
	CFA Rule
	// Regs holds the rule for each DWARF register column.
	Regs [arch.MaxRegs]Rule
	// RA is the return address column named by the CIE.
	RA uint16
	// Signal is true when the FDE's CIE has the 'S' augmentation: the frame
	// is a signal trampoline and the caller's PC is an interrupted
	// instruction, not a return address.
	Signal bool
	// RASigned is true on arm64 when the return address is signed with
	// pointer authentication at this PC (DW_CFA_AARCH64_negate_ra_state has
	// toggled an odd number of times).
	RASigned bool
	// BKey is true when the CIE has arm64's 'B' augmentation (signed with
	// the B key).
	BKey bool
	// OtherStack is true where the caller's frame may lie on another
	// stack than this frame's, below it: set by an Object for code that
	// moved SP to another stack and finds its CFA from its frame pointer
	// (Go's vDSO calls on the g0 stack, whose callers are on a
	// goroutine's), never by CFI.
	OtherStack bool
	// ArgsSize is the last DW_CFA_GNU_args_size operand in effect.
	ArgsSize uint64
	// FDEStart is the link-time start address of the FDE (the function).
	FDEStart uint64
	// Exprs holds the bytes that expression rules refer to; it aliases the
	// CFI section and must not be modified.
	Exprs []byte
}

// Expr returns the expression bytes of an expression rule, or nil.
func (r *Row) Expr(rule Rule) []byte {
	switch rule.Kind {
	case RuleExpression, RuleValExpression, RuleCFAExpression:
	default:
		return nil
	}
	start := uint64(rule.Offset)
	end := start + uint64(rule.ExprLen)
	if rule.Offset < 0 || end > uint64(len(r.Exprs)) || end < start {
		return nil
	}
	return r.Exprs[start:end]
}
