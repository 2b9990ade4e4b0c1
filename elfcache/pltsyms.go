package elfcache

import (
	"debug/elf"
	"encoding/binary"

	"github.com/ustack/ustack/arch"
)

// Relocation types that fill the GOT slot a PLT stub jumps through.
const (
	rX86_64GlobDat   = 6
	rX86_64JumpSlot  = 7
	rAArch64GlobDat  = 1025
	rAArch64JumpSlot = 1026
)

// pltSymbols appends a synthetic "name@plt" symbol for every PLT stub whose
// GOT slot is filled by a dynamic relocation against a named symbol, as
// binutils, gdb and perf name them. The stub's GOT slot is found by decoding
// its indirect jump (x86_64 `jmp *disp(%rip)`, arm64 `adrp x16; ldr x17`), so
// .plt, .plt.sec and .plt.got, lazy or not, IBT or not, are all covered.
func (o *Object) pltSymbols(out []candidate) []candidate {
	slots := o.gotSlotNames()
	if len(slots) == 0 {
		return out
	}
	for _, name := range []string{".plt", ".plt.sec", ".plt.got"} {
		s := o.section(name)
		if s == nil || s.Type != elf.SHT_PROGBITS || s.Size == 0 || s.Size > 1<<24 {
			continue
		}
		data, err := o.sectionData(s)
		if err != nil {
			continue
		}
		secEnd := s.Addr + uint64(len(data))
		// Each stub is sized to the next stub, so that a stub whose
		// slot has no named relocation is not taken for its neighbour.
		var prev *candidate
		add := func(start, got uint64) {
			if prev != nil && prev.size == 0 && start > prev.addr {
				prev.size = start - prev.addr
			}
			prev = nil
			if sym, ok := slots[got]; ok {
				out = append(out, candidate{addr: start, secEnd: secEnd, name: []byte(sym + "@plt"),
					bind: uint8(elf.STB_GLOBAL), typ: uint8(elf.STT_FUNC)})
				prev = &out[len(out)-1]
			}
		}
		switch o.arch {
		case arch.AMD64:
			for k := 0; k+6 <= len(data); k++ {
				if data[k] != 0xff || data[k+1] != 0x25 {
					continue
				}
				start := k
				if k >= 1 && data[k-1] == 0xf2 { // bnd jmp
					start--
				}
				if start >= 4 && data[start-4] == 0xf3 && data[start-3] == 0x0f && data[start-2] == 0x1e && data[start-1] == 0xfa {
					start -= 4 // endbr64
				}
				disp := int32(binary.LittleEndian.Uint32(data[k+2:]))
				got := s.Addr + uint64(k) + 6 + uint64(int64(disp))
				add(s.Addr+uint64(start), got)
				k += 5
			}
		case arch.ARM64:
			for k := 0; k+8 <= len(data); k += 4 {
				adrp := binary.LittleEndian.Uint32(data[k:])
				ldr := binary.LittleEndian.Uint32(data[k+4:])
				// adrp x16, page; ldr x17, [x16, #off]
				if adrp&0x9f00001f != 0x90000010 || ldr&0xffc003ff != 0xf9400211 {
					continue
				}
				pc := s.Addr + uint64(k)
				imm := int64(((adrp>>5)&0x7ffff)<<2|(adrp>>29)&3) << 43 >> 31 // sign-extend, << 12
				got := uint64(int64(pc&^0xfff)+imm) + uint64((ldr>>10)&0xfff)*8
				start := pc
				if k >= 4 && binary.LittleEndian.Uint32(data[k-4:]) == 0xd503245f { // bti c
					start -= 4
				}
				add(start, got)
			}
		}
	}
	return out
}

// gotSlotNames maps GOT slot addresses to the names of the dynamic symbols
// whose JUMP_SLOT or GLOB_DAT relocations fill them.
func (o *Object) gotSlotNames() map[uint64]string {
	dynsym := o.section(".dynsym")
	if dynsym == nil || dynsym.Type != elf.SHT_DYNSYM || int(dynsym.Link) >= len(o.ef.Sections) {
		return nil
	}
	syms, err := o.sectionData(dynsym)
	if err != nil {
		return nil
	}
	strs, err := o.sectionData(o.ef.Sections[dynsym.Link])
	if err != nil {
		return nil
	}
	slots := map[uint64]string{}
	for _, s := range o.ef.Sections {
		if s.Type != elf.SHT_RELA || s.Link != uint32(indexOf(o.ef.Sections, dynsym)) {
			continue
		}
		data, err := o.sectionData(s)
		if err != nil {
			continue
		}
		for off := 0; off+24 <= len(data); off += 24 {
			where := binary.LittleEndian.Uint64(data[off:])
			info := binary.LittleEndian.Uint64(data[off+8:])
			typ, idx := uint32(info), info>>32
			switch {
			case o.arch == arch.AMD64 && (typ == rX86_64JumpSlot || typ == rX86_64GlobDat):
			case o.arch == arch.ARM64 && (typ == rAArch64JumpSlot || typ == rAArch64GlobDat):
			default:
				continue
			}
			if idx == 0 || (idx+1)*24 > uint64(len(syms)) {
				continue
			}
			nameOff := uint64(binary.LittleEndian.Uint32(syms[idx*24:]))
			if nameOff >= uint64(len(strs)) {
				continue
			}
			nm := strs[nameOff:]
			if i := indexByte0(nm); i > 0 && i < 1<<12 {
				slots[where] = string(nm[:i])
			}
		}
	}
	return slots
}

func indexOf(secs []*elf.Section, s *elf.Section) int {
	for i, x := range secs {
		if x == s {
			return i
		}
	}
	return -1
}
