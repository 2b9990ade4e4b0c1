package elfcache

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cloneWindowOf lays out code around a return address for cloneChild:
// before ends at the return address (after the call), after begins there;
// the rest is filled with traps.
func cloneWindowOf(before, after []byte) *[2 * cloneWindow]byte {
	var code [2 * cloneWindow]byte
	for i := range code {
		code[i] = 0xcc
	}
	copy(code[cloneWindow-len(before):], before)
	copy(code[cloneWindow:], after)
	return &code
}

// armWords lays out arm64 instructions as bytes.
func armWords(insns ...uint32) []byte {
	b := make([]byte, 4*len(insns))
	for i, w := range insns {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return b
}

// TestCloneChild: musl's __clone (src/thread/x86_64/clone.s, as Debian's
// libc.so has it, and aarch64/clone.s) is known by its instructions: the
// clone system call, the child's way after it to the call of the thread's
// function, and the exit after the call's return address. A call on the
// parent's way, a return that does not go to exit, a branch before the
// exit, or another system call are not.
func TestCloneChild(t *testing.T) {
	// x86_64: xor %eax,%eax; mov $0x38,%al; mov %rdi,%r11; mov %rdx,%rdi;
	// mov %r8,%rdx; mov %r9,%r8; mov 0x8(%rsp),%r10; mov %r11,%r9;
	// and $-16,%rsi; sub $8,%rsi; mov %rcx,(%rsi); syscall;
	// test %eax,%eax; jne ret; xor %ebp,%ebp; pop %rdi; call *%r9
	before := []byte{0x31, 0xc0, 0xb0, 0x38, 0x49, 0x89, 0xfb, 0x48, 0x89, 0xd7, 0x4c, 0x89, 0xc2, 0x4d, 0x89, 0xc8,
		0x4c, 0x8b, 0x54, 0x24, 0x08, 0x4d, 0x89, 0xd9, 0x48, 0x83, 0xe6, 0xf0, 0x48, 0x83, 0xee, 0x08, 0x48, 0x89, 0x0e,
		0x0f, 0x05, 0x85, 0xc0, 0x75, 0x0f, 0x31, 0xed, 0x5f, 0x41, 0xff, 0xd1}
	// mov %eax,%edi; xor %eax,%eax; mov $0x3c,%al; syscall; hlt; ret
	after := []byte{0x89, 0xc7, 0x31, 0xc0, 0xb0, 0x3c, 0x0f, 0x05, 0xf4, 0xc3}
	edit := func(b []byte, at int, v byte) []byte {
		c := append([]byte(nil), b...)
		c[at] = v
		return c
	}
	for _, c := range []struct {
		name          string
		before, after []byte
		want          bool
	}{
		{"musl __clone", before, after, true},
		{"the parent's way (je)", edit(before, 39, 0x74), after, false},
		{"fork, not clone", edit(before, 3, 0x39), after, false},
		{"clone3", append([]byte{0x31, 0xc0, 0xb8, 0xb3, 0x01, 0x00, 0x00}, before[4:]...), after, true},
		{"getpid after the call", before, edit(after, 5, 0x27), false},
		{"exit_group after the call", before, edit(after, 5, 0xe7), true},
		{"a return after the call", before, []byte{0x89, 0xc7, 0xc3}, false},
		{"a jump before the exit", before, []byte{0x89, 0xc7, 0xeb, 0x00, 0x31, 0xc0, 0xb0, 0x3c, 0x0f, 0x05}, false},
		{"no call before", append(append([]byte(nil), before[:len(before)-3]...), 0x90, 0x90, 0x90), after, false},
	} {
		if got := cloneChildAMD64(cloneWindowOf(c.before, c.after)); got != c.want {
			t.Errorf("x86_64 %s: %v; want %v", c.name, got, c.want)
		}
	}

	// arm64: and x1,x1,#-16; stp x0,x3,[x1,#-16]!; mov w0,w2; mov x2,x4;
	// mov x3,x5; mov x4,x6; mov x8,#220; svc #0; cbz x0,1f; ret;
	// 1: mov x29,#0; ldp x1,x0,[sp],#16; blr x1 | mov x8,#93; svc #0
	armBefore := []uint32{0x927cec21, 0xa9bf0c20, 0x2a0203e0, 0xaa0403e2, 0xaa0503e3, 0xaa0603e4,
		0xd2801b88, 0xd4000001, 0xb4000040, 0xd65f03c0, 0xd280001d, 0xa8c103e1, 0xd63f0020}
	armAfter := []uint32{0xd2800ba8, 0xd4000001}
	with := func(ws []uint32, at int, v uint32) []uint32 {
		c := append([]uint32(nil), ws...)
		c[at] = v
		return c
	}
	for _, c := range []struct {
		name          string
		before, after []uint32
		want          bool
	}{
		{"musl __clone", armBefore, armAfter, true},
		{"cbnz x0 to the parent's ret", with(with(armBefore, 8, 0xb5000040), 9, 0xd503201f), armAfter, true},
		{"cbz x0 to the call's own way, then a branch", with(armBefore, 10, 0x14000001), armAfter, false},
		{"cbz x0 past the call", with(armBefore, 8, 0xb4000200), armAfter, false},
		{"getpid, not clone", with(armBefore, 6, 0xd2801588), armAfter, false},
		{"exit_group after the call", armBefore, []uint32{0xd2800bc8, 0xd4000001}, true},
		{"a return after the call", armBefore, []uint32{0xd65f03c0}, false},
		{"no blr", with(armBefore, 12, 0xd503201f), armAfter, false},
	} {
		if got := cloneChildARM64(cloneWindowOf(armWords(c.before...), armWords(c.after...))); got != c.want {
			t.Errorf("arm64 %s: %v; want %v", c.name, got, c.want)
		}
	}
}

// BenchmarkCloneChildNoSyscall: Outermost asks cloneChild at the end of
// many walks; code without a system call around the return address (the
// usual case) is turned away without decoding.
func BenchmarkCloneChildNoSyscall(b *testing.B) {
	code := cloneWindowOf([]byte{0x48, 0x89, 0xc7, 0xe8, 0, 0, 0, 0}, []byte{0x48, 0x89, 0xc7, 0xc3})
	for b.Loop() {
		if cloneChildAMD64(code) {
			b.Fatal("a clone's child")
		}
	}
}

// BenchmarkCloneChildMusl: musl's __clone, where every thread's walk ends.
func BenchmarkCloneChildMusl(b *testing.B) {
	before := []byte{0x31, 0xc0, 0xb0, 0x38, 0x49, 0x89, 0xfb, 0x48, 0x89, 0xd7, 0x4c, 0x89, 0xc2, 0x4d, 0x89, 0xc8,
		0x4c, 0x8b, 0x54, 0x24, 0x08, 0x4d, 0x89, 0xd9, 0x48, 0x83, 0xe6, 0xf0, 0x48, 0x83, 0xee, 0x08, 0x48, 0x89, 0x0e,
		0x0f, 0x05, 0x85, 0xc0, 0x75, 0x0f, 0x31, 0xed, 0x5f, 0x41, 0xff, 0xd1}
	code := cloneWindowOf(before, []byte{0x89, 0xc7, 0x31, 0xc0, 0xb0, 0x3c, 0x0f, 0x05, 0xf4, 0xc3})
	for b.Loop() {
		if !cloneChildAMD64(code) {
			b.Fatal("not a clone's child")
		}
	}
}

// TestCloneReturn: in glibc's __clone and clone3 (amd64, and the arm64
// cross sysroot's __clone), the instructions from the clone system call's
// return up to the branch its child takes (je, b.eq: to thread_start) are
// where a new thread begins; no other instruction of the function is (its
// parent's ret, the exit system call's return, the code before). The
// addresses come from binutils' disassembly. With the symbols of libc.so
// alone, where clone3 has none, the child's branch to thread_start, whose
// CFI marks its return address undefined, shows it the same.
func TestCloneReturn(t *testing.T) {
	for _, c := range []struct{ lib, objdump, fn, call, childBranch string }{
		{"/lib/x86_64-linux-gnu/libc.so.6", "objdump", "__clone", "syscall", "je"},
		{"/lib/x86_64-linux-gnu/libc.so.6", "objdump", "clone3", "syscall", "je"},
		{"/usr/aarch64-linux-gnu/lib/libc.so.6", "aarch64-linux-gnu-objdump", "__clone", "svc", "b.eq"},
	} {
		t.Run(c.objdump+"/"+c.fn, func(t *testing.T) {
			objdump, err := exec.LookPath(c.objdump)
			if err != nil {
				t.Skipf("%s is not installed (Debian packages binutils, binutils-aarch64-linux-gnu)", c.objdump)
			}
			o, err := Open(c.lib, Options{})
			if err != nil {
				t.Skipf("%v (Debian packages libc6, libc6-arm64-cross)", err)
			}
			defer o.Close()
			start, end, ok := o.symbolRange(c.fn)
			if !ok {
				t.Skipf("%s has no symbol %s (clone3's is in libc6-dbg's debug file)", c.lib, c.fn)
			}
			out, err := exec.Command(objdump, "-d", "--no-show-raw-insn", fmt.Sprintf("--start-address=%#x", start), fmt.Sprintf("--stop-address=%#x", end), c.lib).Output()
			require.NoError(t, err)
			var addrs []uint64
			want := map[uint64]bool{}
			state := 0 // 0: before the system call, 1: after it, 2: past the child's branch
			for _, l := range strings.Split(string(out), "\n") {
				addr, insn, ok := strings.Cut(strings.TrimSpace(l), ":\t")
				a, err := strconv.ParseUint(addr, 16, 64)
				if !ok || err != nil {
					continue
				}
				addrs = append(addrs, a)
				op, _, _ := strings.Cut(insn, " ")
				op, _, _ = strings.Cut(op, "\t")
				switch {
				case state == 1:
					want[a] = true
					if op == c.childBranch {
						state = 2
					}
				case state == 0 && op == c.call:
					state = 1
				}
			}
			require.Equal(t, 2, state, "no %s then %s in %s:\n%s", c.call, c.childBranch, c.fn, out)
			bare, err := Open(c.lib, Options{NoDebugFile: true})
			require.NoError(t, err)
			defer bare.Close()
			for _, a := range addrs {
				assert.Equal(t, want[a], o.CloneReturn(a), "CloneReturn(%#x)", a)
				assert.Equal(t, want[a], bare.CloneReturn(a), "CloneReturn(%#x) without the debug file", a)
			}
		})
	}
}

// symbolRange returns the link-time range of the function symbol name.
func (o *Object) symbolRange(name string) (start, end uint64, ok bool) {
	loads := []func() ([]elf.Symbol, error){o.ef.Symbols, o.ef.DynamicSymbols}
	if d := o.DebugFile(); d != nil && d.ef != nil {
		loads = append(loads, d.ef.Symbols)
	}
	for _, load := range loads {
		syms, err := load()
		if err != nil {
			continue
		}
		for _, s := range syms {
			if n, _, _ := strings.Cut(s.Name, "@"); n == name && s.Size > 0 && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
				return s.Value, s.Value + s.Size, true
			}
		}
	}
	return 0, 0, false
}

// FuzzCloneReturn decodes any bytes around an address as the return of a
// clone system call, on both architectures: no input may crash it, and a
// yes has the system call (syscall, svc #0) within the instructions
// before the address.
func FuzzCloneReturn(f *testing.F) {
	// mov $435,%eax; syscall | test %rax,%rax; jl; je
	f.Add([]byte{0xb8, 0xb3, 0x01, 0x00, 0x00, 0x0f, 0x05}, []byte{0x48, 0x85, 0xc0, 0x7c, 0x10, 0x74, 0x01, 0xc3})
	// mov x8, #220; svc #0 | cmp x0, #0; b.eq
	f.Add(armWords(0xd2801b88, 0xd4000001), armWords(0xf100001f, 0x54000080))
	f.Fuzz(func(t *testing.T, before, after []byte) {
		if len(before) > cloneWindow || len(after) > cloneWindow {
			return
		}
		code := cloneWindowOf(before, after)
		if isCloneReturnAMD64(code) && !bytes.Contains(code[cloneWindow-16:cloneWindow], []byte{0x0f, 0x05}) {
			t.Fatalf("amd64: a clone's return without a syscall before it: % x", code[:cloneWindow])
		}
		if isCloneReturnARM64(code) && !bytes.Contains(code[cloneWindow-16:cloneWindow], []byte{0x01, 0x00, 0x00, 0xd4}) {
			t.Fatalf("arm64: a clone's return without svc #0 before it: % x", code[:cloneWindow])
		}
	})
}

// TestCloneReturnSeeds: the fuzz seeds are clone returns, and stop being
// ones with another system call's number or a branch the child takes.
func TestCloneReturnSeeds(t *testing.T) {
	amdBefore := []byte{0xb8, 0xb3, 0x01, 0x00, 0x00, 0x0f, 0x05}
	assert.True(t, isCloneReturnAMD64(cloneWindowOf(amdBefore, nil)), "at the syscall's return")
	assert.True(t, isCloneReturnAMD64(cloneWindowOf(append(amdBefore, 0x48, 0x85, 0xc0, 0x7c, 0x10), nil)), "after test and jl")
	assert.False(t, isCloneReturnAMD64(cloneWindowOf(append(amdBefore, 0x48, 0x85, 0xc0, 0x74, 0x10), nil)), "after je, which the child takes")
	assert.False(t, isCloneReturnAMD64(cloneWindowOf(append(amdBefore, 0x7c, 0x10), nil)), "jl before any test of rax")
	assert.False(t, isCloneReturnAMD64(cloneWindowOf([]byte{0xb8, 0x27, 0x00, 0x00, 0x00, 0x0f, 0x05}, nil)), "getpid's return")
	armBefore := armWords(0xd2801b88, 0xd4000001)
	assert.True(t, isCloneReturnARM64(cloneWindowOf(armBefore, nil)), "at the svc's return")
	assert.True(t, isCloneReturnARM64(cloneWindowOf(append(armBefore, armWords(0xf100001f, 0x5400008b)...), nil)), "after cmp and b.lt")
	assert.False(t, isCloneReturnARM64(cloneWindowOf(append(armBefore, armWords(0xf100001f, 0x54000080)...), nil)), "after b.eq, which the child takes")
	assert.False(t, isCloneReturnARM64(cloneWindowOf(armWords(0xd2801588, 0xd4000001), nil)), "getpid's return (172)")
}

func isCloneReturnAMD64(code *[2 * cloneWindow]byte) bool {
	ok, _ := cloneReturnAMD64(code, 0x10000)
	return ok
}

func isCloneReturnARM64(code *[2 * cloneWindow]byte) bool {
	ok, _ := cloneReturnARM64(code, 0x10000)
	return ok
}
