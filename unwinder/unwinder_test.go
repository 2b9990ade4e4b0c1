package unwinder

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
)

// fakeObject serves hand-written rows and code bytes, so that the unwind
// loop can be checked against stacks laid out by hand.
type fakeObject struct {
	rows []cfi.Row
	code map[uint64][]byte
}

func (o *fakeObject) FindRow(addr uint64, row *cfi.Row) error {
	for i := range o.rows {
		if o.rows[i].Start <= addr && addr < o.rows[i].End {
			*row = o.rows[i]
			return nil
		}
	}
	return cfi.ErrNoFDE
}

func (o *fakeObject) ReadCode(addr uint64, buf []byte) int {
	for start, b := range o.code {
		if addr >= start && addr < start+uint64(len(b)) {
			return copy(buf, b[addr-start:])
		}
	}
	return 0
}

// x86Row returns a row for [start,end) with CFA = rsp + cfaOff and the
// return address at CFA-8.
func x86Row(start, end uint64, cfaOff int64) cfi.Row {
	r := cfi.Row{Start: start, End: end, RA: arch.AMD64_RIP}
	r.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.AMD64_RSP, Offset: cfaOff}
	r.Regs[arch.AMD64_RIP] = cfi.Rule{Kind: cfi.RuleOffset, Offset: -8}
	return r
}

type stackBuilder struct {
	base uint64
	data []byte
}

func (s *stackBuilder) put(addr, v uint64) {
	binary.LittleEndian.PutUint64(s.data[addr-s.base:], v)
}

func TestUnwindSyntheticX86(t *testing.T) {
	const (
		text  = 0x400000
		stack = 0x7ff000
	)
	// leaf at 0x401000 (CFA=rsp+8), mid at 0x402000 (CFA=rsp+24, rbx at CFA-16),
	// outer at 0x403000 (CFA=rsp+16, RA undefined: the outermost frame).
	leaf := x86Row(0x401000, 0x401100, 8)
	mid := x86Row(0x402000, 0x402100, 24)
	mid.Regs[arch.AMD64_RBX] = cfi.Rule{Kind: cfi.RuleOffset, Offset: -16}
	outer := x86Row(0x403000, 0x403100, 16)
	outer.Regs[arch.AMD64_RIP] = cfi.Rule{Kind: cfi.RuleUndefined}
	obj := &fakeObject{rows: []cfi.Row{leaf, mid, outer}}
	space := NewAddressSpace([]Mapping{
		{Start: text, End: text + 0x10000, Exec: true, Object: obj, Name: "a.out"},
		{Start: stack, End: stack + 0x1000, Name: "[stack]"},
	})
	sb := &stackBuilder{base: stack, data: make([]byte, 0x100)}
	// leaf frame: rsp = stack; [rsp] = return into mid.
	sb.put(stack, 0x402010+5)
	// mid frame: rsp = stack+8; CFA = stack+32; RA at stack+24; rbx at stack+16.
	sb.put(stack+16, 0xb0b)
	sb.put(stack+24, 0x403020)
	var regs arch.Regs
	regs.Set(arch.AMD64_RIP, 0x401010)
	regs.Set(arch.AMD64_RSP, stack)
	regs.Set(arch.AMD64_RBX, 0x1111)

	u := New(arch.AMD64, Options{})
	var c Cache
	frames := make([]Frame, 16)
	st := &Stack{Addr: stack, Data: sb.data}
	res := u.Unwind(&c, space, &regs, st, frames)
	if res.Stop != StopOutermost || res.Frames != 3 {
		t.Fatalf("got %d frames, stop %v (%v); want 3, outermost", res.Frames, res.Stop, res.Err)
	}
	want := []struct {
		pc, sp, cfa uint64
		method      Method
	}{
		{0x401010, stack, stack + 8, MethodContext},
		{0x402015, stack + 8, stack + 32, MethodCFI},
		{0x403020, stack + 32, stack + 48, MethodCFI},
	}
	for i, w := range want {
		f := frames[i]
		if f.PC != w.pc || f.SP != w.sp || f.CFA != w.cfa || f.Method != w.method {
			t.Errorf("frame %d = pc %#x sp %#x cfa %#x %v; want pc %#x sp %#x cfa %#x %v",
				i, f.PC, f.SP, f.CFA, f.Method, w.pc, w.sp, w.cfa, w.method)
		}
	}
	if frames[1].LookupPC() != 0x402014 || frames[0].LookupPC() != 0x401010 {
		t.Errorf("LookupPC: frame 0 %#x frame 1 %#x", frames[0].LookupPC(), frames[1].LookupPC())
	}

	// The same stack cut after 8 bytes: the mid frame's return address lies
	// beyond the snapshot.
	res = u.Unwind(&c, space, &regs, &Stack{Addr: stack, Data: sb.data[:16]}, frames)
	if res.Stop != StopTruncated || res.Frames != 2 {
		t.Errorf("truncated: got %d frames, stop %v; want 2, truncated", res.Frames, res.Stop)
	}

	// A buffer of two frames ends with StopDepth.
	res = u.Unwind(&c, space, &regs, st, frames[:2])
	if res.Stop != StopDepth || res.Frames != 2 {
		t.Errorf("depth: got %d frames, stop %v; want 2, depth", res.Frames, res.Stop)
	}

	// Warm unwinds allocate nothing.
	allocs := testing.AllocsPerRun(100, func() { u.Unwind(&c, space, &regs, st, frames) })
	if allocs != 0 {
		t.Errorf("Unwind allocated %.1f times per run; want 0", allocs)
	}
}

func TestUnwindLoopIsStopped(t *testing.T) {
	const stack = 0x7ff000
	// A row whose CFA is rsp+0 and whose return address is at CFA: the
	// stack never moves.
	r := x86Row(0x401000, 0x401100, 0)
	r.Regs[arch.AMD64_RIP] = cfi.Rule{Kind: cfi.RuleOffset, Offset: 0}
	obj := &fakeObject{rows: []cfi.Row{r}}
	space := NewAddressSpace([]Mapping{{Start: 0x400000, End: 0x410000, Exec: true, Object: obj}})
	sb := &stackBuilder{base: stack, data: make([]byte, 64)}
	sb.put(stack, 0x401050)
	var regs arch.Regs
	regs.Set(arch.AMD64_RIP, 0x401010)
	regs.Set(arch.AMD64_RSP, stack)
	frames := make([]Frame, 64)
	res := New(arch.AMD64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
	if res.Stop != StopLoop || res.Frames != 1 || res.Err == nil || !strings.Contains(res.Err.Error(), "same SP") {
		t.Fatalf("got %d frames, stop %v (%v); want 1, loop, saying where", res.Frames, res.Stop, res.Err)
	}
}

func TestUnwindFramePointerAndSignal(t *testing.T) {
	const stack = 0x7ff000
	// No CFI anywhere: frame 0 is in JIT code (no object) with rbp set up;
	// its caller is the musl-style sigreturn trampoline, recognised by its
	// bytes; the signal context then restores the interrupted frame.
	tramp := &fakeObject{code: map[uint64][]byte{0x500000: sigreturnAMD64}}
	space := NewAddressSpace([]Mapping{
		{Start: 0x400000, End: 0x410000, Exec: true, Name: "[jit]"},
		{Start: 0x500000, End: 0x501000, Exec: true, Object: tramp, Name: "libc"},
	})
	sb := &stackBuilder{base: stack, data: make([]byte, 0x400)}
	// JIT frame: rsp = stack, rbp = stack+0x10: [rbp] = saved rbp, [rbp+8] = RA.
	sb.put(stack+0x10, 0xdead0)
	sb.put(stack+0x18, 0x500000)
	// After the fp step: rsp = stack+0x20 = &ucontext.
	uc := uint64(stack + 0x20)
	gregs := uc + amd64SigcontextOff
	for i, r := range amd64SigRegs {
		v := uint64(0x1000 + r)
		switch r {
		case arch.AMD64_RSP:
			v = 0x7ff300
		case arch.AMD64_RIP:
			v = 0x400777 // interrupted in the JIT code
		}
		sb.put(gregs+uint64(8*i), v)
	}
	var regs arch.Regs
	regs.Set(arch.AMD64_RIP, 0x400100)
	regs.Set(arch.AMD64_RSP, stack)
	regs.Set(arch.AMD64_RBP, stack+0x10)
	frames := make([]Frame, 8)
	res := New(arch.AMD64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
	if res.Frames < 3 {
		t.Fatalf("got %d frames, stop %v (%v); want at least 3", res.Frames, res.Stop, res.Err)
	}
	if f := frames[1]; f.PC != 0x500000 || f.Method != MethodFramePointer || f.Flags&FrameSignalTrampoline == 0 {
		t.Errorf("frame 1 = %+v; want the trampoline at 0x500000 via fp, flagged as signal trampoline", f)
	}
	if f := frames[2]; f.PC != 0x400777 || f.SP != 0x7ff300 || f.Method != MethodSignal || f.Flags&FrameReturnAddress != 0 {
		t.Errorf("frame 2 = %+v; want interrupted pc 0x400777 sp 0x7ff300 via signal, not a return address", f)
	}
}

// A signal can interrupt a function at its first byte. The interrupted PC is
// exact, so its row must be looked up at the PC, not PC-1 (which lies in the
// previous function, whose row here would send the unwind astray).
func TestUnwindSignalAtFunctionEntry(t *testing.T) {
	const stack = 0x7ff000
	prev := x86Row(0x401000, 0x401100, 64) // the function before: a big frame
	entry := x86Row(0x401100, 0x401200, 8) // the interrupted one, at entry
	handler := x86Row(0x402000, 0x402100, 8)
	mainRow := x86Row(0x403000, 0x403100, 16)
	mainRow.Regs[arch.AMD64_RIP] = cfi.Rule{Kind: cfi.RuleUndefined}
	obj := &fakeObject{
		rows: []cfi.Row{prev, entry, handler, mainRow},
		code: map[uint64][]byte{0x410000: sigreturnAMD64},
	}
	space := NewAddressSpace([]Mapping{{Start: 0x400000, End: 0x420000, Exec: true, Object: obj}})
	sb := &stackBuilder{base: stack, data: make([]byte, 0x800)}
	sb.put(stack, 0x410000) // the handler returns to the trampoline
	gregs := uint64(stack+8) + amd64SigcontextOff
	interruptedSP := uint64(stack + 0x400)
	for i, r := range amd64SigRegs {
		switch r {
		case arch.AMD64_RSP:
			sb.put(gregs+uint64(8*i), interruptedSP)
		case arch.AMD64_RIP:
			sb.put(gregs+uint64(8*i), 0x401100)
		}
	}
	sb.put(interruptedSP, 0x403050) // the interrupted function's return address
	var regs arch.Regs
	regs.Set(arch.AMD64_RIP, 0x402010)
	regs.Set(arch.AMD64_RSP, stack)
	frames := make([]Frame, 8)
	res := New(arch.AMD64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
	wantPCs := []uint64{0x402010, 0x410000, 0x401100, 0x403050}
	if res.Frames != len(wantPCs) || res.Stop != StopOutermost {
		t.Fatalf("got %d frames, stop %v (%v); want %d, outermost", res.Frames, res.Stop, res.Err, len(wantPCs))
	}
	for i, pc := range wantPCs {
		if frames[i].PC != pc {
			t.Errorf("frame %d pc %#x; want %#x", i, frames[i].PC, pc)
		}
	}
	if frames[2].LookupPC() != 0x401100 || frames[1].LookupPC() != 0x410000 {
		t.Errorf("LookupPC of the interrupted frame %#x, of the trampoline %#x; want the PCs themselves",
			frames[2].LookupPC(), frames[1].LookupPC())
	}
}

// On arm64 a first frame without CFI still has its return address in the
// link register; the next frame, also without CFI, follows x29.
func TestUnwindARM64LinkRegisterThenFramePointer(t *testing.T) {
	const stack = 0x7ff000
	space := NewAddressSpace([]Mapping{{Start: 0x400000, End: 0x410000, Exec: true, Name: "[jit]"}})
	sb := &stackBuilder{base: stack, data: make([]byte, 0x100)}
	// Caller's frame record at stack+0x40: [x29] = 0 (end of chain), [x29+8] = RA.
	sb.put(stack+0x40, 0)
	sb.put(stack+0x48, 0x400900)
	var regs arch.Regs
	regs.Set(arch.ARM64_PC, 0x400100)
	regs.Set(arch.ARM64_SP, stack)
	regs.Set(arch.ARM64_X30, 0x400504) // return into the caller
	regs.Set(arch.ARM64_X29, stack+0x40)
	frames := make([]Frame, 8)
	res := New(arch.ARM64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
	if res.Frames < 3 {
		t.Fatalf("got %d frames (%v %v)", res.Frames, res.Stop, res.Err)
	}
	if frames[1].PC != 0x400504 || frames[1].Method != MethodLinkRegister || frames[1].SP != stack {
		t.Errorf("frame 1 = %+v; want pc 0x400504 via lr with SP unchanged", frames[1])
	}
	if frames[2].PC != 0x400900 || frames[2].Method != MethodFramePointer {
		t.Errorf("frame 2 = %+v; want pc 0x400900 via fp", frames[2])
	}
}

// An arm64 first frame in code ustack does not have (a missing library)
// that has stored its frame record (stp x29, x30, [sp, #-16]!; mov x29,
// sp): the caller is found through the record, with the SP above it, and
// the caller's CFI (CFA = sp + 64, x29 and x30 at its bottom) then finds
// its own record through x29. The link register step kept the frame's SP:
// the caller's rules read the frame's record as the caller's, giving its
// return address twice.
func TestUnwindARM64OwnFrameRecord(t *testing.T) {
	const stack = 0x7ff000
	caller := cfi.Row{Start: 0x500100, End: 0x500200, RA: arch.ARM64_X30}
	caller.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.ARM64_SP, Offset: 64}
	caller.Regs[arch.ARM64_X29] = cfi.Rule{Kind: cfi.RuleOffset, Offset: -64}
	caller.Regs[arch.ARM64_X30] = cfi.Rule{Kind: cfi.RuleOffset, Offset: -56}
	outer := cfi.Row{Start: 0x500900, End: 0x500a00, RA: arch.ARM64_X30}
	outer.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.ARM64_SP, Offset: 16}
	outer.Regs[arch.ARM64_X30] = cfi.Rule{Kind: cfi.RuleUndefined}
	obj := &fakeObject{rows: []cfi.Row{caller, outer}}
	space := NewAddressSpace([]Mapping{
		{Start: 0x400000, End: 0x410000, Exec: true, Name: "/usr/lib/libgone.so"},
		{Start: 0x500000, End: 0x510000, Exec: true, Object: obj, Name: "a.out"},
	})
	for _, tc := range []struct {
		name     string
		fp       uint64 // frame 0's x29
		wantPCs  []uint64
		wantStop StopReason
		wantSP1  uint64
		wantHow1 Method
	}{
		// The record at the SP: through it.
		{"own record", stack, []uint64{0x400100, 0x500104, 0x500904}, StopOutermost, stack + 16, MethodFramePointer},
		// x29 still the caller's (a leaf that saved nothing): the link
		// register, with the SP unchanged, is the caller's.
		{"caller's record", stack + 16, []uint64{0x400100, 0x500104, 0x500904}, StopOutermost, stack + 16, MethodLinkRegister},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := &stackBuilder{base: stack, data: make([]byte, 0x100)}
			sp := uint64(stack)
			if tc.fp != stack {
				sp = stack + 16 // the leaf pushed nothing
			}
			sb.put(stack, stack+16)    // frame 0's record: the caller's x29,
			sb.put(stack+8, 0x500104)  // and its return address
			sb.put(stack+16, 0)        // the caller's record: main's x29,
			sb.put(stack+24, 0x500904) // and the return into main
			var regs arch.Regs
			regs.Set(arch.ARM64_PC, 0x400100)
			regs.Set(arch.ARM64_SP, sp)
			regs.Set(arch.ARM64_X30, 0x500104)
			regs.Set(arch.ARM64_X29, tc.fp)
			frames := make([]Frame, 8)
			res := New(arch.ARM64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
			var pcs []uint64
			for _, f := range frames[:res.Frames] {
				pcs = append(pcs, f.PC)
			}
			if res.Stop != tc.wantStop || len(pcs) != len(tc.wantPCs) {
				t.Fatalf("pcs %#x, stop %v (%v); want %#x, %v", pcs, res.Stop, res.Err, tc.wantPCs, tc.wantStop)
			}
			for i := range pcs {
				if pcs[i] != tc.wantPCs[i] {
					t.Fatalf("pcs %#x; want %#x", pcs, tc.wantPCs)
				}
			}
			if f := frames[1]; f.SP != tc.wantSP1 || f.Method != tc.wantHow1 {
				t.Errorf("frame 1: SP %#x by %v; want %#x by %v", f.SP, f.Method, tc.wantSP1, tc.wantHow1)
			}
		})
	}
}

// TestScanStep: a first frame in code the capture cannot show (a mapping
// without an object: a library replaced on disk after the process loaded
// it), whose frame pointer is unusable, is left by scanning the stack: the
// first word above its SP that points just after a call in code with CFI
// is its caller's return address (how scan), the caller's SP just above
// it, and the stack, outermost by the caller's CFI, is fp_guess, its error
// saying the caller was found by scanning. Words that point into code
// after no call, or after a call in code without CFI, are passed over;
// where none is left, the walk stops as before (no_unwind_info).
func TestScanStep(t *testing.T) {
	const stack = 0x7ff000
	caller := x86Row(0x402000, 0x402100, 16)
	outer := x86Row(0x403000, 0x403100, 16)
	outer.Regs[arch.AMD64_RIP] = cfi.Rule{Kind: cfi.RuleUndefined}
	call := []byte{0x90, 0x90, 0x90, 0xe8, 0x10, 0x00, 0x00, 0x00} // ...; call rel32
	noCall := []byte{0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90}
	obj := &fakeObject{rows: []cfi.Row{caller, outer}, code: map[uint64][]byte{
		0x402040 - 8: call, 0x402060 - 8: noCall, 0x403050 - 8: call, 0x404040 - 8: call,
	}}
	space := NewAddressSpace([]Mapping{
		{Start: 0x300000, End: 0x310000, Exec: true, Name: "/usr/lib/libgone.so (deleted)"},
		{Start: 0x400000, End: 0x410000, Exec: true, Object: obj, Name: "a.out"},
	})
	for _, tc := range []struct {
		name  string
		words []uint64 // from the SP up
		want  []uint64 // the PCs
		stop  StopReason
	}{
		{"the first return address after a call", []uint64{0x1234, 0x402060, 0x404040, 0x402040, 0x402040}, []uint64{0x300100, 0x402040, 0x403050}, StopFramePointerGuess},
		{"none", []uint64{0x1234, 0x402060, 0x404040}, []uint64{0x300100}, StopNoUnwindInfo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := &stackBuilder{base: stack, data: make([]byte, 8*len(tc.words)+16)}
			for i, w := range tc.words {
				sb.put(stack+uint64(8*i), w)
			}
			// The caller's frame, 16 bytes from its SP: the return into outer.
			at := stack + 8*uint64(len(tc.words)-1) + 8
			if tc.stop == StopFramePointerGuess {
				at = stack + 8*4 // found at word 3: the caller's SP is word 4, its CFA word 6
				sb.data = append(sb.data, make([]byte, 32)...)
				sb.put(at+8, 0x403050)
			}
			var regs arch.Regs
			regs.Set(arch.AMD64_RIP, 0x300100)
			regs.Set(arch.AMD64_RSP, stack)
			regs.Set(arch.AMD64_RBP, 1) // no frame record
			frames := make([]Frame, 8)
			res := New(arch.AMD64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
			var pcs []uint64
			for _, f := range frames[:res.Frames] {
				pcs = append(pcs, f.PC)
			}
			if res.Stop != tc.stop || !slices.Equal(pcs, tc.want) {
				t.Fatalf("pcs %#x, stop %v (%v); want %#x, %v", pcs, res.Stop, res.Err, tc.want, tc.stop)
			}
			if tc.stop != StopFramePointerGuess {
				return
			}
			if f := frames[1]; f.Method != MethodScan || f.SP != stack+8*4 {
				t.Errorf("frame 1 = %+v; want by scan, SP %#x", f, stack+8*4)
			}
			var ge *FramePointerGuessError
			if !errors.As(res.Err, &ge) || !ge.Scan || ge.Frame != 0 || !strings.Contains(ge.Error(), "scanning the stack") {
				t.Errorf("err %v; want a FramePointerGuessError of frame 0 by scanning", res.Err)
			}
		})
	}
}

// TestSignalAtNull: a signal that interrupted a call through a NULL
// function pointer (SIGSEGV at address 0, a handler installed) restores a
// PC of 0. That is no end of the stack: the frame at 0 follows, and its
// caller is found by the call before the return address it left (arm64:
// x30 after a blr; x86_64: the word at the SP after a call through a
// register), as gdb shows it. Before, the PC of 0 was taken for the end,
// and the stack called complete.
func TestSignalAtNull(t *testing.T) {
	const (
		stack   = 0x7ff000
		handler = 0x400100
		tramp   = 0x500000
		callRA  = 0x400244 // in the caller, after its call through a register; the caller's CFI ends the stack
	)
	for _, a := range []arch.Arch{arch.ARM64, arch.AMD64} {
		t.Run(a.String(), func(t *testing.T) {
			var hrow, crow cfi.Row
			var before []byte
			var regs arch.Regs
			sb := &stackBuilder{base: stack, data: make([]byte, 0x1000)}
			interruptedSP := uint64(stack + 0x800)
			if a == arch.ARM64 {
				hrow = cfi.Row{Start: 0x400100, End: 0x400180, RA: arch.ARM64_X30} // a leaf: CFA = SP, return address in x30
				hrow.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.ARM64_SP}
				crow = a64Outermost(0x400200, 0x400300)
				before = a64Code(0xd503201f, 0xd63f0020) // nop; blr x1
				base := uint64(stack) + arm64SigcontextOff
				sb.put(base+8*30, callRA)             // x30: the blr's return address
				sb.put(base+8*31, interruptedSP)      // sp
				sb.put(base+8*32, 0)                  // pc: the NULL the blr went to
				sb.put(stack+592, 528<<32|0x46508001) // fpsimd_context
				regs.Set(arch.ARM64_PC, handler+0x10)
				regs.Set(arch.ARM64_SP, stack)
				regs.Set(arch.ARM64_X30, tramp)
			} else {
				hrow = x86Row(0x400100, 0x400180, 8)
				crow = x86Row(0x400200, 0x400300, 8)
				crow.Regs[arch.AMD64_RIP] = cfi.Rule{Kind: cfi.RuleUndefined}
				before = []byte{0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0xff, 0xd0} // call *%rax
				sb.put(stack, tramp)                                            // the handler's return address: the trampoline
				base := uint64(stack+8) + amd64SigcontextOff
				for i, r := range amd64SigRegs {
					switch r {
					case arch.AMD64_RSP:
						sb.put(base+uint64(8*i), interruptedSP)
					case arch.AMD64_RIP:
						sb.put(base+uint64(8*i), 0)
					}
				}
				sb.put(interruptedSP, callRA) // the call's return address, at the SP
				regs.Set(arch.AMD64_RIP, handler+0x10)
				regs.Set(arch.AMD64_RSP, stack)
			}
			code := sigreturnAMD64
			if a == arch.ARM64 {
				code = sigreturnARM64
			}
			obj := &fakeObject{rows: []cfi.Row{hrow, crow}, code: map[uint64][]byte{callRA - 8: before}}
			trampObj := &fakeObject{code: map[uint64][]byte{tramp: code}}
			space := NewAddressSpace([]Mapping{
				{Start: 0x400000, End: 0x410000, Exec: true, Object: obj, Name: "/usr/bin/prog"},
				{Start: tramp, End: tramp + 0x1000, Exec: true, Object: trampObj, Name: "/usr/lib/libc.so.6"},
			})
			frames := make([]Frame, 8)
			res := New(a, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
			var pcs []uint64
			var hows []Method
			for _, f := range frames[:res.Frames] {
				pcs, hows = append(pcs, f.PC), append(hows, f.Method)
			}
			want := []uint64{handler + 0x10, tramp, 0, callRA}
			if !slices.Equal(pcs, want) || res.Stop != StopOutermost {
				t.Fatalf("pcs %#x (%v), stop %v (%v); want %#x, outermost", pcs, hows, res.Stop, res.Err, want)
			}
			if hows[2] != MethodSignal || hows[3] != MethodBadCall {
				t.Errorf("hows %v; want the frame at 0 by signal, its caller by bad_call", hows)
			}
		})
	}
}

// TestOtherStackRow: a row an Object marks OtherStack (Go's vDSO calls,
// which move SP onto the g0 stack and find their CFA from %rbp) may give a
// caller whose SP lies below the frame's, on the goroutine's stack: the
// walk goes on there, where the same row without the mark stops (loop).
func TestOtherStackRow(t *testing.T) {
	const (
		g0    = 0x7ff000 // the g0 stack, above the goroutine's
		gstk  = 0x500000 // the goroutine's stack
		vdso  = 0x600100 // frame 0: CFA = rsp+8
		nano  = 0x401050 // nanotime1's return address: CFA = rbp+16
		outer = 0x402050 // its caller, on the goroutine's stack: outermost
	)
	for _, mark := range []bool{true, false} {
		leaf := x86Row(0x600000, 0x600200, 8)
		switched := cfi.Row{Start: 0x401000, End: 0x401100, RA: arch.AMD64_RIP, OtherStack: mark}
		switched.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.AMD64_RBP, Offset: 16}
		switched.Regs[arch.AMD64_RIP] = cfi.Rule{Kind: cfi.RuleOffset, Offset: -8}
		switched.Regs[arch.AMD64_RBP] = cfi.Rule{Kind: cfi.RuleOffset, Offset: -16}
		top := x86Row(0x402000, 0x402100, 16)
		top.Regs[arch.AMD64_RIP] = cfi.Rule{Kind: cfi.RuleUndefined}
		obj := &fakeObject{rows: []cfi.Row{leaf, switched, top}}
		space := NewAddressSpace([]Mapping{
			{Start: 0x400000, End: 0x410000, Exec: true, Object: obj, Name: "/usr/bin/goprog"},
			{Start: 0x600000, End: 0x601000, Exec: true, Object: obj, Name: "[vdso]"},
		})
		g0Data := make([]byte, 0x100)
		binary.LittleEndian.PutUint64(g0Data[0:], nano) // the vDSO's return address
		gData := make([]byte, 0x100)
		binary.LittleEndian.PutUint64(gData[0x10:], 0)     // nanotime1's saved rbp
		binary.LittleEndian.PutUint64(gData[0x18:], outer) // its return address
		mem, err := NewSegments([]Segment{{Addr: g0, Size: 0x100, Data: g0Data}, {Addr: gstk, Size: 0x100, Data: gData}})
		if err != nil {
			t.Fatal(err)
		}
		var regs arch.Regs
		regs.Set(arch.AMD64_RIP, vdso)
		regs.Set(arch.AMD64_RSP, g0)
		regs.Set(arch.AMD64_RBP, gstk+0x10) // nanotime1's frame record, on the goroutine's stack
		frames := make([]Frame, 8)
		res := New(arch.AMD64, Options{}).Unwind(&Cache{}, space, &regs, mem, frames)
		var pcs []uint64
		for _, f := range frames[:res.Frames] {
			pcs = append(pcs, f.PC)
		}
		if mark {
			if !slices.Equal(pcs, []uint64{vdso, nano, outer}) || res.Stop != StopOutermost || frames[2].SP != gstk+0x20 {
				t.Errorf("marked: pcs %#x, stop %v (%v), frame 2 SP %#x; want the caller on the goroutine's stack, outermost", pcs, res.Stop, res.Err, frames[2].SP)
			}
		} else if res.Stop != StopLoop || len(pcs) != 2 {
			t.Errorf("unmarked: pcs %#x, stop %v; want 2 frames, loop", pcs, res.Stop)
		}

		// A recording holds the g0 stack only: the caller's frame
		// record, above or below the snapshot, is on the stack the
		// function left (stack_switch), not cut by the snapshot's
		// size (truncated) nor bad memory; unmarked, it stays so.
		for _, rbp := range []uint64{gstk + 0x10, g0 + 0x1000} {
			regs.Set(arch.AMD64_RBP, rbp)
			res := New(arch.AMD64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: g0, Data: g0Data}, frames)
			want := StopStackSwitch
			if !mark && rbp < g0 {
				want = StopBadMemory
			} else if !mark {
				want = StopTruncated
			}
			if res.Frames != 2 || res.Stop != want || mark != errors.Is(res.Err, cfi.ErrStackSwitch) {
				t.Errorf("marked %v, rbp %#x, g0 stack only: %d frames, stop %v (%v); want 2, %v", mark, rbp, res.Frames, res.Stop, res.Err, want)
			}
		}
	}
}

// TestSignalOnAltStack: a handler running on an alternate signal stack
// (sigaltstack), whose snapshot starts there, returns into the sigreturn
// trampoline; the signal frame restores the interrupted frame, whose SP is
// on the thread's stack. Where that stack lies outside the snapshot (above
// it: truncated; below it: bad_memory) the walk stops there with
// ErrInterruptedStackNotCaptured, which says a larger snapshot would not
// reach it; where the interrupted SP is in the snapshot and the word the
// next step needs lies just beyond it, it is an ordinary truncation.
func TestSignalOnAltStack(t *testing.T) {
	const (
		stack   = 0x7ff000 // the alternate stack: the snapshot
		size    = 0x400
		handler = 0x401010
		tramp   = 0x500000
		victim  = 0x402010 // the interrupted function: CFA = rsp+16
	)
	obj := &fakeObject{rows: []cfi.Row{x86Row(0x401000, 0x401100, 8), x86Row(0x402000, 0x402100, 16)}}
	trampObj := &fakeObject{code: map[uint64][]byte{tramp: sigreturnAMD64}}
	space := NewAddressSpace([]Mapping{
		{Start: 0x400000, End: 0x410000, Exec: true, Object: obj, Name: "prog"},
		{Start: tramp, End: tramp + 0x1000, Exec: true, Object: trampObj, Name: "libc"},
	})
	for _, c := range []struct {
		name     string
		sp       uint64 // the interrupted frame's SP
		stop     StopReason
		notThere bool
	}{
		{"thread stack above", 0x900000, StopTruncated, true},
		{"thread stack below", 0x600000, StopBadMemory, true},
		{"in the snapshot, next word beyond", stack + size - 8, StopTruncated, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			sb := &stackBuilder{base: stack, data: make([]byte, size)}
			sb.put(stack, tramp) // the handler's return address
			gregs := uint64(stack+8) + amd64SigcontextOff
			for i, r := range amd64SigRegs {
				v := uint64(0x1000 + r)
				switch r {
				case arch.AMD64_RSP:
					v = c.sp
				case arch.AMD64_RIP:
					v = victim
				}
				sb.put(gregs+uint64(8*i), v)
			}
			var regs arch.Regs
			regs.Set(arch.AMD64_RIP, handler)
			regs.Set(arch.AMD64_RSP, stack)
			frames := make([]Frame, 8)
			res := New(arch.AMD64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
			if res.Frames != 3 || frames[2].PC != victim || frames[2].Method != MethodSignal {
				t.Fatalf("got %d frames (%+v), stop %v (%v); want handler, trampoline, the interrupted frame by the signal frame", res.Frames, frames[:res.Frames], res.Stop, res.Err)
			}
			if res.Stop != c.stop || errors.Is(res.Err, ErrInterruptedStackNotCaptured) != c.notThere {
				t.Errorf("stop %v (%v); want %v, interrupted stack not captured: %v", res.Stop, res.Err, c.stop, c.notThere)
			}
		})
	}
}

// TestSigreturnAtSyscallEntry: a thread sampled at rt_sigreturn's entry
// (its tracepoint) has its PC after the trampoline's system call, the
// signal frame it is about to restore at its SP. A trampoline without CFI
// (musl's) is known by its code ending there, as it is by its code
// starting at the PC: the signal frame gives the interrupted frame, here
// outermost by its CFI. Before, the walk stopped at the trampoline.
func TestSigreturnAtSyscallEntry(t *testing.T) {
	const (
		stack       = 0x7ff000
		tramp       = 0x500000
		interrupted = 0x400210 // outermost by its CFI
	)
	for _, a := range []arch.Arch{arch.ARM64, arch.AMD64} {
		t.Run(a.String(), func(t *testing.T) {
			sb := &stackBuilder{base: stack, data: make([]byte, 0x1000)}
			var row cfi.Row
			var regs arch.Regs
			code := sigreturnAMD64
			if a == arch.ARM64 {
				code = sigreturnARM64
				row = a64Outermost(0x400200, 0x400300)
				base := uint64(stack) + arm64SigcontextOff
				sb.put(base+8*31, stack+0x800)        // sp
				sb.put(base+8*32, interrupted)        // pc
				sb.put(stack+592, 528<<32|0x46508001) // fpsimd_context
				regs.Set(arch.ARM64_PC, tramp+uint64(len(code)))
				regs.Set(arch.ARM64_SP, stack)
				regs.Set(arch.ARM64_X30, tramp) // the handler returned through it
			} else {
				row = x86Row(0x400200, 0x400300, 8)
				row.Regs[arch.AMD64_RIP] = cfi.Rule{Kind: cfi.RuleUndefined}
				base := uint64(stack) + amd64SigcontextOff
				for i, r := range amd64SigRegs {
					switch r {
					case arch.AMD64_RSP:
						sb.put(base+uint64(8*i), stack+0x800)
					case arch.AMD64_RIP:
						sb.put(base+uint64(8*i), interrupted)
					}
				}
				regs.Set(arch.AMD64_RIP, tramp+uint64(len(code)))
				regs.Set(arch.AMD64_RSP, stack)
			}
			obj := &fakeObject{rows: []cfi.Row{row}}
			// The trampoline, then what follows it in the library.
			trampObj := &fakeObject{code: map[uint64][]byte{tramp: append(slices.Clone(code), 0x1f, 0x20, 0x03, 0xd5)}}
			space := NewAddressSpace([]Mapping{
				{Start: 0x400000, End: 0x410000, Exec: true, Object: obj, Name: "/usr/bin/prog"},
				{Start: tramp, End: tramp + 0x1000, Exec: true, Object: trampObj, Name: "/lib/ld-musl.so.1"},
			})
			frames := make([]Frame, 8)
			res := New(a, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
			var pcs []uint64
			var hows []Method
			for _, f := range frames[:res.Frames] {
				pcs, hows = append(pcs, f.PC), append(hows, f.Method)
			}
			want := []uint64{tramp + uint64(len(code)), interrupted}
			if !slices.Equal(pcs, want) || res.Stop != StopOutermost {
				t.Fatalf("pcs %#x (%v), stop %v (%v); want %#x, outermost", pcs, hows, res.Stop, res.Err, want)
			}
			if hows[1] != MethodSignal {
				t.Errorf("hows %v; want the interrupted frame by signal", hows)
			}
		})
	}
}
