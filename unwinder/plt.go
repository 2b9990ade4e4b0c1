package unwinder

import (
	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
)

// arm64 lazy binding. A call to an unresolved function goes through its PLT
// entry (adrp x16; ldr x17; add x16; br x17) to PLT0, which pushes a
// 16-byte pair for the resolver (stp x16, x30, [sp, #-16]!) and jumps to
// ld.so's _dl_runtime_resolve. Those 16 bytes belong to neither frame:
//
//   - PLT0 has no CFI; the Object synthesizes its rows (package elfcache
//     decodes the push: CFA = SP+16 once it has run).
//   - glibc's CFI for the resolver puts the CFA at the SP on entry, with x30
//     saved at CFA+8 (in the pushed pair), so the caller's SP is CFA+16, not
//     the CFA (gdb takes the CFA, and so sees the caller 16 bytes low). The
//     unwinder corrects that: pltEntered.
//
// x86_64 needs none of this: its resolver's CFA includes the pushed words.

// raInPushedPair reports whether an arm64 row saves the return address at
// CFA+8: above the CFA, where no function's own frame is. glibc's lazy
// resolver does, since its CFA leaves out the pair PLT0 pushed.
func raInPushedPair(row *cfi.Row) bool {
	r := row.Regs[arch.ARM64_X30]
	return row.RA == arch.ARM64_X30 && r.Kind == cfi.RuleOffset && r.Offset == 8
}

// pltEntered reports whether row, of obj, is one of a function entered from
// arm64 PLT0 whose CFA leaves out the pair PLT0 pushed (glibc's
// _dl_runtime_resolve): its caller's SP is CFA+16. Such rows save the return
// address at CFA+8 (raInPushedPair), except the first instruction's row of a
// BTI build (bti c, before the CFI's save rule), which is recognised by the
// row after it.
func pltEntered(obj Object, row *cfi.Row) bool {
	if row.RA != arch.ARM64_X30 {
		return false
	}
	if raInPushedPair(row) {
		return true
	}
	if row.Start != row.FDEStart || row.End-row.Start != 4 || row.CFA.Kind != cfi.RuleCFAOffset ||
		row.CFA.Reg != arch.ARM64_SP || row.CFA.Offset != 0 || row.Regs[arch.ARM64_X30].Kind != cfi.RuleUnspecified {
		return false
	}
	var after cfi.Row
	return obj.FindRow(row.End, &after) == nil && after.FDEStart == row.FDEStart && raInPushedPair(&after) &&
		after.CFA.Kind == cfi.RuleCFAOffset && after.CFA.Reg == arch.ARM64_SP && after.CFA.Offset == 0
}
