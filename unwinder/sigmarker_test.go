package unwinder_test

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/unwinder"
)

// The signal frames below are laid out as the kernel writes them (see
// fallback.go): a handler with no CFI returns into a sigreturn trampoline
// at tramp; the interrupted code is at interrupted, in a frame whose frame
// pointer is 0 (the outermost).
const (
	sigStack       = 0x7ff000
	sigTramp       = 0x9000
	sigHandler     = 0x1100
	sigInterrupted = 0x3100
)

func sigSpace() *unwinder.AddressSpace {
	return unwinder.NewAddressSpace([]unwinder.Mapping{
		{Start: 0x1000, End: 0x2000, Exec: true},
		{Start: 0x3000, End: 0x4000, Exec: true},
	})
}

// arm64SigFrame returns a stack whose SP holds an rt_sigframe; marker says
// whether its fpsimd_context header is there.
func arm64SigFrame(marker bool) ([]byte, arch.Regs) {
	stack := make([]byte, 0x2000)
	put := func(off int, v uint64) { binary.LittleEndian.PutUint64(stack[off:], v) }
	const mc = 304 + 8            // x0 in uc_mcontext
	put(mc+29*8, 0)               // x29: the outermost frame
	put(mc+30*8, 0x3200)          // x30
	put(mc+31*8, sigStack+0x1000) // sp
	put(mc+32*8, sigInterrupted)  // pc
	if marker {
		put(592, 528<<32|0x46508001) // fpsimd_context: magic, size
	}
	var regs arch.Regs
	regs.Set(arch.ARM64_PC, sigHandler)
	regs.Set(arch.ARM64_SP, sigStack)
	regs.Set(arch.ARM64_X30, sigTramp)
	regs.Set(arch.ARM64_X29, sigStack+0x800)
	return stack, regs
}

// amd64SigFrame returns a stack whose first word pair is the handler's
// frame record (saved rbp, return address into the trampoline) and whose
// ucontext follows; marker says whether the xsave area's magic is there.
func amd64SigFrame(marker bool) ([]byte, arch.Regs) {
	stack := make([]byte, 0x2000)
	put := func(off int, v uint64) { binary.LittleEndian.PutUint64(stack[off:], v) }
	put(0, 0)
	put(8, sigTramp)
	const uc = 16                 // the trampoline's SP
	const mc = uc + 40            // uc_mcontext: r8..r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip
	put(mc+10*8, 0)               // rbp: the outermost frame
	put(mc+15*8, sigStack+0x1000) // rsp
	put(mc+16*8, sigInterrupted)  // rip
	const fpstate = 0x400         // 64-byte aligned
	put(uc+224, sigStack+fpstate) // sigcontext's fpstate pointer
	if marker {
		binary.LittleEndian.PutUint32(stack[fpstate+464:], 0x46505853) // FP_XSTATE_MAGIC1
	}
	var regs arch.Regs
	regs.Set(arch.AMD64_RIP, sigHandler)
	regs.Set(arch.AMD64_RSP, sigStack)
	regs.Set(arch.AMD64_RBP, sigStack)
	return stack, regs
}

// TestSignalMarker unwinds through a signal frame whose sigreturn
// trampoline's code is not in the capture (qemu-user's page in a
// recording): the kernel's marker in the frame (arm64's fpsimd_context
// magic, x86_64's xstate magic) makes it a signal frame, how
// signal_marker; without the marker the walk stops at the trampoline's
// address, in no mapping, rather than guess.
func TestSignalMarker(t *testing.T) {
	for _, a := range []arch.Arch{arch.ARM64, arch.AMD64} {
		for _, marker := range []bool{true, false} {
			frame := arm64SigFrame
			if a == arch.AMD64 {
				frame = amd64SigFrame
			}
			data, regs := frame(marker)
			var c unwinder.Cache
			frames := make([]unwinder.Frame, 16)
			res := unwinder.New(a, unwinder.Options{}).Unwind(&c, sigSpace(), &regs, &unwinder.Stack{Addr: sigStack, Data: data}, frames)
			pcs, hows := framePCs(frames[:res.Frames])
			if marker {
				assert.Equal(t, []uint64{sigHandler, sigTramp, sigInterrupted}, pcs, "%v: %v", a, hows)
				if len(hows) == 3 {
					assert.Equal(t, "signal_marker", hows[2], "%v", a)
				}
				// The interrupted frame is in anonymous memory with a zero
				// frame pointer: nothing proves it outermost.
				assert.Equal(t, unwinder.StopNoUnwindInfo, res.Stop, "%v: %v", a, res.Err)
			} else {
				assert.Equal(t, []uint64{sigHandler}, pcs, "%v without the marker: %v", a, hows)
				assert.NotEqual(t, unwinder.StopOutermost, res.Stop, "%v without the marker", a)
			}
		}
	}
}

// TestSigreturnInMemory finds an x86_64 sigreturn trampoline by its code
// in the captured memory (a core's anonymous page: no object, no CFI, no
// symbol), as gdb does, and restores the interrupted frame from the
// ucontext, how signal, with no need of a marker.
func TestSigreturnInMemory(t *testing.T) {
	data, regs := amd64SigFrame(false)
	tramp := []byte{0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x0f, 0x1f, 0x00, 0x00, 0x00, 0x00, 0x00}
	mem, err := unwinder.NewSegments([]unwinder.Segment{
		{Addr: sigStack, Size: uint64(len(data)), Data: data},
		{Addr: sigTramp, Size: 0x1000, Data: tramp},
	})
	if err != nil {
		t.Fatal(err)
	}
	space := unwinder.NewAddressSpace([]unwinder.Mapping{
		{Start: 0x1000, End: 0x2000, Exec: true},
		{Start: 0x3000, End: 0x4000, Exec: true},
		{Start: sigTramp, End: sigTramp + 0x1000, Exec: true},
	})
	var c unwinder.Cache
	frames := make([]unwinder.Frame, 16)
	res := unwinder.New(arch.AMD64, unwinder.Options{}).Unwind(&c, space, &regs, mem, frames)
	pcs, hows := framePCs(frames[:res.Frames])
	assert.Equal(t, []uint64{sigHandler, sigTramp, sigInterrupted}, pcs, "%v", hows)
	assert.Equal(t, []string{"context", "fp", "signal"}, hows)
}

// framePCs returns the frames' PCs and how each was found.
func framePCs(frames []unwinder.Frame) (pcs []uint64, hows []string) {
	for _, f := range frames {
		pcs = append(pcs, f.PC)
		hows = append(hows, f.Method.String())
	}
	return pcs, hows
}
