package goruntime

import (
	"encoding/binary"
	"sort"

	"github.com/ustack/ustack/arch"
)

// codeRefs returns the data addresses the machine code refers to (link-time
// code at addr) by loads and address computations: amd64 RIP-relative
// operands of MOV, LEA, CMP, ADD and SUB; arm64 ADRP pages completed by
// ADD, LDR or LDP. Each reference is counted once per instruction; an LDP
// counts both words.
func codeRefs(a arch.Arch, code []byte, addr uint64) []uint64 {
	var out []uint64
	switch a {
	case arch.AMD64:
		// REX.W op ModRM(mod 00, r/m 101) disp32: the operand is
		// next-instruction + disp32. Scanning every byte may also match
		// inside another instruction's bytes; the caller keeps only
		// addresses that pass its checks.
		for i := 0; i+7 <= len(code); i++ {
			if code[i]&0xf8 != 0x48 {
				continue
			}
			switch code[i+1] {
			case 0x8b, 0x8d, 0x3b, 0x39, 0x03, 0x2b, 0x89:
			default:
				continue
			}
			if code[i+2]&0xc7 != 0x05 {
				continue
			}
			disp := int32(binary.LittleEndian.Uint32(code[i+3:]))
			out = append(out, uint64(int64(addr)+int64(i)+7+int64(disp)))
		}
	case arch.ARM64:
		var page [32]uint64
		var known [32]bool
		for i := 0; i+4 <= len(code); i += 4 {
			in := binary.LittleEndian.Uint32(code[i:])
			pc := addr + uint64(i)
			rd, rn := in&31, (in>>5)&31
			switch {
			case in&0x9f000000 == 0x90000000: // ADRP
				imm := int64(((in>>5)&0x7ffff)<<2|(in>>29)&3) << 43 >> 31 // sign-extended, << 12
				page[rd], known[rd] = uint64(int64(pc&^0xfff)+imm), true
			case in&0xff800000 == 0x91000000 && known[rn]: // ADD (immediate), 64-bit
				imm := uint64((in >> 10) & 0xfff)
				if (in>>22)&1 == 1 {
					imm <<= 12
				}
				page[rd], known[rd] = page[rn]+imm, true
				out = append(out, page[rd])
			case in&0xffc00000 == 0xf9400000 && known[rn]: // LDR Xt, [Xn, #imm]
				out = append(out, page[rn]+uint64((in>>10)&0xfff)*8)
				known[rd] = false
			case in&0xffc00000 == 0xa9400000 && known[rn]: // LDP Xt1, Xt2, [Xn, #imm]
				off := int64((in>>15)&0x7f) << 57 >> 54 // sign-extended, * 8
				a := uint64(int64(page[rn]) + off)
				out = append(out, a, a+8)
				known[rd], known[(in>>10)&31] = false, false
			}
		}
	}
	return out
}

// sliceCandidates returns the addresses A in [lo, hi) that refs holds
// together with A+8: a slice variable whose data pointer and length the
// code loads. Sorted, each once.
func sliceCandidates(refs []uint64, lo, hi uint64) []uint64 {
	seen := map[uint64]bool{}
	for _, r := range refs {
		seen[r] = true
	}
	var out []uint64
	for r := range seen {
		if r >= lo && r+8 < hi && seen[r+8] {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
