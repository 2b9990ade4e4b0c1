package cfi

import (
	"encoding/binary"
	"testing"

	"github.com/ustack/ustack/arch"
)

// fuzzSeedFrame returns a small real-looking .eh_frame, .eh_frame_hdr and
// .debug_frame: GCC's x86_64 CIE and FDEs with the common instructions.
func fuzzSeedFrame() (eh, hdr, df []byte) {
	c := testCIE{aug: "zR", augData: []byte{0x00}, insns: baseCIEInsns}
	eh, offs := buildFrame(true, c,
		testFDE{start: 0x1000, length: 0x40, insns: []byte{0x41, 0x0e, 16, 0x86, 2, 0x43, 0x0d, 6, 0x0a, 0x41, 0x0c, 7, 8, 0x0b}},
		testFDE{start: 0x1040, length: 0x20, insns: []byte{0x10, 3, 2, 0x77, 8, 0x0f, 3, 0x77, 8, 0x06, 0x2e, 8}},
	)
	hdr = buildHdr(0x8000, testEHAddr, [][2]uint64{{0x1000, testEHAddr + uint64(offs[0])}, {0x1040, testEHAddr + uint64(offs[1])}})
	df, _ = buildFrame(false, testCIE{version: 4, preCode: []byte{8, 0}, insns: baseCIEInsns},
		testFDE{start: 0x2000, length: 0x10, insns: []byte{0x44, 0x14, 3, 2, 0x2f, 4, 1}})
	return
}

func FuzzLookup(f *testing.F) {
	eh, hdr, df := fuzzSeedFrame()
	for _, pc := range []uint64{0x1000, 0x1005, 0x1041, 0x2008, 0x3000} {
		f.Add(eh, hdr, df, pc, false)
		f.Add(eh, []byte(nil), df, pc, true)
	}
	f.Fuzz(func(t *testing.T, eh, hdr, df []byte, pc uint64, arm bool) {
		a := arch.AMD64
		if arm {
			a = arch.ARM64
		}
		tab, err := NewTable(a, Sections{
			EHFrame:    Section{Name: ".eh_frame", Data: eh, Addr: testEHAddr},
			EHFrameHdr: Section{Name: ".eh_frame_hdr", Data: hdr, Addr: 0x8000},
			DebugFrame: Section{Name: ".debug_frame", Data: df},
			TextAddr:   0x1000, DataAddr: 0x9000,
		}, Options{MaxInstructions: 5000})
		if err != nil {
			t.Fatal(err)
		}
		var row Row
		for _, p := range []uint64{pc, pc + 1, 0x1000} {
			if err := tab.Lookup(p, &row); err != nil {
				continue
			}
			if row.Start > p || row.End <= p || p < row.FDEStart {
				t.Fatalf("pc %#x outside row [%#x, %#x) of FDE %#x", p, row.Start, row.End, row.FDEStart)
			}
			if row.CFA.Kind != RuleCFAOffset && row.CFA.Kind != RuleCFAExpression {
				t.Fatalf("bad CFA rule %v", row.CFA.Kind)
			}
			if row.CFA.Kind == RuleCFAExpression && row.Expr(row.CFA) == nil && row.CFA.ExprLen != 0 {
				t.Fatalf("CFA expression out of range")
			}
			for _, r := range row.Regs {
				if (r.Kind == RuleExpression || r.Kind == RuleValExpression) && r.ExprLen != 0 && row.Expr(r) == nil {
					t.Fatalf("expression out of range")
				}
			}
		}
	})
}

type fuzzMem struct{}

func (fuzzMem) ReadUint64(addr uint64) (uint64, bool) {
	if addr%3 == 0 {
		return 0, false
	}
	return addr * 0x9e3779b97f4a7c15, true
}

func FuzzEval(f *testing.F) {
	f.Add([]byte{0x77, 8, 0x06}, uint64(0x1000), true)
	f.Add([]byte{0x92, 7, 0x10, 0x94, 4, 0x23, 8}, uint64(0), false)
	f.Add([]byte{0x31, 0x28, 0xfc, 0xff}, uint64(0), false)
	f.Add(binary.LittleEndian.AppendUint64([]byte{0x03}, 0x401000), uint64(0), false)
	f.Add([]byte{0x30, 0x31, 0x32, 0x17, 0x15, 2, 0x1b, 0x1d, 0x2b, 0x2f, 0x01, 0x00, 0x96, 0x12}, uint64(7), true)
	f.Fuzz(func(t *testing.T, expr []byte, initial uint64, push bool) {
		var regs arch.Regs
		for i := 0; i < 17; i++ {
			regs.Set(i, uint64(i)*0x1000)
		}
		Eval(expr, &ExprContext{Arch: arch.AMD64, Regs: &regs, Mem: fuzzMem{}, CFA: initial, PushCFA: push, MaxSteps: 200})
	})
}

// FuzzRegOffset checks that RegOffset never fails on any input and that
// whatever it recognises, Eval computes the same way.
func FuzzRegOffset(f *testing.F) {
	f.Add([]byte{0x77, 0xa0, 0x01, 0x06})
	f.Add([]byte{0x77, 0x08})
	f.Add([]byte{0x92, 0x07, 0x10})
	f.Add([]byte{0x92, 0x07, 0x10, 0x06})
	f.Add([]byte{0x77, 0x08, 0x23, 0x08})
	f.Fuzz(func(t *testing.T, expr []byte) {
		reg, off, deref, ok := RegOffset(expr)
		if !ok || reg >= arch.MaxRegs {
			return
		}
		var regs arch.Regs
		for i := 0; i < arch.MaxRegs; i++ {
			regs.Set(i, uint64(i)*0x1000)
		}
		got, err := Eval(expr, &ExprContext{Arch: arch.AMD64, Regs: &regs, Mem: fuzzMem{}})
		v, _ := regs.Get(int(reg))
		want := v + uint64(off)
		if deref {
			var ok bool
			if want, ok = (fuzzMem{}).ReadUint64(want); !ok {
				return // Eval may still read the word from its aligned halves
			}
		}
		if err != nil || got != want {
			t.Fatalf("%x: Eval = %#x, %v; RegOffset's reading gives %#x", expr, got, err, want)
		}
	})
}
