package unwinder

import (
	"fmt"

	"github.com/ustack/ustack/arch"
)

// The frame-pointer walk: the second unwind, by the rules the kernel itself
// follows for a user stack when perf asks it for a call chain
// (perf_callchain_user). It needs no object and no CFI: the sampled PC, then
// one return address per frame record, each record found through the
// previous one. Replayed on the registers and memory the CFI walk uses, it
// says which frames a frame-pointer profiler (perf record -g, the kernel's
// own chain in a dwarf recording) would have shown for the same sample.
//
// x86_64 (arch/x86/events/core.c, perf_callchain_user): the record is at
// rbp: the next record's address in its first word, the return address in
// the second. The chain is followed while the record's address is a user
// address (__access_ok) and both words can be read; every return address
// read is stored, zero included, and nothing checks that the chain moves up
// the stack.
//
// arm64 (arch/arm64/kernel/stacktrace.c, arch_stack_walk_user and
// unwind_user_frame): the record is at x29, {next record, lr}. The walk goes
// on while the record's address is non-zero and 8-byte aligned and the
// record can be read; lr, its pointer authentication code stripped, is
// stored; the walk ends after a record whose next record does not lie above
// it. The link register x30 is never read: a leaf that did not save it costs
// its caller.
//
// Both stop when the chain holds as many frames as the kernel keeps
// (max_stack: the caller's buffer).
//
// One more x86_64 rule, for a sample a uprobe took at a function's entry
// (is_uprobe_at_func_entry: 6.12, and the 6.1.y and 6.6.y stable kernels
// since October 2024; the kernel lab's 6.1.176 guest has it): when the probed
// instruction is push %rbp or endbr64, the frame pointer is still the
// caller's, so the kernel stores the word at the stack pointer, the return
// address, before the loop (WalkFramePointersAtProbe).

// FPFrame is one frame of a frame-pointer walk.
type FPFrame struct {
	// PC is the sampled PC (frame 0) or the return address read from a
	// frame record.
	PC uint64
	// Record is the address of the frame record PC was read from (0 for
	// frame 0): the return address lies at Record+8. For the return
	// address a uprobe's walk reads at the stack pointer, SP-8.
	Record uint64
}

// FPStop says why a frame-pointer walk ended, and so whether the kernel's
// walk of the same stack would have ended there too.
type FPStop uint8

const (
	// FPStopEnd: the kernel's walk ends here as well: the next record's
	// address is no user address (zero, in the never-mapped first page,
	// past the top of user space) or, on arm64, is misaligned or does not
	// lie above the record before it.
	FPStopEnd FPStop = iota
	// FPStopDepth: the caller's buffer (the kernel's max_stack) is full.
	FPStopDepth
	// FPStopTruncated: the next record lies at or beyond the end of the
	// captured stack: the kernel read on, this walk cannot.
	FPStopTruncated
	// FPStopOutside: the next record lies in memory the capture does not
	// hold (below the stack pointer, the heap): the kernel may have read
	// it (a register that held something other than a frame pointer
	// makes garbage frames), this walk cannot.
	FPStopOutside
	// FPStopUnknownRegister: the PC (no frame at all) or the frame
	// pointer was not captured.
	FPStopUnknownRegister
)

var fpStopNames = [...]string{"end", "depth", "truncated", "outside", "unknown_register"}

// String returns the short name used in reports: end, depth, truncated,
// outside, unknown_register.
func (s FPStop) String() string {
	if int(s) < len(fpStopNames) {
		return fpStopNames[s]
	}
	return fmt.Sprintf("fpstop(%d)", uint8(s))
}

// FPResult is the outcome of one frame-pointer walk.
type FPResult struct {
	// Frames is the number of frames written into the caller's buffer.
	Frames int
	// Stop says why the walk ended.
	Stop FPStop
	// Next is the address of the record the walk could not read
	// (FPStopTruncated, FPStopOutside).
	Next uint64
}

// Exact reports whether the kernel's walk of the same registers and memory
// finds exactly Frames frames: the walk ended for a reason the kernel
// shares, not for want of captured memory.
func (r FPResult) Exact() bool { return r.Stop == FPStopEnd || r.Stop == FPStopDepth }

// Bounds of the addresses the kernel reads a record at. The first page is
// never mapped (vm.mmap_min_addr is at least 4096); x86_64's __access_ok
// takes addresses up to TASK_SIZE_MAX-1 with 4-level page tables, arm64's
// access_ok those below TASK_SIZE (48-bit virtual addresses).
const (
	fpLowest       = 4096
	fpTopAMD64     = 1<<47 - 4096
	fpTopARM64     = 1 << 48
	fpRecordLength = 16
)

// WalkFramePointers walks the stack described by regs and mem by frame
// pointers, by the kernel's rules for user stacks (see FPFrame's file), and
// writes the frames, the sampled PC first, into frames. It reads memory only
// through mem, as Unwind does, and allocates nothing.
func (u *Unwinder) WalkFramePointers(regs *arch.Regs, mem Memory, frames []FPFrame) FPResult {
	return u.walkFP(regs, mem, frames, false)
}

// WalkFramePointersAtProbe is WalkFramePointers for a sample a uprobe took
// at the PC, whose instruction begins with insn (its first bytes, as the
// object holds them). On x86_64, when that instruction is push %rbp or
// endbr64, the return address at the stack pointer comes first, as the
// kernel stores it.
func (u *Unwinder) WalkFramePointersAtProbe(regs *arch.Regs, mem Memory, insn []byte, frames []FPFrame) FPResult {
	entry := u.arch == arch.AMD64 && (len(insn) >= 1 && insn[0] == 0x55 ||
		len(insn) >= 4 && insn[0] == 0xf3 && insn[1] == 0x0f && insn[2] == 0x1e && insn[3] == 0xfa)
	return u.walkFP(regs, mem, frames, entry)
}

func (u *Unwinder) walkFP(regs *arch.Regs, mem Memory, frames []FPFrame, probedEntry bool) FPResult {
	a := u.arch
	if len(frames) == 0 {
		return FPResult{Stop: FPStopDepth}
	}
	pc, ok := regs.Get(a.PC())
	if !ok {
		return FPResult{Stop: FPStopUnknownRegister}
	}
	frames[0] = FPFrame{PC: pc}
	n := 1
	rec, ok := regs.Get(a.FP())
	if !ok {
		return FPResult{Frames: n, Stop: FPStopUnknownRegister}
	}
	if probedEntry && n < len(frames) {
		// The kernel's get_user at the stack pointer: a word it cannot
		// read is left out, one beyond the snapshot leaves the walk
		// short of the kernel's.
		sp, ok := regs.Get(a.SP())
		if !ok {
			return FPResult{Frames: n, Stop: FPStopUnknownRegister}
		}
		ra, ms := mem.ReadUint64(sp)
		switch ms {
		case MemOK:
			frames[n] = FPFrame{PC: ra, Record: sp - 8}
			n++
		case MemTruncated:
			return FPResult{Frames: n, Stop: FPStopTruncated, Next: sp - 8}
		default:
			return FPResult{Frames: n, Stop: FPStopOutside, Next: sp - 8}
		}
	}
	arm64 := a == arch.ARM64
	top := uint64(fpTopAMD64)
	if arm64 {
		top = fpTopARM64
	}
	for {
		if n >= len(frames) {
			return FPResult{Frames: n, Stop: FPStopDepth}
		}
		if arm64 && rec&7 != 0 {
			return FPResult{Frames: n, Stop: FPStopEnd}
		}
		// rec < fpLowest also ends arm64's walk at a zero x29.
		if rec < fpLowest || rec > top-fpRecordLength {
			return FPResult{Frames: n, Stop: FPStopEnd}
		}
		next, ms := mem.ReadUint64(rec)
		if ms == MemOK {
			var ra uint64
			ra, ms = mem.ReadUint64(rec + 8)
			if ms == MemOK {
				if arm64 {
					ra = a.StripPAC(ra, u.opts.PACMask)
				}
				frames[n] = FPFrame{PC: ra, Record: rec}
				n++
				if arm64 && next <= rec {
					return FPResult{Frames: n, Stop: FPStopEnd}
				}
				rec = next
				continue
			}
		}
		if ms == MemTruncated {
			return FPResult{Frames: n, Stop: FPStopTruncated, Next: rec}
		}
		return FPResult{Frames: n, Stop: FPStopOutside, Next: rec}
	}
}
