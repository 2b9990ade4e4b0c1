package unwinder_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/internal/fixture"
	"github.com/ustack/ustack/unwinder"
)

// fuzzFixtures are the committed captures FuzzUnwind unwinds: real objects
// with real CFI (GCC and clang, .debug_frame only, stack realignment, signal
// frames, a sigaltstack, PAC, a leaf in the link register, frame-pointer and
// no-CFI fallbacks, a truncated snapshot).
var fuzzFixtures = []string{
	"x86_64/syscall_gcc_O2",
	"x86_64/cxx_exception",
	"x86_64/debug_frame_only",
	"x86_64/realign_drap",
	"x86_64/musl_no_cfi",
	"x86_64/signal_handler",
	"x86_64/sigaltstack_handler",
	"x86_64/recursion_truncated",
	"aarch64/a64_leaf_lr",
	"aarch64/a64_pac",
	"aarch64/a64_syscall_O2_nofp",
	"aarch64/a64_signal",
}

type fuzzCase struct {
	name string
	p    *fixture.Prepared
	u    *unwinder.Unwinder
	c    *unwinder.Cache // warm across inputs, as a worker's would be
}

const fuzzFrameBuf = 64

// FuzzUnwind runs the whole unwind on real fixture objects with fuzzed
// registers and a fuzzed stack snapshot. Whatever the input, Unwind must
// return, write no more frames than its buffer and depth limit allow, report
// frame 0 at the given PC and every further PC from memory it was given (the
// snapshot) or from a register it was given, and give the same answer with a
// cold row cache as with a warm one, and from the same memory as Segments or
// behind an opaque Memory as from the Stack.
func FuzzUnwind(f *testing.F) {
	var cases []fuzzCase
	for _, name := range fuzzFixtures {
		fx, err := fixture.Load(filepath.Join(fixture.Dir(), "fixtures", name+".json"))
		if err != nil {
			f.Fatal(err)
		}
		cache := fx.NewCache()
		f.Cleanup(func() { cache.Close() })
		p, err := fx.Prepare(cache)
		if err != nil {
			f.Fatal(err)
		}
		cases = append(cases, fuzzCase{name: name, p: p, u: unwinder.New(p.Arch, unwinder.Options{}), c: new(unwinder.Cache)})
	}
	for i, fc := range cases {
		a := fc.p.Arch
		pc, _ := fc.p.Regs.Get(a.PC())
		sp, _ := fc.p.Regs.Get(a.SP())
		fp, _ := fc.p.Regs.Get(a.FP())
		ra, _ := fc.p.Regs.Get(fuzzExtraReg(a))
		// The capture exactly as recorded, then a few classic damages:
		// a smashed return-address slot, a cut snapshot, a frame-pointer
		// loop, registers pointing elsewhere in the stack.
		f.Add(uint8(i), pc, sp, fp, ra, uint64(0), uint16(0), []byte(nil), uint16(0), uint8(0))
		f.Add(uint8(i), pc, sp, fp, ra, uint64(0), uint16(8), bytes.Repeat([]byte{0x41}, 16), uint16(0), uint8(0))
		f.Add(uint8(i), pc, sp, fp, ra, uint64(0), uint16(0), []byte(nil), uint16(len(fc.p.Stack.Data)-24), uint8(0))
		f.Add(uint8(i), pc, sp, sp, ra, uint64(0), uint16(0), binary.LittleEndian.AppendUint64(nil, sp), uint16(0), uint8(3))
		f.Add(uint8(i), pc+1, sp+8, fp-16, pc, uint64(1)<<uint(a.FP()), uint16(0), []byte(nil), uint16(0), uint8(0))
	}

	f.Fuzz(func(t *testing.T, which uint8, pc, sp, fp, ra, unset uint64, patchOff uint16, patch []byte, cut uint16, maxFrames uint8) {
		fc := &cases[int(which)%len(cases)]
		p := fc.p
		a := p.Arch

		regs := p.Regs
		regs.Set(a.PC(), pc)
		regs.Set(a.SP(), sp)
		regs.Set(a.FP(), fp)
		regs.Set(fuzzExtraReg(a), ra)
		for n := 0; n < arch.MaxRegs; n++ {
			if unset&(1<<uint(n)) != 0 {
				regs.Unset(n)
			}
		}
		data := bytes.Clone(p.Stack.Data)
		if len(data) > 0 {
			copy(data[int(patchOff)%len(data):], patch)
			data = data[:len(data)-int(cut)%len(data)]
		}
		stack := unwinder.Stack{Addr: p.Stack.Addr, Data: data, Extra: p.Stack.Extra}

		u := fc.u
		limit := fuzzFrameBuf
		if maxFrames != 0 {
			u = unwinder.New(a, unwinder.Options{MaxFrames: int(maxFrames)})
			limit = min(limit, int(maxFrames))
		}
		frames := make([]unwinder.Frame, fuzzFrameBuf)
		res := u.Unwind(fc.c, p.Space, &regs, &stack, frames)

		if res.Frames < 0 || res.Frames > limit {
			t.Fatalf("%s: %d frames, limit %d", fc.name, res.Frames, limit)
		}
		if res.Stop == unwinder.StopDepth && res.Frames != limit {
			t.Fatalf("%s: stop depth after %d frames, limit %d", fc.name, res.Frames, limit)
		}
		pcKnown := !(unset&(1<<uint(a.PC())) != 0)
		if pcKnown != (res.Frames > 0) {
			t.Fatalf("%s: pc known %v but %d frames (%v)", fc.name, pcKnown, res.Frames, res.Stop)
		}
		for i, fr := range frames[res.Frames:] {
			if fr != (unwinder.Frame{}) {
				t.Fatalf("%s: frame %d written beyond the %d reported", fc.name, res.Frames+i, res.Frames)
			}
		}
		got := frames[:res.Frames]
		for i, fr := range got {
			switch {
			case fr.Mapping == -1:
				// Only a sigreturn trampoline outside every mapping,
				// known by the signal frame's marker, or an exact PC
				// a call just went to (bad_call: the caller found by
				// the call before its return address) lets the walk
				// go on past an unmapped frame.
				marked := i+1 < len(got) && (got[i+1].Method == unwinder.MethodSignalMarker ||
					got[i+1].Method == unwinder.MethodBadCall && fr.Flags&unwinder.FrameReturnAddress == 0)
				// The last frame may also be a marked one where the
				// frame buffer ended (depth).
				last := i == len(got)-1
				if !marked && (!last || (res.Stop != unwinder.StopNoMapping && res.Stop != unwinder.StopDepth)) {
					var hows []string
					for _, g := range got {
						hows = append(hows, fmt.Sprintf("%#x/%v/%d", g.PC, g.Method, g.Mapping))
					}
					t.Fatalf("%s: frame %d pc %#x unmapped but the walk went on (%v): %v", fc.name, i, fr.PC, res.Stop, hows)
				}
			case fr.Mapping < 0 || int(fr.Mapping) >= p.Space.Len():
				t.Fatalf("%s: frame %d mapping %d of %d", fc.name, i, fr.Mapping, p.Space.Len())
			default:
				m := p.Space.Mapping(int(fr.Mapping))
				if fr.PC < m.Start || fr.PC >= m.End {
					t.Fatalf("%s: frame %d pc %#x outside its mapping [%#x, %#x)", fc.name, i, fr.PC, m.Start, m.End)
				}
				if fr.Flags&unwinder.FrameReturnAddress != 0 && !m.Exec && m.Object == nil {
					t.Fatalf("%s: frame %d: return address %#x in a mapping that is neither executable nor an object's", fc.name, i, fr.PC)
				}
			}
			if i == 0 {
				if fr.PC != pc || fr.Method != unwinder.MethodContext {
					t.Fatalf("%s: frame 0 pc %#x method %v; given %#x", fc.name, fr.PC, fr.Method, pc)
				}
				continue
			}
			if !fuzzPCFrom(a, fr.PC, &regs, &stack) {
				t.Fatalf("%s: frame %d pc %#x (%v) is in no register and nowhere in the snapshot", fc.name, i, fr.PC, fr.Method)
			}
		}

		// A caller found by scanning the stack is one of a frame in code
		// the capture cannot show, and no stack through one is complete.
		for i, fr := range got {
			if fr.Method != unwinder.MethodScan {
				continue
			}
			if prev := got[i-1]; prev.Mapping >= 0 && p.Space.Mapping(int(prev.Mapping)).Object != nil {
				t.Fatalf("%s: frame %d found by scanning, below it frame %d in an object", fc.name, i, i-1)
			}
			if res.Stop == unwinder.StopOutermost {
				t.Fatalf("%s: frame %d found by scanning, and the stack called outermost", fc.name, i)
			}
		}

		// A cold cache must agree with the warm one.
		frames2 := make([]unwinder.Frame, fuzzFrameBuf)
		res2 := u.Unwind(new(unwinder.Cache), p.Space, &regs, &stack, frames2)
		if res2.Frames != res.Frames || res2.Stop != res.Stop || errString(res2.Err) != errString(res.Err) {
			t.Fatalf("%s: cold cache %d frames %v (%v); warm %d frames %v (%v)", fc.name, res2.Frames, res2.Stop, res2.Err, res.Frames, res.Stop, res.Err)
		}
		for i := range res.Frames {
			if frames[i] != frames2[i] {
				t.Fatalf("%s: frame %d cold %+v warm %+v", fc.name, i, frames2[i], frames[i])
			}
		}

		// So must the same memory read as core-dump segments and through
		// a Memory that Unwind can only call.
		for _, mem := range []unwinder.Memory{stackSegments(t, &stack), opaqueMemory{&stack}} {
			clear(frames2)
			res3 := u.Unwind(fc.c, p.Space, &regs, mem, frames2)
			if res3.Frames != res.Frames || res3.Stop != res.Stop || errString(res3.Err) != errString(res.Err) {
				t.Fatalf("%s: %T: %d frames %v (%v); Stack %d frames %v (%v)", fc.name, mem, res3.Frames, res3.Stop, res3.Err, res.Frames, res.Stop, res.Err)
			}
			for i := range res.Frames {
				if frames[i] != frames2[i] {
					t.Fatalf("%s: %T: frame %d %+v; Stack %+v", fc.name, mem, i, frames2[i], frames[i])
				}
			}
		}
	})
}

// fuzzExtraReg is the fourth fuzzed register: arm64's link register, x86_64's
// rbx (its return address column is the PC itself).
func fuzzExtraReg(a arch.Arch) int {
	if a.RA() == a.PC() {
		return 3
	}
	return a.RA()
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// fuzzPCFrom reports whether pc (a caller's PC, PAC-stripped on arm64) is one
// of the registers given to Unwind or 8 bytes found anywhere in the captured
// memory: the unwinder may not invent addresses.
func fuzzPCFrom(a arch.Arch, pc uint64, regs *arch.Regs, stack *unwinder.Stack) bool {
	mask := arch.PACMask(48)
	for n := 0; n < arch.MaxRegs; n++ {
		if v, ok := regs.Get(n); ok && a.StripPAC(v, mask) == pc {
			return true
		}
	}
	want := binary.LittleEndian.AppendUint64(nil, pc)
	regions := [][]byte{stack.Data}
	for _, r := range stack.Extra {
		regions = append(regions, r.Data)
	}
	for _, d := range regions {
		if bytes.Contains(d, want) {
			return true
		}
		if a == arch.ARM64 {
			for off := 0; off+8 <= len(d); off++ {
				if a.StripPAC(binary.LittleEndian.Uint64(d[off:]), mask) == pc {
					return true
				}
			}
		}
	}
	return false
}
