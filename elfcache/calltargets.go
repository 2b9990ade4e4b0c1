package elfcache

import (
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
// word in the code can look like a bl). It implements
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
	var exec []*elf.Section
	for _, s := range o.ef.Sections {
		if s.Type == elf.SHT_PROGBITS && s.Flags&elf.SHF_EXECINSTR != 0 && s.Flags&elf.SHF_ALLOC != 0 && s.Flags&elf.SHF_COMPRESSED == 0 && s.Addr+s.Size > s.Addr {
			exec = append(exec, s)
		}
	}
	inText := func(a uint64) bool {
		for _, s := range exec {
			if a >= s.Addr && a-s.Addr < s.Size {
				return true
			}
		}
		return false
	}
	if o.arch == arch.ARM64 {
		o.callTargets = o.arm64CallTargets(exec, inText)
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
	o.callTargets = slices.Clip(kept)
	o.held.heap.Add(int64(8 * len(o.callTargets)))
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
