package elfcache

import (
	"testing"
)

// ehInstallSeed is the shape ehInstallRange looks for: call (the install);
// call (to the ret at the end: the debug hook); mov %rcx,%rsp; jmp *%rcx;
// ret and padding.
var ehInstallSeed = []byte{0xe8, 0, 0, 0, 0, 0xe8, 5, 0, 0, 0, 0x48, 0x89, 0xcc, 0xff, 0xe1, 0xc3, 0xcc, 0xcc, 0xcc, 0xcc}

// TestEHInstallRange: the range begins at the first call's return and
// ends with the function; without a call of a bare return, there is none.
func TestEHInstallRange(t *testing.T) {
	read := func(code []byte) func(uint64, []byte) int {
		return func(a uint64, b []byte) int { return copy(b, code[a-0x1000:]) }
	}
	r, ok := ehInstallRange(ehInstallSeed, 0x1000, read(ehInstallSeed))
	if !ok || r != (Range{0x1005, 0x1014}) {
		t.Errorf("ehInstallRange = %#x, %v; want 0x1005-0x1014", r, ok)
	}
	other := append([]byte(nil), ehInstallSeed...)
	other[15] = 0x90 // the hook does more than return
	if r, ok := ehInstallRange(other, 0x1000, read(other)); ok {
		t.Errorf("ehInstallRange found %#x in code without a bare return's call", r)
	}
	// 100 bytes of other code between the two calls: not the install's.
	far := append(append(append([]byte{}, ehInstallSeed[:5]...), make([]byte, 100)...), ehInstallSeed[5:]...)
	for i := 5; i < 105; i++ {
		far[i] = 0x90 // nop
	}
	if r, ok := ehInstallRange(far, 0x1000, read(far)); ok {
		t.Errorf("ehInstallRange found %#x with the calls 100 bytes apart", r)
	}
}

// FuzzEHInstallRange decodes any bytes as an unwinder's entry point: no
// input may crash it, and a range found lies in the function and begins
// at a call's return address.
func FuzzEHInstallRange(f *testing.F) {
	f.Add(ehInstallSeed)
	f.Add([]byte{0xf3, 0x0f, 0x1e, 0xfa, 0xc3})
	f.Fuzz(func(t *testing.T, code []byte) {
		const addr = 0x1000
		read := func(a uint64, b []byte) int {
			if a < addr || a-addr >= uint64(len(code)) {
				return 0
			}
			return copy(b, code[a-addr:])
		}
		r, ok := ehInstallRange(code, addr, read)
		if !ok {
			return
		}
		if r.Start < addr || r.End != addr+uint64(len(code)) || r.Start >= r.End {
			t.Fatalf("range %#x-%#x outside the function %#x-%#x", r.Start, r.End, addr, addr+len(code))
		}
		if end := r.Start - addr; end < 5 || code[end-5] != 0xe8 {
			t.Fatalf("range starts at %#x, not at a call's return address", r.Start)
		}
	})
}
