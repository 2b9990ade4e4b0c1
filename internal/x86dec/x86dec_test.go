package x86dec

import (
	"testing"

	"golang.org/x/arch/x86/x86asm"
)

// TestShortCode: an EVEX prefix as the last 4 bytes of code made the
// decoder panic (found by unwinder's FuzzX86Sweep); Decode says the
// instruction does not fit, and decodes whole instructions at the end of
// code as the decoder does with room after them.
func TestShortCode(t *testing.T) {
	if _, err := Decode([]byte("b000")); err == nil {
		t.Error("an EVEX prefix in 4 bytes decoded")
	}
	for _, code := range [][]byte{
		{0xc3},                   // ret
		{0x48, 0x83, 0xec, 0x28}, // sub $0x28,%rsp
		{0xe8, 1, 2, 3, 4},       // call rel32
	} {
		in, err := Decode(code)
		if err != nil || in.Len != len(code) {
			t.Errorf("% x: %v (%d bytes), %v", code, in, in.Len, err)
		}
		want, _ := x86asm.Decode(append(code, make([]byte, 16)...), 64)
		if in.Op != want.Op || in.Args != want.Args {
			t.Errorf("% x: %v, want %v", code, in, want)
		}
	}
	if _, err := Decode([]byte{0x48, 0x83, 0xec}); err == nil {
		t.Error("a 4-byte instruction decoded from 3 bytes")
	}
}

// FuzzDecode: no code makes Decode panic, and what it decodes fits in
// the code.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("b000"))
	f.Add([]byte{0x62, 0xf1, 0x7c, 0x48, 0x10, 0x00})
	f.Fuzz(func(t *testing.T, code []byte) {
		in, err := Decode(code)
		if err == nil && in.Len > len(code) {
			t.Fatalf("% x: a %d-byte instruction", code, in.Len)
		}
	})
}
