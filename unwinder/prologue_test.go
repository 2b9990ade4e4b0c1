package unwinder

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
)

// TestPrologueStep: an x86_64 frame without CFI and without a frame
// pointer, in hand-written code that pushes callee-saved registers and
// adjusts the stack in straight-line code (cgo's crosscall1: six pushes,
// then calls), is stepped by decoding its function from its first
// instruction to the PC (how prologue): the CFA is the SP plus what was
// pushed and allocated plus the return address, the pushed registers are
// read back from their slots (the caller's CFA here is rbp+16, so a wrong
// rbp shows), and the return address is taken only where the instruction
// before it calls the function. A jump or an unknown change of the SP
// before the PC, or a return address after a call to elsewhere, leaves
// the frame to the other fallbacks (here: no_unwind_info).
func TestPrologueStep(t *testing.T) {
	const (
		text  = 0x400000
		stack = 0x7ff000
		fn    = 0x401000 // hand-written, no CFI
		ra    = 0x402040 // in the caller, whose CFI is CFA = rbp+16, outermost
		rbp   = 0x7ff800 // the caller's frame pointer, pushed by fn
	)
	caller := cfi.Row{Start: 0x402000, End: 0x402100, RA: arch.AMD64_RIP}
	caller.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.AMD64_RBP, Offset: 16}
	caller.Regs[arch.AMD64_RIP] = cfi.Rule{Kind: cfi.RuleUndefined}
	pushes := []byte{
		0xf3, 0x0f, 0x1e, 0xfa, // endbr64
		0x53,       // push %rbx
		0x55,       // push %rbp
		0x41, 0x54, // push %r12
		0x41, 0x55, // push %r13
		0x41, 0x56, // push %r14
		0x41, 0x57, // push %r15
		0x48, 0x89, 0xfb, // mov %rdi,%rbx
	}
	callRSI := []byte{0xff, 0xd6} // call *%rsi
	rel := func(target uint64) []byte {
		b := []byte{0xe8, 0, 0, 0, 0}
		binary.LittleEndian.PutUint32(b[1:], uint32(int32(int64(target)-ra)))
		return b
	}
	cat := func(parts ...[]byte) []byte { return slices.Concat(parts...) }
	for _, tc := range []struct {
		name  string
		code  []byte // fn's code up to its PC
		call  []byte // the caller's instruction ending at ra
		delta uint64 // bytes below the return address
		found bool
		rbpIn bool // the caller's rbp is still in the register (its slot, if any, is stale)
		guess bool // found, but the call is not shown to be to fn: fp_guess
	}{
		{"six pushes", cat(pushes, callRSI), rel(fn), 48, true, false, false},
		{"six pushes, sub $0x28", cat(pushes, []byte{0x48, 0x83, 0xec, 0x28}, callRSI), rel(fn), 88, true, false, false},
		{"six pushes, a pop", cat(pushes, []byte{0x41, 0x5f}, callRSI), rel(fn), 40, true, false, false},
		// rbp pushed and popped back before a call that may overwrite its
		// slot: rbp is the caller's again, read from the register.
		{"rbp popped back", cat(pushes[:5], []byte{0x55, 0x5d}, callRSI), rel(fn), 8, true, true, false},
		{"call *%rax, rax fn", cat(pushes, callRSI), []byte{0xff, 0xd0}, 48, true, false, false},
		{"a jump before the pc", cat(pushes[:6], []byte{0x75, 0x02}, pushes[6:], callRSI), rel(fn), 48, false, false, false},
		{"and $-16,%rsp", cat(pushes, []byte{0x48, 0x83, 0xe4, 0xf0}, callRSI), rel(fn), 48, false, false, false},
		{"a ret before the pc", cat([]byte{0xc3}, pushes, callRSI), rel(fn), 48, true, false, true},
		{"called from elsewhere", cat(pushes, callRSI), rel(0x401800), 48, true, false, true},
		// A branch whose target the fall-through reaches with the same
		// stack: the states agree.
		{"a branch over a move", cat(pushes[:6], []byte{0x75, 0x02, 0x31, 0xc0}, pushes[6:], callRSI), rel(fn), 48, true, false, false},
		// An early return's epilogue, then the block its branch skipped
		// to: the branch's state, not the popped one.
		{"after an early return", cat(pushes[:6], []byte{0x74, 0x03, 0x5d, 0x5b, 0xc3}, pushes[6:], callRSI), rel(fn), 48, true, false, false},
		// A jump through a register (a jump table), then a case: the
		// state at the jump.
		{"a jump table's case", cat(pushes, []byte{0xff, 0xe0, 0x90}, callRSI), rel(fn), 48, true, false, false},
		// A computed goto (an interpreter's dispatch: jmp *%rax), an
		// exit's epilogue and return, then an opcode's handler, which
		// only the computed goto reaches, in the middle of the function
		// (a branch ahead is still to arrive): the state at the jump.
		{"a computed goto's handler after a return", cat(pushes, []byte{0x75, 0x20, 0xff, 0xe0,
			0x41, 0x5f, 0x41, 0x5e, 0x41, 0x5d, 0x41, 0x5c, 0x5d, 0x5b, 0xc3}, callRSI), rel(fn), 48, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := make([]byte, 16)
			for i := range before {
				before[i] = 0x90
			}
			copy(before[16-len(tc.call):], tc.call)
			obj := &funcObject{fakeObject: fakeObject{rows: []cfi.Row{caller},
				code: map[uint64][]byte{ra - 16: before, fn: append(slices.Clone(tc.code), 0x90)}},
				starts: []uint64{fn, 0x401800, 0x402000}}
			space := NewAddressSpace([]Mapping{
				{Start: text, End: text + 0x10000, Exec: true, Object: obj, Name: "a.out"},
				{Start: stack, End: stack + 0x1000, Name: "[stack]"},
			})
			sb := &stackBuilder{base: stack, data: make([]byte, 0x200)}
			// The slots of rbx, rbp, r12-r15, pushed in that order: rbp's
			// is 16 bytes below the return address, under rbx's.
			callerRBP, slotRBP := uint64(0x1234), uint64(rbp) // 0x1234: no frame pointer
			if tc.rbpIn {
				callerRBP, slotRBP = rbp, 0xdead0000
			}
			if tc.delta >= 16 {
				sb.put(stack+tc.delta-16, slotRBP)
			}
			sb.put(stack+tc.delta, ra)
			var regs arch.Regs
			regs.Set(arch.AMD64_RIP, fn+uint64(len(tc.code)-len(callRSI))) // at the call
			regs.Set(arch.AMD64_RSP, stack)
			regs.Set(arch.AMD64_RBP, callerRBP)
			regs.Set(arch.AMD64_RAX, fn)
			frames := make([]Frame, 8)
			res := New(arch.AMD64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
			if tc.guess {
				var ge *FramePointerGuessError
				if res.Stop != StopFramePointerGuess || res.Frames != 2 || !errors.As(res.Err, &ge) || !ge.Call {
					t.Fatalf("got %d frames, stop %v (%v); want 2, fp_guess by the call", res.Frames, res.Stop, res.Err)
				}
			} else if !twoFramesOr(t, res, tc.found, StopNoUnwindInfo) {
				return
			}
			if f := frames[1]; f.PC != ra || f.SP != stack+tc.delta+8 || f.Method != MethodPrologue || f.CFA != rbp+16 {
				t.Errorf("frame 1 = %+v; want pc %#x sp %#x cfa %#x by prologue", f, ra, stack+tc.delta+8, rbp+16)
			}
		})
	}
}

// FuzzX86Sweep decodes fuzzed code as an x86_64 function without CFI, from
// its first instruction (or, with no symbol, from the start of the code) to
// a fuzzed PC, over a fuzzed stack. The unwind must return; a caller the
// step found must be at the return address after the call before it, with
// its SP above the frame's; one whose call is not shown to be to the
// function must make the stack a guess, never outermost.
func FuzzX86Sweep(f *testing.F) {
	const (
		text  = 0x400000
		stack = 0x7ff000
		fn    = 0x401000
		ra    = 0x402040
	)
	f.Add([]byte{0x53, 0x55, 0x48, 0x83, 0xec, 0x28, 0x74, 0x03, 0x5d, 0x5b, 0xc3, 0xff, 0xd6}, uint16(13), []byte{}, true, false)
	f.Add([]byte{0xc3, 0x90, 0x41, 0x54, 0xff, 0xe0, 0x90, 0xe8, 0, 0, 0, 0}, uint16(12), []byte{}, false, true)
	// A split part (coldFrame) at the start of the code: mov %rsi,%rax;
	// jmp back; then its function: push %rbx; sub $0x20,%rsp; jne to the
	// part; add $0x20,%rsp; pop %rbx; ret. The return address lies past
	// the function's frame.
	coldStack := make([]byte, 0x30)
	binary.LittleEndian.PutUint64(coldStack[0x28:], ra)
	f.Add([]byte{0x48, 0x89, 0xf0, 0xe9, 0x0b, 0, 0, 0, 0x53, 0x48, 0x83, 0xec, 0x20, 0x0f, 0x85, 0xed, 0xff, 0xff, 0xff,
		0x48, 0x83, 0xc4, 0x20, 0x5b, 0xc3}, uint16(3), coldStack, false, false)
	f.Fuzz(func(t *testing.T, code []byte, pcOff uint16, stackData []byte, symbol, indirect bool) {
		if len(code) > 4096 {
			code = code[:4096]
		}
		caller := cfi.Row{Start: 0x402000, End: 0x402100, RA: arch.AMD64_RIP}
		caller.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.AMD64_RSP, Offset: 8}
		caller.Regs[arch.AMD64_RIP] = cfi.Rule{Kind: cfi.RuleUndefined}
		call := []byte{0x90, 0x90, 0x90, 0xe8, 0, 0, 0, 0} // call fn
		rel := int64(fn) - int64(ra)
		binary.LittleEndian.PutUint32(call[4:], uint32(int32(rel)))
		if indirect {
			copy(call, []byte{0x90, 0x90, 0x90, 0x90, 0x90, 0xff, 0x53, 0x48}) // call *0x48(%rbx)
		}
		var starts []uint64
		if symbol {
			starts = []uint64{fn}
		}
		obj := &startsBefore{funcObject{fakeObject: fakeObject{rows: []cfi.Row{caller},
			code: map[uint64][]byte{ra - 8: call, fn: code}}, starts: append(starts, 0x402000)}}
		space := NewAddressSpace([]Mapping{
			{Start: text, End: text + 0x10000, Exec: true, Object: obj, Name: "a.out"},
			{Start: stack, End: stack + 0x1000, Name: "[stack]"},
		})
		if len(stackData) > 0x1000 {
			stackData = stackData[:0x1000]
		}
		var regs arch.Regs
		regs.Set(arch.AMD64_RIP, fn+uint64(pcOff)%uint64(len(code)+1))
		regs.Set(arch.AMD64_RSP, stack)
		frames := make([]Frame, 8)
		res := New(arch.AMD64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: stackData}, frames)
		if res.Frames > len(frames) {
			t.Fatalf("%d frames in a buffer of %d", res.Frames, len(frames))
		}
		if res.Frames > 1 && (frames[1].Method == MethodPrologue || frames[1].Method == MethodFrameless) {
			if f := frames[1]; f.PC != ra || f.SP <= stack {
				t.Fatalf("frame 1 = %+v: stepped by the code, not to the return address %#x after the call", f, uint64(ra))
			}
			if indirect && res.Stop == StopOutermost {
				t.Fatalf("a step after a call through memory, and the stack called complete")
			}
		}
	})
}

// startsBefore is a funcObject that also names the nearest start before an
// address (StartBeforeObject): the first of its code without a symbol. It
// lists the direct jumps in its code at 0x401000 (JumpSourceObject) as
// elfcache does, by their encodings.
type startsBefore struct{ funcObject }

func (o *startsBefore) JumpSources(addr uint64, out []uint64) []uint64 {
	code := o.code[0x401000]
	for i := range code {
		next, rel := uint64(0), int32(0)
		switch {
		case code[i] == 0xe9 && i+5 <= len(code):
			next, rel = 0x401000+uint64(i)+5, int32(binary.LittleEndian.Uint32(code[i+1:]))
		case code[i] == 0x0f && i+6 <= len(code) && code[i+1]&0xf0 == 0x80:
			next, rel = 0x401000+uint64(i)+6, int32(binary.LittleEndian.Uint32(code[i+2:]))
		default:
			continue
		}
		if next+uint64(int64(rel)) == addr {
			out = append(out, 0x401000+uint64(i))
		}
	}
	return out
}

func (o *startsBefore) StartBefore(addr uint64) (uint64, bool) {
	if addr >= 0x401000 && addr < 0x402000 {
		return 0x401000, true
	}
	return 0, false
}

// TestPrologueStepFramePointer: a function without CFI that pushes %rbp,
// computes, and only then points %rbp at the frame record (gcc's
// scheduling in a function with a variable-length array), then allocates
// an amount the code computes (sub %rax,%rsp): the SP's depth is lost,
// but the record gives the CFA (%rbp+16), the return address and the
// caller's %rbp. Before, a mov %rsp,%rbp not just after the push was
// taken for no frame record and the step was a frame-pointer guess.
func TestPrologueStepFramePointer(t *testing.T) {
	const (
		text  = 0x400000
		stack = 0x7ff000
		fn    = 0x401000
		ra    = 0x402040
		rec   = stack + 0x80 // the frame record: [rec] caller's rbp, [rec+8] ra
	)
	caller := cfi.Row{Start: 0x402000, End: 0x402100, RA: arch.AMD64_RIP}
	caller.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.AMD64_RBP, Offset: 16}
	caller.Regs[arch.AMD64_RIP] = cfi.Rule{Kind: cfi.RuleUndefined}
	code := []byte{
		0x55,             // push %rbp
		0x48, 0x89, 0xf8, // mov %rdi,%rax
		0x48, 0x89, 0xe5, // mov %rsp,%rbp
		0x53,             // push %rbx
		0x48, 0x29, 0xc4, // sub %rax,%rsp
		0xff, 0xd6, // call *%rsi
		0x90,
	}
	call := []byte{0x90, 0x90, 0x90, 0xe8, 0, 0, 0, 0}
	rel := int64(fn) - int64(ra)
	binary.LittleEndian.PutUint32(call[4:], uint32(int32(rel)))
	obj := &funcObject{fakeObject: fakeObject{rows: []cfi.Row{caller},
		code: map[uint64][]byte{ra - 8: call, fn: code}}, starts: []uint64{fn, 0x402000}}
	space := NewAddressSpace([]Mapping{
		{Start: text, End: text + 0x10000, Exec: true, Object: obj, Name: "a.out"},
		{Start: stack, End: stack + 0x1000, Name: "[stack]"},
	})
	const callerRBP = stack + 0x400
	sb := &stackBuilder{base: stack, data: make([]byte, 0x200)}
	sb.put(rec, callerRBP)
	sb.put(rec+8, ra)
	var regs arch.Regs
	regs.Set(arch.AMD64_RIP, fn+11) // at the call
	regs.Set(arch.AMD64_RSP, stack)
	regs.Set(arch.AMD64_RBP, rec)
	frames := make([]Frame, 8)
	res := New(arch.AMD64, Options{}).Unwind(&Cache{}, space, &regs, &Stack{Addr: stack, Data: sb.data}, frames)
	if !twoFramesOr(t, res, true, StopNoUnwindInfo) {
		return
	}
	if f := frames[1]; f.PC != ra || f.SP != rec+16 || f.Method != MethodPrologue || f.CFA != callerRBP+16 {
		t.Errorf("frame 1 = %+v; want pc %#x sp %#x cfa %#x by prologue", f, uint64(ra), uint64(rec+16), uint64(callerRBP+16))
	}
}

// hiddenObject is a stripped object's code: no symbol covers it, the sweep
// begins at the nearest direct call's target or at the section's start
// (StartBeforeObject, CallTargetObject, as elfcache's).
type hiddenObject struct {
	fakeObject
	section uint64
	targets []uint64
}

func (o *hiddenObject) CallTarget(addr uint64) bool { return slices.Contains(o.targets, addr) }

func (o *hiddenObject) StartBefore(addr uint64) (uint64, bool) {
	s := o.section
	for _, t := range o.targets {
		if t <= addr && t > s {
			s = t
		}
	}
	return s, true
}

// TestPrologueStepFalseCallTarget: in a stripped function (no symbol) an
// e8 byte inside another instruction reads as a call whose target lies
// inside the function, mid-instruction (in liblzma, inside a 6-byte mov):
// that target is no start, as the sweep from the start before it shows,
// and the step decodes from the real one. Swept from the false target, the
// frame was left unknown.
func TestPrologueStepFalseCallTarget(t *testing.T) {
	const (
		stack = 0x7ff000
		fn    = 0x401000
		ra    = 0x402040
	)
	caller := cfi.Row{Start: 0x402000, End: 0x402100, RA: arch.AMD64_RIP}
	caller.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.AMD64_RSP, Offset: 8}
	caller.Regs[arch.AMD64_RIP] = cfi.Rule{Kind: cfi.RuleUndefined}
	call := make([]byte, 16)
	for i := range call {
		call[i] = 0x90
	}
	call[11] = 0xe8
	off := int64(fn) - ra
	binary.LittleEndian.PutUint32(call[12:], uint32(int32(off)))
	code := []byte{
		0x53,                               // push %rbx
		0x41, 0xbc, 0x01, 0x00, 0x00, 0x00, // mov $0x1,%r12d: 0x401003 is inside it
		0xff, 0xd6, // call *%rsi, at 0x401007
		0x5b, 0xc3, // pop %rbx; ret
	}
	for _, targets := range [][]uint64{nil, {0x401003}} {
		obj := &hiddenObject{fakeObject: fakeObject{rows: []cfi.Row{caller},
			code: map[uint64][]byte{ra - 16: call, fn: code}}, section: fn, targets: targets}
		sb := &stackBuilder{base: stack, data: make([]byte, 0x100)}
		sb.put(stack+8, ra) // above %rbx's slot
		var regs arch.Regs
		regs.Set(arch.AMD64_RIP, 0x401007)
		regs.Set(arch.AMD64_RSP, stack)
		frames := make([]Frame, 8)
		res := New(arch.AMD64, Options{}).Unwind(&Cache{}, textAndStack(obj), &regs, &Stack{Addr: stack, Data: sb.data}, frames)
		if res.Frames != 2 || res.Stop != StopOutermost || frames[1].PC != ra || frames[1].Method != MethodPrologue {
			t.Errorf("call targets %#x: %d frames %+v, stop %v (%v); want the caller at %#x by prologue, outermost",
				targets, res.Frames, frames[:res.Frames], res.Stop, res.Err, uint64(ra))
		}
	}
}

// TestPrologueStepRecursionAtEntry: a recursive function without CFI
// (gcc's test; je; push %rbx; ...; call itself; pop %rbx; ret) sampled
// before its push, or at its ret, in a call of itself: the word at its SP
// is its own return address after its call of itself. Nothing was pushed
// and no call was passed since its first instruction, so no callee can
// have moved the SP; or the instruction is a return, which takes that
// word: it is the return address (stale ones, as V8's baseline code
// leaves, follow a call and are at no return:
// TestX86NoStaleReturnAddress). Before, such a word was refused as maybe
// stale and the stack ended at its first frame (no_unwind_info), with a
// symbol for the function or without one, and where the code at the PC
// cannot be decoded (framelessReturn, by the symbol).
func TestPrologueStepRecursionAtEntry(t *testing.T) {
	const (
		stack = 0x7ff000
		fn    = 0x402000
		ra    = 0x403020 // the outer call's return address, in code with CFI
		self  = fn + 0xd // the recursion's return address
	)
	code := []byte{
		0x85, 0xff, // test %edi,%edi
		0x74, 0x0c, // je fn+0x10
		0x53,             // push %rbx
		0x83, 0xef, 0x01, // sub $1,%edi
		0xe8, 0xf3, 0xff, 0xff, 0xff, // call fn
		0x5b,       // pop %rbx
		0xc3,       // ret
		0x90,       // nop
		0x31, 0xc0, // xor %eax,%eax
		0xc3, // ret
	}
	// A byte that is no instruction in 64-bit mode (push %es), then the
	// same function: no sweep.
	bad := append([]byte{0x06}, code...)
	call := []byte{0x90, 0x90, 0x90, 0xe8, 0, 0, 0, 0}
	for _, tc := range []struct {
		name string
		obj  func(code []byte) Object
		code []byte
		pcs  []uint64 // offsets of fn sampled
	}{
		{"by its symbol", func(code []byte) Object {
			return &funcObject{fakeObject: fakeObject{rows: []cfi.Row{x86Outermost()}, code: map[uint64][]byte{ra - 8: call, fn: code}},
				starts: []uint64{fn, 0x403000}}
		}, code, []uint64{0, 2, 4, 0xe, 0x10}},
		{"stripped", func(code []byte) Object {
			return &hiddenObject{fakeObject: fakeObject{rows: []cfi.Row{x86Outermost()}, code: map[uint64][]byte{ra - 8: call, fn: code}},
				section: fn, targets: []uint64{fn}}
		}, code, []uint64{0, 2, 4, 0xe, 0x10}},
		{"undecodable, by its symbol", func(code []byte) Object {
			return &funcObject{fakeObject: fakeObject{rows: []cfi.Row{x86Outermost()}, code: map[uint64][]byte{ra - 8: call, fn: code}},
				starts: []uint64{fn, 0x403000}}
		}, bad, []uint64{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			selfRA := uint64(self + len(tc.code) - len(code))
			c := slices.Clone(tc.code)
			// The recursive call's target: fn, from the call's end.
			binary.LittleEndian.PutUint32(c[selfRA-fn-4:], uint32(int32(int64(fn)-int64(selfRA))))
			rel := int64(fn) - ra
			binary.LittleEndian.PutUint32(call[4:], uint32(int32(rel)))
			obj := tc.obj(c)
			for _, off := range tc.pcs {
				sb := &stackBuilder{base: stack, data: make([]byte, 0x100)}
				sb.put(stack, selfRA)   // the recursion's return address
				sb.put(stack+8, 0x1234) // the outer call's %rbx, pushed
				sb.put(stack+0x10, ra)  // the outer call's return address
				var regs arch.Regs
				regs.Set(arch.AMD64_RIP, fn+off)
				regs.Set(arch.AMD64_RSP, stack)
				frames := make([]Frame, 8)
				res := New(arch.AMD64, Options{}).Unwind(&Cache{}, textAndStack(obj), &regs, &Stack{Addr: stack, Data: sb.data}, frames)
				var pcs []uint64
				for _, f := range frames[:res.Frames] {
					pcs = append(pcs, f.PC)
				}
				want := []uint64{fn + off, selfRA, ra}
				if tc.code[0] == 0x06 {
					// The caller's frame, in the same function,
					// has no sweep: the walk stops there.
					want = want[:2]
				}
				require.Equal(t, want, pcs, "pc fn+%#x: frames %+v, stop %v (%v)", off, frames[:res.Frames], res.Stop, res.Err)
				assert.Equal(t, MethodFrameless, frames[1].Method, "pc fn+%#x", off)
				if len(want) == 3 {
					assert.Equal(t, StopOutermost, res.Stop, "pc fn+%#x: %v", off, res.Err)
				}
			}
		})
	}
}

// jumpsObject is a hiddenObject that lists its direct jumps
// (JumpSourceObject), as elfcache's does.
type jumpsObject struct {
	hiddenObject
	jumps map[uint64][]uint64 // target: sources
}

func (o *jumpsObject) JumpSources(addr uint64, out []uint64) []uint64 {
	return append(out, o.jumps[addr]...)
}

// The layout of the split-part tests: the parts' code at coldText (the
// start of the code), their function at coldFn, its caller's return
// address coldRA after a call to it, a leaf with CFI at coldLeaf, and the
// stack at coldStack.
const (
	coldText  = 0x401800
	coldFn    = 0x402000
	coldRA    = 0x403020
	coldLeaf  = 0x404000
	coldStack = 0x7ff000
)

// rel32 is the displacement of a jump or call ending at next to to.
func rel32(next, to uint64) uint32 { return uint32(int32(int64(to) - int64(next))) }

// coldFnCode is the function of the split-part tests: push %rbx; sub
// $0x20,%rsp (nops instead where pushed is false); test %edi,%edi; jne
// part (at coldFn+7); add $0x20,%rsp (coldFn+0xd, where parts jump
// back); pop %rbx; ret.
func coldFnCode(part uint64, pushed bool) []byte {
	code := []byte{
		0x53,                   // push %rbx
		0x48, 0x83, 0xec, 0x20, // sub $0x20,%rsp
		0x85, 0xff, // test %edi,%edi
		0x0f, 0x85, 0, 0, 0, 0, // jne part
		0x48, 0x83, 0xc4, 0x20, // add $0x20,%rsp
		0x5b, // pop %rbx
		0xc3, // ret
	}
	binary.LittleEndian.PutUint32(code[9:], rel32(coldFn+13, part))
	if !pushed {
		for i := range 5 {
			code[i] = 0x90
		}
	}
	return code
}

// unwindColdPart unwinds, sampled in the leaf, which part (whose code is
// parts at coldText) called with its return address at the SP and the
// function's return address where its frame puts it (SP+0x30 past the
// leaf's return address), the function's jne the one jump to part; it
// returns the frames' pcs.
func unwindColdPart(t *testing.T, parts, fnCode []byte, part uint64) ([]uint64, []Frame, Result) {
	t.Helper()
	call := []byte{0x90, 0x90, 0x90, 0xe8, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(call[4:], rel32(coldRA, coldFn))
	obj := &jumpsObject{
		hiddenObject: hiddenObject{fakeObject: fakeObject{rows: []cfi.Row{x86Row(coldLeaf, coldLeaf+0x100, 8), x86Outermost()},
			code: map[uint64][]byte{coldText: parts, coldFn: fnCode, coldRA - 8: call, coldLeaf: {0x90, 0x90, 0xc3}}},
			section: coldText, targets: []uint64{coldFn, coldLeaf}},
		jumps: map[uint64][]uint64{part: {coldFn + 7}},
	}
	sb := &stackBuilder{base: coldStack, data: make([]byte, 0x100)}
	sb.put(coldStack, part+5)      // the leaf's return address, after the part's call
	sb.put(coldStack+0x28, 0x777)  // the caller's %rbx, pushed by the function
	sb.put(coldStack+0x30, coldRA) // the function's return address
	var regs arch.Regs
	regs.Set(arch.AMD64_RIP, coldLeaf+1)
	regs.Set(arch.AMD64_RSP, coldStack)
	frames := make([]Frame, 8)
	res := New(arch.AMD64, Options{}).Unwind(&Cache{}, textAndStack(obj), &regs, &Stack{Addr: coldStack, Data: sb.data}, frames)
	var pcs []uint64
	for _, f := range frames[:res.Frames] {
		pcs = append(pcs, f.PC)
	}
	return pcs, frames[:res.Frames], res
}

// TestPrologueStepColdPart: a stripped function without CFI whose rare
// path gcc split off to .text.unlikely (function.cold), laid out before
// it, at the start of the code: a block that only a jump from the
// function reaches, with the function's frame (a push and 0x20 bytes
// allocated), which calls another function. Sampled in that callee, the
// step out of the block takes the function's frame at the jump (the
// caller's SP past the push and the allocation, and its return address),
// and the function's start is checked against the caller's call. Before,
// the sweep took the block for a function's entry, nothing pushed, and the
// stack ended there (no_unwind_info). A block a jump with nothing pushed
// reaches (a tail call) is still an entry.
func TestPrologueStepColdPart(t *testing.T) {
	part := []byte{
		0xe8, 0, 0, 0, 0, // call leaf
		0xe9, 0, 0, 0, 0, // jmp back
	}
	binary.LittleEndian.PutUint32(part[1:], rel32(coldText+5, coldLeaf))
	binary.LittleEndian.PutUint32(part[6:], rel32(coldText+10, coldFn+0xd))
	pcs, frames, res := unwindColdPart(t, part, coldFnCode(coldText, true), coldText)
	require.Equal(t, []uint64{coldLeaf + 1, coldText + 5, coldRA}, pcs, "frames %+v, stop %v (%v)", frames, res.Stop, res.Err)
	assert.Equal(t, MethodPrologue, frames[2].Method)
	assert.Equal(t, uint64(coldStack+0x38), frames[2].SP)
	assert.Equal(t, StopOutermost, res.Stop, "%v", res.Err)

	pcs, frames, res = unwindColdPart(t, part, coldFnCode(coldText, false), coldText)
	require.Equal(t, []uint64{coldLeaf + 1, coldText + 5}, pcs, "a tail call's jump: frames %+v, stop %v (%v)", frames, res.Stop, res.Err)
	assert.NotEqual(t, StopOutermost, res.Stop)
}

// TestPrologueStepColdPartAfterAnother: two split parts laid out one after
// the other; the sweep from the first carries a state it cannot tell into
// the second (a branch of the first, taken with something pushed, lands
// in the second: the code after the jump ending the first is still the
// first's, for all the sweep knows). The second part, which only a jump
// from its function reaches, has that function's frame at the jump: the
// step out of it finds the caller. Before, the frame stayed unknown and
// the stack ended there (no_unwind_info).
func TestPrologueStepColdPartAfterAnother(t *testing.T) {
	const second = coldText + 9
	parts := []byte{
		0x50,       // first: push %rax
		0x74, 0x0e, // je second+8
		0x58,             // pop %rax
		0xe9, 0, 0, 0, 0, // jmp back
		0xe8, 0, 0, 0, 0, // second: call leaf
		0x48, 0x89, 0xc3, // mov %rax,%rbx
		0xe9, 0, 0, 0, 0, // jmp back (second+8)
	}
	binary.LittleEndian.PutUint32(parts[5:], rel32(coldText+9, coldFn+0xd))
	binary.LittleEndian.PutUint32(parts[10:], rel32(second+5, coldLeaf))
	binary.LittleEndian.PutUint32(parts[18:], rel32(second+13, coldFn+0xd))
	pcs, frames, res := unwindColdPart(t, parts, coldFnCode(second, true), second)
	require.Equal(t, []uint64{coldLeaf + 1, second + 5, coldRA}, pcs, "frames %+v, stop %v (%v)", frames, res.Stop, res.Err)
	assert.Equal(t, MethodPrologue, frames[2].Method)
	assert.Equal(t, StopOutermost, res.Stop, "%v", res.Err)
}

// TestPrologueStepCalledFrameRecord: V8's baseline code has no CFI; its
// first instruction calls BaselineOutOfLinePrologue, which pushes %rbp,
// points %rbp at it and allocates the frame, and the JS functions it calls
// pop the arguments it pushed: the sweep sees neither, so the CFA it finds
// is wrong in general, and the %rbp it keeps for the caller is the frame's
// own. In a CI run beside other work, one node sample stopped so: the
// caller found by prologue, then no_unwind_info (%rbp below the caller's
// SP), where perf, following %rbp, went on to node::Start.
//   - The sweep's CFA just above the frame's own record (%rbp = CFA-16,
//     [%rbp+8] the return address): the caller's %rbp is the word the
//     record saved, and its CFI (CFA = %rbp+16) finds its own CFA.
//   - The sweep's CFA further above %rbp, on a return address after a
//     call to the function left there: %rbp inside the frame contradicts
//     it, the step is not taken, and the frame pointer (a guess) finds the
//     caller.
func TestPrologueStepCalledFrameRecord(t *testing.T) {
	const (
		stack     = 0x7ff000
		fn        = 0x401000
		ra        = 0x402040 // after a call to fn
		stale     = 0x402080 // after another call to fn
		callerRBP = stack + 0x400
	)
	caller := cfi.Row{Start: 0x402000, End: 0x402100, RA: arch.AMD64_RIP}
	caller.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.AMD64_RBP, Offset: 16}
	caller.Regs[arch.AMD64_RIP] = cfi.Rule{Kind: cfi.RuleUndefined}
	callFn := func(end uint64) []byte {
		b := []byte{0x90, 0x90, 0x90, 0xe8, 0, 0, 0, 0}
		binary.LittleEndian.PutUint32(b[4:], uint32(int32(int64(fn)-int64(end))))
		return b
	}
	for _, tc := range []struct {
		name  string
		code  []byte
		pc    uint64
		rbp   uint64 // the frame's own record
		words map[uint64]uint64
		want  []uint64
		how   Method
		stop  StopReason
	}{
		{"the record below the sweep's return address", []byte{
			0xe8, 0xfb, 0x07, 0x00, 0x00, // call 0x401800 (the out-of-line prologue)
			0x41, 0x52, // push %r10
			0x41, 0x53, // push %r11
			0xe8, 0xf2, 0x08, 0x00, 0x00, // call 0x401900 (a JS function: pops both)
			0x41, 0x54, // push %r12
			0x90, 0xc3, // nop (the PC); ret
		}, fn + 0x10, stack + 0x10,
			map[uint64]uint64{stack: 0x12, stack + 8: 0x13, stack + 0x10: callerRBP, stack + 0x18: ra},
			[]uint64{fn + 0x10, ra}, MethodPrologue, StopOutermost},
		{"a return address elsewhere", []byte{
			0xe8, 0xfb, 0x07, 0x00, 0x00, // call 0x401800
			0x41, 0x52, // push %r10
			0x41, 0x53, // push %r11
			0x41, 0x54, // push %r12
			0xe8, 0xf0, 0x08, 0x00, 0x00, // call 0x401900 (pops all three)
			0x90, 0xc3, // nop (the PC); ret
		}, fn + 0x10, stack + 8,
			map[uint64]uint64{stack: 0x12, stack + 8: callerRBP, stack + 0x10: ra, stack + 0x18: stale},
			[]uint64{fn + 0x10, ra}, MethodFramePointer, StopFramePointerGuess},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &funcObject{fakeObject: fakeObject{rows: []cfi.Row{caller}, code: map[uint64][]byte{
				fn: tc.code, 0x401800: {0x55, 0x48, 0x89, 0xe5, 0xc3}, 0x401900: {0xc2, 0x18, 0x00},
				ra - 8: callFn(ra), stale - 8: callFn(stale),
			}}, starts: []uint64{fn, 0x401800, 0x401900, 0x402000}}
			sb := &stackBuilder{base: stack, data: make([]byte, 0x100)}
			for a, v := range tc.words {
				sb.put(a, v)
			}
			var regs arch.Regs
			regs.Set(arch.AMD64_RIP, tc.pc)
			regs.Set(arch.AMD64_RSP, stack)
			regs.Set(arch.AMD64_RBP, tc.rbp)
			frames := make([]Frame, 8)
			res := New(arch.AMD64, Options{}).Unwind(&Cache{}, textAndStack(obj), &regs, &Stack{Addr: stack, Data: sb.data}, frames)
			var pcs []uint64
			for _, f := range frames[:res.Frames] {
				pcs = append(pcs, f.PC)
			}
			require.Equal(t, tc.want, pcs, "frames %+v, stop %v (%v)", frames[:res.Frames], res.Stop, res.Err)
			assert.Equal(t, tc.how, frames[1].Method)
			assert.Equal(t, tc.stop, res.Stop, "%v", res.Err)
			assert.Equal(t, uint64(callerRBP+16), frames[1].CFA, "the caller's CFA, by its CFI from the %rbp it was given")
		})
	}
}
