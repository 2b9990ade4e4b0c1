package elfcache

import (
	"debug/elf"
	"encoding/binary"
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
// its call of uw_install_context_1 to its end (amd64), or to the branch
// into the epilogue it shares with the function's normal return (arm64).
type ehInstall struct {
	Range
	fn string
	// epi is that shared epilogue (arm64; empty where the window runs
	// on to the function's return itself): the install and the normal
	// return both restore the frame there and leave by ret, the install
	// with SP moved by register epiReg (x4, the distance to the
	// handler's frame), which the normal return has set to 0.
	epi    Range
	epiReg int
}

// findEHInstalls finds the install windows of libgcc_s's unwinder (amd64,
// arm64). A function whose code does not show the calls above is left as
// its CFI describes it.
func (o *Object) findEHInstalls() {
	if o.arch != arch.AMD64 && o.arch != arch.ARM64 || !strings.HasPrefix(filepath.Base(o.path), "libgcc_s.so") || o.ef == nil {
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
		if o.arch == arch.ARM64 {
			if in, ok := ehInstallARM64(code, s.Value, o.ReadCode); ok {
				in.fn = name
				o.ehInstalls = append(o.ehInstalls, in)
			}
		} else if r, ok := ehInstallRange(code, s.Value, o.ReadCode); ok {
			o.ehInstalls = append(o.ehInstalls, ehInstall{Range: r, fn: name, epiReg: -1})
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

// ehInstallARM64 is ehInstallRange for arm64 (Debian 12's libgcc_s):
//
//	bl   uw_install_context_1
//	mov  x4, x0                 // the distance to the handler's frame
//	ldr  x0, ...; ldr x1, ...
//	bl   _Unwind_DebugHook      // ret
//	str  x1, [x29, #8]          // the handler, into the saved x30
//	b    epilogue               // or the epilogue itself, inline
//	...
//	epilogue: ldp x29, x30, [sp]; ...; add sp, sp, #N; add sp, sp, x4; ret
//
// The window runs from the install's return on, straight (a conditional
// branch is passed by), to the ret or the b; past a b, the code up to the
// next ret is the shared epilogue, kept with its offset register when
// the instruction before that ret is add sp, sp, xN.
func ehInstallARM64(code []byte, addr uint64, readCode func(uint64, []byte) int) (ehInstall, bool) {
	read := func(pc uint64) (uint32, bool) {
		var b [4]byte
		if pc >= addr && pc-addr+4 <= uint64(len(code)) {
			return binary.LittleEndian.Uint32(code[pc-addr:]), true
		}
		if readCode(pc, b[:]) != 4 {
			return 0, false
		}
		return binary.LittleEndian.Uint32(b[:]), true
	}
	var calls, targets []uint64 // the return addresses and targets of the bl
	for off := 0; off+4 <= len(code); off += 4 {
		insn := binary.LittleEndian.Uint32(code[off:])
		if insn&0xfc000000 != 0x94000000 {
			continue
		}
		ret := addr + uint64(off) + 4
		calls = append(calls, ret)
		targets = append(targets, ret-4+uint64(int64(int32(insn<<6)>>6)*4))
	}
	for i := len(calls) - 1; i >= 1; i-- {
		if !returnsOnlyARM64(targets[i], read) {
			continue
		}
		if calls[i]-calls[i-1] > ehHookGap {
			return ehInstall{}, false
		}
		in := ehInstall{Range: Range{Start: calls[i-1]}, epiReg: -1}
		for pc, n := calls[i], 0; n < ehEpilogueMax; pc, n = pc+4, n+1 {
			insn, ok := read(pc)
			if !ok || arm64Leaves(insn) && !arm64Ret(insn) {
				return ehInstall{}, false // an indirect jump or a call: not the code above
			}
			if arm64Ret(insn) {
				in.End = pc + 4
				return in, true
			}
			if insn&0xfc000000 != 0x14000000 { // not b imm26
				continue
			}
			in.End = pc + 4
			epi := pc + uint64(int64(int32(insn<<6)>>6)*4)
			for q, k := epi, 0; k < ehEpilogueMax; q, k = q+4, k+1 {
				insn, ok := read(q)
				if !ok || arm64Leaves(insn) && !arm64Ret(insn) || insn&0xfc000000 == 0x14000000 {
					break
				}
				if arm64Ret(insn) {
					if prev, ok := read(q - 4); ok && q > epi && prev&0xffe0ffff == 0x8b2063ff { // add sp, sp, xN
						in.epi, in.epiReg = Range{epi, q + 4}, int(prev>>16&31)
					}
					break
				}
			}
			return in, true
		}
		return ehInstall{}, false
	}
	return ehInstall{}, false
}

// ehEpilogueMax bounds, in instructions, the code from the hook's return
// to the window's end, and the shared epilogue (20 and 15 in Debian 12's
// libgcc_s).
const ehEpilogueMax = 64

// arm64Ret reports whether insn is ret, retaa or retab.
func arm64Ret(insn uint32) bool {
	return insn == 0xd65f03c0 || insn == 0xd65f0bff || insn == 0xd65f0fff
}

// arm64Leaves reports whether insn leaves the straight line other than by
// a conditional branch or b: a call (bl) or a branch to a register (br,
// blr, ret and their PAC forms).
func arm64Leaves(insn uint32) bool {
	return insn&0xfc000000 == 0x94000000 || insn&0xfe000000 == 0xd6000000
}

// returnsOnlyARM64 reports whether the code at addr only returns: ret, or
// bti c (or another hint) then ret.
func returnsOnlyARM64(addr uint64, read func(uint64) (uint32, bool)) bool {
	insn, ok := read(addr)
	if ok && insn&0xfffff01f == 0xd503201f { // hint: bti, nop, paciasp...
		insn, ok = read(addr + 4)
	}
	return ok && arm64Ret(insn)
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

// EHInstallEpilogue reports whether addr, link-time, lies in the epilogue
// an arm64 libgcc exception entry point shares between its normal return
// and the jump to a handler, and names the function and the register that
// holds the distance SP moves by: 0 on the normal return, where the
// function's CFI gives its caller; any other value when it installs a
// handler, whose address it has written into the saved x30 and which is
// not its caller.
func (o *Object) EHInstallEpilogue(addr uint64) (fn string, reg int, ok bool) {
	o.cfiOnce.Do(o.buildCFI)
	for i := range o.ehInstalls {
		if in := &o.ehInstalls[i]; in.epiReg >= 0 && in.epi.Contains(addr) {
			return in.fn, in.epiReg, true
		}
	}
	return "", 0, false
}
