package elfcache

import (
	"debug/elf"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/arch/x86/x86asm"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
	"github.com/ustack/ustack/internal/x86dec"
)

// libgcc's exception unwinder ends each of its entry points that resume
// execution elsewhere (a handler, a cleanup) with uw_install_context
// (unwind-dw2.c):
//
//	offset = uw_install_context_1(current, target)  // a call
//	handler = uw_frob_return_addr(current, target)
//	_Unwind_DebugHook(target->cfa, handler)         // a call to "ret"
//	_Unwind_Frames_Extra(frames)                    // the shadow stack's pops
//	__builtin_eh_return(offset, handler)            // the epilogue and jump
//
// uw_install_context_1 writes the target frame's registers, its return
// address slot included, into the save slots of the function's own frame,
// which its epilogue then restores, moving SP to the target frame and
// jumping to the handler. From that call's return on, the function's CFI
// gives, as its caller, the handler with the handler's registers but with
// the stack pointer of the function's own CFA, which is not the handler's:
// a handler whose frame is found from SP then yields whatever the stack
// holds there as callers (frames of the very functions being unwound,
// called by the wrong ones, down to an outermost frame). gdb shows the
// handler and stops.
//
// Inside uw_install_context_1 itself (a tenth of the samples of a program
// that throws in a loop) the slots are written one register after the
// other, the return address's last, in a loop; until that last write the
// frames above are the thrower's, which its CFI finds as before. The
// window starts after the call, so those walks go on; past the last write
// (its loop's last turn, its return), the handler's address is in the
// slot, and report checks the caller (EHInstallReturn).
//
// ehInstallFuncs are those entry points, by their exported names.
var ehInstallFuncs = [...]string{"_Unwind_RaiseException", "_Unwind_Resume", "_Unwind_Resume_or_Rethrow", "_Unwind_ForcedUnwind"}

// ehInstall is the code of an ehInstallFuncs function from the return of
// its call of uw_install_context_1 to its end.
type ehInstall struct {
	Range
	fn string
}

// findEHInstalls finds the install windows of libgcc_s's unwinder (amd64).
// A function whose code does not show the calls above is left as its CFI
// describes it.
func (o *Object) findEHInstalls() {
	if o.arch != arch.AMD64 || !strings.HasPrefix(filepath.Base(o.path), "libgcc_s.so") || o.ef == nil {
		return
	}
	syms, err := o.ef.DynamicSymbols()
	if err != nil {
		return
	}
	for _, s := range syms {
		name, _, _ := strings.Cut(s.Name, "@")
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 || s.Size > 8192 || !isEHInstallFunc(name) {
			continue
		}
		code := make([]byte, s.Size)
		if o.ReadCode(s.Value, code) != len(code) {
			continue
		}
		if r, ok := ehInstallRange(code, s.Value, o.ReadCode); ok {
			o.ehInstalls = append(o.ehInstalls, ehInstall{Range: r, fn: name})
		}
	}
}

func isEHInstallFunc(name string) bool {
	for _, f := range ehInstallFuncs {
		if name == f {
			return true
		}
	}
	return false
}

// ehInstallRange decodes code, the function at addr, and returns the range
// from the return address of its call of uw_install_context_1 to its end:
// the direct call just before the last call of _Unwind_DebugHook, a
// function that only returns (endbr64; ret or ret), read with readCode, and
// at most ehHookGap bytes before it. The function's frame returned to from
// the install's call (looked up at its return address minus one) is left
// out; from the hook's call, it is in.
func ehInstallRange(code []byte, addr uint64, readCode func(uint64, []byte) int) (Range, bool) {
	var calls []uint64 // the return addresses of the direct calls, in order
	var targets []uint64
	for off := 0; off < len(code); {
		in, err := x86dec.Decode(code[off:])
		if err != nil {
			off++ // data or padding: the calls sought are found or not
			continue
		}
		off += in.Len
		if in.Op != x86asm.CALL {
			continue
		}
		rel, ok := in.Args[0].(x86asm.Rel)
		if !ok {
			continue
		}
		ret := addr + uint64(off)
		calls = append(calls, ret)
		targets = append(targets, ret+uint64(int64(rel)))
	}
	for i := len(calls) - 1; i >= 1; i-- {
		if returnsOnly(targets[i], readCode) {
			if calls[i]-calls[i-1] > ehHookGap {
				// The call before is not the install's (inlined
				// in this build): leave the function as its CFI
				// describes it rather than cut its other calls.
				return Range{}, false
			}
			return Range{calls[i-1], addr + uint64(len(code))}, true
		}
	}
	return Range{}, false
}

// ehHookGap bounds the code between the install's call and the hook's:
// computing the handler and loading the hook's two arguments (24 bytes in
// Debian 12's libgcc_s).
const ehHookGap = 64

// returnsOnly reports whether the code at addr is a function that only
// returns: ret, or endbr64 then ret.
func returnsOnly(addr uint64, readCode func(uint64, []byte) int) bool {
	var b [5]byte
	if readCode(addr, b[:]) != len(b) {
		return false
	}
	return b[0] == 0xc3 || b[0] == 0xf3 && b[1] == 0x0f && b[2] == 0x1e && b[3] == 0xfa && b[4] == 0xc3
}

// ehInstallErr answers FindRow for addr in an install window:
// cfi.ErrInstallingHandler, wrapped, naming the function; nil elsewhere.
func (o *Object) ehInstallErr(addr uint64) error {
	for i := range o.ehInstalls {
		if s := &o.ehInstalls[i]; s.Contains(addr) {
			return newErr(o.path, "", -1, fmt.Errorf("%s at %#x: %w", s.fn, addr, cfi.ErrInstallingHandler))
		}
	}
	return nil
}

// clipToEHInstalls narrows row, found for addr, to end where an install
// window after addr begins (and to begin where one before it ends).
func (o *Object) clipToEHInstalls(addr uint64, row *cfi.Row) {
	for i := range o.ehInstalls {
		clipAround(row, addr, o.ehInstalls[i].Range)
	}
}

// EHInstallReturn reports whether addr, link-time, is the return address
// of the install's call (uw_install_context_1's) in one of libgcc's
// exception entry points, and names the function. A frame at it is the
// caller of uw_install_context_1, which may have written the handler's
// address into its return address slot already (its last write): the
// caller its CFI gives is the function's own only where the call before
// that caller's return address is a call of the function.
func (o *Object) EHInstallReturn(addr uint64) (fn string, ok bool) {
	o.cfiOnce.Do(o.buildCFI)
	for i := range o.ehInstalls {
		if o.ehInstalls[i].Start == addr {
			return o.ehInstalls[i].fn, true
		}
	}
	return "", false
}
