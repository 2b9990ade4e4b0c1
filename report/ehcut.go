package report

import (
	"encoding/binary"
	"fmt"

	"github.com/ustack/ustack/cfi"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/resolve"
	"github.com/ustack/ustack/unwinder"
)

// cutInstallCaller returns how many of frames to keep: all of them, or, in
// libgcc's exception unwinder called uw_install_context_1 (a frame at the
// call's return, elfcache.Object.EHInstallReturn), up to that frame when
// the caller its CFI gave is not proven its own (callsFunction): the
// handler, whose address uw_install_context_1 writes into the return
// address slot last, read with the wrong SP. The error says why.
func cutInstallCaller(as *unwinder.AddressSpace, frames []unwinder.Frame) (int, error) {
	for i := 0; i+1 < len(frames); i++ {
		f := &frames[i]
		if f.Flags&unwinder.FrameReturnAddress == 0 || uint(f.Mapping) >= uint(as.Len()) {
			continue
		}
		m := as.Mapping(int(f.Mapping))
		o, ok := m.Object.(*elfcache.Object)
		if !ok {
			continue
		}
		fn, ok := o.EHInstallReturn(f.PC - m.Bias)
		if !ok || callsFunction(as, &frames[i+1], fn) {
			continue
		}
		return i + 1, fmt.Errorf("%s's caller at %#x: %w", fn, frames[i+1].PC, cfi.ErrInstallingHandler)
	}
	return len(frames), nil
}

// callsFunction reports whether f's PC is a return address right after a
// direct call of the function fn or its PLT stub ("fn@plt"), as
// __cxa_throw's call of _Unwind_RaiseException@plt and a cleanup's of
// _Unwind_Resume@plt are; a handler's address follows no such call.
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
	if ret < 5 || o.ReadCode(ret-5, b[:]) != 5 || b[0] != 0xe8 { // call rel32
		return false
	}
	target := ret + uint64(int64(int32(binary.LittleEndian.Uint32(b[1:]))))
	name, off, ok := o.Symbolize(target)
	name = resolve.Unversioned(name)
	return ok && off == 0 && (name == fn || name == fn+"@plt")
}
