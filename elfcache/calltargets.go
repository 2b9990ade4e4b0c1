package elfcache

import (
	"cmp"
	"debug/elf"
	"encoding/binary"
	"slices"

	"github.com/ustack/ustack/arch"
)

// Where a stripped object's symbols leave functions out (a library's
// hidden ones: musl's libc.so names none of its internal functions), the
// targets of its direct calls still show where many of them begin, as
// disassemblers find functions. The unwinder's prologue analysis
// (unwinder.CallTargetObject) takes such an address, reached after a
// return or a jump, as a function's first instruction.

// maxCallTargets bounds the table (8 bytes an entry).
const maxCallTargets = 1 << 22

// CallTarget reports whether a direct call in the object's executable
// sections targets link-time address addr: x86_64 call rel32, to an
// address where a function may begin (aligned to 16 bytes, or after a ret,
// int3 or nop); arm64 bl. The table is built on first use, by scanning the
// sections for the call's encoding (x86_64: a byte that only looks like
// the opcode, inside another instruction, adds an address that is rarely
// such an instruction's; arm64's instructions are words, so only a literal
// word in the code can look like a bl), and the functions the object's init
// and fini arrays hold (withInitFini). It implements
// unwinder.CallTargetObject.
func (o *Object) CallTarget(addr uint64) bool {
	if o.closed.Load() || o.arch != arch.AMD64 && o.arch != arch.ARM64 {
		return false
	}
	o.targetOnce.Do(o.findCallTargets)
	_, ok := slices.BinarySearch(o.callTargets, addr)
	return ok
}

// callTargetBefore returns the greatest call target at or before addr.
func (o *Object) callTargetBefore(addr uint64) (uint64, bool) {
	if o.closed.Load() || o.arch != arch.AMD64 && o.arch != arch.ARM64 {
		return 0, false
	}
	o.targetOnce.Do(o.findCallTargets)
	i, found := slices.BinarySearch(o.callTargets, addr)
	if found {
		return addr, true
	}
	if i == 0 {
		return 0, false
	}
	return o.callTargets[i-1], true
}

func (o *Object) findCallTargets() {
	exec := o.execSections()
	inText := func(a uint64) bool { return inExec(exec, a) }
	if o.arch == arch.ARM64 {
		o.callTargets = o.withInitFini(o.arm64CallTargets(exec, inText), inText)
		o.held.heap.Add(int64(8 * len(o.callTargets)))
		return
	}
	var out []uint64
	buf := make([]byte, 1<<20)
	for _, s := range exec {
		for off := uint64(0); off+5 <= s.Size && len(out) < maxCallTargets; {
			n := o.ReadCode(s.Addr+off, buf[:min(uint64(len(buf)), s.Size-off)])
			if n < 5 {
				break
			}
			for i := 0; i+5 <= n; i++ {
				if buf[i] != 0xe8 {
					continue
				}
				next := s.Addr + off + uint64(i) + 5
				if t := next + uint64(int64(int32(binary.LittleEndian.Uint32(buf[i+1:])))); inText(t) {
					out = append(out, t)
				}
			}
			off += uint64(n - 4) // the last four bytes again: a call may straddle
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	// A function begins aligned (gcc and clang align them to 16 bytes
	// at -O2) or after the return, trap or nop that ends the one before
	// (-Os); a target that is neither most likely came from a byte that
	// only looks like a call, inside another instruction.
	kept := out[:0]
	var prev [1]byte
	for _, t := range out {
		if t%16 == 0 || o.ReadCode(t-1, prev[:]) == 1 && (prev[0] == 0xc3 || prev[0] == 0xcc || prev[0] == 0x90) {
			kept = append(kept, t)
		}
	}
	o.callTargets = o.withInitFini(slices.Clip(kept), inText)
	o.held.heap.Add(int64(8 * len(o.callTargets)))
}

// maxInitFini bounds the slots read of each init or fini array (a damaged
// file's section size may be anything).
const maxInitFini = 1 << 16

// withInitFini adds to the sorted targets the functions the dynamic loader
// calls through the object's init and fini arrays (InitFiniEntry): its
// constructors and destructors (crtstuff's frame_dummy and
// __do_global_dtors_aux, which a stripped object names nowhere else).
func (o *Object) withInitFini(targets []uint64, inText func(uint64) bool) []uint64 {
	n := len(targets)
	for _, s := range o.ef.Sections {
		if !initFiniSection(s) {
			continue
		}
		for i := uint64(0); i < min(s.Size/8, maxInitFini); i++ {
			if t, ok := o.InitFiniEntry(s.Addr + 8*i); ok && inText(t) {
				targets = append(targets, t)
			}
		}
	}
	if len(targets) == n {
		return targets
	}
	slices.Sort(targets)
	return slices.Clip(slices.Compact(targets))
}

// arm64CallTargets returns the sorted targets of the bl instructions of
// the sections exec that inText holds.
func (o *Object) arm64CallTargets(exec []*elf.Section, inText func(uint64) bool) []uint64 {
	var out []uint64
	buf := make([]byte, 1<<20)
	for _, s := range exec {
		if s.Addr%4 != 0 {
			continue
		}
		for off := uint64(0); off+4 <= s.Size && len(out) < maxCallTargets; {
			n := o.ReadCode(s.Addr+off, buf[:min(uint64(len(buf)), s.Size-off)])
			n &^= 3
			if n < 4 {
				break
			}
			for i := 0; i+4 <= n; i += 4 {
				insn := binary.LittleEndian.Uint32(buf[i:])
				if insn&0xfc000000 != 0x94000000 { // bl imm26
					continue
				}
				at := s.Addr + off + uint64(i)
				if t := at + uint64(int64(int32(insn<<6)>>6)*4); inText(t) {
					out = append(out, t)
				}
			}
			off += uint64(n)
		}
	}
	slices.Sort(out)
	return slices.Clip(slices.Compact(out))
}

// maxJumps bounds the jump table (8 bytes an entry).
const maxJumps = 1 << 22

// jumpEntry is a direct jump, by its target's and its own offsets from the
// object's first executable section.
type jumpEntry struct{ target, source uint32 }

// JumpSources appends to out the link-time addresses of the direct jumps
// in the object's executable sections that target link-time address addr
// (x86_64 jmp rel32 and jcc rel32, found by scanning for their encodings
// as CallTarget finds calls: a byte that only looks like one adds a
// source that no decoding of the code has an instruction at). A block
// that only jumps reach, after the end of the function before it, is a
// part of another function split off to a cold section (gcc's
// function.cold): its frame is that function's at the jump. It implements
// unwinder.JumpSourceObject; the table is built on first use.
func (o *Object) JumpSources(addr uint64, out []uint64) []uint64 {
	if o.closed.Load() || o.arch != arch.AMD64 {
		return out
	}
	o.jumpOnce.Do(o.findJumps)
	base := o.jumpBase
	if addr < base || addr-base > 1<<32-1 {
		return out
	}
	t := uint32(addr - base)
	i, _ := slices.BinarySearchFunc(o.jumps, t, func(e jumpEntry, t uint32) int { return cmp.Compare(e.target, t) })
	for ; i < len(o.jumps) && o.jumps[i].target == t; i++ {
		out = append(out, base+uint64(o.jumps[i].source))
	}
	return out
}

// execBase is the lowest address of the object's executable sections
// (0 when it has none).
func (o *Object) execBase() uint64 {
	base, ok := uint64(0), false
	for _, s := range o.execSections() {
		if !ok || s.Addr < base {
			base, ok = s.Addr, true
		}
	}
	return base
}

// inExec reports whether address a lies in one of the sections exec.
func inExec(exec []*elf.Section, a uint64) bool {
	for _, s := range exec {
		if a >= s.Addr && a-s.Addr < s.Size {
			return true
		}
	}
	return false
}

// execSections returns the object's allocated executable sections with
// contents.
func (o *Object) execSections() []*elf.Section {
	var exec []*elf.Section
	for _, s := range o.ef.Sections {
		if s.Type == elf.SHT_PROGBITS && s.Flags&elf.SHF_EXECINSTR != 0 && s.Flags&elf.SHF_ALLOC != 0 && s.Flags&elf.SHF_COMPRESSED == 0 && s.Addr+s.Size > s.Addr {
			exec = append(exec, s)
		}
	}
	return exec
}

func (o *Object) findJumps() {
	exec := o.execSections()
	base := o.execBase()
	o.jumpBase = base
	// About one in 29 bytes of code holds a rel32 jump or its look-alike
	// (python3.11: 98,620 in 2.8 MB): sized so, the table seldom grows.
	size := uint64(0)
	for _, s := range exec {
		size += s.Size
	}
	out := make([]jumpEntry, 0, min(size/24, maxJumps))
	buf := make([]byte, 1<<20)
	for _, s := range exec {
		if s.Addr+s.Size-base > 1<<32-1 {
			continue
		}
		for off := uint64(0); off+5 <= s.Size && len(out) < maxJumps; {
			n := o.ReadCode(s.Addr+off, buf[:min(uint64(len(buf)), s.Size-off)])
			if n < 5 {
				break
			}
			for i := 0; i+5 <= n; i++ {
				var next uint64
				var rel int32
				switch {
				case buf[i] == 0xe9:
					next, rel = s.Addr+off+uint64(i)+5, int32(binary.LittleEndian.Uint32(buf[i+1:]))
				case buf[i] == 0x0f && i+6 <= n && buf[i+1]&0xf0 == 0x80:
					next, rel = s.Addr+off+uint64(i)+6, int32(binary.LittleEndian.Uint32(buf[i+2:]))
				default:
					continue
				}
				if t := next + uint64(int64(rel)); inExec(exec, t) {
					out = append(out, jumpEntry{target: uint32(t - base), source: uint32(s.Addr + off + uint64(i) - base)})
				}
			}
			if off+uint64(n) >= s.Size {
				break
			}
			off += uint64(n - 5) // the last five bytes again: a jump may straddle
		}
	}
	slices.SortFunc(out, func(a, b jumpEntry) int {
		if c := cmp.Compare(a.target, b.target); c != 0 {
			return c
		}
		return cmp.Compare(a.source, b.source)
	})
	o.jumps = slices.Clip(slices.Compact(out))
	o.held.heap.Add(int64(8 * len(o.jumps)))
}
