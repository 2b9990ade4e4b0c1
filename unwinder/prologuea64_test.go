package unwinder

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
)

// TestARM64PrologueStep: an arm64 frame without CFI and without a frame
// record (code built with -fomit-frame-pointer and without unwind tables)
// is stepped by decoding its function from its first instruction to the
// PC (how prologue): stores of x30 relative to the SP, with or
// without writeback, and constant SP adjustments give the CFA and the
// slots, up to the PC or the first branch; the return address, PAC
// stripped, is taken only where the instruction before it is a bl to the
// function (or a blr). A change of the SP by a register, a call from
// elsewhere, or a frame where the SP has not moved and x30 was not written
// leaves the frame to the link-register step (lr) as before. The encodings
// are the GNU assembler's.
func TestARM64PrologueStep(t *testing.T) {
	const (
		text   = 0x400000
		stack  = 0x7ff000
		fn     = 0x401000 // no CFI, no frame record
		ra     = 0x402040 // in the caller, whose CFI is CFA = SP, outermost
		callee = 0x401800 // another function fn calls
	)
	caller := cfi.Row{Start: 0x402000, End: 0x402100, RA: arch.ARM64_X30}
	caller.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.ARM64_SP}
	caller.Regs[arch.ARM64_X30] = cfi.Rule{Kind: cfi.RuleUndefined}
	const (
		stpX19X30Pre64 = 0xa9bc7bf3 // stp x19, x30, [sp, #-64]!
		strX30Pre16    = 0xf81f0ffe // str x30, [sp, #-16]!
		subSP32        = 0xd10083ff // sub sp, sp, #0x20
		stpX29X30At16  = 0xa9017bfd // stp x29, x30, [sp, #16]
		bne8           = 0x54000041 // b.ne .+8
		movSPX1        = 0x9100003f // mov sp, x1
		blrX3          = 0xd63f0060 // blr x3
		movW19W0       = 0x2a0003f3 // mov w19, w0
		ldpX29X30Post  = 0xa8c17bfd // ldp x29, x30, [sp], #16
		stpX29X30Pre16 = 0xa9bf7bfd // stp x29, x30, [sp, #-16]!
		paciasp        = 0xd503233f
		andSPX1        = 0x927cec3f // and sp, x1, #0xfffffffffffffff0
	)
	bl := func(at, target uint64) uint32 { return 0x94000000 | uint32((int64(target)-int64(at))/4)&0x03ffffff }
	const pac = 0x0023000000000000 // a PAC in the bits above the 48-bit address
	for _, tc := range []struct {
		name   string
		code   []uint32 // fn's code; the PC is after it, or at the bl to callee it ends with
		call   uint32   // the caller's instruction before ra; 0: bl fn
		delta  uint64   // the CFA's offset from the SP
		raSlot int64    // the return address's slot from the CFA; 0: in x30
		found  bool
		signed bool // the saved return address carries a PAC
	}{
		{"stp x19, x30 pre-index, then a call", []uint32{stpX19X30Pre64, movW19W0, 0}, 0, 64, -56, true, false},
		{"str x30 pre-index, sub sp, a call", []uint32{strX30Pre16, subSP32, 0}, 0, 48, -16, true, false},
		{"sub sp, stp x29, x30 at an offset, a call", []uint32{subSP32, stpX29X30At16, 0}, 0, 32, -8, true, false},
		{"a branch after the saves: the prologue ends there", []uint32{stpX19X30Pre64, bne8, 0}, 0, 64, -56, true, false},
		{"paciasp: a signed return address", []uint32{paciasp, stpX19X30Pre64, 0}, 0, 64, -56, true, true},
		{"called through blr", []uint32{stpX19X30Pre64, 0}, blrX3, 64, -56, true, false},
		{"a leaf that allocated: x30 holds it", []uint32{subSP32}, 0, 32, 0, true, false},
		{"mov sp, x1", []uint32{stpX19X30Pre64, movSPX1, 0}, 0, 64, -56, false, false},
		{"and sp, x1, #-16", []uint32{stpX19X30Pre64, andSPX1, 0}, 0, 64, -56, false, false},
		{"called from elsewhere", []uint32{stpX19X30Pre64, 0}, 0x94000000 | 0x100, 64, -56, false, false},
		{"saved and restored: the lr step's", []uint32{stpX29X30Pre16, ldpX29X30Post}, 0, 0, 0, false, false},
		// OpenSSL's KeccakF1600_int: nothing allocated, x30 saved in the
		// caller's outgoing area; the caller's SP is the frame's.
		{"stp x28, x30 above the SP, then a call", []uint32{0xa9017bfc, 0}, 0, 0, 24, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code := make([]byte, 4*len(tc.code)+4)
			for i, insn := range tc.code {
				if insn == 0 {
					insn = bl(fn+uint64(4*i), callee)
				}
				binary.LittleEndian.PutUint32(code[4*i:], insn)
			}
			binary.LittleEndian.PutUint32(code[4*len(tc.code):], 0xd503201f) // nop
			call := tc.call
			if call == 0 {
				call = bl(ra-4, fn)
			}
			before := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 0xd503201f), call) // nop; the call
			obj := &funcObject{fakeObject: fakeObject{rows: []cfi.Row{caller},
				code: map[uint64][]byte{ra - 8: before, fn: code}},
				starts: []uint64{fn, callee, 0x402000}}
			space := NewAddressSpace([]Mapping{
				{Start: text, End: text + 0x10000, Exec: true, Object: obj, Name: "a.out"},
				{Start: stack, End: stack + 0x1000, Name: "[stack]"},
			})
			sb := &stackBuilder{base: stack, data: make([]byte, 0x200)}
			cfa := stack + tc.delta
			saved := uint64(ra)
			if tc.signed {
				saved |= pac
			}
			var regs arch.Regs
			regs.Set(arch.ARM64_PC, fn+uint64(4*len(tc.code)))
			regs.Set(arch.ARM64_SP, stack)
			regs.Set(arch.ARM64_X29, 0x7ff800)
			regs.Set(arch.ARM64_X30, 0xbad0) // overwritten by the call, where there is one
			if tc.raSlot != 0 {
				sb.put(uint64(int64(cfa)+tc.raSlot), saved)
			} else {
				regs.Set(arch.ARM64_X30, ra)
			}
			frames := make([]Frame, 8)
			res := New(arch.ARM64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
			if !tc.found {
				if res.Frames > 1 && frames[1].Method == MethodPrologue {
					t.Fatalf("frame 1 = %+v: stepped by the prologue", frames[1])
				}
				return
			}
			if res.Stop != StopOutermost || res.Frames != 2 {
				t.Fatalf("got %d frames, stop %v (%v); want 2, outermost", res.Frames, res.Stop, res.Err)
			}
			if f := frames[1]; f.PC != ra || f.SP != cfa || f.Method != MethodPrologue || f.CFA != cfa {
				t.Errorf("frame 1 = %+v; want pc %#x sp %#x cfa %#x by prologue", f, ra, cfa, cfa)
			}
		})
	}
}

// FuzzARM64Prologue decodes fuzzed code as a function without CFI, from
// its first instruction to a fuzzed PC, over a fuzzed stack. The unwind
// must return; a caller stepped to by the prologue must be at a return
// address after a call (a bl to the function, or a blr), with its SP at or
// above the frame's.
func FuzzARM64Prologue(f *testing.F) {
	const (
		text  = 0x400000
		stack = 0x7ff000
		fn    = 0x401000
		ra    = 0x402040
	)
	f.Add([]byte{0xf3, 0x7b, 0xbc, 0xa9, 0xf3, 0x03, 0x00, 0x2a, 0x00, 0x02, 0x00, 0x94}, uint16(12), []byte{}, uint64(0))
	f.Add([]byte{0xff, 0x83, 0x00, 0xd1}, uint16(4), []byte{}, uint64(ra))
	f.Fuzz(func(t *testing.T, code []byte, pcOff uint16, stackData []byte, x30 uint64) {
		if len(code) > arm64ProloguePeek {
			code = code[:arm64ProloguePeek]
		}
		caller := cfi.Row{Start: 0x402000, End: 0x402100, RA: arch.ARM64_X30}
		caller.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.ARM64_SP}
		caller.Regs[arch.ARM64_X30] = cfi.Rule{Kind: cfi.RuleUndefined}
		off := (int64(fn) - int64(ra-4)) / 4
		before := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 0xd503201f), 0x94000000|uint32(off)&0x03ffffff)
		obj := &funcObject{fakeObject: fakeObject{rows: []cfi.Row{caller},
			code: map[uint64][]byte{ra - 8: before, fn: code}},
			starts: []uint64{fn, 0x402000}}
		space := NewAddressSpace([]Mapping{
			{Start: text, End: text + 0x10000, Exec: true, Object: obj, Name: "a.out"},
			{Start: stack, End: stack + 0x1000, Name: "[stack]"},
		})
		if len(stackData) > 0x1000 {
			stackData = stackData[:0x1000]
		}
		var regs arch.Regs
		regs.Set(arch.ARM64_PC, fn+uint64(pcOff)%0x200&^3)
		regs.Set(arch.ARM64_SP, stack)
		regs.Set(arch.ARM64_X30, x30)
		frames := make([]Frame, 8)
		res := New(arch.ARM64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: stackData}, frames)
		if res.Frames > len(frames) {
			t.Fatalf("%d frames in a buffer of %d", res.Frames, len(frames))
		}
		if res.Frames > 1 && frames[1].Method == MethodPrologue {
			if f := frames[1]; f.PC != ra || f.SP < stack {
				t.Fatalf("frame 1 = %+v: stepped by the prologue, not to the return address %#x after the call", f, uint64(ra))
			}
		}
	})
}

// namedObject is a funcObject whose functions have names (SymbolObject).
type namedObject struct {
	funcObject
	names map[uint64]string
}

func (o *namedObject) Symbolize(addr uint64) (string, uint64, bool) {
	best, ok := uint64(0), false
	for start := range o.names {
		if start <= addr && (!ok || start > best) {
			best, ok = start, true
		}
	}
	if !ok {
		return "", 0, false
	}
	return o.names[best], addr - best, true
}

// TestARM64PrologueStepPLT: a library function without CFI that the
// program called through its PLT stub (bl NAME@plt, a bti c first where
// the PLT has them) is stepped out of by its prologue, as where the bl is
// to the function itself; a stub of another name is no call of it.
func TestARM64PrologueStepPLT(t *testing.T) {
	const (
		stack = 0x7ff000
		stub  = 0x400500 // in the program
		ra    = 0x402040 // in the program's caller, outermost
		fn    = 0x501000 // in the library: no CFI
	)
	const (
		strX30Pre16 = 0xf81f0ffe // str x30, [sp, #-16]!
		btiC        = 0xd503245f
		adrpX16     = 0x90000090 // adrp x16, ...
		nop         = 0xd503201f
	)
	caller, bl, le := a64Outermost(0x402000, 0x402100), a64BL, a64Code
	for _, tc := range []struct {
		name     string
		stubCode []uint32
		stubSym  uint64 // where the stub's symbol begins
		stubName string
		found    bool
	}{
		{"bl nocfi_entry@plt", []uint32{adrpX16, nop}, stub, "nocfi_entry@plt", true},
		{"bl to a bti c before the stub", []uint32{btiC, adrpX16, nop}, stub + 4, "nocfi_entry@plt", true},
		{"bl other@plt", []uint32{adrpX16, nop}, stub, "other@plt", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prog := &namedObject{
				funcObject: funcObject{fakeObject: fakeObject{rows: []cfi.Row{caller},
					code: map[uint64][]byte{ra - 8: le(nop, bl(ra-4, stub)), stub: le(tc.stubCode...)}},
					starts: []uint64{stub, 0x402000}},
				names: map[uint64]string{tc.stubSym: tc.stubName, 0x402000: "use_lib"},
			}
			lib := &namedObject{
				funcObject: funcObject{fakeObject: fakeObject{code: map[uint64][]byte{fn: le(strX30Pre16, nop)}},
					starts: []uint64{fn}},
				names: map[uint64]string{fn: "nocfi_entry"},
			}
			space := NewAddressSpace([]Mapping{
				{Start: 0x400000, End: 0x410000, Exec: true, Object: prog, Name: "prog"},
				{Start: 0x500000, End: 0x510000, Exec: true, Object: lib, Name: "lib.so"},
			})
			sb := &stackBuilder{base: stack, data: make([]byte, 0x100)}
			sb.put(stack, ra) // str x30, [sp, #-16]!
			checkPrologueStep(t, space, fn+4, stack, sb.data, tc.found, ra, stack+16, true)
		})
	}
}

// TestARM64PrologueStepLong: the prologue's saves may come hundreds of
// instructions in (GCC scheduled a store of x30 516 bytes into a function
// of straight-line code); they are found up to 4096 bytes from the start.
// A PC further in is stepped only where a branch within them ended the
// prologue.
func TestARM64PrologueStepLong(t *testing.T) {
	const (
		stack  = 0x7ff000
		ra     = 0x402040 // in the caller, outermost
		callee = 0x403000
		fn     = 0x404000 // no CFI, no frame record
	)
	const (
		subSP32        = 0xd10083ff // sub sp, sp, #0x20
		stpX29X30At16  = 0xa9017bfd // stp x29, x30, [sp, #16]
		stpX19X30Pre64 = 0xa9bc7bf3 // stp x19, x30, [sp, #-64]!
		movW19W0       = 0x2a0003f3 // mov w19, w0
		bne8           = 0x54000041 // b.ne .+8
	)
	caller, bl := a64Outermost(0x402000, 0x402100), a64BL
	movs := func(n int) []uint32 { return slices.Repeat([]uint32{movW19W0}, n) }
	for _, tc := range []struct {
		name   string
		code   []uint32 // then a bl callee, the PC after it
		delta  uint64
		raSlot int64
		found  bool
	}{
		{"x30 saved 516 bytes in", slices.Concat([]uint32{subSP32}, movs(128), []uint32{stpX29X30At16}, movs(300)), 32, -8, true},
		{"straight-line code past 4096 bytes", slices.Concat([]uint32{stpX19X30Pre64}, movs(1100)), 64, -56, false},
		{"a branch early, the PC 5000 bytes in", slices.Concat([]uint32{stpX19X30Pre64, bne8}, movs(1250)), 64, -56, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var code []byte
			for _, insn := range tc.code {
				code = binary.LittleEndian.AppendUint32(code, insn)
			}
			code = binary.LittleEndian.AppendUint32(code, bl(fn+uint64(len(code)), callee))
			pc := fn + uint64(len(code))
			code = binary.LittleEndian.AppendUint32(code, 0xd503201f) // nop
			before := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 0xd503201f), bl(ra-4, fn))
			obj := &funcObject{fakeObject: fakeObject{rows: []cfi.Row{caller},
				code: map[uint64][]byte{ra - 8: before, fn: code}},
				starts: []uint64{0x402000, callee, fn}}
			space := NewAddressSpace([]Mapping{{Start: 0x400000, End: 0x410000, Exec: true, Object: obj, Name: "a.out"}})
			sb := &stackBuilder{base: stack, data: make([]byte, 0x200)}
			cfa := stack + tc.delta
			sb.put(uint64(int64(cfa)+tc.raSlot), ra)
			checkPrologueStep(t, space, pc, stack, sb.data, tc.found, ra, cfa, false)
		})
	}
}

// strippedObject is a fakeObject whose symbols cover no function
// (FunctionStart fails), with the starts StartBefore gives and the targets
// of direct calls (CallTargetObject).
type strippedObject struct {
	fakeObject
	starts, targets []uint64
}

func (o *strippedObject) FunctionStart(uint64) (uint64, bool) { return 0, false }

func (o *strippedObject) StartBefore(addr uint64) (uint64, bool) {
	best, ok := uint64(0), false
	for _, s := range slices.Concat(o.starts, o.targets) {
		if s <= addr && (!ok || s > best) {
			best, ok = s, true
		}
	}
	return best, ok
}

func (o *strippedObject) CallTarget(addr uint64) bool { return slices.Contains(o.targets, addr) }

// TestARM64PrologueStepStripped: in a stripped object without CFI, whose
// symbols name none of its hidden functions, the function of a PC starts
// at the nearest target of a bl before it; its prologue step is taken only
// where the return address found follows a bl to that start. A blr (whose
// target cannot be checked) or a start no bl targets leaves the frame to
// the other fallbacks.
func TestARM64PrologueStepStripped(t *testing.T) {
	const (
		stack = 0x7ff000
		ra    = 0x402040 // in the caller, outermost
		fn    = 0x401000 // hidden, no CFI
	)
	const (
		strX30Pre16 = 0xf81f0ffe // str x30, [sp, #-16]!
		nop         = 0xd503201f
		blrX3       = 0xd63f0060
	)
	caller, bl, le := a64Outermost(0x402000, 0x402100), a64BL, a64Code
	for _, tc := range []struct {
		name    string
		call    uint32
		starts  []uint64 // symbols' starts before fn
		targets []uint64
		found   bool
	}{
		{"a bl to the nearest call target", bl(ra-4, fn), []uint64{0x400000}, []uint64{0x400800, fn}, true},
		{"a blr", blrX3, []uint64{0x400000}, []uint64{0x400800, fn}, false},
		{"no call target: a symbol's start before", bl(ra-4, fn), []uint64{fn}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &strippedObject{fakeObject: fakeObject{rows: []cfi.Row{caller},
				code: map[uint64][]byte{ra - 8: le(nop, tc.call), fn: le(strX30Pre16, nop)}},
				starts: tc.starts, targets: tc.targets}
			space := NewAddressSpace([]Mapping{{Start: 0x400000, End: 0x410000, Exec: true, Object: obj, Name: "/usr/lib/libstripped.so"}})
			sb := &stackBuilder{base: stack, data: make([]byte, 0x100)}
			sb.put(stack, ra)
			checkPrologueStep(t, space, fn+4, stack, sb.data, tc.found, ra, stack+16, true)
		})
	}
}

// checkPrologueStep unwinds an arm64 first frame at pc, its SP at stack
// (over data), whose x29 and x30 point nowhere useful. Frame 1 must be
// stepped by the prologue exactly when found, then be at ra with SP sp,
// and, with outermost, end the stack.
func checkPrologueStep(t *testing.T, space *AddressSpace, pc, stack uint64, data []byte, found bool, ra, sp uint64, outermost bool) {
	t.Helper()
	var regs arch.Regs
	regs.Set(arch.ARM64_PC, pc)
	regs.Set(arch.ARM64_SP, stack)
	regs.Set(arch.ARM64_X29, 0x7ff800)
	regs.Set(arch.ARM64_X30, 0xbad0)
	frames := make([]Frame, 8)
	res := New(arch.ARM64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: data}, frames)
	stepped := res.Frames > 1 && frames[1].Method == MethodPrologue
	if stepped != found {
		t.Fatalf("frame 1 stepped by the prologue: %v, want %v (%d frames, %+v)", stepped, found, res.Frames, frames[1])
	}
	if found && (frames[1].PC != ra || frames[1].SP != sp || (outermost && res.Stop != StopOutermost)) {
		t.Errorf("frame 1 = %+v, stop %v; want pc %#x sp %#x (outermost: %v)", frames[1], res.Stop, ra, sp, outermost)
	}
}

// a64Outermost returns an arm64 row for [start, end) that ends the stack:
// CFA = SP, x30 undefined.
func a64Outermost(start, end uint64) cfi.Row {
	r := cfi.Row{Start: start, End: end, RA: arch.ARM64_X30}
	r.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.ARM64_SP}
	r.Regs[arch.ARM64_X30] = cfi.Rule{Kind: cfi.RuleUndefined}
	return r
}

// a64BL encodes bl target at address at.
func a64BL(at, target uint64) uint32 {
	return 0x94000000 | uint32((int64(target)-int64(at))/4)&0x03ffffff
}

// a64Code encodes instructions as code bytes.
func a64Code(insns ...uint32) []byte {
	var b []byte
	for _, i := range insns {
		b = binary.LittleEndian.AppendUint32(b, i)
	}
	return b
}

// TestARM64LinkRegisterReused: a first frame without CFI in code that keeps
// a frame record and reuses x30 (OpenSSL's assembly: as data, zeroed, or
// holding the return address of the function's own last call) is left
// through its frame record, as a guess (fp, fp_guess), where x30 is 0 in a
// function not known to begin a stack, the PC itself, outside code, or a
// return address into the same function before the PC with nothing that
// ends a function between. Before, the link register step ended the stack
// (a zero return address, a loop) or repeated the function. An x30 before
// the PC with a ret between is a caller's, as before (lr).
func TestARM64LinkRegisterReused(t *testing.T) {
	const (
		stack  = 0x7ff000
		fn     = 0x401000 // no CFI, no symbol: paciasp; stp x29, x30, [sp, #-16]!; mov x29, sp; ...
		caller = 0x402040 // the return address in fn's frame record; outermost
	)
	const (
		nop   = 0xd503201f
		ret   = 0xd65f03c0
		other = 0x400f00 // a function before fn that ends with a ret
	)
	code := a64Code(0xd503233f, 0xa9bf7bfd, 0x910003fd, nop, nop, nop, nop, nop, nop, nop) // fn: 10 instructions
	before := a64Code(nop, nop, nop, ret)                                                  // other's end, at other+0x20
	for _, tc := range []struct {
		name string
		x30  uint64
		pc   uint64
		how  Method
		stop StopReason
	}{
		{"x30 zero", 0, fn + 0x20, MethodFramePointer, StopFramePointerGuess},
		{"x30 the PC", fn + 0x20, fn + 0x20, MethodFramePointer, StopFramePointerGuess},
		{"x30 data", 0x1793943100804e30, fn + 0x20, MethodFramePointer, StopFramePointerGuess},
		{"x30 an earlier return into fn", fn + 0x10, fn + 0x20, MethodFramePointer, StopFramePointerGuess},
		{"x30 before a ret: a caller's", other + 0x1c, fn + 0x20, MethodLinkRegister, StopNoMapping},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &fakeObject{rows: []cfi.Row{a64Outermost(0x402000, 0x402100)},
				code: map[uint64][]byte{fn: code, other + 0x10: before, caller - 8: a64Code(nop, a64BL(caller-4, fn))}}
			space := NewAddressSpace([]Mapping{{Start: 0x400000, End: 0x410000, Exec: true, Object: obj, Name: "/usr/lib/libcrypto.so.3"}})
			sb := &stackBuilder{base: stack, data: make([]byte, 0x100)}
			sb.put(stack, 0)        // the caller's x29
			sb.put(stack+8, caller) // the return address
			var regs arch.Regs
			regs.Set(arch.ARM64_PC, tc.pc)
			regs.Set(arch.ARM64_SP, stack)
			regs.Set(arch.ARM64_X29, stack)
			regs.Set(arch.ARM64_X30, tc.x30)
			frames := make([]Frame, 8)
			res := New(arch.ARM64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
			if res.Frames < 2 || frames[1].Method != tc.how {
				t.Fatalf("%d frames (%v %v), frame 1 %+v; want frame 1 by %v", res.Frames, res.Stop, res.Err, frames[1], tc.how)
			}
			if tc.how == MethodFramePointer && (frames[1].PC != caller || res.Stop != tc.stop) {
				t.Errorf("frame 1 pc %#x, stop %v; want %#x, %v", frames[1].PC, res.Stop, caller, tc.stop)
			}
			if tc.how == MethodLinkRegister && frames[1].PC != tc.x30 {
				t.Errorf("frame 1 pc %#x; want x30 %#x", frames[1].PC, tc.x30)
			}
		})
	}
}
