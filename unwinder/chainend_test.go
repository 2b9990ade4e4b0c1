package unwinder

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
)

// entryObject is a fakeObject whose functions in [lo, hi) begin a stack.
type entryObject struct {
	fakeObject
	lo, hi uint64
	asked  []uint64 // the addresses Outermost was asked about
}

func (o *entryObject) Outermost(addr uint64) bool {
	o.asked = append(o.asked, addr)
	return o.lo <= addr && addr < o.hi
}

// TestChainEndProvesOutermost checks that the end of a frame-pointer or
// link-register chain (a zero frame pointer, a zero return address) ends
// the stack as complete only in a function the object says begins a stack
// (_start, clone): a frame whose object is missing, or a function not known
// to begin a stack, stops with no_unwind_info. Code built without frame
// pointers holds anything in rbp, 0 included, and a program whose file is
// missing says nothing at all.
func TestChainEndProvesOutermost(t *testing.T) {
	const (
		text  = 0x400000
		stack = 0x7ff000
	)
	// _start at [0x401000, 0x401020) ends with its call to main
	// (0x402000), which returns to 0x401020, past _start's end: the
	// lookup at the return address minus one is what lies in _start.
	mainRow := x86Row(0x402000, 0x402100, 8)
	cases := []struct {
		name       string
		a          arch.Arch
		obj        func() Object // nil: the object is missing
		pc, fp, lr uint64
		ra         uint64 // the word at SP, main's return address (x86_64)
		frames     int
		stop       StopReason
		err        error
	}{
		{name: "missing_object_fp0", a: arch.AMD64, pc: 0x401010,
			frames: 1, stop: StopNoUnwindInfo, err: errNoObject},
		{name: "missing_object_arm64_lr0", a: arch.ARM64, pc: 0x401010,
			frames: 1, stop: StopNoUnwindInfo, err: errNoObject},
		{name: "no_cfi_fp0_other_function", a: arch.AMD64, pc: 0x403010,
			obj:    func() Object { return &entryObject{lo: 0x401000, hi: 0x401020} },
			frames: 1, stop: StopNoUnwindInfo, err: errZeroFramePointer},
		{name: "no_cfi_fp0_entry_function", a: arch.AMD64, pc: 0x401010,
			obj:    func() Object { return &entryObject{lo: 0x401000, hi: 0x401020} },
			frames: 1, stop: StopOutermost},
		{name: "cfi_then_no_cfi_start_fp0", a: arch.AMD64, pc: 0x402010, ra: 0x401020,
			obj: func() Object {
				return &entryObject{fakeObject: fakeObject{rows: []cfi.Row{mainRow}}, lo: 0x401000, hi: 0x401020}
			},
			frames: 2, stop: StopOutermost},
		{name: "cfi_then_no_cfi_other_fp0", a: arch.AMD64, pc: 0x402010, ra: 0x403020,
			obj: func() Object {
				return &entryObject{fakeObject: fakeObject{rows: []cfi.Row{mainRow}}, lo: 0x401000, hi: 0x401020}
			},
			frames: 2, stop: StopNoUnwindInfo, err: errZeroFramePointer},
		{name: "arm64_lr0_other_function", a: arch.ARM64, pc: 0x403010, fp: stack + 0x40,
			obj:    func() Object { return &entryObject{lo: 0x401000, hi: 0x401020} },
			frames: 1, stop: StopNoUnwindInfo, err: errZeroReturnAddress},
		{name: "arm64_lr0_entry_function", a: arch.ARM64, pc: 0x401010, fp: stack + 0x40,
			obj:    func() Object { return &entryObject{lo: 0x401000, hi: 0x401020} },
			frames: 1, stop: StopOutermost},
		{name: "fp_record_ra0_missing_object", a: arch.AMD64, pc: 0x401010, fp: stack + 0x40,
			frames: 1, stop: StopNoUnwindInfo, err: errNoObject},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var obj Object
			if c.obj != nil {
				obj = c.obj()
			}
			space := NewAddressSpace([]Mapping{{Start: text, End: text + 0x10000, Exec: true, Object: obj, Name: "a.out"}})
			sb := &stackBuilder{base: stack, data: make([]byte, 0x100)}
			sb.put(stack, c.ra)
			// A frame record of zeros where fp points: caller's FP
			// 0, return address 0.
			var regs arch.Regs
			regs.Set(c.a.PC(), c.pc)
			regs.Set(c.a.SP(), stack)
			regs.Set(c.a.FP(), c.fp)
			if c.a == arch.ARM64 {
				regs.Set(arch.ARM64_X30, c.lr)
			}
			frames := make([]Frame, 8)
			res := New(c.a, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
			if res.Frames != c.frames || res.Stop != c.stop || res.Err != c.err {
				t.Errorf("got %d frames, stop %v (%v); want %d, %v (%v)", res.Frames, res.Stop, res.Err, c.frames, c.stop, c.err)
			}
			if eo, ok := obj.(*entryObject); ok && c.stop == StopOutermost && c.frames == 2 {
				if len(eo.asked) != 1 || eo.asked[0] != 0x40101f {
					t.Errorf("Outermost asked about %#x; want the return address minus one, 0x40101f", eo.asked)
				}
			}
		})
	}
}

// TestReturnIntoStackBaseEndsStack: a frame returning into a function that
// begins a stack (Go's runtime.clone, whose child side calls the thread's
// function) is the stack's first, whatever word its CFI finds above it: a
// return address in no code there ends the stack outermost, not with
// no_mapping, and so does a word past the end of the snapshot (the top of
// the new thread's stack), not truncated. Returning into any other
// function, it is no_mapping (truncated) as before.
func TestReturnIntoStackBaseEndsStack(t *testing.T) {
	const (
		text  = 0x400000
		stack = 0x7ff000
	)
	// mstart at 0x402000 (CFA = rsp+8) returns into clone at
	// [0x401000, 0x401100) (CFA = rsp+8), whose return address slot
	// holds a heap address.
	rows := []cfi.Row{x86Row(0x402000, 0x402100, 8), x86Row(0x401000, 0x401100, 8)}
	for _, tc := range []struct {
		name   string
		lo, hi uint64 // the functions that begin a stack
		size   int    // the snapshot's bytes
		stop   StopReason
	}{
		{"into runtime.clone", 0x401000, 0x401100, 0x100, StopOutermost},
		{"into another function", 0x405000, 0x405100, 0x100, StopNoMapping},
		{"into runtime.clone, snapshot ends", 0x401000, 0x401100, 8, StopOutermost},
		{"into another function, snapshot ends", 0x405000, 0x405100, 8, StopTruncated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &entryObject{fakeObject: fakeObject{rows: rows}, lo: tc.lo, hi: tc.hi}
			space := NewAddressSpace([]Mapping{
				{Start: text, End: text + 0x10000, Exec: true, Object: obj, Name: "goprog"},
				{Start: stack, End: stack + 0x1000, Name: "[stack]"},
			})
			sb := &stackBuilder{base: stack, data: make([]byte, 0x100)}
			sb.put(stack, 0x401050)       // mstart's return address, into clone
			sb.put(stack+8, 0xc000123000) // above clone's frame: a heap word
			var regs arch.Regs
			regs.Set(arch.AMD64_RIP, 0x402010)
			regs.Set(arch.AMD64_RSP, stack)
			frames := make([]Frame, 8)
			res := New(arch.AMD64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data[:tc.size]}, frames)
			if res.Frames != 2 || res.Stop != tc.stop {
				t.Fatalf("got %d frames, stop %v (%v); want 2, %v", res.Frames, res.Stop, res.Err, tc.stop)
			}
		})
	}
}

// TestARM64FrameRecordAtFrameBottom: an arm64 function without CFI whose
// frame record lies at the bottom of its 64-byte frame (stp x29, x30,
// [sp, #-64]!; mov x29, sp) is stepped out of by its frame record, which
// gives its caller's x29 and return address but only a lower bound of the
// caller's SP (x29+16, 48 bytes short). Where the caller's CFI keeps a
// frame record (x29 at CFA-32, x30 at CFA-24), its CFA is x29+32 exactly
// and the walk goes on right; where it keeps none, a zero word found at
// the guessed CFA is no proof of the stack's end (no_unwind_info, not
// outermost).
func TestARM64FrameRecordAtFrameBottom(t *testing.T) {
	const (
		text  = 0x400000
		stack = 0x7ff000
	)
	// The caller at [0x402000, 0x402100): CFA = sp+32.
	caller := cfi.Row{Start: 0x402000, End: 0x402100, RA: arch.ARM64_X30}
	caller.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.ARM64_SP, Offset: 32}
	withRecord := caller
	withRecord.Regs[arch.ARM64_X29] = cfi.Rule{Kind: cfi.RuleOffset, Offset: -32}
	withRecord.Regs[arch.ARM64_X30] = cfi.Rule{Kind: cfi.RuleOffset, Offset: -24}
	noRecord := caller
	noRecord.Regs[arch.ARM64_X30] = cfi.Rule{Kind: cfi.RuleOffset, Offset: -8}
	// The outermost function at [0x403000, 0x403100): RA undefined.
	top := cfi.Row{Start: 0x403000, End: 0x403100, RA: arch.ARM64_X30}
	top.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.ARM64_SP, Offset: 16}
	top.Regs[arch.ARM64_X30] = cfi.Rule{Kind: cfi.RuleUndefined}
	// The crashing leaf at [0x404000, 0x404100): CFA = sp, the return
	// address still in x30.
	leaf := cfi.Row{Start: 0x404000, End: 0x404100, RA: arch.ARM64_X30}
	leaf.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.ARM64_SP, Offset: 0}

	// The stack: the leaf called by the callee (no CFI, at 0x401000),
	// which has SP = stack, its record at stack (x29 = stack), 64 bytes
	// of frame with zeroed locals; the caller's frame is [stack+64, stack+96), its record at
	// stack+64 (x29 = stack+64), return address into top at stack+72.
	sb := &stackBuilder{base: stack, data: make([]byte, 0x100)}
	sb.put(stack, stack+64)    // the callee's record: the caller's x29
	sb.put(stack+8, 0x402040)  // and the return address into the caller
	sb.put(stack+64, 0)        // the caller's record: top's x29
	sb.put(stack+72, 0x403020) // return address into top
	// The callee's code: stp x29, x30, [sp, #-64]!; mov x29, sp; two
	// nops; bl to the leaf (its return address 0x401014). Its symbol
	// starts at 0x401000 (funcObject).
	callee := []byte{
		0xfd, 0x7b, 0xbc, 0xa9, // stp x29, x30, [sp, #-64]!
		0xfd, 0x03, 0x00, 0x91, // mov x29, sp
		0x1f, 0x20, 0x03, 0xd5, // nop
		0x1f, 0x20, 0x03, 0xd5, // nop
		0xfc, 0x0b, 0x00, 0x94, // bl 0x404000
	}
	noSetUp := append([]byte{}, callee...)
	copy(noSetUp[4:], []byte{0x1f, 0x20, 0x03, 0xd5}) // the mov a nop
	for _, tc := range []struct {
		name   string
		row    cfi.Row
		code   []byte
		frames int
		stop   StopReason
	}{
		{"caller keeps a frame record", withRecord, callee, 4, StopOutermost},
		{"caller keeps none", noRecord, callee, 3, StopNoUnwindInfo},
		// Nothing shows the callee pointed x29 at its record: the
		// same frames, not called complete.
		{"callee never sets x29", withRecord, noSetUp, 4, StopFramePointerGuess},
		{"callee without symbols", withRecord, nil, 4, StopFramePointerGuess},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &funcObject{fakeObject: fakeObject{rows: []cfi.Row{tc.row, top, leaf}, code: map[uint64][]byte{0x401000: tc.code}}}
			if tc.code != nil {
				obj.starts = []uint64{0x401000, 0x402000, 0x403000, 0x404000}
			}
			space := textAndStack(obj)
			var regs arch.Regs
			regs.Set(arch.ARM64_PC, 0x404010)
			regs.Set(arch.ARM64_SP, stack)
			regs.Set(arch.ARM64_X29, stack)
			regs.Set(arch.ARM64_X30, 0x401014) // into the callee
			frames := make([]Frame, 8)
			res := New(arch.ARM64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
			if res.Frames != tc.frames || res.Stop != tc.stop {
				t.Fatalf("got %d frames, stop %v (%v); want %d, %v", res.Frames, res.Stop, res.Err, tc.frames, tc.stop)
			}
			if f := frames[2]; f.PC != 0x402040 || f.Method != MethodFramePointer {
				t.Errorf("frame 2 = %+v; want the caller by frame pointer", f)
			}
			if tc.frames == 4 {
				if f := frames[3]; f.PC != 0x403020 || f.SP != stack+96 || frames[2].CFA != stack+96 {
					t.Errorf("frame 3 = %+v, frame 2's CFA %#x; want top at sp %#x", f, frames[2].CFA, stack+96)
				}
			}
		})
	}
}

// TestARM64SignalHandlerEndingStack: a signal handler whose CFI ends the
// stack (Go's runtime.sigtramp: TOPFRAME functions get an undefined link
// register in the CFI Go writes) while the kernel's signal frame lies at
// its CFA (the fpsimd_context marker at rt_sigframe+592): the walk goes on
// through that signal frame into the interrupted code (how
// signal_marker), cold (the general loop) and warm (the fast path).
// Without the marker, the stack ends there, outermost, as before.
func TestARM64SignalHandlerEndingStack(t *testing.T) {
	const (
		text  = 0x400000
		stack = 0x7ff000
		frame = stack + 0x40 // the handler's CFA: the rt_sigframe
	)
	// The handler at [0x401000, 0x401100): CFA = sp+0x40, x30 undefined.
	handler := cfi.Row{Start: 0x401000, End: 0x401100, RA: arch.ARM64_X30}
	handler.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.ARM64_SP, Offset: 0x40}
	handler.Regs[arch.ARM64_X30] = cfi.Rule{Kind: cfi.RuleUndefined}
	// The interrupted function at [0x402000, 0x402100), outermost.
	top := cfi.Row{Start: 0x402000, End: 0x402100, RA: arch.ARM64_X30}
	top.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.ARM64_SP, Offset: 16}
	top.Regs[arch.ARM64_X30] = cfi.Rule{Kind: cfi.RuleUndefined}
	obj := &fakeObject{rows: []cfi.Row{handler, top}}
	space := NewAddressSpace([]Mapping{
		{Start: text, End: text + 0x10000, Exec: true, Object: obj, Name: "goprog"},
		{Start: stack, End: stack + 0x2000, Name: "[stack]"},
	})
	for _, marked := range []bool{true, false} {
		sb := &stackBuilder{base: stack, data: make([]byte, 0x1000)}
		if marked {
			sb.put(frame+arm64ReservedOff, arm64FPSIMDHeader)
		}
		// The interrupted context: pc in top, sp above the signal frame.
		sb.put(frame+arm64SigcontextOff+8*arch.ARM64_PC, 0x402010)
		sb.put(frame+arm64SigcontextOff+8*arch.ARM64_SP, stack+0x800)
		var regs arch.Regs
		regs.Set(arch.ARM64_PC, 0x401010)
		regs.Set(arch.ARM64_SP, stack)
		var c Cache
		for _, pass := range []string{"cold", "warm"} {
			frames := make([]Frame, 8)
			res := New(arch.ARM64, Options{}).Unwind(&c, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
			if !marked {
				if res.Frames != 1 || res.Stop != StopOutermost {
					t.Errorf("unmarked, %s: %d frames, %v (%v); want 1, outermost", pass, res.Frames, res.Stop, res.Err)
				}
				continue
			}
			if res.Frames != 2 || res.Stop != StopOutermost {
				t.Fatalf("%s: %d frames, %v (%v); want 2, outermost", pass, res.Frames, res.Stop, res.Err)
			}
			if f := frames[1]; f.PC != 0x402010 || f.SP != stack+0x800 || f.Method != MethodSignalMarker || f.Flags&FrameReturnAddress != 0 {
				t.Errorf("%s: frame 1 = %+v; want the interrupted pc 0x402010, exact, by signal_marker", pass, f)
			}
		}
	}
}

// TestX86FramePointerStepProven: x86_64 first frames without CFI in
// functions whose symbols start at 0x401000 (push %rbp; mov %rsp,%rbp; nop;
// pop %rbp; jmp: a tail call) and 0x401020 (push %rbp; mov %rsp,%rbp; pop
// %rbx; ret), stepped out of by the frame pointer into the outermost
// function. In the body, past the mov, %rbp is the frame's own: the step is
// proven. Before the mov, after the epilogue's pop %rbp, and at the ret,
// %rbp is the caller's: what the step finds there is not this frame's
// record (and the word at the SP, no return address, cannot be taken
// instead), so the stack is not called complete.
func TestX86FramePointerStepProven(t *testing.T) {
	const stack = 0x7ff000
	top := x86Outermost()
	code := map[uint64][]byte{
		0x401000: {0x55, 0x48, 0x89, 0xe5, 0x90, 0x5d, 0xe9, 0x00, 0x00, 0x00, 0x00},
		0x401020: {0x55, 0x48, 0x89, 0xe5, 0x5b, 0xc3},
	}
	sb := &stackBuilder{base: stack, data: make([]byte, 0x100)}
	sb.put(stack, stack+0x40)    // a frame record: the caller's %rbp
	sb.put(stack+8, 0x403020)    // and the return address into top
	sb.put(stack+0x40, 0)        // top's record
	sb.put(stack+0x48, 0x7ffabc) // no return address: top's CFI ends the stack
	for _, tc := range []struct {
		name string
		pc   uint64
		stop StopReason
	}{
		{"in the body", 0x401004, StopOutermost},
		{"at the push", 0x401000, StopFramePointerGuess},
		{"after the pop", 0x401006, StopFramePointerGuess},
		{"at the ret", 0x401025, StopFramePointerGuess},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &funcObject{fakeObject: fakeObject{rows: []cfi.Row{top}, code: code},
				starts: []uint64{0x401000, 0x401020, 0x403000}}
			space := textAndStack(obj)
			var regs arch.Regs
			regs.Set(arch.AMD64_RIP, tc.pc)
			regs.Set(arch.AMD64_RSP, stack)
			regs.Set(arch.AMD64_RBP, stack)
			frames := make([]Frame, 8)
			res := New(arch.AMD64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
			require.Equal(t, 2, res.Frames, "frames %+v, stop %v (%v)", frames[:res.Frames], res.Stop, res.Err)
			assert.Equal(t, tc.stop, res.Stop, "%v", res.Err)
			assert.Equal(t, uint64(0x403020), frames[1].PC)
			assert.Equal(t, MethodFramePointer, frames[1].Method)
			if tc.stop == StopFramePointerGuess {
				var e *FramePointerGuessError
				require.ErrorAs(t, res.Err, &e)
				assert.Equal(t, 0, e.Frame)
				assert.Equal(t, tc.pc, e.PC)
			}
		})
	}
}

// TestARM64FirstFrameWithFrameRecord: an arm64 first frame without CFI in
// a function (symbol at 0x401000) that set up its frame record and has
// called since: x30 holds the return address of that call, into the
// function itself, and only the frame record gives the caller (gdb's
// prologue analysis finds it so). At its ret, past the epilogue's ldp, the
// return address is back in x30 and x29 is the caller's: the link
// register gives the caller.
func TestARM64FirstFrameWithFrameRecord(t *testing.T) {
	const (
		text  = 0x400000
		stack = 0x7ff000
	)
	top := cfi.Row{Start: 0x403000, End: 0x403100, RA: arch.ARM64_X30}
	top.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.ARM64_SP, Offset: 16}
	top.Regs[arch.ARM64_X30] = cfi.Rule{Kind: cfi.RuleUndefined}
	code := []byte{
		0xfd, 0x7b, 0xbf, 0xa9, // stp x29, x30, [sp, #-16]!
		0xfd, 0x03, 0x00, 0x91, // mov x29, sp
		0xfe, 0x0b, 0x00, 0x94, // bl 0x404000
		0x1f, 0x20, 0x03, 0xd5, // nop
		0xfd, 0x7b, 0xc1, 0xa8, // ldp x29, x30, [sp], #16
		0xc0, 0x03, 0x5f, 0xd6, // ret
	}
	sb := &stackBuilder{base: stack, data: make([]byte, 0x100)}
	sb.put(stack, 0)          // the record: the caller's x29
	sb.put(stack+8, 0x403020) // and the return address into top
	for _, tc := range []struct {
		name                   string
		pc, sp, x29, x30, want uint64
		method                 Method
	}{
		{"after a call", 0x40100c, stack, stack, 0x40100c, 0x403020, MethodFramePointer},
		{"at the ret", 0x401014, stack + 16, 0, 0x403020, 0x403020, MethodLinkRegister},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &funcObject{fakeObject: fakeObject{rows: []cfi.Row{top}, code: map[uint64][]byte{0x401000: code}},
				starts: []uint64{0x401000, 0x403000}}
			space := textAndStack(obj)
			var regs arch.Regs
			regs.Set(arch.ARM64_PC, tc.pc)
			regs.Set(arch.ARM64_SP, tc.sp)
			regs.Set(arch.ARM64_X29, tc.x29)
			regs.Set(arch.ARM64_X30, tc.x30)
			frames := make([]Frame, 8)
			res := New(arch.ARM64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
			require.Equal(t, 2, res.Frames, "frames %+v, stop %v (%v)", frames[:res.Frames], res.Stop, res.Err)
			assert.Equal(t, StopOutermost, res.Stop, "%v", res.Err)
			assert.Equal(t, tc.want, frames[1].PC)
			assert.Equal(t, tc.method, frames[1].Method)
		})
	}
}

// TestX86FramePointerBeforeFrameless: an x86_64 first frame without CFI in
// a function (symbol at 0x401000) past its push %rbp; mov %rsp,%rbp, whose
// SP holds a stale word that looks like its return address (the return
// address of an earlier call to it, from 0x402000, left below its frame):
// the prologue shows the frame pointer is the frame's own, so the caller
// comes from the frame record, not from the word at the SP that
// framelessReturn would take.
func TestX86FramePointerBeforeFrameless(t *testing.T) {
	const stack = 0x7ff000
	top := x86Outermost()
	code := map[uint64][]byte{
		0x401000: {0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10, 0x90, 0x90, 0xc9, 0xc3},       // push %rbp; mov %rsp,%rbp; sub $16,%rsp; nop; nop; leave; ret
		0x401ff8: {0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0xe8, 0xfb, 0xef, 0xff, 0xff}, // call 0x401000 at 0x402000
	}
	sb := &stackBuilder{base: stack, data: make([]byte, 0x100)}
	sb.put(stack, 0x402005)      // stale: a return address after a call to the function
	sb.put(stack+0x10, 0)        // the frame record at %rbp: the caller's %rbp
	sb.put(stack+0x18, 0x403020) // and the return address into top
	obj := &funcObject{fakeObject: fakeObject{rows: []cfi.Row{top}, code: code}, starts: []uint64{0x401000, 0x401ff8, 0x403000}}
	space := textAndStack(obj)
	var regs arch.Regs
	regs.Set(arch.AMD64_RIP, 0x401008)
	regs.Set(arch.AMD64_RSP, stack)
	regs.Set(arch.AMD64_RBP, stack+0x10)
	frames := make([]Frame, 8)
	res := New(arch.AMD64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
	require.Equal(t, 2, res.Frames, "frames %+v, stop %v (%v)", frames[:res.Frames], res.Stop, res.Err)
	assert.Equal(t, StopOutermost, res.Stop, "%v", res.Err)
	assert.Equal(t, uint64(0x403020), frames[1].PC)
	assert.Equal(t, MethodFramePointer, frames[1].Method)
}

// textAndStack is the address space of the synthetic tests here: obj's
// code at 0x400000 (64 KiB) and a 4 KiB stack at 0x7ff000.
func textAndStack(obj Object) *AddressSpace {
	return NewAddressSpace([]Mapping{
		{Start: 0x400000, End: 0x410000, Exec: true, Object: obj, Name: "a.out"},
		{Start: 0x7ff000, End: 0x800000, Name: "[stack]"},
	})
}

// x86Outermost is the row of an x86_64 function at [0x403000, 0x403100)
// that begins a stack: CFA = rsp+8, the return address undefined.
func x86Outermost() cfi.Row {
	top := cfi.Row{Start: 0x403000, End: 0x403100, RA: arch.AMD64_RIP}
	top.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.AMD64_RSP, Offset: 8}
	top.Regs[arch.AMD64_RIP] = cfi.Rule{Kind: cfi.RuleUndefined}
	return top
}

// TestX86NoStaleReturnAddress: a function without CFI whose first
// instruction calls another function (V8's baseline code sets up its frame
// in a builtin so; the sweep sees nothing pushed), then calls itself. Its
// frame, whether sampled in it or a caller's at a return address, has at
// its SP a stale return address after a call to the function (the
// recursion's, as in node recordings) and no return address of its own:
// the caller comes from the frame record the builtin made, as perf finds
// it, and the stack is not called complete.
func TestX86NoStaleReturnAddress(t *testing.T) {
	const stack = 0x7ff000
	code := map[uint64][]byte{
		// fn: call 0x401800 (the out-of-line prologue); call 0x401000 (itself, returning to 0x40100a); nop...
		0x401000: {0xe8, 0xfb, 0x07, 0x00, 0x00, 0xe8, 0xf6, 0xff, 0xff, 0xff, 0x90, 0x90, 0xc3},
		0x401800: {0x55, 0x48, 0x89, 0xe5, 0xc3},
		0x404000: {0x90, 0x90, 0xc3},
		// fn2: call 0x402000 (itself, returning to 0x402005); nop; ret
		0x402000: {0xe8, 0xfb, 0xff, 0xff, 0xff, 0x90, 0xc3},
	}
	leaf := x86Row(0x404000, 0x404100, 8) // CFA = SP+8
	for _, tc := range []struct {
		name string
		pc   uint64 // the frame sampled
		sp   uint64 // fn's SP
		ra   uint64 // the return address into fn, after its call of itself
	}{
		{"caller at a return address", 0x404001, stack + 8, 0x40100a},
		{"sampled in it", 0x40100b, stack + 8, 0x40100a},
		// fn2 calls itself first: the state at its return address is
		// the one before that call, but the frame has passed it.
		{"caller at its first call's return address", 0x404001, stack + 8, 0x402005},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := &stackBuilder{base: stack, data: make([]byte, 0x100)}
			sb.put(stack, tc.ra)         // the leaf's return address into fn
			sb.put(stack+8, tc.ra)       // stale: fn's SP, a return address after a call to fn
			sb.put(stack+0x10, 0)        // the frame record at %rbp: the caller's %rbp
			sb.put(stack+0x18, 0x403020) // and the return address into top
			obj := &funcObject{fakeObject: fakeObject{rows: []cfi.Row{leaf, x86Outermost()}, code: code},
				starts: []uint64{0x401000, 0x401800, 0x402000, 0x403000, 0x404000}}
			var regs arch.Regs
			regs.Set(arch.AMD64_RIP, tc.pc)
			regs.Set(arch.AMD64_RSP, stack)
			if tc.pc < 0x404000 {
				regs.Set(arch.AMD64_RSP, tc.sp)
			}
			regs.Set(arch.AMD64_RBP, stack+0x10)
			frames := make([]Frame, 8)
			res := New(arch.AMD64, Options{}).Unwind(&Cache{}, textAndStack(obj), &regs, &Stack{Addr: stack, Data: sb.data}, frames)
			var pcs []uint64
			for _, f := range frames[:res.Frames] {
				pcs = append(pcs, f.PC)
			}
			want := []uint64{0x404001, tc.ra, 0x403020}
			if tc.pc < 0x404000 {
				want = []uint64{0x40100b, 0x403020}
			}
			require.Equal(t, want, pcs, "frames %+v, stop %v (%v)", frames[:res.Frames], res.Stop, res.Err)
			assert.Equal(t, MethodFramePointer, frames[len(want)-1].Method)
			assert.NotEqual(t, StopOutermost, res.Stop, "a stack through an unproven frame-pointer step called complete")
		})
	}
}

// TestX86FramePointerGuessAfterCall: a frame-pointer step out of a function
// not shown to set up %rbp is a guess, and where the word after the
// "frame record" is readable code that follows no call, %rbp held
// something else (code built without frame pointers keeps data in it): no
// caller is made up from it, the walk stops (no_unwind_info). A return
// address after a call, at a function's first instruction (returned into
// at its entry), or in code the capture does not hold is followed, a guess.
func TestX86FramePointerGuessAfterCall(t *testing.T) {
	const stack = 0x7ff000
	nops := func(n int) []byte { return bytes.Repeat([]byte{0x90}, n) }
	code := map[uint64][]byte{
		0x401000: nops(16),                          // fn: no CFI, no frame pointer set up
		0x402038: append(nops(3), 0xe8, 0, 0, 0, 0), // a call ending at 0x402040
		0x402040: nops(16),
	}
	for _, tc := range []struct {
		name  string
		ra    uint64
		taken bool
	}{
		{"after a call", 0x402040, true},
		{"after no call", 0x402048, false},
		{"a function's first instruction", 0x402048, true},
		{"code not held", 0x40a000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			starts := []uint64{0x401000, 0x402000}
			if tc.name == "a function's first instruction" {
				starts = append(starts, 0x402048)
			}
			obj := &funcObject{fakeObject: fakeObject{code: code}, starts: starts}
			sb := &stackBuilder{base: stack, data: make([]byte, 0x100)}
			sb.put(stack+0x20, 0)     // the "frame record" at %rbp
			sb.put(stack+0x28, tc.ra) // and the word after it
			var regs arch.Regs
			regs.Set(arch.AMD64_RIP, 0x401008)
			regs.Set(arch.AMD64_RSP, stack)
			regs.Set(arch.AMD64_RBP, stack+0x20)
			frames := make([]Frame, 8)
			res := New(arch.AMD64, Options{}).Unwind(&Cache{}, textAndStack(obj), &regs, &Stack{Addr: stack, Data: sb.data}, frames)
			if !tc.taken {
				require.Equal(t, 1, res.Frames, "frames %+v", frames[:res.Frames])
				assert.Equal(t, StopNoUnwindInfo, res.Stop, "%v", res.Err)
				return
			}
			require.GreaterOrEqual(t, res.Frames, 2, "stop %v (%v)", res.Stop, res.Err)
			assert.Equal(t, tc.ra, frames[1].PC)
			assert.Equal(t, MethodFramePointer, frames[1].Method)
			assert.NotEqual(t, StopOutermost, res.Stop)
		})
	}
}

// TestCFIZeroReturnAddress: a return address of zero where a frame's CFI
// says it lies ends the stack as complete only in a function its object
// says begins one (an entry point whose CFI does not mark the return
// address undefined, Go's goexit). In any other function it is an
// overwritten stack (a buffer overflow zeroed the slot): the walk stops
// with no_mapping at pc 0, as gdb shows a caller at 0. Both the fast walk
// (a Stack, compact rows) and the general loop (a core's Segments) say the
// same.
func TestCFIZeroReturnAddress(t *testing.T) {
	const (
		text  = 0x400000
		stack = 0x7ff000
	)
	// victim at 0x402000 (CFA = rsp+8) calls into 0x403000 (CFA =
	// rsp+8), whose return address is 0x402011; victim's is the word at
	// stack+8: 0.
	rows := []cfi.Row{x86Row(0x402000, 0x402100, 8), x86Row(0x403000, 0x403100, 8)}
	for _, tc := range []struct {
		name   string
		lo, hi uint64 // the functions that begin a stack
		stop   StopReason
	}{
		{"in a function that begins a stack", 0x402000, 0x402100, StopOutermost},
		{"elsewhere", 0x401000, 0x401020, StopNoMapping},
	} {
		for _, general := range []bool{false, true} {
			obj := &entryObject{fakeObject: fakeObject{rows: rows}, lo: tc.lo, hi: tc.hi}
			space := NewAddressSpace([]Mapping{{Start: text, End: text + 0x10000, Exec: true, Object: obj, Name: "a.out"}})
			sb := &stackBuilder{base: stack, data: make([]byte, 0x40)}
			sb.put(stack, 0x402011)
			sb.put(stack+8, 0)
			var regs arch.Regs
			regs.Set(arch.AMD64_RIP, 0x403010)
			regs.Set(arch.AMD64_RSP, stack)
			frames := make([]Frame, 8)
			var res Result
			if general {
				// Memory other than a Stack (a core's Segments)
				// leaves the walk to the general loop.
				segs, err := NewSegments([]Segment{{Addr: stack, Size: uint64(len(sb.data)), Data: sb.data}})
				require.NoError(t, err)
				res = New(arch.AMD64, Options{}).Unwind(&Cache{}, space, &regs, segs, frames)
			} else {
				res = New(arch.AMD64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
			}
			require.Equal(t, 2, res.Frames, "%s (general %v): %+v", tc.name, general, res)
			assert.Equal(t, tc.stop, res.Stop, "%s (general %v): %v", tc.name, general, res.Err)
			if tc.stop == StopNoMapping {
				var nm *NoMappingError
				if assert.ErrorAs(t, res.Err, &nm) {
					assert.Zero(t, nm.PC)
				}
			}
		}
	}
}

// TestGarbageFramePointerNotTruncated: code without frame pointers keeps
// data in rbp (a running sum, 0x1de0fdc07c697e08 in a perf recording of a
// library gone from disk). Before, the frame-pointer fallback read a frame
// record there, beyond the end of the stack snapshot, and the stack ended
// truncated, with the advice to record more stack, which did not help (39
// of 335 stacks still truncated at 32 KiB). A frame pointer 4 GiB or more
// above the SP is no frame record: the walk goes on to what follows that
// fallback, as for a frame pointer below the SP.
func TestGarbageFramePointerNotTruncated(t *testing.T) {
	const stack = 0x7ffd0000f000
	for _, fp := range []uint64{0x1de0fdc07c697e08, stack + 1<<32} {
		space := NewAddressSpace([]Mapping{{Start: 0x7f0000000000, End: 0x7f0000010000, Exec: true, Name: "/gone/libw.so"}})
		sb := &stackBuilder{base: stack, data: make([]byte, 0x100)}
		var regs arch.Regs
		regs.Set(arch.AMD64_RIP, 0x7f0000001030)
		regs.Set(arch.AMD64_RSP, stack)
		regs.Set(arch.AMD64_RBP, fp)
		frames := make([]Frame, 8)
		res := New(arch.AMD64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
		assert.Equal(t, StopNoUnwindInfo, res.Stop, "rbp %#x: %d frames, %v", fp, res.Frames, res.Err)
	}
	// A frame pointer within reach but past the snapshot is still a
	// truncated stack.
	space := NewAddressSpace([]Mapping{{Start: 0x7f0000000000, End: 0x7f0000010000, Exec: true, Name: "/gone/libw.so"}})
	var regs arch.Regs
	regs.Set(arch.AMD64_RIP, 0x7f0000001030)
	regs.Set(arch.AMD64_RSP, stack)
	regs.Set(arch.AMD64_RBP, stack+0x1000)
	frames := make([]Frame, 8)
	res := New(arch.AMD64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: make([]byte, 0x100)}, frames)
	assert.Equal(t, StopTruncated, res.Stop, "%v", res.Err)
}

// TestOutermostAnswersKeptPerObject checks the Cache's memory of
// OutermostObject answers: two objects give different answers at the same
// link-time address and a Cache shared by their walks gives each its own,
// asks each once for walks that end at the same place one after another,
// and asks again after Reset.
func TestOutermostAnswersKeptPerObject(t *testing.T) {
	const (
		text  = 0x400000
		stack = 0x7ff000
	)
	base := &entryObject{lo: 0x401000, hi: 0x401020} // the PC's function begins a stack
	other := &entryObject{lo: 0x405000, hi: 0x405020}
	walk := func(c *Cache, obj Object) Result {
		space := NewAddressSpace([]Mapping{{Start: text, End: text + 0x10000, Exec: true, Object: obj, Name: "a.out"}})
		var regs arch.Regs
		regs.Set(arch.AMD64_RIP, 0x401010)
		regs.Set(arch.AMD64_RSP, stack)
		regs.Set(arch.AMD64_RBP, 0) // the end of the frame-pointer chain
		return New(arch.AMD64, Options{}).Unwind(c, space, &regs, &Stack{Addr: stack, Data: make([]byte, 0x40)}, make([]Frame, 4))
	}
	check := func(c *Cache, obj Object) {
		t.Helper()
		res := walk(c, obj)
		if obj == base {
			assert.Equal(t, StopOutermost, res.Stop)
		} else {
			assert.Equal(t, StopNoUnwindInfo, res.Stop)
			assert.Equal(t, errZeroFramePointer, res.Err)
		}
	}
	var c Cache
	for _, obj := range []*entryObject{base, other} {
		for range 3 {
			check(&c, obj)
		}
		assert.Equal(t, []uint64{0x401010}, obj.asked, "asked once for three walks")
	}
	for range 3 {
		check(&c, base)
		check(&c, other)
	}
	c.Reset()
	n := len(base.asked)
	check(&c, base)
	assert.Len(t, base.asked, n+1, "asked again after Reset")
}
