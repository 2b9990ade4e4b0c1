package report

import (
	"fmt"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/resolve"
	"github.com/ustack/ustack/unwinder"
)

// cutInstallCaller returns how many of frames to keep: all of them, or,
// in libgcc's exception unwinder called uw_install_context_1 (a frame at
// the call's return, elfcache.Object.EHInstallReturn), up to that frame
// when the caller its CFI gave is not proven its own (callsFunction): the
// handler, whose address uw_install_context_1 writes into the return
// address slot last, read with the wrong SP. On arm64 it is never proven:
// the frame pointer x29, which the callers' CFI finds their frames by, is
// among the registers written before the return address (on amd64,
// gdb-driven stops at every few instructions of the loop, in code with and
// without frame pointers, found the callers intact up to that last write). On arm64 the function's
// epilogue is also its normal return's (EHInstallEpilogue): a frame there
// keeps its caller only where it is the first, whose registers regs are,
// and its offset register is 0 (the normal return). The error says why.
func cutInstallCaller(as *unwinder.AddressSpace, regs *arch.Regs, frames []unwinder.Frame) (int, error) {
	for i := 0; i+1 < len(frames); i++ {
		f := &frames[i]
		if uint(f.Mapping) >= uint(as.Len()) {
			continue
		}
		m := as.Mapping(int(f.Mapping))
		o, ok := m.Object.(*elfcache.Object)
		if !ok {
			continue
		}
		if f.Flags&unwinder.FrameReturnAddress == 0 {
			fn, reg, ok := o.EHInstallEpilogue(f.PC - m.Bias)
			if !ok {
				continue
			}
			if i == 0 && regs != nil {
				if v, known := regs.Get(reg); known && v == 0 {
					continue // the normal return
				}
			}
			return i + 1, fmt.Errorf("%s's epilogue at %#x with x%d not 0, the handler's address in its saved x30: %w", fn, f.PC, reg, cfi.ErrInstallingHandler)
		}
		fn, ok := o.EHInstallReturn(f.PC - m.Bias)
		if !ok || o.Arch() == arch.AMD64 && callsFunction(as, &frames[i+1], fn) {
			continue
		}
		return i + 1, fmt.Errorf("%s's caller at %#x: %w", fn, frames[i+1].PC, cfi.ErrInstallingHandler)
	}
	return len(frames), nil
}

// callsFunction reports whether f's PC is a return address right after a
// direct call (call rel32, bl) of the function fn or its PLT stub
// ("fn@plt"), as __cxa_throw's call of _Unwind_RaiseException@plt and a
// cleanup's of _Unwind_Resume@plt are; a handler's address follows no
// such call.
func callsFunction(as *unwinder.AddressSpace, f *unwinder.Frame, fn string) bool {
	if f.Flags&unwinder.FrameReturnAddress == 0 || uint(f.Mapping) >= uint(as.Len()) {
		return false
	}
	m := as.Mapping(int(f.Mapping))
	o, ok := m.Object.(*elfcache.Object)
	if !ok {
		return false
	}
	ret := f.PC - m.Bias
	var b [5]byte
	if ret < uint64(len(b)) || o.ReadCode(ret-uint64(len(b)), b[:]) != len(b) {
		return false
	}
	target, ok := unwinder.CallTarget(o.Arch(), b[:], ret)
	if !ok {
		return false
	}
	name, off, ok := o.Symbolize(target)
	name = resolve.Unversioned(name)
	return ok && off == 0 && (name == fn || name == fn+"@plt")
}
