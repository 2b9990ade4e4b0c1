package unwinder

import (
	"encoding/binary"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
)

// arm64 lazy binding. A call to an unresolved function goes through its PLT
// entry (adrp x16; ldr x17; add x16; br x17) to PLT0, which pushes a
// 16-byte pair for the resolver (stp x16, x30, [sp, #-16]!) and jumps to
// ld.so's _dl_runtime_resolve. Those 16 bytes belong to neither frame:
//
//   - PLT0 has no CFI. Once it has pushed the pair, the caller's SP is
//     SP+16; the return address is still in x30.
//   - glibc's CFI for the resolver puts the CFA at the SP on entry, with x30
//     saved at CFA+8 (in the pushed pair), so the caller's SP is CFA+16, not
//     the CFA (gdb takes the CFA, and so sees the caller 16 bytes low).
//
// x86_64 needs none of this: its PLT0 has CFI (an expression counting the
// pushed words) and its resolver's CFA includes them.

// The instructions of arm64 PLT0 (binutils' elfNN_aarch64_small_plt0_entry):
// the push, then adrp x16, ldr x17, [x16, #imm] and add x16, x16, #imm (with
// any page and offset), and br x17.
const (
	plt0Push     = 0xa9bf7bf0 // stp x16, x30, [sp, #-16]!
	plt0AdrpMask = 0x9f00001f
	plt0Adrp     = 0x90000010 // adrp x16, page
	plt0LdrMask  = 0xffc003ff
	plt0Ldr      = 0xf9400211 // ldr x17, [x16, #imm]
	plt0AddMask  = 0xff8003ff
	plt0Add      = 0x91000210 // add x16, x16, #imm
	plt0Br       = 0xd61f0220 // br x17
)

// inPLT0AfterPush reports whether the instruction at link-time address addr
// of obj is one of arm64 PLT0's after its push: the push is 1 to 4
// instructions before it.
func inPLT0AfterPush(obj Object, addr uint64) bool {
	var buf [5 * 4]byte
	for k := uint64(1); k <= 4 && 4*k <= addr; k++ {
		if obj.ReadCode(addr-4*k, buf[:]) != len(buf) {
			continue
		}
		word := func(i int) uint32 { return binary.LittleEndian.Uint32(buf[4*i:]) }
		if word(0) == plt0Push && word(1)&plt0AdrpMask == plt0Adrp && word(2)&plt0LdrMask == plt0Ldr &&
			word(3)&plt0AddMask == plt0Add && word(4) == plt0Br {
			return true
		}
	}
	return false
}

// plt0 recovers the caller of a first frame stopped in arm64 PLT0 after its
// push: the return address is in x30, and the caller's SP is above the pair
// PLT0 pushed.
func (u *Unwinder) plt0(cur, next *arch.Regs, st *stepResult) {
	u.linkRegister(cur, next, st)
	if st.stop != stopNone {
		return
	}
	sp, _ := cur.Get(arch.ARM64_SP)
	st.cfa = sp + 16
	next.Set(arch.ARM64_SP, sp+16)
}

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
