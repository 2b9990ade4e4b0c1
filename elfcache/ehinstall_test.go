package elfcache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/cfi"
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
		read := codeAt(code, addr)
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

// armLibgcc is Debian 12's arm64 libgcc_s in the cross sysroot
// (libgcc-s1-arm64-cross).
const armLibgcc = "/usr/aarch64-linux-gnu/lib/libgcc_s.so.1"

// TestEHInstallARM64 finds the install windows of arm64's libgcc_s, whose
// entry points (but _Unwind_Resume) branch into the epilogue of their
// normal return. For the build of Debian 12 the windows and epilogues are
// those read off its disassembly by hand (_Unwind_ForcedUnwind: bl
// uw_install_context_1 at 0xe978, bl _Unwind_DebugHook at 0xe988, str x1,
// [x29, #8]; b 0xe934 at 0xe990; the epilogue ends add sp, sp, x4; ret at
// 0xe96c). For any build, binutils' disassembly must show a bl just
// before each window, a b or ret as its last instruction, and a ret after
// add sp, sp, xN ending each epilogue. FindRow answers in the windows that
// the handler is being installed, and in the epilogues as the CFI says.
func TestEHInstallARM64(t *testing.T) {
	o, err := Open(armLibgcc, Options{})
	if err != nil {
		t.Skipf("%v (Debian package libgcc-s1-arm64-cross)", err)
	}
	defer o.Close()
	o.cfiOnce.Do(o.buildCFI)
	type window struct {
		fn       string
		win, epi Range
	}
	var got []window
	for _, in := range o.ehInstalls {
		got = append(got, window{in.fn, in.Range, in.epi})
		if in.epi != (Range{}) && in.epiReg != 4 {
			t.Errorf("%s: the epilogue's offset register is x%d, not x4", in.fn, in.epiReg)
		}
	}
	if o.BuildIDHex() == "7d529537ede2e2084bc24df38d99501c0fb9d12b" {
		want := []window{
			{"_Unwind_Resume", Range{0xea28, 0xea78}, Range{}},
			{"_Unwind_RaiseException", Range{0xe88c, 0xe8a4}, Range{0xe7f0, 0xe830}},
			{"_Unwind_Resume_or_Rethrow", Range{0xeb68, 0xeb80}, Range{0xeadc, 0xeb18}},
			{"_Unwind_ForcedUnwind", Range{0xe97c, 0xe994}, Range{0xe934, 0xe970}},
		}
		require.ElementsMatch(t, want, got)
	} else {
		require.Len(t, got, 4, "windows found in %s (another build than Debian 12's)", armLibgcc)
	}
	for _, w := range got {
		var row cfi.Row
		for a := w.win.Start; a < w.win.End; a += 4 {
			if err := o.FindRow(a, &row); !errors.Is(err, cfi.ErrInstallingHandler) || !errors.Is(err, cfi.ErrStackSwitch) {
				t.Errorf("%s: FindRow(%#x) = %v, want the handler's install", w.fn, a, err)
			}
		}
		if err := o.FindRow(w.win.Start-4, &row); err != nil {
			t.Errorf("%s: FindRow(%#x), the install's call = %v", w.fn, w.win.Start-4, err)
		}
		if fn, ok := o.EHInstallReturn(w.win.Start); !ok || fn != w.fn {
			t.Errorf("EHInstallReturn(%#x) = %q, %v", w.win.Start, fn, ok)
		}
		for a := w.epi.Start; a < w.epi.End; a += 4 {
			if err := o.FindRow(a, &row); err != nil {
				t.Errorf("%s: FindRow(%#x) in the shared epilogue = %v", w.fn, a, err)
			}
			if fn, reg, ok := o.EHInstallEpilogue(a); !ok || fn != w.fn || reg != 4 {
				t.Errorf("EHInstallEpilogue(%#x) = %q, x%d, %v", a, fn, reg, ok)
			}
		}
	}
	if _, _, ok := o.EHInstallEpilogue(0xe978); ok {
		t.Error("EHInstallEpilogue found the install's call in an epilogue")
	}

	objdump, err := exec.LookPath("aarch64-linux-gnu-objdump")
	if err != nil {
		t.Skip("aarch64-linux-gnu-objdump is not installed (Debian package binutils-aarch64-linux-gnu): the windows are not checked against binutils")
	}
	out, err := exec.Command(objdump, "-d", "--no-show-raw-insn", armLibgcc).Output()
	require.NoError(t, err)
	insn := map[uint64]string{} // address: mnemonic and operands
	for _, l := range strings.Split(string(out), "\n") {
		addr, rest, ok := strings.Cut(strings.TrimSpace(l), ":\t")
		a, err := strconv.ParseUint(addr, 16, 64)
		if ok && err == nil {
			insn[a] = strings.Join(strings.Fields(rest), " ")
		}
	}
	mnemonic := func(a uint64) string { m, _, _ := strings.Cut(insn[a], " "); return m }
	for _, w := range got {
		assert.Equal(t, "bl", mnemonic(w.win.Start-4), "%s: before the window at %#x: %s", w.fn, w.win.Start, insn[w.win.Start-4])
		last := mnemonic(w.win.End - 4)
		assert.True(t, last == "b" || last == "ret", "%s: the window's last instruction at %#x: %s", w.fn, w.win.End-4, insn[w.win.End-4])
		if w.epi != (Range{}) {
			assert.Equal(t, "b", last, "%s: a window with an epilogue of its own ends with b", w.fn)
			assert.True(t, strings.HasPrefix(insn[w.win.End-4], fmt.Sprintf("b %x ", w.epi.Start)), "%s: %s does not branch to %#x", w.fn, insn[w.win.End-4], w.epi.Start)
			assert.Equal(t, "ret", insn[w.epi.End-4], "%s: the epilogue's end", w.fn)
			assert.Equal(t, "add sp, sp, x4", insn[w.epi.End-8], "%s: before the epilogue's ret", w.fn)
		}
	}
}

// FuzzEHInstallARM64 decodes any bytes as an arm64 unwinder's entry
// point: no input may crash or hang it, and a window found begins at a
// bl's return address, ends after its start, and an epilogue found ends
// with a ret.
func FuzzEHInstallARM64(f *testing.F) {
	// The epilogue (add sp, sp, x4; ret); bl +8 (the install); bl to the
	// ret at the end (the hook); str x1, [x29, #8]; b to the epilogue;
	// ret.
	f.Add(armEHSeed)
	f.Fuzz(func(t *testing.T, code []byte) {
		const addr = 0x1000
		read := codeAt(code, addr)
		in, ok := ehInstallARM64(code, addr, read)
		if !ok {
			return
		}
		if in.Start < addr+4 || in.Start-addr > uint64(len(code)) || in.End <= in.Start {
			t.Fatalf("window %#x-%#x in a function at %#x of %d bytes", in.Start, in.End, addr, len(code))
		}
		if b := code[in.Start-addr-4:]; b[3]&0xfc != 0x94 {
			t.Fatalf("window starts at %#x, not at a bl's return address", in.Start)
		}
		if in.epiReg >= 0 {
			var b [4]byte
			if read(in.epi.End-4, b[:]) != 4 || !arm64Ret(binary.LittleEndian.Uint32(b[:])) {
				t.Fatalf("epilogue %#x-%#x does not end with ret", in.epi.Start, in.epi.End)
			}
		}
	})
}

var armEHSeed = []byte{
	0xff, 0x63, 0x24, 0x8b, 0xc0, 0x03, 0x5f, 0xd6,
	0x02, 0, 0, 0x94, 0x03, 0, 0, 0x94, 0xa1, 0x07, 0, 0xf9, 0xfb, 0xff, 0xff, 0x17,
	0xc0, 0x03, 0x5f, 0xd6,
}

// TestEHInstallARM64Seed: the fuzz seed's window and epilogue.
func TestEHInstallARM64Seed(t *testing.T) {
	in, ok := ehInstallARM64(armEHSeed, 0x1000, codeAt(armEHSeed, 0x1000))
	require.True(t, ok)
	assert.Equal(t, Range{0x100c, 0x1018}, in.Range)
	assert.Equal(t, Range{0x1000, 0x1008}, in.epi)
	assert.Equal(t, 4, in.epiReg)
	other := slices.Clone(armEHSeed)
	other[24] = 0x1f // the hook ret x24, not ret: no window
	_, ok = ehInstallARM64(other, 0x1000, codeAt(other, 0x1000))
	assert.False(t, ok)
}

// codeAt reads code as if it lay at addr, and nothing around it.
func codeAt(code []byte, addr uint64) func(uint64, []byte) int {
	return func(a uint64, b []byte) int {
		if a < addr || a-addr >= uint64(len(code)) {
			return 0
		}
		return copy(b, code[a-addr:])
	}
}
