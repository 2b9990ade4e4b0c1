// Package x86dec decodes one x86_64 instruction with golang.org/x/arch's
// decoder, from code that may end before the instruction does.
//
// The decoder indexes past the end of a slice shorter than the
// instruction it begins in places (an EVEX prefix, 0x62, as the last
// bytes of a section: "index out of range [4] with length 4"): a panic
// that bytes of any object, or of a fuzzed one, could raise in a report.
// Decode gives it at least 16 bytes (the longest instruction is 15), the
// bytes past the code zero, and refuses an instruction that would run
// past the code; a panic left in the decoder is returned as an error.
package x86dec

import (
	"fmt"

	"golang.org/x/arch/x86/x86asm"
)

// MaxLen is the length of the longest x86_64 instruction.
const MaxLen = 15

// Decode decodes the instruction code begins with, in 64-bit mode.
func Decode(code []byte) (in x86asm.Inst, err error) {
	defer func() {
		if p := recover(); p != nil {
			in, err = x86asm.Inst{}, fmt.Errorf("x86dec: decoder failed: %v", p)
		}
	}()
	if len(code) > MaxLen {
		return x86asm.Decode(code, 64)
	}
	var pad [MaxLen + 1]byte
	copy(pad[:], code)
	in, err = x86asm.Decode(pad[:], 64)
	if err == nil && in.Len > len(code) {
		return x86asm.Inst{}, fmt.Errorf("x86dec: a %d-byte instruction in %d bytes of code", in.Len, len(code))
	}
	return in, err
}
