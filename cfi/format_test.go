package cfi

import (
	"errors"
	"strings"
	"testing"

	"github.com/ustack/ustack/arch"
)

const testEHAddr = 0x10000

// TestPointerEncodings checks each DW_EH_PE_* encoding of the FDE initial
// location. The location field of the FDE is at testEHAddr + fdeOff + 8
// (after the 4-byte length and CIE pointer); each expected start is derived
// by hand from the LSB definition of the encoding.
func TestPointerEncodings(t *testing.T) {
	cieLen := func(enc byte) int {
		b, _ := buildFrame(true, testCIE{aug: "zR", augData: []byte{enc}, insns: baseCIEInsns})
		return len(b)
	}
	const textAddr, dataAddr = 0x400000, 0x600000
	type tcase struct {
		name    string
		enc     byte
		loc     func(field uint64) []byte // initial location and range bytes
		want    uint64
		length  uint64
		wantErr string
	}
	cases := []tcase{
		{name: "absptr", enc: 0x00, loc: func(uint64) []byte { return cat(u64(0x401000), u64(0x40)) }, want: 0x401000, length: 0x40},
		{name: "uleb128", enc: 0x01, loc: func(uint64) []byte { return cat(uleb(0x401000), uleb(0x40)) }, want: 0x401000, length: 0x40},
		{name: "udata2", enc: 0x02, loc: func(uint64) []byte { return cat(u16(0x8000), u16(0x40)) }, want: 0x8000, length: 0x40},
		{name: "udata4", enc: 0x03, loc: func(uint64) []byte { return cat(u32(0x80001000), u32(0x40)) }, want: 0x80001000, length: 0x40},
		{name: "udata8", enc: 0x04, loc: func(uint64) []byte { return cat(u64(0x7f0000001000), u64(0x40)) }, want: 0x7f0000001000, length: 0x40},
		{name: "signed", enc: 0x08, loc: func(uint64) []byte { return cat(u64(0x401000), u64(0x40)) }, want: 0x401000, length: 0x40},
		// sleb128 pc-relative: -0x100 from the field.
		{name: "pcrel|sleb128", enc: 0x19, loc: func(uint64) []byte { return cat(sleb(-0x100), sleb(0x40)) }, want: 0, length: 0x40},
		{name: "pcrel|sdata2", enc: 0x1a, loc: func(uint64) []byte { return cat(u16(0xff00), u16(0x40)) }, want: 0, length: 0x40},
		{name: "pcrel|sdata4", enc: 0x1b, loc: func(uint64) []byte { return cat(u32(0xffffff00), u32(0x40)) }, want: 0, length: 0x40},
		{name: "pcrel|sdata8", enc: 0x1c, loc: func(uint64) []byte { return cat(u64(0x1000), u64(0x40)) }, want: 0, length: 0x40},
		{name: "pcrel|udata4", enc: 0x13, loc: func(uint64) []byte { return cat(u32(0x1000), u32(0x40)) }, want: 0, length: 0x40},
		{name: "textrel|udata4", enc: 0x23, loc: func(uint64) []byte { return cat(u32(0x1000), u32(0x40)) }, want: textAddr + 0x1000, length: 0x40},
		{name: "datarel|sdata4", enc: 0x3b, loc: func(uint64) []byte { return cat(u32(0xfffff000), u32(0x40)) }, want: dataAddr - 0x1000, length: 0x40},
		{name: "funcrel", enc: 0x43, loc: func(uint64) []byte { return cat(u32(0), u32(0x40)) }, wantErr: "funcrel"},
		{name: "indirect", enc: 0x9b, loc: func(uint64) []byte { return cat(u32(0), u32(0x40)) }, wantErr: "indirect"},
		{name: "omit", enc: 0xff, loc: func(uint64) []byte { return cat(u32(0), u32(0x40)) }, wantErr: "omit"},
		{name: "bad_format", enc: 0x05, loc: func(uint64) []byte { return cat(u32(0), u32(0x40)) }, wantErr: "unknown pointer encoding format"},
		{name: "bad_application", enc: 0x73, loc: func(uint64) []byte { return cat(u32(0), u32(0x40)) }, wantErr: "application"},
	}
	// Fill in the pc-relative expectations: field address + value.
	for i := range cases {
		c := &cases[i]
		field := uint64(testEHAddr + cieLen(c.enc) + 8)
		switch c.name {
		case "pcrel|sleb128", "pcrel|sdata2", "pcrel|sdata4":
			c.want = field - 0x100
		case "pcrel|sdata8", "pcrel|udata4":
			c.want = field + 0x1000
		}
	}
	// DW_EH_PE_aligned: the location is an absolute pointer aligned to 8
	// in the address space; pad accordingly.
	cases = append(cases, tcase{name: "aligned", enc: 0x50, loc: func(field uint64) []byte {
		pad := (8 - field%8) % 8
		return cat(make([]byte, pad), u64(0x401000), u64(0x40))
	}, want: 0x401000, length: 0x40})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			field := uint64(testEHAddr + cieLen(c.enc) + 8)
			data, _ := buildFrame(true, testCIE{aug: "zR", augData: []byte{c.enc}, insns: baseCIEInsns},
				testFDE{loc: c.loc(field), insns: []byte{0x41, 0x0e, 16}})
			if got := cieLen(c.enc); got+8 != int(field-testEHAddr) {
				t.Fatalf("layout: %d", got)
			}
			s := frameSection{name: ".eh_frame", data: data, addr: testEHAddr, eh: true, textAddr: textAddr, dataAddr: dataAddr, ptrSize: 8}
			var f fde
			var ci cie
			err := s.parseFDE(cieLen(c.enc), &f, &ci)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.start != c.want || f.end != c.want+c.length {
				t.Fatalf("FDE [%#x, %#x), want [%#x, %#x)", f.start, f.end, c.want, c.want+c.length)
			}
			tab, err := NewTable(arch.AMD64, Sections{EHFrame: Section{Data: data, Addr: testEHAddr}, TextAddr: textAddr, DataAddr: dataAddr}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var row Row
			if err := tab.Lookup(c.want, &row); err != nil || row.FDEStart != c.want || row.End != c.want+1 {
				t.Fatalf("Lookup(start): %v %+v", err, row)
			}
			if err := tab.Lookup(c.want+c.length-1, &row); err != nil || row.CFA.Offset != 16 {
				t.Fatalf("Lookup(last): %v", err)
			}
			if err := tab.Lookup(c.want+c.length, &row); err != ErrNoFDE {
				t.Fatalf("Lookup(end): %v, want ErrNoFDE", err)
			}
		})
	}
}

// TestSetLocEncoding checks DW_CFA_set_loc with the FDE's pcrel|sdata4
// encoding: relative to the address of the operand.
func TestSetLocEncoding(t *testing.T) {
	c := testCIE{aug: "zR", augData: []byte{0x1b}, insns: baseCIEInsns}
	hdr, _ := buildFrame(true, c)
	fdeOff := uint64(len(hdr))
	field := testEHAddr + fdeOff + 8
	start := field + 0x1000
	// set_loc operand at field+8 (loc, range) +1 (aug length 0) +1 (opcode).
	opnd := field + 10
	insns := cat([]byte{0x01}, u32(uint32(start+0x10-opnd)), []byte{0x0e, 32})
	data, _ := buildFrame(true, c, testFDE{loc: cat(u32(0x1000), u32(0x40)), insns: insns})
	tab, _ := NewTable(arch.AMD64, Sections{EHFrame: Section{Data: data, Addr: testEHAddr}}, Options{})
	var row Row
	if err := tab.Lookup(start+0x10, &row); err != nil || row.Start != start+0x10 || row.CFA.Offset != 32 {
		t.Fatalf("%v %+v", err, row)
	}
	if err := tab.Lookup(start+0xf, &row); err != nil || row.End != start+0x10 || row.CFA.Offset != 8 {
		t.Fatalf("%v %+v", err, row)
	}
}

type formatCase struct {
	name    string
	eh      bool
	cie     testCIE
	fde     testFDE
	pc      uint64
	wantErr string
	check   func(t *testing.T, r *Row)
}

func TestCIEFormats(t *testing.T) {
	abs := testFDE{start: 0x1000, length: 0x100, insns: []byte{0x41, 0x0e, 16}}
	cases := []formatCase{
		{name: "eh_frame/v1", eh: true, cie: testCIE{insns: baseCIEInsns}, fde: abs},
		{name: "eh_frame/v3", eh: true, cie: testCIE{version: 3, aug: "zR", augData: []byte{0}, insns: baseCIEInsns}, fde: abs},
		{name: "eh_frame/v4", eh: true, cie: testCIE{version: 4, aug: "zR", augData: []byte{0}, preCode: []byte{8, 0}, insns: baseCIEInsns}, fde: abs},
		{name: "eh_frame/64bit", eh: true, cie: testCIE{aug: "zR", augData: []byte{0}, insns: baseCIEInsns, is64: true}, fde: abs},
		{name: "eh_frame/eh_augmentation", eh: true, cie: testCIE{aug: "eh", preCode: u64(0xdead), insns: baseCIEInsns}, fde: abs},
		{name: "eh_frame/zPLR", eh: true, cie: testCIE{aug: "zPLR", augData: cat([]byte{0x9b}, u32(0x1234), []byte{0x1b, 0x00}), insns: baseCIEInsns},
			fde: testFDE{start: 0x1000, length: 0x100, augData: u32(0x5678), insns: []byte{0x41, 0x0e, 16}}},
		{name: "eh_frame/zPLR_aligned_personality", eh: true, cie: testCIE{aug: "zP", augData: cat([]byte{0x50}, make([]byte, 16)), insns: baseCIEInsns}, fde: abs},
		{name: "eh_frame/zS", eh: true, cie: testCIE{aug: "zS", insns: baseCIEInsns}, fde: abs, check: func(t *testing.T, r *Row) {
			if !r.Signal {
				t.Error("Signal not set")
			}
		}},
		{name: "eh_frame/unknown_augmentation_after_R", eh: true, cie: testCIE{aug: "zRX", augData: []byte{0, 7, 7}, insns: baseCIEInsns}, fde: abs},
		{name: "eh_frame/unknown_augmentation_without_z", eh: true, cie: testCIE{aug: "X", insns: baseCIEInsns}, fde: abs, wantErr: "augmentation"},
		{name: "eh_frame/bad_version", eh: true, cie: testCIE{version: 2, insns: baseCIEInsns}, fde: abs, wantErr: "version"},
		{name: "debug_frame/v1", cie: testCIE{insns: baseCIEInsns}, fde: abs},
		{name: "debug_frame/v3", cie: testCIE{version: 3, insns: baseCIEInsns}, fde: abs},
		{name: "debug_frame/v4", cie: testCIE{version: 4, preCode: []byte{8, 0}, insns: baseCIEInsns}, fde: abs},
		{name: "debug_frame/v4_addr4", cie: testCIE{version: 4, preCode: []byte{4, 0}, insns: cat(baseCIEInsns, []byte{0x01}, u32(0x1001))},
			fde: testFDE{loc: cat(u32(0x1000), u32(0x100)), insns: []byte{0x0e, 16}}, pc: 0x1001},
		{name: "debug_frame/64bit", cie: testCIE{version: 4, preCode: []byte{8, 0}, insns: baseCIEInsns, is64: true}, fde: abs},
		{name: "debug_frame/segment_selector", cie: testCIE{version: 4, preCode: []byte{8, 2}, insns: baseCIEInsns},
			fde: testFDE{loc: cat(u16(0), u64(0x1000), u64(0x100)), insns: []byte{0x41, 0x0e, 16}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data, offs := buildFrame(c.eh, c.cie, c.fde)
			var s Sections
			if c.eh {
				s.EHFrame = Section{Name: ".eh_frame", Data: data, Addr: testEHAddr}
				s.EHFrameHdr = Section{Name: ".eh_frame_hdr", Addr: 0x8000, Data: buildHdr(0x8000, testEHAddr, [][2]uint64{{0x1000, testEHAddr + uint64(offs[0])}})}
			} else {
				s.DebugFrame = Section{Name: ".debug_frame", Data: data}
			}
			tab, err := NewTable(arch.AMD64, s, Options{})
			if err != nil {
				t.Fatal(err)
			}
			pc := c.pc
			if pc == 0 {
				pc = 0x1001
			}
			var row Row
			err = tab.Lookup(pc, &row)
			if c.wantErr != "" {
				var fe *FormatError
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !errors.As(err, &fe) {
					t.Fatalf("error %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if row.FDEStart != 0x1000 || row.Start != 0x1001 || row.End != 0x1100 || row.CFA != cfaOff(7, 16) || row.Regs[16] != offRule(-8) {
				t.Fatalf("row %+v", row)
			}
			if c.check != nil {
				c.check(t, &row)
			}
		})
	}
}

// TestTableSearch checks the index and hdr searches: zero-length FDEs, FDEs
// that fail to decode, gaps between functions, the zero terminator and
// .debug_frame after .eh_frame.
func TestTableSearch(t *testing.T) {
	c := testCIE{aug: "zR", augData: []byte{0}, insns: baseCIEInsns}
	body := []byte{0x41, 0x0e, 16}
	data, offs := buildFrame(true, c,
		testFDE{start: 0x1000, length: 0x100, insns: body},
		testFDE{start: 0x1100, length: 0, insns: body}, // zero range
		testFDE{start: 0x1100, length: 0x80, insns: body},
		testFDE{start: 0x2000, length: 0x10, insns: []byte{0x20}}, // bad instruction
		testFDE{start: 0x3000, length: 0x10, insns: body},
	)
	// Break the CIE pointer of the FDE at 0x3000.
	bad := offs[4]
	copy(data[bad+4:], u32(0x7fffffff))
	data = append(data, 0, 0, 0, 0) // terminator
	df, _ := buildFrame(false, testCIE{insns: baseCIEInsns}, testFDE{start: 0x5000, length: 0x20, insns: body})
	var hdrEntries [][2]uint64
	for i, st := range []uint64{0x1000, 0x1100, 0x1100, 0x2000, 0x3000} {
		hdrEntries = append(hdrEntries, [2]uint64{st, testEHAddr + uint64(offs[i])})
	}
	for _, useHdr := range []bool{false, true} {
		s := Sections{EHFrame: Section{Name: ".eh_frame", Data: data, Addr: testEHAddr}, DebugFrame: Section{Name: ".debug_frame", Data: df}}
		if useHdr {
			s.EHFrameHdr = Section{Data: buildHdr(0x8000, testEHAddr, hdrEntries), Addr: 0x8000}
		}
		tab, err := NewTable(arch.AMD64, s, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			pc       uint64
			fdeStart uint64
			err      string
		}{
			{pc: 0xfff, err: "no FDE"},
			{pc: 0x1000, fdeStart: 0x1000},
			{pc: 0x10ff, fdeStart: 0x1000},
			{pc: 0x1100, fdeStart: 0x1100},
			{pc: 0x117f, fdeStart: 0x1100},
			{pc: 0x1180, err: "no FDE"},
			{pc: 0x2000, err: "unknown CFA instruction"},
			{pc: 0x4000, err: "no FDE"},
			{pc: 0x5000, fdeStart: 0x5000},
			{pc: 0x501f, fdeStart: 0x5000},
			{pc: 0x5020, err: "no FDE"},
		} {
			var row Row
			err := tab.Lookup(tc.pc, &row)
			if tc.err == "no FDE" && useHdr && tc.pc > 0x3000 {
				// The hdr entry at 0x3000 is the candidate and cannot be
				// decoded: its error is reported rather than ErrNoFDE.
				tc.err = "CIE pointer"
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("hdr=%v Lookup(%#x) = %v, want %q", useHdr, tc.pc, err, tc.err)
				}
				continue
			}
			if err != nil || row.FDEStart != tc.fdeStart {
				t.Errorf("hdr=%v Lookup(%#x) = %v, FDEStart %#x, want %#x", useHdr, tc.pc, err, row.FDEStart, tc.fdeStart)
			}
		}
		var row Row
		err = tab.Lookup(0x3000, &row)
		if useHdr {
			// The hdr names the broken FDE: its error is reported.
			if err == nil || !strings.Contains(err.Error(), "CIE pointer") {
				t.Errorf("hdr Lookup(0x3000) = %v", err)
			}
		} else if err != ErrNoFDE {
			t.Errorf("index Lookup(0x3000) = %v", err)
		}
	}
}

func TestNewTableArch(t *testing.T) {
	if _, err := NewTable(arch.Unknown, Sections{}, Options{}); err == nil {
		t.Fatal("no error for unknown arch")
	}
	tab, err := NewTable(arch.AMD64, Sections{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var row Row
	if err := tab.Lookup(0x1000, &row); err != ErrNoFDE {
		t.Fatal(err)
	}
}
