package elfcache

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/arch/arm64/arm64asm"
	"golang.org/x/arch/x86/x86asm"

	"github.com/ustack/ustack/internal/x86dec"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
)

// Go's runtime switches a thread from a goroutine's stack to its g0 stack in
// three assembly functions, each of which loads SP from g0.sched.sp and
// then calls a function there:
//
//   - runtime.mcall(fn) calls fn, which never returns (gopark, Gosched):
//     fn runs from the top of the g0 stack and nothing above it is live.
//     The word where mcall's CFI finds a return address holds whatever
//     mstart's frame left there (zero, a stack or heap address, code), and
//     gdb walks on into it; Go's own traceback stops at mcall and Delve
//     ends a system stack there. A frame returning into mcall past its
//     switch is the outermost.
//   - runtime.systemstack(fn) calls fn and switches back: its caller is on
//     the goroutine's stack (g.sched, saved by gosave_systemstack_switch).
//   - runtime.morestack calls newstack, which never returns into it: the
//     function whose stack grows, and its callers, are on the goroutine's
//     stack (g.sched and m.morebuf).
//   - runtime.asmcgocall(fn, arg) calls a C function (cgo): runtime.cgocall
//     and its callers are on the goroutine's stack (g.syscallsp, saved by
//     entersyscall). Called on the g0 stack already, it does not switch:
//     that call lies past the range and keeps its rows.
//   - gogo (runtime.gogo's tail, gogo<> in the assembly; runtime.gogo
//     itself before Go 1.17) resumes a goroutine: it loads SP from
//     gobuf.sp, clears the gobuf and jumps to gobuf.pc. From the load to
//     its end the thread is on the goroutine's stack, whose innermost
//     frame is gobuf.pc's, not a caller of gogo's (the scheduler's
//     frames are on the g0 stack it left), and the word at the SP is
//     that frame's, no return address.
//
// Past the switch, CFI (Go's .debug_frame and the pclntab's pcsp alike)
// describes the goroutine's stack as if SP still pointed there. FindRow
// makes mcall's return address undefined there and answers
// cfi.ErrStackSwitch for the others: the unwinder ends the walk with
// StopStackSwitch, where a core's reader can go on from the goroutine's
// saved registers. Where the switch lies is found by decoding the function
// (golang.org/x/arch, the disassembler of Go's own objdump): from the
// first instruction that loads SP from memory or a register (amd64 MOVQ
// 0x38(R14), SP; arm64 MOVD R0, RSP) to the end of the first call after it
// (gogo's: to the function's end). A thread stopped before the switch
// keeps its caller.

// goSwitch is one function's range past its stack switch.
type goSwitch struct {
	Range
	fn        string
	outermost bool // mcall: the stack ends; else the caller is on the other stack
	// bpFrame: a range of goBPFuncs, where the CFA is the frame pointer
	// plus cfaOff (amd64 %rbp+16; arm64 x29+8+the frame's size), the
	// return address at CFA+raOff and the caller's frame pointer at
	// CFA+fpOff.
	bpFrame              bool
	cfaOff, raOff, fpOff int64
	// sameStack: a range of goAlignFuncs, whose caller is on the same
	// stack (the row is not marked OtherStack).
	sameStack bool
	// cfaReg, when not 0, is the register the CFA is relative to in
	// place of the frame pointer, whose rule is then left as it is
	// (racecall's %r12).
	cfaReg uint16
}

// goBPFuncs are the runtime's functions that call into the vDSO:
// each moves SP, onto the g0 stack when it runs on a goroutine's and
// aligned to 16 bytes (MOVQ 0x38(DX), SP; SUBQ; ANDQ $-0x10, SP), calls
// clock_gettime or getrandom there, and moves it back (MOVQ R12, SP).
// Their CFI (.debug_frame and the pclntab's pcsp alike) gives an SP-based
// CFA throughout, wrong past the move: a thread stopped in the vDSO under
// nanotime1 read a zero for its return address (a stack called complete
// at two frames), or a stale word (a made-up caller), and a goroutine in
// time.now lost its frames. Each sets up a frame pointer first (PUSHQ BP;
// MOVQ SP, BP), so from there to the POPQ BP before its RET, and in the
// code after that RET (the system call it falls back to, which jumps
// back), the CFA is %rbp+16, as Go's own traceback finds it (m.vdsoSP).
// On arm64 they do the same (MOVD R1, RSP; MOVD R20, RSP back) after
// their frame record (MOVD.W R30, -N(RSP); MOVD R29, -8(RSP); SUB $8, RSP,
// R29): up to the MOVD -8(RSP), R29 of their epilogue the CFA is
// x29+8+N.
var goBPFuncs = [...]string{"runtime.nanotime1", "runtime.walltime", "runtime.walltime1", "time.now", "runtime.vgetrandom1"}

// goAlignFuncs are the amd64 runtime's calls into cgo's C functions for
// mmap, munmap and sigaction: each sets up a frame pointer, then aligns SP
// to 16 bytes on the same stack (MOVQ SP, BX; ANDQ $-0x10, SP) and calls
// the C function. Their CFI does not know the alignment: in half the calls
// the CFA it gives is 8 bytes off, and the walk read the saved frame
// pointer for the return address (a cgo program's stacks in mmap ended
// no_mapping at runtime.callCgoMmap). runtime.asmcgocall, called on the
// g0 stack already (creating a thread), aligns SP the same way; its
// switching path is a stack switch (goSwitchFuncs), whose range comes
// first. As in goBPFuncs, the CFA is %rbp+16 from the MOVQ SP, BP to the
// POPQ BP.
var goAlignFuncs = [...]string{"runtime.callCgoMmap", "runtime.callCgoMunmap", "runtime.callCgoSigaction", "runtime.asmcgocall"}

// switchEnd says where a switch's range ends.
type switchEnd uint8

const (
	endAtCall     switchEnd = iota // mcall, morestack: the call never returns
	endSwitchBack                  // at the end of the next load of SP after the call, which switches back
	endOfCode                      // gogo: no call follows; it jumps to the goroutine's PC
)

// goSwitchFuncs are the runtime's stack-switching functions, by their
// pclntab names.
var goSwitchFuncs = [...]struct {
	name      string
	outermost bool
	end       switchEnd
}{{"runtime.mcall", true, endAtCall}, {"runtime.systemstack", false, endSwitchBack}, {"runtime.morestack", false, endAtCall},
	{"runtime.asmcgocall", false, endSwitchBack}, {"gogo", false, endOfCode}, {"runtime.gogo", false, endOfCode}}

// findGoSwitches finds the switches of an object with a Go pclntab. Objects
// without one are not parsed; a function whose code does not decode, or has
// no such load and call, is left as it is.
func (o *Object) findGoSwitches() {
	defer func() {
		if recover() != nil { // a damaged pclntab: GoPCLNError says why
			o.goSwitches = nil
		}
	}()
	if o.section(".gopclntab") == nil && o.section(".data.rel.ro.gopclntab") == nil {
		return
	}
	if o.arch != arch.AMD64 && o.arch != arch.ARM64 {
		return
	}
	var names [len(goSwitchFuncs)]string
	for i, f := range goSwitchFuncs {
		names[i] = f.name
	}
	o.eachGoFunction(names[:], func(i int, start uint64, code []byte) {
		f := goSwitchFuncs[i]
		if r, ok := goSwitchRange(o.arch, code, start, f.end); ok {
			o.goSwitches = append(o.goSwitches, goSwitch{Range: r, fn: f.name, outermost: f.outermost})
		}
	})
	o.eachGoFunction(goBPFuncs[:], func(i int, start uint64, code []byte) {
		name := goBPFuncs[i]
		if o.arch == arch.ARM64 {
			if r, size, ok := goFrameRangeARM64(code, start); ok {
				o.goSwitches = append(o.goSwitches, goSwitch{Range: r, fn: name, bpFrame: true,
					cfaOff: 8 + size, raOff: -size, fpOff: -size - 8})
			}
			return
		}
		for _, r := range goBPRanges(code, start) {
			o.goSwitches = append(o.goSwitches, goSwitch{Range: r, fn: name, bpFrame: true, cfaOff: 16, raOff: -8, fpOff: -16})
		}
	})
	if o.arch != arch.AMD64 {
		return // arm64's SP stays aligned: its CFI holds
	}
	o.eachGoFunction(goAlignFuncs[:], func(i int, start uint64, code []byte) {
		for _, r := range goBPRanges(code, start) {
			o.goSwitches = append(o.goSwitches, goSwitch{Range: r, fn: goAlignFuncs[i], bpFrame: true, cfaOff: 16, raOff: -8, fpOff: -16, sameStack: true})
		}
	})
	o.eachGoFunction([]string{"racecall"}, func(_ int, start uint64, code []byte) {
		if r, ok := raceCallRange(code, start); ok {
			o.goSwitches = append(o.goSwitches, goSwitch{Range: r, fn: "racecall", bpFrame: true, cfaReg: arch.AMD64_R12, cfaOff: 8, raOff: -8})
		}
	})
}

// raceCallRange decodes racecall<> (runtime/race_amd64.s, the race
// detector's way into its C runtime, "racecall" in the pclntab; jumped to
// from runtime.racecall, racecalladdr and the like, at their caller's
// return address), which keeps the SP in %r12 (MOVQ SP, R12), moves SP
// to the g0 stack where it runs on a goroutine's, aligns it (ANDQ
// $-0x10, SP), calls the C function and moves it back (MOVQ R12, SP): from
// the end of the one to the end of the other the CFA is %r12+8, where its
// CFI's SP-based one is wrong (a race detector build's stacks in
// __tsan_read ended no_mapping at racecall).
func raceCallRange(code []byte, addr uint64) (Range, bool) {
	var start uint64
	for off := 0; off < len(code); {
		in, err := x86dec.Decode(code[off:])
		if err != nil {
			return Range{}, false
		}
		at := addr + uint64(off)
		off += in.Len
		if in.Op != x86asm.MOV {
			continue
		}
		switch {
		case in.Args[0] == x86asm.R12 && in.Args[1] == x86asm.RSP && start == 0:
			start = at + uint64(in.Len)
		case in.Args[0] == x86asm.RSP && in.Args[1] == x86asm.R12 && start != 0:
			return Range{start, at + uint64(in.Len)}, true
		}
	}
	return Range{}, false
}

// eachGoFunction calls fn with the index in names, the start and the code
// of each function the pclntab names so, where its code can be read.
func (o *Object) eachGoFunction(names []string, fn func(i int, start uint64, code []byte)) {
	bounds := make([]Range, len(names))
	o.goFunctions(names, bounds)
	for i := range names {
		if code, ok := o.functionCode(bounds[i]); ok {
			fn(i, bounds[i].Start, code)
		}
	}
}

// functionCode returns the code of the function at r, a runtime assembly
// function of at most 4 KiB.
func (o *Object) functionCode(r Range) ([]byte, bool) {
	if r.Start >= r.End || r.End-r.Start > 4096 {
		return nil, false
	}
	code := make([]byte, r.End-r.Start)
	return code, o.ReadCode(r.Start, code) == len(code)
}

// goFrameRangeARM64 decodes code, an arm64 function at addr whose first
// instructions set up Go's frame record (str x30, [sp, #-N]!; stur x29,
// [sp, #-8]; sub x29, sp, #8), and returns the addresses from the end of
// those to its ldur x29, [sp, #-8], where x29 holds the record, and N.
func goFrameRangeARM64(code []byte, addr uint64) (Range, int64, bool) {
	if len(code) < 12 {
		return Range{}, 0, false
	}
	w := func(off int) uint32 { return binary.LittleEndian.Uint32(code[off:]) }
	str := w(0)
	if str&^(0x1ff<<12) != 0xf8000ffe || w(4) != 0xf81f83fd || w(8) != 0xd10023fd { // str x30, [sp, #imm9]!; stur x29, [sp, #-8]; sub x29, sp, #8
		return Range{}, 0, false
	}
	size := -(int64(int32(str<<11)) >> 23) // imm9, sign-extended: -N
	if size <= 0 {
		return Range{}, 0, false
	}
	for off := 12; off+4 <= len(code); off += 4 {
		if w(off) == 0xf85f83fd { // ldur x29, [sp, #-8]
			return Range{addr + 12, addr + uint64(off)}, size, true
		}
	}
	return Range{}, 0, false
}

// goBPRanges decodes code, an amd64 function at addr with a frame pointer,
// and returns where the CFA is %rbp+16: from the end of its MOVQ SP, BP to
// the POPQ BP before its first RET, and from each RET's end (code reached
// by jumps from the body: a system call to fall back to, asmcgocall's path
// on the g0 stack) to the next POPQ BP before a RET, or to the end of the
// code. It returns nothing for code of another shape.
func goBPRanges(code []byte, addr uint64) []Range {
	var set, from, pop uint64 // the end of MOVQ SP, BP; where the open range begins; the POPQ BP last seen
	var out []Range
	for off := 0; off < len(code); {
		in, err := x86dec.Decode(code[off:])
		if err != nil {
			return nil
		}
		at := addr + uint64(off)
		off += in.Len
		switch {
		case in.Op == x86asm.MOV && in.Args[0] == x86asm.RBP && in.Args[1] == x86asm.RSP && set == 0:
			set = at + uint64(in.Len)
			from = set
		case in.Op == x86asm.POP && in.Args[0] == x86asm.RBP:
			pop = at
		case in.Op == x86asm.RET:
			if set == 0 || pop+1 != at || pop <= from {
				return nil
			}
			out = append(out, Range{from, pop})
			from = at + uint64(in.Len)
		}
	}
	if len(out) == 0 {
		return nil
	}
	if end := addr + uint64(len(code)); from < end {
		out = append(out, Range{from, end})
	}
	return out
}

// goSwitchRange decodes code (a function at addr) up to the first
// instruction that writes SP from memory or another register and the first
// call after it, and returns the addresses from the end of the one to the
// end of the other, or as end says: to the end of the next such write of
// SP after the call (where one follows), or to the end of the code.
func goSwitchRange(a arch.Arch, code []byte, addr uint64, end switchEnd) (Range, bool) {
	var start, called uint64
	for off := 0; off < len(code); {
		n, sw, call := 0, false, false
		switch a {
		case arch.AMD64:
			in, err := x86dec.Decode(code[off:])
			if err != nil {
				break
			}
			n = in.Len
			switch in.Op {
			case x86asm.MOV:
				if in.Args[0] == x86asm.RSP {
					_, mem := in.Args[1].(x86asm.Mem)
					reg, isReg := in.Args[1].(x86asm.Reg)
					sw = mem || isReg && reg != x86asm.RBP
				}
			case x86asm.CALL:
				call = true
			}
		case arch.ARM64:
			in, err := arm64asm.Decode(code[off:])
			if err != nil {
				break
			}
			n = 4
			switch in.Op {
			case arm64asm.MOV:
				sw = in.Args[0] == arm64asm.RegSP(arm64asm.SP)
			case arm64asm.BL, arm64asm.BLR:
				call = true
			}
		}
		if n == 0 { // undecodable
			break
		}
		at := addr + uint64(off)
		off += n
		switch {
		case sw && start == 0:
			start = at + uint64(n)
			if end == endOfCode {
				return Range{start, addr + uint64(len(code))}, start < addr+uint64(len(code))
			}
		case call && start != 0 && called == 0:
			called = at + uint64(n)
			if end == endAtCall {
				return Range{start, called}, true
			}
		case sw && called != 0:
			return Range{start, at + uint64(n)}, true
		}
	}
	if called != 0 {
		return Range{start, called}, true
	}
	return Range{}, false
}

// goSwitchRow answers FindRow for addr in an object with stack switches:
// cfi.ErrStackSwitch (wrapped, naming the function) past a switch whose
// caller is on the other stack; past mcall's, its row with the return
// address undefined; elsewhere the row, kept clear of the switches' ranges
// (a row ends where one begins), or cfi.ErrNoFDE when there is none.
func (o *Object) goSwitchRow(addr uint64, row *cfi.Row) error {
	for i := range o.goSwitches {
		s := &o.goSwitches[i]
		if !s.Contains(addr) {
			continue
		}
		if s.bpFrame {
			if err := o.row(addr, row); err != nil {
				return err
			}
			row.Start, row.End = max(row.Start, s.Start), min(row.End, s.End)
			fp := uint16(arch.AMD64_RBP)
			if o.arch == arch.ARM64 {
				fp = arch.ARM64_X29
			}
			if s.cfaReg != 0 {
				row.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: s.cfaReg, Offset: s.cfaOff}
				row.Regs[row.RA] = cfi.Rule{Kind: cfi.RuleOffset, Offset: s.raOff}
				row.OtherStack = true // on the g0 stack, or aligned on the goroutine's
				o.clipToSwitches(addr, row)
				return nil
			}
			row.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: fp, Offset: s.cfaOff}
			row.Regs[row.RA] = cfi.Rule{Kind: cfi.RuleOffset, Offset: s.raOff}
			row.Regs[fp] = cfi.Rule{Kind: cfi.RuleOffset, Offset: s.fpOff}
			row.OtherStack = !s.sameStack // on the g0 stack, its caller on a goroutine's
			o.clipToSwitches(addr, row)   // asmcgocall's switch lies in its frame's range
			return nil
		}
		if !s.outermost {
			return newErr(o.path, "", -1, fmt.Errorf("%s at %#x: %w", s.fn, addr, cfi.ErrStackSwitch))
		}
		if err := o.row(addr, row); err != nil {
			return err
		}
		row.Start, row.End = max(row.Start, s.Start), min(row.End, s.End)
		row.Regs[row.RA] = cfi.Rule{Kind: cfi.RuleUndefined}
		return nil
	}
	if err := o.row(addr, row); err != nil {
		return cfi.ErrNoFDE // FindRow asks again and reports it
	}
	o.clipToSwitches(addr, row)
	return nil
}

// clipToSwitches narrows row, found for addr, to end where a switch's range
// after addr begins and to begin where one before it ends.
func (o *Object) clipToSwitches(addr uint64, row *cfi.Row) {
	for i := range o.goSwitches {
		clipAround(row, addr, o.goSwitches[i].Range)
	}
}

// clipAround narrows row, found for addr outside r, to end where r begins
// (r after addr) or to begin where r ends (r before it).
func clipAround(row *cfi.Row, addr uint64, r Range) {
	if addr < r.Start && row.End > r.Start {
		row.End = r.Start
	} else if addr >= r.End && row.Start < r.End {
		row.Start = max(row.Start, r.End)
	}
}
