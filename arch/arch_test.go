package arch

import "testing"

// perf delivers x86_64 user registers in the order of
// arch/x86/include/uapi/asm/perf_regs.h; with the usual mask 0xff0fff that is
// AX BX CX DX SI DI BP SP IP FLAGS CS SS R8..R15.
func TestLoadPerfAMD64(t *testing.T) {
	vals := []uint64{
		0xa0, 0xb0, 0xc0, 0xd0, 0x51, 0xd1, 0xbb, 0x7ff0, 0x401000, 0x246, 0x33, 0x2b,
		0x8, 0x9, 0x10, 0x11, 0x12, 0x13, 0x14, ^uint64(0),
	}
	var r Regs
	AMD64.LoadPerf(&r, AMD64.PerfMask(), vals, true)
	want := map[int]uint64{AMD64_RAX: 0xa0, AMD64_RBX: 0xb0, AMD64_RCX: 0xc0, AMD64_RDX: 0xd0,
		AMD64_RSI: 0x51, AMD64_RDI: 0xd1, AMD64_RBP: 0xbb, AMD64_RSP: 0x7ff0, AMD64_RIP: 0x401000,
		8: 0x8, 9: 0x9, 10: 0x10, 11: 0x11, 12: 0x12, 13: 0x13, 14: 0x14}
	for n, v := range want {
		if got, ok := r.Get(n); !ok || got != v {
			t.Errorf("%s = %#x, %v; want %#x", AMD64.RegName(n), got, ok, v)
		}
	}
	// r15 came as all ones: perf's mark for a register it did not save.
	if r.Known(AMD64_R15) {
		t.Errorf("r15 known; perf's -1 must read as unknown")
	}
	// Fewer values than the mask asks for (a damaged sample): the rest
	// are unknown, not garbage.
	AMD64.LoadPerf(&r, AMD64.PerfMask(), vals[:3], true)
	if !r.Known(AMD64_RCX) || r.Known(AMD64_RDX) || r.Known(AMD64_RIP) {
		t.Errorf("short register list: known mask %#x", r.KnownMask())
	}
}

func TestLoadPerfARM64(t *testing.T) {
	vals := make([]uint64, 33)
	for i := range vals {
		vals[i] = uint64(0x1000 + i)
	}
	var r Regs
	ARM64.LoadPerf(&r, ARM64.PerfMask(), vals, false)
	for n, name := range map[int]string{0: "x0", 29: "x29", 30: "x30", 31: "sp", 32: "pc"} {
		if v, ok := r.Get(n); !ok || v != uint64(0x1000+n) || ARM64.RegName(n) != name {
			t.Errorf("%s (%d) = %#x %v", ARM64.RegName(n), n, v, ok)
		}
	}
}

func TestStripPAC(t *testing.T) {
	// A return address signed with a PAC in bits 48..54 (48-bit VA), as
	// seen in the a64_pac fixture's stack.
	signed := uint64(0x002c00550000080c)
	if got := ARM64.StripPAC(signed, PACMask(48)); got != 0x550000080c {
		t.Errorf("StripPAC = %#x", got)
	}
	if got := AMD64.StripPAC(signed, PACMask(48)); got != signed {
		t.Errorf("x86_64 address changed: %#x", got)
	}
	if PACMask(52) != 0xfff0000000000000 || PACMask(0) != 0 {
		t.Errorf("PACMask(52) = %#x", PACMask(52))
	}
}
