package unwinder

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
)

// TestBadCallX86: a thread stopped at an address that is no code (0, or
// the heap) right after a call, or a tail call's jump: its caller is found
// from the return address the call pushed, where the instruction before
// it is a call, and the walk goes on by CFI to the outermost frame. A word
// at the SP after any other instruction stops it with no_mapping, as
// before.
func TestBadCallX86(t *testing.T) {
	const (
		text  = 0x400000
		stack = 0x7ff000
		heap  = 0x900000
	)
	// caller at 0x401000 (CFA = rsp+16), outermost: RA undefined.
	caller := x86Row(0x401000, 0x401100, 16)
	caller.Regs[arch.AMD64_RIP] = cfi.Rule{Kind: cfi.RuleUndefined}
	code := map[uint64][]byte{}
	obj := &fakeObject{rows: []cfi.Row{caller}, code: code}
	space := NewAddressSpace([]Mapping{
		{Start: text, End: text + 0x10000, Exec: true, Object: obj, Name: "a.out"},
		{Start: stack, End: stack + 0x1000, Name: "[stack]"},
		{Start: heap, End: heap + 0x1000, Name: "[heap]"},
	})
	const ra = 0x401040
	sb := &stackBuilder{base: stack, data: make([]byte, 0x100)}
	sb.put(stack, ra)
	rel := func(target uint64) []byte {
		b := []byte{0xe8, 0, 0, 0, 0}
		binary.LittleEndian.PutUint32(b[1:], uint32(int32(int64(target)-ra)))
		return b
	}
	for _, tc := range []struct {
		name  string
		pc    uint64
		insn  []byte         // the instruction ending at ra
		regs  map[int]uint64 // besides rip and rsp
		found bool           // the caller is recovered
	}{
		{"call *%rax, rax 0", 0, []byte{0xff, 0xd0}, map[int]uint64{arch.AMD64_RAX: 0}, true},
		{"call *%r11, r11 0", 0, []byte{0x41, 0xff, 0xd3}, map[int]uint64{arch.AMD64_R8 + 3: 0, arch.AMD64_RBX: 7}, true},
		{"call *%rbx into the heap", heap + 0x10, []byte{0xff, 0xd3}, map[int]uint64{arch.AMD64_RBX: heap + 0x10}, true},
		{"call *0x18(%rdi)", 0, []byte{0xff, 0x57, 0x18}, nil, true},
		{"call *0x8(%rax,%rbx,8)", 0, []byte{0xff, 0x54, 0xd8, 0x08}, nil, true},
		{"call *0x12345(%rip)", 0, []byte{0xff, 0x15, 0x45, 0x23, 0x01, 0x00}, nil, true},
		{"call rel32 to the pc", 0x1000, rel(0x1000), nil, true},
		// A call elsewhere whose callee then jumped to the PC (a tail
		// call through a bad pointer): the return address is the
		// callee's, whose frame is gone.
		{"call rel32 elsewhere, then a jump", 0, rel(0x401000), nil, true},
		{"call *%rax, rax elsewhere", 0, []byte{0xff, 0xd0}, map[int]uint64{arch.AMD64_RAX: 0x401000}, true},
		// No call before the word at the SP: no return address.
		{"jmp *%rax (ff /4)", 0, []byte{0xff, 0xe0}, map[int]uint64{arch.AMD64_RAX: 0}, false},
		{"push *%rax (ff /6)", 0, []byte{0xff, 0xf0}, nil, false},
		{"no call", 0, []byte{0x90, 0x90}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Fill what precedes the instruction with nops.
			before := make([]byte, 16)
			for i := range before {
				before[i] = 0x90
			}
			copy(before[16-len(tc.insn):], tc.insn)
			clear(code)
			code[ra-16] = append(before, 0xc3)
			var regs arch.Regs
			regs.Set(arch.AMD64_RIP, tc.pc)
			regs.Set(arch.AMD64_RSP, stack)
			for r, v := range tc.regs {
				regs.Set(r, v)
			}
			frames := make([]Frame, 8)
			res := New(arch.AMD64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
			if !badCallStop(t, res, tc.found) {
				return
			}
			if f := frames[0]; f.PC != tc.pc || f.Method != MethodContext {
				t.Errorf("frame 0 = %+v", f)
			}
			if f := frames[1]; f.PC != ra || f.SP != stack+8 || f.CFA != stack+24 || f.Method != MethodBadCall || f.Flags&FrameReturnAddress == 0 {
				t.Errorf("frame 1 = %+v; want pc %#x sp %#x cfa %#x by bad_call, a return address", f, ra, stack+8, stack+24)
			}
		})
	}
}

// TestBadCallARM64: on arm64 the call left the return address in x30
// (bl, blr, blraa...: to the PC, or to a function that branched there);
// the SP is the caller's, and x30 is unknown in the caller.
func TestBadCallARM64(t *testing.T) {
	const (
		text  = 0x400000
		stack = 0x7ff000
		ra    = 0x401040
	)
	// caller at 0x401000: CFA = sp+16, x29 at CFA-16, x30 undefined: the
	// outermost frame (a zero return address at CFA-8 would prove that
	// only in a function that begins a stack).
	caller := cfi.Row{Start: 0x401000, End: 0x401100, RA: arch.ARM64_X30}
	caller.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.ARM64_SP, Offset: 16}
	caller.Regs[arch.ARM64_X29] = cfi.Rule{Kind: cfi.RuleOffset, Offset: -16}
	caller.Regs[arch.ARM64_X30] = cfi.Rule{Kind: cfi.RuleUndefined}
	code := map[uint64][]byte{}
	obj := &fakeObject{rows: []cfi.Row{caller}, code: code}
	space := NewAddressSpace([]Mapping{
		{Start: text, End: text + 0x10000, Exec: true, Object: obj, Name: "a.out"},
		{Start: stack, End: stack + 0x1000, Name: "[stack]"},
	})
	sb := &stackBuilder{base: stack, data: make([]byte, 0x100)}
	sb.put(stack, 0) // the caller's x29
	sb.put(stack+8, 0)
	bl := func(target uint64) uint32 { return 0x94000000 | uint32((int64(target)-(ra-4))/4)&0x3ffffff }
	for _, tc := range []struct {
		name  string
		pc    uint64
		insn  uint32
		x8    uint64
		found bool
	}{
		{"blr x8, x8 0", 0, 0xd63f0000 | 8<<5, 0, true},
		{"blraaz x8, x8 0", 0, 0xd63f081f | 8<<5, 0, true},
		{"blrab x8, x9", 0, 0xd73f0c00 | 8<<5 | 9, 0, true},
		{"bl to the pc", 0x10000, bl(0x10000), 1, true},
		// A call elsewhere whose callee then branched to the PC (br
		// x1 to NULL: a tail call).
		{"bl elsewhere, then br", 0, bl(0x401000), 0, true},
		{"blr x8, x8 elsewhere", 0, 0xd63f0000 | 8<<5, 0x401000, true},
		{"br x8 (no call)", 0, 0xd61f0000 | 8<<5, 0, false},
		{"ret (no call)", 0, 0xd65f03c0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			insns := make([]byte, 16)
			for i := 0; i < 16; i += 4 {
				binary.LittleEndian.PutUint32(insns[i:], 0xd503201f) // nop
			}
			binary.LittleEndian.PutUint32(insns[12:], tc.insn)
			clear(code)
			code[ra-16] = insns
			var regs arch.Regs
			regs.Set(arch.ARM64_PC, tc.pc)
			regs.Set(arch.ARM64_SP, stack)
			regs.Set(arch.ARM64_X30, ra)
			regs.Set(arch.ARM64_X0+8, tc.x8)
			frames := make([]Frame, 8)
			res := New(arch.ARM64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
			if !badCallStop(t, res, tc.found) {
				return
			}
			if f := frames[1]; f.PC != ra || f.SP != stack || f.CFA != stack+16 || f.Method != MethodBadCall {
				t.Errorf("frame 1 = %+v; want pc %#x sp %#x cfa %#x by bad_call", f, ra, stack, stack+16)
			}
		})
	}
}

// badCallStop checks how an unwind of the tests' two frames ended: at the
// outermost frame where the caller was found, else at the first frame with
// no_mapping. It reports whether the caller was found.
func badCallStop(t *testing.T, res Result, found bool) bool {
	t.Helper()
	return twoFramesOr(t, res, found, StopNoMapping)
}

// twoFramesOr checks that an unwind found the caller and ended outermost
// after 2 frames, or (found false) stopped after the first with stop; it
// reports found.
func twoFramesOr(t *testing.T, res Result, found bool, stop StopReason) bool {
	t.Helper()
	if !found {
		if res.Stop != stop || res.Frames != 1 {
			t.Fatalf("got %d frames, stop %v (%v); want 1, %v", res.Frames, res.Stop, res.Err, stop)
		}
		return false
	}
	if res.Stop != StopOutermost || res.Frames != 2 {
		t.Fatalf("got %d frames, stop %v (%v); want 2, outermost", res.Frames, res.Stop, res.Err)
	}
	return true
}

// funcObject is a fakeObject whose functions begin at the given addresses.
type funcObject struct {
	fakeObject
	starts []uint64 // sorted
}

func (o *funcObject) FunctionStart(addr uint64) (uint64, bool) {
	for i := len(o.starts) - 1; i >= 0; i-- {
		if o.starts[i] <= addr {
			return o.starts[i], true
		}
	}
	return 0, false
}

// TestFramelessReturn: an x86_64 frame without CFI that pushed nothing
// (glibc's clone3 after its system call, a leaf of hand-written
// assembly) still has its return address at its SP; it is taken (how
// frameless) where the instruction before it calls that function's first
// instruction, directly or through a register still holding it. A word
// there after any other instruction, or a call to elsewhere, leaves the
// frame to the frame-pointer fallback as before.
func TestFramelessReturn(t *testing.T) {
	const (
		text  = 0x400000
		stack = 0x7ff000
		fn    = 0x401000 // the frameless function, no CFI
		ra    = 0x402040 // in the caller, whose CFI is outermost
	)
	caller := x86Row(0x402000, 0x402100, 16)
	caller.Regs[arch.AMD64_RIP] = cfi.Rule{Kind: cfi.RuleUndefined}
	rel := func(target uint64) []byte {
		b := []byte{0xe8, 0, 0, 0, 0}
		binary.LittleEndian.PutUint32(b[1:], uint32(int32(int64(target)-ra)))
		return b
	}
	for _, tc := range []struct {
		name  string
		insn  []byte
		rax   uint64
		found bool
	}{
		{"call fn", rel(fn), 0, true},
		{"call *%rax, rax fn", []byte{0xff, 0xd0}, fn, true},
		{"call elsewhere", rel(0x401800), 0, false},
		{"call *%rax, rax elsewhere", []byte{0xff, 0xd0}, 0x401800, false},
		{"call *0x10(%rbx), unverifiable", []byte{0xff, 0x53, 0x10}, 0, false},
		{"no call", []byte{0x90, 0x90}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := make([]byte, 16)
			for i := range before {
				before[i] = 0x90
			}
			copy(before[16-len(tc.insn):], tc.insn)
			obj := &funcObject{fakeObject: fakeObject{rows: []cfi.Row{caller}, code: map[uint64][]byte{ra - 16: before}},
				starts: []uint64{fn, 0x401800, 0x402000}}
			space := NewAddressSpace([]Mapping{
				{Start: text, End: text + 0x10000, Exec: true, Object: obj, Name: "a.out"},
				{Start: stack, End: stack + 0x1000, Name: "[stack]"},
			})
			sb := &stackBuilder{base: stack, data: make([]byte, 0x100)}
			sb.put(stack, ra)
			var regs arch.Regs
			regs.Set(arch.AMD64_RIP, fn+0x19)
			regs.Set(arch.AMD64_RSP, stack)
			regs.Set(arch.AMD64_RBP, 0x1234) // no frame pointer
			regs.Set(arch.AMD64_RAX, tc.rax)
			frames := make([]Frame, 8)
			res := New(arch.AMD64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
			if !twoFramesOr(t, res, tc.found, StopNoUnwindInfo) {
				return
			}
			if f := frames[1]; f.PC != ra || f.SP != stack+8 || f.Method != MethodFrameless {
				t.Errorf("frame 1 = %+v; want pc %#x sp %#x by frameless", f, ra, stack+8)
			}
		})
	}
}

// TestDirectCall checks the direct-call check on encodings taken from
// objdump listings: "401136: e8 eb ff ff ff  call 401126 <leaf>" and
// "4005d0: 97ffffe8  bl 400570 <leaf>" (a call backwards), and forwards
// ones built from their encodings' definitions.
func TestDirectCall(t *testing.T) {
	x86 := []byte{0x90, 0x90, 0x90, 0xe8, 0xeb, 0xff, 0xff, 0xff}
	assert.True(t, DirectCall(arch.AMD64, x86, 0x40113b, 0x401126))
	assert.False(t, DirectCall(arch.AMD64, x86, 0x40113b, 0x401127), "another target")
	assert.True(t, DirectCall(arch.AMD64, []byte{0xe8, 0x10, 0, 0, 0}, 0x1005, 0x1015), "forwards")
	assert.False(t, DirectCall(arch.AMD64, []byte{0xe9, 0x10, 0, 0, 0}, 0x1005, 0x1015), "jmp rel32")
	assert.False(t, DirectCall(arch.AMD64, []byte{0xff, 0xd0}, 0x1002, 0), "indirect, and too short")
	assert.False(t, DirectCall(arch.AMD64, x86, 0x40113b, 0x401126+1<<32), "rel32 wraps nowhere")

	a64 := []byte{0xe8, 0xff, 0xff, 0x97}
	assert.True(t, DirectCall(arch.ARM64, a64, 0x4005d4, 0x400570))
	assert.False(t, DirectCall(arch.ARM64, a64, 0x4005d4, 0x400574), "another target")
	assert.True(t, DirectCall(arch.ARM64, []byte{0x04, 0, 0, 0x94}, 0x2004, 0x2010), "bl forwards")
	assert.False(t, DirectCall(arch.ARM64, []byte{0x04, 0, 0, 0x14}, 0x2004, 0x2010), "b, not bl")
	assert.False(t, DirectCall(arch.ARM64, []byte{0, 0, 0x3f, 0xd6}, 0x2004, 0), "blr x0")
	assert.False(t, DirectCall(arch.Unknown, x86, 0x40113b, 0x401126), "no architecture")
	if to, ok := CallTarget(arch.AMD64, x86, 0x40113b); !ok || to != 0x401126 {
		t.Errorf("CallTarget(amd64) = %#x, %v", to, ok)
	}
	if to, ok := CallTarget(arch.ARM64, []byte{0xff, 0xff, 0xff, 0x97}, 0x2004); !ok || to != 0x1ffc {
		t.Errorf("CallTarget(arm64, bl backwards) = %#x, %v", to, ok)
	}
	_, ok := CallTarget(arch.ARM64, []byte{0, 0, 0x3f, 0xd6}, 0x2004)
	assert.False(t, ok, "blr x0")
}

// TestAMD64CallOperand: the address an indirect call through memory reads
// its target from, for the encodings GNU as gives (objdump's reading of
// each in the comment), ending at the end of the 8 bytes before a return
// address. A call through a register, a RIP-relative one, or one whose
// register is unknown gives none.
func TestAMD64CallOperand(t *testing.T) {
	var regs arch.Regs
	regs.Set(arch.AMD64_RBX, 0x1000)
	regs.Set(13, 0x2000) // %r13
	regs.Set(arch.AMD64_RBP, 0x3000)
	regs.Set(arch.AMD64_R12, 0x4000)
	regs.Set(arch.AMD64_RDX, 3)
	regs.Set(arch.AMD64_RCX, 5)
	regs.Set(9, 7) // %r9
	for _, tc := range []struct {
		asm  string
		enc  []byte
		ea   uint64
		none bool
	}{
		{"call *(%rbx)", []byte{0xff, 0x13}, 0x1000, false},
		{"call *0x68(%r13)", []byte{0x41, 0xff, 0x55, 0x68}, 0x2068, false},
		{"call *0x18(%rbp)", []byte{0xff, 0x55, 0x18}, 0x3018, false},
		{"call *0x18(%r12)", []byte{0x41, 0xff, 0x54, 0x24, 0x18}, 0x4018, false},
		{"call *(%r12,%rdx,8)", []byte{0x41, 0xff, 0x14, 0xd4}, 0x4018, false},
		{"call *0x10(,%rcx,8)", []byte{0xff, 0x14, 0xcd, 0x10, 0, 0, 0}, 0x38, false},
		{"call *0x1000(%rbx,%r9,4)", []byte{0x42, 0xff, 0x94, 0x8b, 0x00, 0x10, 0, 0}, 0x201c, false},
		{"call *-0x8(%rbx)", []byte{0xff, 0x53, 0xf8}, 0xff8, false},
		{"call *0x200(%rip)", []byte{0xff, 0x15, 0x00, 0x02, 0, 0}, 0, true},
		{"call *%rbx", []byte{0xff, 0xd3}, 0, true},
		{"call *(%rsi) (unknown)", []byte{0xff, 0x16}, 0, true},
	} {
		var code [8]byte
		for i := range code {
			code[i] = 0x90
		}
		copy(code[8-len(tc.enc):], tc.enc)
		var got []uint64
		for k := 1; k <= 6; k++ {
			if ea, ok := amd64CallOperand(code, k, &regs); ok {
				got = append(got, ea)
			}
		}
		if tc.none {
			assert.Empty(t, got, tc.asm)
			continue
		}
		assert.Equal(t, []uint64{tc.ea}, got, tc.asm)
	}
}

// initFiniObject is a funcObject whose init and fini arrays hold fns
// (InitFiniObject), from link-time address at.
type initFiniObject struct {
	funcObject
	at  uint64
	fns []uint64
}

func (o *initFiniObject) InitFiniEntry(addr uint64) (uint64, bool) {
	if addr < o.at || addr%8 != 0 || (addr-o.at)/8 >= uint64(len(o.fns)) {
		return 0, false
	}
	return o.fns[(addr-o.at)/8], true
}

// TestLoaderCall: a function without CFI, reached by the dynamic loader's
// call *(%rbx) through its object's .fini_array (glibc's _dl_call_fini),
// is stepped by its prologue and its caller taken as proven only where
// %rbx points at a slot of those arrays that holds the function's address
// (after the load bias): the stack is complete. Pointing at the slot of
// another function, or at no slot, or unknown, the caller is still taken,
// a guess (fp_guess), as before.
func TestLoaderCall(t *testing.T) {
	const (
		stack = 0x7ff000
		bias  = 0x10000000
		fn    = 0x1050 // link-time; the PC is after its call
		other = 0x1100
		slots = 0x3dd0
		ra    = 0x403040 // after call *(%rbx), in the loader (another object)
	)
	code := []byte{0x48, 0x83, 0xec, 0x08, 0xe8, 0x17, 0x00, 0x00, 0x00, 0x89, 0xc1, 0xc3} // sub $8,%rsp; call 0x1070; mov %eax,%ecx; ret
	for _, tc := range []struct {
		name string
		rbx  uint64
		set  bool
		stop StopReason
	}{
		{"the slot holds the function", bias + slots + 8, true, StopOutermost},
		{"the slot holds another", bias + slots, true, StopFramePointerGuess},
		{"no slot", bias + slots + 0x100, true, StopFramePointerGuess},
		{"%rbx unknown", 0, false, StopFramePointerGuess},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &initFiniObject{funcObject: funcObject{fakeObject: fakeObject{code: map[uint64][]byte{fn: code}},
				starts: []uint64{fn, 0x1070}}, at: slots, fns: []uint64{other, fn}}
			loader := &fakeObject{rows: []cfi.Row{x86Outermost()}, code: map[uint64][]byte{
				ra - 8: {0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0xff, 0x13}, // call *(%rbx)
			}}
			space := NewAddressSpace([]Mapping{
				{Start: bias, End: bias + 0x2000, Exec: true, Object: obj, Bias: bias, Name: "a.out"},
				{Start: 0x400000, End: 0x410000, Exec: true, Object: loader, Name: "ld.so"},
				{Start: stack, End: stack + 0x1000, Name: "[stack]"},
			})
			sb := &stackBuilder{base: stack, data: make([]byte, 0x100)}
			sb.put(stack+8, ra)
			var regs arch.Regs
			regs.Set(arch.AMD64_RIP, bias+fn+9)
			regs.Set(arch.AMD64_RSP, stack)
			if tc.set {
				regs.Set(arch.AMD64_RBX, tc.rbx)
			}
			frames := make([]Frame, 8)
			res := New(arch.AMD64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
			require.Equal(t, 2, res.Frames, "frames %+v, stop %v (%v)", frames[:res.Frames], res.Stop, res.Err)
			assert.Equal(t, uint64(ra), frames[1].PC)
			assert.Equal(t, MethodPrologue, frames[1].Method)
			assert.Equal(t, tc.stop, res.Stop, "%v", res.Err)
		})
	}
}
