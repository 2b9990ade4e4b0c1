package cfi

import (
	"errors"
	"strings"
	"testing"

	"github.com/ustack/ustack/arch"
)

type mapMem map[uint64]uint64

func (m mapMem) ReadUint64(addr uint64) (uint64, bool) {
	v, ok := m[addr]
	return v, ok
}

func TestEval(t *testing.T) {
	var regs arch.Regs
	regs.Set(arch.AMD64_RSP, 0x7ff000)
	regs.Set(arch.AMD64_RBP, 0x7ff100)
	regs.Set(20, 5)
	mem := mapMem{0x7ff010: 0x1122334455667788, 0x7ff018: 0xaabbccddeeff0011}
	lit := func(n byte) byte { return 0x30 + n }
	cases := []struct {
		name    string
		expr    []byte
		initial uint64
		push    bool
		want    uint64
		wantErr string
	}{
		{name: "lit", expr: []byte{lit(7)}, want: 7},
		{name: "lit31", expr: []byte{0x4f}, want: 31},
		{name: "push_initial", expr: []byte{lit(1), 0x22}, initial: 100, push: true, want: 101},
		{name: "addr", expr: cat([]byte{0x03}, u64(0x401000)), want: 0x401000},
		{name: "const1u", expr: []byte{0x08, 0xff}, want: 0xff},
		{name: "const1s", expr: []byte{0x09, 0xff}, want: ^uint64(0)},
		{name: "const2u", expr: cat([]byte{0x0a}, u16(0xfffe)), want: 0xfffe},
		{name: "const2s", expr: cat([]byte{0x0b}, u16(0xfffe)), want: ^uint64(1)},
		{name: "const4u", expr: cat([]byte{0x0c}, u32(0xfffffffd)), want: 0xfffffffd},
		{name: "const4s", expr: cat([]byte{0x0d}, u32(0xfffffffd)), want: ^uint64(2)},
		{name: "const8u", expr: cat([]byte{0x0e}, u64(1<<63)), want: 1 << 63},
		{name: "const8s", expr: cat([]byte{0x0f}, u64(1<<63)), want: 1 << 63},
		{name: "constu", expr: cat([]byte{0x10}, uleb(624485)), want: 624485},
		{name: "consts", expr: cat([]byte{0x11}, sleb(-123456)), want: uint64(1<<64 - 123456)},
		{name: "dup", expr: []byte{lit(3), 0x12, 0x22}, want: 6},
		{name: "drop", expr: []byte{lit(3), lit(4), 0x13}, want: 3},
		{name: "over", expr: []byte{lit(3), lit(4), 0x14}, want: 3},
		{name: "pick", expr: []byte{lit(3), lit(4), lit(5), 0x15, 2}, want: 3},
		{name: "pick_out_of_range", expr: []byte{lit(3), 0x15, 1}, wantErr: "pick index"},
		{name: "swap", expr: []byte{lit(3), lit(4), 0x16, 0x1c}, want: 1},
		// rot: [1 2 3] (3 on top) -> [3 1 2]: top 2, then 1, then 3.
		{name: "rot/top", expr: []byte{lit(1), lit(2), lit(3), 0x17}, want: 2},
		{name: "rot/third", expr: []byte{lit(1), lit(2), lit(3), 0x17, 0x13, 0x13}, want: 3},
		{name: "abs", expr: cat([]byte{0x11}, sleb(-5), []byte{0x19}), want: 5},
		{name: "and", expr: []byte{lit(6), lit(3), 0x1a}, want: 2},
		{name: "div", expr: cat([]byte{0x11}, sleb(-12), []byte{lit(4), 0x1b}), want: uint64(1<<64 - 3)},
		{name: "div_by_zero", expr: []byte{lit(1), lit(0), 0x1b}, wantErr: "division by zero"},
		{name: "minus", expr: []byte{lit(10), lit(3), 0x1c}, want: 7},
		{name: "mod", expr: []byte{lit(10), lit(3), 0x1d}, want: 1},
		{name: "mod_by_zero", expr: []byte{lit(10), lit(0), 0x1d}, wantErr: "division by zero"},
		{name: "mul", expr: []byte{lit(6), lit(7), 0x1e}, want: 42},
		{name: "neg", expr: []byte{lit(5), 0x1f}, want: uint64(1<<64 - 5)},
		{name: "not", expr: []byte{lit(0), 0x20}, want: ^uint64(0)},
		{name: "or", expr: []byte{lit(4), lit(1), 0x21}, want: 5},
		{name: "plus", expr: []byte{lit(4), lit(1), 0x22}, want: 5},
		{name: "plus_uconst", expr: cat([]byte{lit(4), 0x23}, uleb(1000)), want: 1004},
		{name: "shl", expr: []byte{lit(1), lit(4), 0x24}, want: 16},
		{name: "shr", expr: cat([]byte{0x11}, sleb(-16), []byte{lit(2), 0x25}), want: (1<<64 - 16) >> 2},
		{name: "shra", expr: cat([]byte{0x11}, sleb(-16), []byte{lit(2), 0x26}), want: uint64(1<<64 - 4)},
		{name: "xor", expr: []byte{lit(6), lit(3), 0x27}, want: 5},
		{name: "eq", expr: []byte{lit(3), lit(3), 0x29}, want: 1},
		{name: "ne", expr: []byte{lit(3), lit(3), 0x2e}, want: 0},
		// Comparisons are signed: -1 < 1.
		{name: "ge", expr: cat([]byte{0x11}, sleb(-1), []byte{lit(1), 0x2a}), want: 0},
		{name: "gt", expr: []byte{lit(2), lit(1), 0x2b}, want: 1},
		{name: "le", expr: cat([]byte{0x11}, sleb(-1), []byte{lit(1), 0x2c}), want: 1},
		{name: "lt", expr: []byte{lit(2), lit(1), 0x2d}, want: 0},
		// skip over lit5: result lit7.
		{name: "skip", expr: cat([]byte{0x2f}, u16(1), []byte{lit(5), lit(7)}), want: 7},
		{name: "skip_out_of_range", expr: cat([]byte{0x2f}, u16(10)), wantErr: "branch target"},
		{name: "bra_taken", expr: cat([]byte{lit(1), 0x28}, u16(1), []byte{lit(5), lit(7)}), want: 7},
		{name: "bra_not_taken", expr: cat([]byte{lit(9), lit(0), 0x28}, u16(1), []byte{lit(5)}), want: 5},
		// lit1; bra -3 (back to itself): loops until the step bound.
		{name: "bra_loop", expr: cat([]byte{lit(1), 0x28}, u16(0xfffc)), wantErr: "step limit"},
		{name: "skip_loop", expr: cat([]byte{0x2f}, u16(0xfffd)), wantErr: "step limit"},
		{name: "reg", expr: []byte{0x57}, want: 0x7ff000},
		{name: "regx", expr: cat([]byte{0x90}, uleb(20)), want: 5},
		{name: "breg", expr: cat([]byte{0x77}, sleb(16)), want: 0x7ff010},
		{name: "bregx", expr: cat([]byte{0x92}, uleb(6), sleb(-0x100)), want: 0x7ff000},
		{name: "breg_unknown", expr: cat([]byte{0x70}, sleb(0)), wantErr: "unknown"},
		{name: "bregx_out_of_range", expr: cat([]byte{0x92}, uleb(100), sleb(0)), wantErr: "unknown"},
		{name: "deref", expr: cat([]byte{0x77}, sleb(16), []byte{0x06}), want: 0x1122334455667788},
		{name: "deref_fail", expr: cat([]byte{0x77}, sleb(8), []byte{0x06}), wantErr: "cannot read"},
		{name: "deref_size4", expr: cat([]byte{0x77}, sleb(16), []byte{0x94, 4}), want: 0x55667788},
		// Unaligned: bytes 0x7ff014..0x7ff017 from the aligned words.
		{name: "deref_size4_unaligned", expr: cat([]byte{0x77}, sleb(0x14), []byte{0x94, 4}), want: 0x11223344},
		{name: "deref_size2_straddle", expr: cat([]byte{0x77}, sleb(0x17), []byte{0x94, 2}), want: 0x1111},
		{name: "deref_size_invalid", expr: cat([]byte{0x77}, sleb(16), []byte{0x94, 9}), wantErr: "invalid size"},
		{name: "nop", expr: []byte{0x96, lit(1)}, want: 1},
		{name: "fbreg", expr: cat([]byte{0x91}, sleb(0)), wantErr: "fbreg"},
		{name: "call_frame_cfa", expr: []byte{0x9c}, wantErr: "call_frame_cfa"},
		{name: "stack_value", expr: []byte{lit(1), 0x9f}, wantErr: "not valid"},
		{name: "unknown_op", expr: []byte{0xe0}, wantErr: "unsupported"},
		{name: "underflow", expr: []byte{0x22}, wantErr: "underflow"},
		{name: "empty", expr: nil, wantErr: "empty stack"},
		{name: "truncated", expr: []byte{0x0e, 1, 2}, wantErr: "truncated"},
		{name: "overflow", expr: func() []byte {
			b := make([]byte, StackSize+1)
			for i := range b {
				b[i] = lit(1)
			}
			return b
		}(), wantErr: "overflow"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Eval(c.expr, &ExprContext{Arch: arch.AMD64, Regs: &regs, Mem: mem, CFA: c.initial, PushCFA: c.push})
			if c.wantErr != "" {
				var ee *ExprError
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !errors.As(err, &ee) {
					t.Fatalf("Eval = %#x, %v; want error %q", got, err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("Eval = %#x, %v; want %#x", got, err, c.want)
			}
		})
	}
}

func TestEvalErrorOffset(t *testing.T) {
	_, err := Eval([]byte{0x30, 0x30, 0x1b}, &ExprContext{Arch: arch.AMD64})
	var ee *ExprError
	if !errors.As(err, &ee) || ee.Offset != 2 || ee.Op != 0x1b || !strings.Contains(err.Error(), "DW_OP_div") {
		t.Fatalf("err = %v", err)
	}
	_, err = Eval([]byte{0x31, 0x28, 0xfc, 0xff}, &ExprContext{Arch: arch.AMD64, MaxSteps: 50})
	if !errors.As(err, &ee) || !strings.Contains(err.Error(), "step limit 50") {
		t.Fatalf("err = %v", err)
	}
}

func TestEvalAllocs(t *testing.T) {
	var regs arch.Regs
	regs.Set(7, 0x1000)
	expr := []byte{0x77, 8, 0x30, 0x22, 0x31, 0x28, 0x01, 0x00, 0x96, 0x96}
	ctx := &ExprContext{Arch: arch.AMD64, Regs: &regs}
	n := testing.AllocsPerRun(100, func() {
		if _, err := Eval(expr, ctx); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Fatalf("Eval allocates %v times", n)
	}
}

// TestRegOffset checks RegOffset against Eval: for each expression it
// recognises, Eval must compute register + offset (or the word there), and
// the expressions it refuses must be ones that compute something else.
func TestRegOffset(t *testing.T) {
	var regs arch.Regs
	for r := 0; r < arch.MaxRegs; r++ {
		regs.Set(r, 0x10000+uint64(r)*0x100)
	}
	mem := mapMem{}
	for a := uint64(0xf000); a < 0x14000; a += 8 {
		mem[a] = a ^ 0xabcdef
	}
	cases := []struct {
		name  string
		expr  []byte
		ok    bool
		reg   uint64
		off   int64
		deref bool
	}{
		{"breg7", cat([]byte{0x77}, sleb(160)), true, 7, 160, false},
		{"breg7_negative", cat([]byte{0x77}, sleb(-8)), true, 7, -8, false},
		{"breg7_deref", cat([]byte{0x77}, sleb(160), []byte{0x06}), true, 7, 160, true},
		{"breg0_large", cat([]byte{0x70}, sleb(0x12345)), true, 0, 0x12345, false},
		{"bregx", cat([]byte{0x92}, uleb(16), sleb(24)), true, 16, 24, false},
		{"bregx_deref", cat([]byte{0x92}, uleb(6), sleb(-16), []byte{0x06}), true, 6, -16, true},
		{"empty", nil, false, 0, 0, false},
		{"reg7_not_breg", []byte{0x57}, false, 0, 0, false},
		{"breg_plus_uconst", cat([]byte{0x77}, sleb(8), []byte{0x23, 8}), false, 0, 0, false},
		{"double_deref", cat([]byte{0x77}, sleb(8), []byte{0x06, 0x06}), false, 0, 0, false},
		{"deref_size", cat([]byte{0x77}, sleb(8), []byte{0x94, 4}), false, 0, 0, false},
		{"truncated_sleb", []byte{0x77, 0x80}, false, 0, 0, false},
		{"truncated_bregx", []byte{0x92, 0x07}, false, 0, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reg, off, deref, ok := RegOffset(c.expr)
			if ok != c.ok || reg != c.reg || off != c.off || deref != c.deref {
				t.Fatalf("RegOffset = %d, %d, %v, %v; want %d, %d, %v, %v", reg, off, deref, ok, c.reg, c.off, c.deref, c.ok)
			}
			if !ok {
				return
			}
			// Eval agrees, with the CFA pushed first or not.
			for _, push := range []bool{false, true} {
				got, err := Eval(c.expr, &ExprContext{Arch: arch.AMD64, Regs: &regs, Mem: mem, CFA: 0x999, PushCFA: push})
				if err != nil {
					t.Fatal(err)
				}
				v, _ := regs.Get(int(reg))
				want := v + uint64(off)
				if deref {
					want = mem[want]
				}
				if got != want {
					t.Fatalf("Eval = %#x; RegOffset's reading gives %#x", got, want)
				}
			}
		})
	}
}
