package cfi

import (
	"errors"
	"strings"
	"testing"

	"github.com/ustack/ustack/arch"
)

// The common CIE of the op tests: "zR" with DW_EH_PE_absptr FDE pointers,
// code alignment 1, data alignment -8, return address column 16, initial
// instructions DW_CFA_def_cfa rsp+8 and DW_CFA_offset r16 at cfa-8 — what
// GCC emits on x86_64.
var baseCIEInsns = []byte{0x0c, 7, 8, 0x90, 1}

const (
	fdeStart = 0x1000
	fdeLen   = 0x100
)

func cfaOff(reg uint16, off int64) Rule { return Rule{Kind: RuleCFAOffset, Reg: reg, Offset: off} }
func offRule(off int64) Rule            { return Rule{Kind: RuleOffset, Offset: off} }

type opCase struct {
	name      string
	arch      arch.Arch // default AMD64
	cie       testCIE   // zero: base CIE
	insns     []byte
	opts      Options
	pc        uint64 // absolute
	wantErr   string // substring of the error
	start     uint64
	end       uint64
	cfa       Rule
	regs      map[int]Rule // checked columns; others must be unspecified except 16
	check     func(t *testing.T, r *Row)
	noRACheck bool
	cieErr    bool // the error is in the CIE: FDEs cannot be indexed
}

func runOpCase(t *testing.T, tc opCase) {
	t.Helper()
	c := tc.cie
	if c.aug == "" && c.insns == nil {
		c = testCIE{aug: "zR", augData: []byte{0x00}, insns: baseCIEInsns}
	}
	data, offs := buildFrame(true, c, testFDE{start: fdeStart, length: fdeLen, insns: tc.insns})
	a := tc.arch
	if a == arch.Unknown {
		a = arch.AMD64
	}
	for _, useHdr := range []bool{true, false} {
		s := Sections{EHFrame: Section{Name: ".eh_frame", Data: data, Addr: 0x20000}}
		if useHdr {
			s.EHFrameHdr = Section{Name: ".eh_frame_hdr", Addr: 0x1f000,
				Data: buildHdr(0x1f000, 0x20000, [][2]uint64{{fdeStart, 0x20000 + uint64(offs[0])}})}
		}
		tab, err := NewTable(a, s, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if useHdr != tab.useHdr {
			t.Fatalf("useHdr = %v", tab.useHdr)
		}
		if !useHdr && tc.cieErr {
			// The index cannot decode FDEs whose CIE is broken.
			var row Row
			if err := tab.Lookup(fdeStart, &row); err != ErrNoFDE {
				t.Errorf("index: Lookup error = %v, want ErrNoFDE", err)
			}
			continue
		}
		checkOpCase(t, tc, tab)
	}
}

func checkOpCase(t *testing.T, tc opCase, tab *Table) {
	t.Helper()
	pc := tc.pc
	if pc == 0 {
		pc = fdeStart
	}
	var row Row
	err := tab.Lookup(pc, &row)
	if tc.wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Fatalf("Lookup(%#x) error = %v, want containing %q", pc, err, tc.wantErr)
		}
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Section != ".eh_frame" {
			t.Fatalf("error %v is not a *FormatError for .eh_frame", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Lookup(%#x): %v", pc, err)
	}
	if tc.start != 0 || tc.end != 0 {
		if row.Start != tc.start || row.End != tc.end {
			t.Errorf("row range [%#x, %#x), want [%#x, %#x)", row.Start, row.End, tc.start, tc.end)
		}
	}
	if tc.cfa.Kind != 0 && row.CFA != tc.cfa {
		t.Errorf("CFA = %+v, want %+v", row.CFA, tc.cfa)
	}
	for reg, want := range tc.regs {
		if row.Regs[reg] != want {
			t.Errorf("reg %d = %+v, want %+v", reg, row.Regs[reg], want)
		}
	}
	for reg := range row.Regs {
		if _, ok := tc.regs[reg]; ok || reg == 16 || tc.check != nil {
			continue
		}
		if row.Regs[reg].Kind != RuleUnspecified {
			t.Errorf("reg %d = %+v, want unspecified", reg, row.Regs[reg])
		}
	}
	if row.FDEStart != fdeStart {
		t.Errorf("FDEStart = %#x", row.FDEStart)
	}
	if !tc.noRACheck && row.RA != 16 {
		t.Errorf("RA = %d", row.RA)
	}
	if tc.check != nil {
		tc.check(t, &row)
	}
}

func TestCFAOps(t *testing.T) {
	ra := offRule(-8)
	cases := []opCase{
		{name: "initial_row", start: 0x1000, end: 0x1100, cfa: cfaOff(7, 8), regs: map[int]Rule{16: ra}},
		{name: "nop", insns: []byte{0, 0, 0}, start: 0x1000, end: 0x1100, cfa: cfaOff(7, 8)},
		// DW_CFA_advance_loc 1; DW_CFA_def_cfa_offset 16.
		{name: "advance_loc/before", insns: []byte{0x41, 0x0e, 16}, pc: 0x1000, start: 0x1000, end: 0x1001, cfa: cfaOff(7, 8)},
		{name: "advance_loc/after", insns: []byte{0x41, 0x0e, 16}, pc: 0x1001, start: 0x1001, end: 0x1100, cfa: cfaOff(7, 16)},
		{name: "advance_loc/end_of_fde", insns: []byte{0x41, 0x0e, 16}, pc: 0x10ff, start: 0x1001, end: 0x1100, cfa: cfaOff(7, 16)},
		{name: "advance_loc/code_align_4", cie: testCIE{aug: "zR", augData: []byte{0}, codeAlign: 4, insns: baseCIEInsns},
			insns: []byte{0x42, 0x0e, 16}, pc: 0x1007, start: 0x1000, end: 0x1008, cfa: cfaOff(7, 8)},
		{name: "advance_loc1", insns: []byte{0x02, 0x20, 0x0e, 16}, pc: 0x1020, start: 0x1020, end: 0x1100, cfa: cfaOff(7, 16)},
		{name: "advance_loc2", insns: cat([]byte{0x03}, u16(0x40), []byte{0x0e, 16}), pc: 0x103f, start: 0x1000, end: 0x1040, cfa: cfaOff(7, 8)},
		{name: "advance_loc4", insns: cat([]byte{0x04}, u32(0x80), []byte{0x0e, 16}), pc: 0x1080, start: 0x1080, end: 0x1100, cfa: cfaOff(7, 16)},
		{name: "MIPS_advance_loc8", insns: cat([]byte{0x1d}, u64(0x10), []byte{0x0e, 16}), pc: 0x1010, start: 0x1010, end: 0x1100, cfa: cfaOff(7, 16)},
		{name: "advance_past_fde_end", insns: cat([]byte{0x03}, u16(0x200), []byte{0x0e, 16}), pc: 0x1050, start: 0x1000, end: 0x1100, cfa: cfaOff(7, 8)},
		{name: "set_loc", insns: cat([]byte{0x01}, u64(0x1010), []byte{0x0e, 16}), pc: 0x1010, start: 0x1010, end: 0x1100, cfa: cfaOff(7, 16)},
		{name: "set_loc/before", insns: cat([]byte{0x01}, u64(0x1010), []byte{0x0e, 16}), pc: 0x100f, start: 0x1000, end: 0x1010, cfa: cfaOff(7, 8)},
		{name: "set_loc/backwards", insns: cat([]byte{0x41}, []byte{0x01}, u64(0x1000)), pc: 0x1050, wantErr: "backwards"},
		// DW_CFA_offset rbx, 2: saved at CFA + 2*-8.
		{name: "offset", insns: []byte{0x83, 2}, regs: map[int]Rule{3: offRule(-16)}},
		{name: "offset_extended", insns: []byte{0x05, 3, 2}, regs: map[int]Rule{3: offRule(-16)}},
		{name: "offset_extended_sf", insns: cat([]byte{0x11, 3}, sleb(-2)), regs: map[int]Rule{3: offRule(16)}},
		{name: "restore/to_cie_value", insns: []byte{0x90, 3, 0xd0}, regs: map[int]Rule{16: ra}},
		{name: "restore/not_in_cie", insns: []byte{0x83, 2, 0xc3}, regs: map[int]Rule{3: {}}},
		{name: "restore_extended", insns: []byte{0x90, 3, 0x06, 16}, regs: map[int]Rule{16: ra}},
		{name: "undefined", insns: []byte{0x07, 16}, regs: map[int]Rule{16: {Kind: RuleUndefined}}},
		{name: "same_value", insns: []byte{0x08, 3}, regs: map[int]Rule{3: {Kind: RuleSameValue}}},
		{name: "register", insns: []byte{0x09, 3, 5}, regs: map[int]Rule{3: {Kind: RuleRegister, Reg: 5}}},
		// remember; cfa 32; rbx at -16; advance 1; restore.
		{name: "remember_restore/inside", insns: []byte{0x0a, 0x0e, 32, 0x83, 2, 0x41, 0x0b}, pc: 0x1000,
			cfa: cfaOff(7, 32), regs: map[int]Rule{3: offRule(-16)}},
		{name: "remember_restore/after", insns: []byte{0x0a, 0x0e, 32, 0x83, 2, 0x41, 0x0b}, pc: 0x1001,
			start: 0x1001, end: 0x1100, cfa: cfaOff(7, 8), regs: map[int]Rule{3: {}}},
		{name: "remember_state/overflow", opts: Options{MaxStateStack: 2}, insns: []byte{0x0a, 0x0a, 0x0a}, wantErr: "overflow"},
		{name: "remember_state/at_limit", opts: Options{MaxStateStack: 2}, insns: []byte{0x0a, 0x0a, 0x0b, 0x0b}, cfa: cfaOff(7, 8)},
		{name: "restore_state/underflow", insns: []byte{0x0b}, wantErr: "underflow"},
		{name: "def_cfa", insns: []byte{0x0c, 6, 16}, cfa: cfaOff(6, 16)},
		{name: "def_cfa_sf", insns: cat([]byte{0x12, 6}, sleb(-2)), cfa: cfaOff(6, 16)},
		{name: "def_cfa_register", insns: []byte{0x0d, 6}, cfa: cfaOff(6, 8)},
		{name: "def_cfa_offset", insns: []byte{0x0e, 32}, cfa: cfaOff(7, 32)},
		{name: "def_cfa_offset_sf", insns: cat([]byte{0x13}, sleb(-4)), cfa: cfaOff(7, 32)},
		{name: "def_cfa_expression", insns: []byte{0x0f, 3, 0x77, 8, 0x06}, check: func(t *testing.T, r *Row) {
			if r.CFA.Kind != RuleCFAExpression || r.CFA.ExprLen != 3 || string(r.Expr(r.CFA)) != "\x77\x08\x06" {
				t.Errorf("CFA = %+v expr %x", r.CFA, r.Expr(r.CFA))
			}
		}},
		{name: "def_cfa_register/after_expression", insns: []byte{0x0f, 1, 0x30, 0x0d, 6}, wantErr: "expression"},
		{name: "expression", insns: []byte{0x10, 3, 2, 0x77, 0x10}, check: func(t *testing.T, r *Row) {
			if r.Regs[3].Kind != RuleExpression || string(r.Expr(r.Regs[3])) != "\x77\x10" {
				t.Errorf("rbx = %+v expr %x", r.Regs[3], r.Expr(r.Regs[3]))
			}
		}},
		{name: "val_expression", insns: []byte{0x16, 3, 2, 0x77, 0x10}, check: func(t *testing.T, r *Row) {
			if r.Regs[3].Kind != RuleValExpression || string(r.Expr(r.Regs[3])) != "\x77\x10" {
				t.Errorf("rbx = %+v expr %x", r.Regs[3], r.Expr(r.Regs[3]))
			}
		}},
		// val_offset is factored: 2 * -8.
		{name: "val_offset", insns: []byte{0x14, 3, 2}, regs: map[int]Rule{3: {Kind: RuleValOffset, Offset: -16}}},
		{name: "val_offset_sf", insns: cat([]byte{0x15, 3}, sleb(-2)), regs: map[int]Rule{3: {Kind: RuleValOffset, Offset: 16}}},
		{name: "GNU_args_size", insns: []byte{0x2e, 16}, check: func(t *testing.T, r *Row) {
			if r.ArgsSize != 16 {
				t.Errorf("ArgsSize = %d", r.ArgsSize)
			}
		}},
		// -(2 * -8) = +16.
		{name: "GNU_negative_offset_extended", insns: []byte{0x2f, 3, 2}, regs: map[int]Rule{3: offRule(16)}},
		{name: "AARCH64_negate_ra_state/x86_64", insns: []byte{0x2d}, wantErr: "not valid"},
		{name: "vector_register_ignored", insns: []byte{0x05, 40, 2, 0x10, 41, 1, 0x30, 0x07, 0x80, 0x01}, cfa: cfaOff(7, 8)},
		{name: "def_cfa/register_out_of_range", insns: []byte{0x0c, 40, 8}, wantErr: "out of range"},
		{name: "def_cfa_register/out_of_range", insns: []byte{0x0d, 33}, wantErr: "out of range"},
		{name: "ra_column_out_of_range", cie: testCIE{aug: "zR", augData: []byte{0}, version: 3, ra: 40, insns: baseCIEInsns}, wantErr: "return address column", cieErr: true},
		{name: "instruction_limit", opts: Options{MaxInstructions: 4}, insns: []byte{0, 0, 0, 0}, wantErr: "limit"},
		{name: "unknown_opcode", insns: []byte{0x20}, wantErr: "unknown CFA instruction"},
		{name: "truncated_operand", insns: []byte{0x05, 3}, wantErr: "truncated"},
		{name: "no_cfa_rule", cie: testCIE{aug: "zR", augData: []byte{0}, insns: []byte{0x90, 1}}, wantErr: "no CFA"},
		{name: "signal_frame", cie: testCIE{aug: "zRS", augData: []byte{0}, insns: baseCIEInsns}, check: func(t *testing.T, r *Row) {
			if !r.Signal {
				t.Error("Signal not set")
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { runOpCase(t, tc) })
	}
}

func TestARM64(t *testing.T) {
	// arm64 CIE: code align 4, data align -8, ra x30, def_cfa sp+0.
	cie := testCIE{aug: "zR", augData: []byte{0}, codeAlign: 4, ra: 30, insns: []byte{0x0c, 31, 0}}
	bcie := testCIE{aug: "zRB", augData: []byte{0}, codeAlign: 4, ra: 30, insns: []byte{0x0c, 31, 0}}
	signed := func(want bool) func(*testing.T, *Row) {
		return func(t *testing.T, r *Row) {
			if r.RASigned != want {
				t.Errorf("RASigned = %v, want %v", r.RASigned, want)
			}
			if r.RA != 30 {
				t.Errorf("RA = %d", r.RA)
			}
		}
	}
	cases := []opCase{
		{name: "negate_ra_state", cie: cie, insns: []byte{0x2d}, check: signed(true)},
		{name: "negate_ra_state/twice", cie: cie, insns: []byte{0x2d, 0x2d}, check: signed(false)},
		// paciasp; remember; autiasp; advance; restore: signed again.
		{name: "negate_ra_state/remembered", cie: cie, insns: []byte{0x2d, 0x0a, 0x2d, 0x41, 0x0b}, pc: 0x1004, check: signed(true)},
		{name: "negate_ra_state/before_restore", cie: cie, insns: []byte{0x2d, 0x0a, 0x2d, 0x41, 0x0b}, pc: 0x1000, check: signed(false)},
		{name: "B_key", cie: bcie, check: func(t *testing.T, r *Row) {
			if !r.BKey {
				t.Error("BKey not set")
			}
		}},
	}
	for _, tc := range cases {
		tc.arch = arch.ARM64
		tc.noRACheck = true
		if tc.check == nil {
			t.Fatal("no check")
		}
		t.Run(tc.name, func(t *testing.T) { runOpCase(t, tc) })
	}
}
