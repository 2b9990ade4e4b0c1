package cfi

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"testing"

	"github.com/go-delve/delve/pkg/dwarf/frame"
	"github.com/ustack/ustack/arch"
)

// delveUnsupported names the first construct in a CFA program that delve's
// pkg/dwarf/frame is known to get wrong, or "" if there is none. Each name
// is an exclusion of the differential test:
//
//   - "set_loc": delve reads 8 raw bytes instead of the FDE's encoding;
//   - "val_offset": delve does not multiply by the data alignment factor;
//   - "negate_ra_state": delve lacks DW_CFA_AARCH64_negate_ra_state;
//   - "GNU_negative_offset_extended", "MIPS_advance_loc8": not in delve;
//   - "unknown opcode": not decodable by this scanner.
func delveUnsupported(insns []byte) string {
	r := reader{data: insns}
	for r.off < len(insns) {
		op, _ := r.u8()
		switch op & 0xc0 {
		case 0x40, 0xc0:
			continue
		case 0x80:
			r.uleb()
			continue
		}
		switch op {
		case 0x00, 0x0a, 0x0b:
		case 0x01:
			return "set_loc"
		case 0x02:
			r.skip(1)
		case 0x03:
			r.skip(2)
		case 0x04:
			r.skip(4)
		case 0x05, 0x09, 0x0c:
			r.uleb()
			r.uleb()
		case 0x06, 0x07, 0x08, 0x0d, 0x0e, 0x2e:
			r.uleb()
		case 0x0f:
			n, _ := r.uleb()
			r.skip(n)
		case 0x10, 0x16:
			r.uleb()
			n, _ := r.uleb()
			r.skip(n)
		case 0x11, 0x12, 0x15:
			r.uleb()
			r.sleb()
		case 0x13:
			r.sleb()
		case 0x14:
			return "val_offset"
		case 0x2d:
			return "negate_ra_state"
		case 0x2f:
			return "GNU_negative_offset_extended"
		case 0x1d:
			return "MIPS_advance_loc8"
		default:
			return "unknown opcode"
		}
	}
	return ""
}

// TestDelveDifferential compares every row of every FDE of libc's .eh_frame
// with github.com/go-delve/delve/pkg/dwarf/frame, on the constructs delve
// handles; excluded FDEs are counted by reason.
func TestDelveDifferential(t *testing.T) {
	s, a := loadSections(t, libcPath)
	fdes, err := frame.Parse(s.EHFrame.Data, binary.LittleEndian, 0, 8, s.EHFrame.Addr)
	if err != nil {
		t.Fatalf("delve: %v", err)
	}
	// delve returns FDEs in file order.
	sort.SliceStable(fdes, func(i, j int) bool { return fdes[i].Begin() < fdes[j].Begin() })
	tab, _ := NewTable(a, s, Options{})
	excluded := map[string]int{}
	rows, compared := 0, 0
	var row Row
	for _, fd := range fdes {
		if fd.End() <= fd.Begin() {
			excluded["zero-length FDE"]++
			continue
		}
		if why := delveUnsupported(fd.CIE.InitialInstructions); why != "" {
			excluded[why]++
			continue
		}
		if why := delveUnsupported(fd.Instructions); why != "" {
			excluded[why]++
			continue
		}
		compared++
		for pc := fd.Begin(); pc < fd.End(); pc = row.End {
			if err := tab.Lookup(pc, &row); err != nil {
				t.Fatalf("Lookup(%#x): %v", pc, err)
			}
			if row.FDEStart != fd.Begin() || row.End <= pc {
				t.Fatalf("Lookup(%#x): FDE %#x row [%#x, %#x), delve FDE %#x", pc, row.FDEStart, row.Start, row.End, fd.Begin())
			}
			ctx, err := fd.EstablishFrame(pc)
			if err != nil {
				t.Fatalf("delve EstablishFrame(%#x): %v", pc, err)
			}
			if msg := diffDelve(a, &row, ctx); msg != "" {
				t.Errorf("pc %#x (FDE %#x): %s", pc, fd.Begin(), msg)
			}
			rows++
		}
	}
	total := 0
	for _, n := range excluded {
		total += n
	}
	names := make([]string, 0, len(excluded))
	for k := range excluded {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		t.Logf("excluded %-30s %d", k, excluded[k])
	}
	t.Logf("compared %d rows of %d FDEs with delve; %d FDEs excluded", rows, compared, total)
	if total > len(fdes)/20 {
		t.Fatalf("%d of %d FDEs excluded (more than 5%%)", total, len(fdes))
	}
}

func diffDelve(a arch.Arch, row *Row, ctx *frame.FrameContext) string {
	if uint64(row.RA) != ctx.RetAddrReg {
		return fmt.Sprintf("RA %d, delve %d", row.RA, ctx.RetAddrReg)
	}
	switch ctx.CFA.Rule {
	case frame.RuleCFA:
		if row.CFA.Kind != RuleCFAOffset || uint64(row.CFA.Reg) != ctx.CFA.Reg || row.CFA.Offset != ctx.CFA.Offset {
			return fmt.Sprintf("CFA %+v, delve %+v", row.CFA, ctx.CFA)
		}
	case frame.RuleExpression:
		if row.CFA.Kind != RuleCFAExpression || !bytes.Equal(row.Expr(row.CFA), ctx.CFA.Expression) {
			return fmt.Sprintf("CFA %+v, delve %+v", row.CFA, ctx.CFA)
		}
	default:
		return fmt.Sprintf("delve CFA rule %v", ctx.CFA.Rule)
	}
	for reg := 0; reg < arch.MaxRegs; reg++ {
		got := row.Regs[reg]
		d, ok := ctx.Regs[uint64(reg)]
		bad := false
		switch {
		case !ok || d.Rule == frame.RuleUndefined:
			bad = got.Kind != RuleUnspecified && got.Kind != RuleUndefined
		case d.Rule == frame.RuleSameVal:
			bad = got.Kind != RuleSameValue
		case d.Rule == frame.RuleOffset:
			bad = got.Kind != RuleOffset || got.Offset != d.Offset
		case d.Rule == frame.RuleValOffset:
			bad = got.Kind != RuleValOffset || got.Offset != d.Offset
		case d.Rule == frame.RuleRegister:
			bad = got.Kind != RuleRegister || uint64(got.Reg) != d.Reg
		case d.Rule == frame.RuleExpression:
			bad = got.Kind != RuleExpression || !bytes.Equal(row.Expr(got), d.Expression)
		case d.Rule == frame.RuleValExpression:
			bad = got.Kind != RuleValExpression || !bytes.Equal(row.Expr(got), d.Expression)
		default:
			bad = true
		}
		if bad {
			return fmt.Sprintf("%s: %+v, delve %+v (ok %v)", a.RegName(reg), got, d, ok)
		}
	}
	return ""
}
