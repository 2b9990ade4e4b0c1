package report

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/ianlancetaylor/demangle"
	"github.com/stretchr/testify/require"
	"golang.org/x/arch/x86/x86asm"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/unwinder"
)

// ehThrowSrc throws through three frames of its own to a catch in main,
// all built -O2: main's landing pad finds its frame from SP.
const ehThrowSrc = `#include <stdexcept>
#include <cstdio>
__attribute__((noinline)) void thrower(int n) { if (n >= 0) throw std::runtime_error("x"); }
__attribute__((noinline)) int mid(int n) { char buf[64]; buf[n & 63] = n; thrower(n); return buf[3]; }
__attribute__((noinline)) int outer(int n) { int r = mid(n); return r + 1; }
int main(int argc, char **argv) {
  long caught = 0;
  for (int i = 0; i < 3; i++) {
    try { outer(argc + i); } catch (const std::exception &e) { caught++; }
  }
  printf("%ld\n", caught);
  return 0;
}
`

// TestEHInstallNeverNamesWrongCallers stops a C++ throw in libgcc's
// _Unwind_RaiseException at its last instructions, where it installs the
// handler's frame (its CFI then gives main's landing pad as its caller,
// with the landing pad's registers but its own SP), and dumps a core at
// each stop with gdb. The truth is gdb's backtrace at the first stop, the
// call that begins the install (the frames are still intact there): the
// core of that stop must give it whole, and the cores of the later stops
// a prefix of it that does not end outermost (but for the second, in the
// install's callee before it wrote anything: the whole stack again; the
// third is that callee's return, past its last write). Before ustack knew the
// install, the later cores gave main's landing pad as the caller and then
// thrower, mid, outer and main again, read from where the landing pad's
// SP is not, down to an outermost frame. The stops are found by decoding
// the function: the call before the last call of a function that only
// returns (_Unwind_DebugHook), that call, the move of RCX into RSP and the
// final jump.
func TestEHInstallNeverNamesWrongCallers(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the stops are amd64 instructions of libgcc_s")
	}
	gdb, err := exec.LookPath("gdb")
	if err != nil {
		t.Skip("gdb is not installed (Debian package gdb): no truth for the throw's frames")
	}
	const libgcc = "/lib/x86_64-linux-gnu/libgcc_s.so.1"
	f, err := elf.Open(libgcc)
	if err != nil {
		t.Skipf("%v (Debian package libgcc-s1)", err)
	}
	syms, err := f.DynamicSymbols()
	require.NoError(t, err)
	var fn elf.Symbol
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "_Unwind_RaiseException") {
			fn = s
		}
	}
	require.NotZero(t, fn.Size, "%s exports no _Unwind_RaiseException", libgcc)
	code := make([]byte, fn.Size)
	var read bool
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && fn.Value >= p.Vaddr && fn.Value+fn.Size <= p.Vaddr+p.Filesz {
			_, err = p.ReadAt(code, int64(fn.Value-p.Vaddr))
			require.NoError(t, err)
			read = true
		}
	}
	f.Close()
	require.True(t, read, "_Unwind_RaiseException's code is in no executable segment")

	// Offsets in the function: its calls (and their targets), the load of
	// RSP from RCX and the indirect jump that ends it.
	var calls, targets []uint64
	var movRSP, jmp uint64
	for off := 0; off < len(code); {
		in, err := x86asm.Decode(code[off:], 64)
		if err != nil {
			off++
			continue
		}
		switch {
		case in.Op == x86asm.CALL:
			if rel, ok := in.Args[0].(x86asm.Rel); ok {
				calls = append(calls, uint64(off))
				targets = append(targets, fn.Value+uint64(off+in.Len)+uint64(int64(rel)))
			}
		case in.Op == x86asm.MOV && in.Args[0] == x86asm.RSP && in.Args[1] == x86asm.RCX:
			movRSP = uint64(off)
		case in.Op == x86asm.JMP && in.Args[0] == x86asm.RCX:
			jmp = uint64(off)
		}
		off += in.Len
	}
	require.NotZero(t, movRSP, "no mov %%rcx,%%rsp in _Unwind_RaiseException: not the eh_return epilogue this test knows")
	require.NotZero(t, jmp, "no jmp *%%rcx in _Unwind_RaiseException")
	hook := -1
	for i := len(calls) - 1; i >= 1; i-- {
		if calls[i] < movRSP && returnsOnlyAt(t, libgcc, targets[i]) {
			hook = i
			break
		}
	}
	require.Positive(t, hook, "no call of a function that only returns (_Unwind_DebugHook) before the epilogue")
	afterCall := func(i int) uint64 {
		in, err := x86asm.Decode(code[calls[i]:], 64)
		require.NoError(t, err)
		return calls[i] + uint64(in.Len)
	}
	// The install's call, the first instruction of the function it
	// calls (uw_install_context_1: nothing written yet), its return, the
	// hook's return, the load of RSP, the jump.
	install := int64(targets[hook-1]) - int64(fn.Value) // before the function, in libgcc_s's layout
	// uw_install_context_1's first return: past its loop, which writes
	// the handler's address into the return address slot last.
	var installRet int64
	body := readELF(t, libgcc, targets[hook-1], 1024)
	for off := 0; off < len(body); {
		in, err := x86asm.Decode(body[off:], 64)
		if err != nil {
			off++
			continue
		}
		if in.Op == x86asm.RET {
			installRet = install + int64(off)
			break
		}
		off += in.Len
	}
	require.NotZero(t, installRet, "no ret in the 1 KB from uw_install_context_1's start")
	stops := []int64{int64(calls[hook-1]), install, installRet, int64(afterCall(hook - 1)), int64(afterCall(hook)), int64(movRSP), int64(jmp)}

	dir := t.TempDir()
	exe := testprog.Build(t, dir, "throw.cc", ehThrowSrc, "-O2", "-g")
	var script strings.Builder
	script.WriteString("set pagination off\nset confirm off\nset backtrace past-main on\nset debuginfod enabled off\nstart\n")
	for _, off := range stops {
		fmt.Fprintf(&script, "break *((char *)_Unwind_RaiseException%+d)\n", off)
	}
	for i := range stops {
		if i == 0 {
			script.WriteString("continue\necho ==bt==\\n\nbt\necho ==end==\\n\n")
		} else {
			script.WriteString("continue\n")
		}
		fmt.Fprintf(&script, "gcore %s\n", filepath.Join(dir, fmt.Sprintf("core.%d", i)))
	}
	script.WriteString("kill\n")
	gdbScript := filepath.Join(dir, "stops.gdb")
	require.NoError(t, os.WriteFile(gdbScript, []byte(script.String()), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), testprog.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, gdb, "-nx", "-batch", "-x", gdbScript, exe)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "gdb: %s", out)
	_, bt, ok := strings.Cut(string(out), "==bt==\n")
	bt, _, ok2 := strings.Cut(bt, "==end==")
	require.True(t, ok && ok2, "gdb printed no backtrace: %s", out)
	var want []string
	for _, m := range gdbFrameRe.FindAllStringSubmatch(bt, -1) {
		want = append(want, m[1])
	}
	require.Equal(t, []string{"_Unwind_RaiseException", "__cxa_throw", "thrower", "mid", "outer", "main"}, want[:min(6, len(want))],
		"gdb's backtrace at the install's call: %s", bt)

	for i := range stops {
		core := filepath.Join(dir, fmt.Sprintf("core.%d", i))
		require.FileExists(t, core, "gdb did not stop at _Unwind_RaiseException%+#x: %s", stops[i], out)
		opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}, Exe: exe}
		cc, err := OpenCore(core, opts)
		require.NoError(t, err)
		var got []string
		var stop, stopErr string
		_, err = RunCore(cc, opts, func(s *Sample) error {
			for _, f := range s.Frames {
				if !f.Kernel {
					got = append(got, demangle.Filter(f.Symbol, demangle.NoParams))
				}
			}
			stop, stopErr = s.Stop, s.StopErr
			return nil
		})
		cc.Close()
		require.NoError(t, err)
		at := fmt.Sprintf("_Unwind_RaiseException%+#x (stop %d of %d)", stops[i], i+1, len(stops))
		if i == 0 {
			require.Equal(t, want, got, "%s: before the install, the whole stack gdb gives", at)
			require.Equal(t, "outermost", stop, "%s: %s", at, stopErr)
			continue
		}
		if i == 1 {
			// In the install's callee, before it writes a slot: the
			// same stack under its frame, whole.
			require.Equal(t, want, got[1:], "%s: at the install's first instruction, the whole stack under it", at)
			require.Equal(t, "outermost", stop, "%s: %s", at, stopErr)
			continue
		}
		require.NotEmpty(t, got, at)
		if i == 2 {
			got = got[1:] // uw_install_context_1's own frame
		}
		require.True(t, slices.Equal(got, want[:min(len(got), len(want))]), "%s: frames %q are not a prefix of the stack at the throw %q", at, got, want)
		require.NotEqual(t, "outermost", stop, "%s: %q called complete", at, got)
		require.Contains(t, stopErr, "installing a handler's frame", at)
	}
}

// gdbFrameRe matches a frame of gdb's backtrace, capturing its function.
var gdbFrameRe = regexp.MustCompile(`(?m)^#\d+\s+(?:0x[0-9a-f]+ in )?(\S+) \(`)

// returnsOnlyAt reports whether the function at the link-time address addr
// of the ELF file path is a bare return (ret, or endbr64; ret).
func returnsOnlyAt(t *testing.T, path string, addr uint64) bool {
	b := readELF(t, path, addr, 5)
	return len(b) == 5 && (b[0] == 0xc3 || string(b) == "\xf3\x0f\x1e\xfa\xc3")
}

// readELF returns up to n bytes at the link-time address addr of the ELF
// file path, from the loadable segment holding it (nil where none does).
func readELF(t *testing.T, path string, addr uint64, n int) []byte {
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr < p.Vaddr+p.Filesz {
			b := make([]byte, min(uint64(n), p.Vaddr+p.Filesz-addr))
			_, err := p.ReadAt(b, int64(addr-p.Vaddr))
			require.NoError(t, err)
			return b
		}
	}
	return nil
}

// TestCutInstallCallerARM64 walks frames placed in arm64's libgcc_s (the
// cross sysroot's, Debian 12's build: addresses read off its disassembly,
// elfcache's TestEHInstallARM64). In the epilogue _Unwind_ForcedUnwind
// shares with its normal return (0xe934-0xe970), the first frame keeps
// its caller only with x4 0 (the normal return); x4 not 0 (the install,
// which wrote the handler into the saved x30) or unknown, or a frame
// there that is not the first (its x4 is not known), ends the stack
// there. At the return of _Unwind_RaiseException's install call
// (0xe88c) the stack ends, even where the caller follows a bl of
// _Unwind_RaiseException@plt (0xead4, in _Unwind_Resume_or_Rethrow): the
// install may have written the handler's x29 already.
func TestCutInstallCallerARM64(t *testing.T) {
	o, err := elfcache.Open("/usr/aarch64-linux-gnu/lib/libgcc_s.so.1", elfcache.Options{})
	if err != nil {
		t.Skipf("%v (Debian package libgcc-s1-arm64-cross)", err)
	}
	defer o.Close()
	if o.BuildIDHex() != "7d529537ede2e2084bc24df38d99501c0fb9d12b" {
		t.Skipf("%s is another build than Debian 12's, whose addresses this test knows", o.Path())
	}
	const bias = 0x5500000000
	as := unwinder.NewAddressSpace([]unwinder.Mapping{{Start: bias, End: bias + 0x20000, Bias: bias, Exec: true, Object: o, Name: o.Path()}})
	frame := func(pc uint64, ret bool) unwinder.Frame {
		f := unwinder.Frame{PC: bias + pc, Mapping: 0}
		if ret {
			f.Flags |= unwinder.FrameReturnAddress
		}
		return f
	}
	regs := func(x4 uint64, known bool) *arch.Regs {
		var r arch.Regs
		if known {
			r.Set(4, x4)
		}
		return &r
	}
	for _, c := range []struct {
		name   string
		regs   *arch.Regs
		frames []unwinder.Frame
		keep   int
	}{
		{"epilogue, normal return", regs(0, true), []unwinder.Frame{frame(0xe964, false), frame(0xead8, true)}, 2},
		{"epilogue, installing", regs(0x40, true), []unwinder.Frame{frame(0xe964, false), frame(0xead8, true)}, 1},
		{"epilogue's ret, installing", regs(0x40, true), []unwinder.Frame{frame(0xe96c, false), frame(0xead8, true)}, 1},
		{"epilogue, x4 unknown", regs(0, false), []unwinder.Frame{frame(0xe964, false), frame(0xead8, true)}, 1},
		{"epilogue, interrupted frame", regs(0, true), []unwinder.Frame{frame(0x1000, false), frame(0xe964, false), frame(0xead8, true)}, 2},
		{"before the epilogue", regs(0x40, true), []unwinder.Frame{frame(0xe930, false), frame(0xead8, true)}, 2},
		{"install's return, a bl's return", regs(0, false), []unwinder.Frame{frame(0xc430, false), frame(0xe88c, true), frame(0xead8, true)}, 2},
		{"install's return, handler", regs(0, false), []unwinder.Frame{frame(0xc430, false), frame(0xe88c, true), frame(0xeadc, true)}, 2},
	} {
		n, err := cutInstallCaller(as, c.regs, c.frames)
		require.Equal(t, c.keep, n, c.name)
		if c.keep < len(c.frames) {
			require.ErrorIs(t, err, cfi.ErrInstallingHandler, c.name)
		} else {
			require.NoError(t, err, c.name)
		}
	}
}
