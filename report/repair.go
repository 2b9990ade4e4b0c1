package report

import (
	"fmt"
	"io"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/resolve"
	"github.com/ustack/ustack/unwinder"
)

// The repair: a stack whose CFI walk ran off the end of its snapshot goes on
// with the kernel's own call chain of the same sample (ustack record keeps
// its user part), where that chain provably continues the same stack.
//
// The kernel walked frame pointers in the process's memory at the event;
// the frame-pointer audit replays that walk on the snapshot. Where the
// replay reproduces the chain's first m frames and then needs the record at
// R, beyond the snapshot, the chain's frame m is the word the kernel read
// at R+8. When that word is the very one the CFI walk needed and could not
// read (unwinder.Result.Beyond: the last frame's return address slot), the
// chain's frame m is the last CFI frame's caller, read by the kernel from
// the same address at the same instant, and the chain's frames from m on
// are the stack above it as a frame-pointer walk sees it. Anything else (the
// chain of another stack, a chain that skipped the frame, a slot that is
// not the return address's) is not spliced.

// StopCallchain is the stop of a stack whose CFI walk reached the end of its
// snapshot and which goes on with the kernel's call chain of the sample, to
// that chain's end (frames with how callchain).
const StopCallchain = "callchain"

// spliceChain returns the index in user (the sample's user call chain, with
// its context markers) of the frame that continues a CFI walk that stopped
// truncated at beyond, given the frame-pointer walk fp of the same
// registers and snapshot and how it ended; -1 when the chain does not
// provably continue it.
func spliceChain(user []uint64, fp []unwinder.FPFrame, fpRes unwinder.FPResult, beyond uint64) int {
	if fpRes.Stop != unwinder.FPStopTruncated || beyond == 0 || beyond != fpRes.Next+8 {
		return -1
	}
	m := 0 // frames of the chain matched with the replay
	for i, ip := range user {
		if ip >= perfdata.ContextMax {
			continue
		}
		if m == fpRes.Frames {
			return i
		}
		if ip != fp[m].PC {
			return -1
		}
		m++
	}
	return -1
}

// switchChain returns the index in user (the sample's user call chain)
// of the frame that continues a CFI walk of frames that stopped at a Go
// stack switch (unwinder.StopStackSwitch: runtime.systemstack and the like,
// on a thread's g0 stack), where the chain provably continues it; -1
// otherwise. Go's functions keep frame pointers, and systemstack sets its
// own before it switches, so the g0 frames' chain leads back into the
// goroutine's stack: where the kernel's walk at the event found every CFI
// frame, in order and none skipped (the chain's first len(frames) return
// addresses are the frames' PCs), its next one is the caller of the last,
// read from the frame record the switch left, provided it returns to a call
// of the switching function (callsInto: a switching function that did not
// set its own frame pointer would leave its caller out). A chain that
// skipped a frame (a leaf without a frame record) or ends there (morestack
// clears the frame pointer) is not spliced.
func switchChain(user []uint64, frames []unwinder.Frame) int {
	m := 0
	for i, ip := range user {
		if ip >= perfdata.ContextMax {
			continue
		}
		if m == len(frames) {
			return i
		}
		if ip != frames[m].PC {
			return -1
		}
		m++
	}
	return -1
}

// callsInto reports whether the instruction before return address ra is a
// direct call to the function holding the frame f (x86_64 call rel32,
// arm64 bl): Go's callers call runtime.systemstack so, and a chain that
// skipped the switching function's caller would return to a call of
// something else.
func callsInto(space *resolve.Space, a arch.Arch, ra uint64, f *unwinder.Frame) bool {
	as := space.AddressSpace()
	fi, ri := int(f.Mapping), as.Find(ra)
	fo, ro := space.Object(fi), space.Object(ri)
	if fo == nil || ro == nil {
		return false
	}
	fb, rb := space.Bias(fi), space.Bias(ri)
	start, ok := fo.FunctionStart(f.LookupPC() - fb)
	if !ok || ra-rb < 8 {
		return false
	}
	var code [8]byte
	return ro.ReadCode(ra-rb-8, code[:]) == len(code) && unwinder.DirectCall(a, code[:], ra, start+fb)
}

// repair continues the job's truncated stack with the kernel's chain, from
// index k of j.user on, up to the first return address that is not in code
// (as the unwinder ends a stack there: a frame-pointer chain through code
// without frame pointers reads garbage).
func (w *worker) repair(j *job, k int) {
	as := j.space.AddressSpace()
	for _, ip := range j.user[k:] {
		if ip >= perfdata.ContextMax {
			continue
		}
		mi := as.Find(ip)
		if mi < 0 || !as.Mapping(mi).Exec && as.Mapping(mi).Object == nil {
			break
		}
		fr := unwinder.Frame{PC: ip, Mapping: int32(mi), Flags: unwinder.FrameReturnAddress}
		j.out.Frames = w.sym.Append(j.out.Frames, j.space, &fr, "callchain")
	}
	j.out.Stop, j.out.StopErr = StopCallchain, ""
}

// WriteRepairLine prints, when the kernel's call chain carried stacks on
// past the end of their snapshot or a Go stack switch, how many.
func (s *Summary) WriteRepairLine(w io.Writer) {
	n := s.Stops[StopCallchain]
	if n == 0 {
		return
	}
	empty := ""
	if s.NoStackChained > 0 {
		empty = fmt.Sprintf(" (%d of them had no stack snapshot at all: the kernel copied none)", s.NoStackChained)
	}
	fmt.Fprintf(w, "ustack: %d stacks cut at the end of their stack snapshot, or at a Go stack switch, went on with the kernel's call chain of the sample (how callchain)%s\n", n, empty)
}
