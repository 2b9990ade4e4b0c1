package report

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

// noCFILibSrc is a library of frames of many shapes, built without frame
// pointers: pushes of callee-saved registers, stack allocations, loops and
// branches before calls, a jump table, tail calls, recursion, a variable
// length array (a frame pointer), a call that does not return, and calls
// through a structure's function pointers. Its static functions are named
// by no symbol once stripped.
const noCFILibSrc = `struct ops { long (*step)(long, long); long (*mix)(const long *, int); };
static volatile long sink;

__attribute__((noinline)) static long spin(long x, long n) {
	for (long i = 0; i < n; i++) {
		x = x * 6364136223846793005L + 1442695040888963407L;
		if (x & 0x100) x ^= i;
	}
	return x;
}
__attribute__((noinline)) static long mix(const long *v, int n) {
	long acc[32];
	for (int i = 0; i < 32; i++) acc[i] = v[i % n] ^ i;
	long s = 0;
	for (int i = 0; i < 32; i++) { s += spin(acc[i], 20 + (acc[i] & 7)); if (s < 0) s = -s; }
	return s;
}
__attribute__((noinline)) static long step(long a, long b) {
	long r1 = a * 3, r2 = b * 5, r3 = a ^ b, r4 = a + b, r5 = a - b;
	if (a & 1) r1 = spin(r1, 50); else r2 = spin(r2, 40);
	for (int i = 0; i < 3; i++) { r3 += spin(r4 + i, 30); r4 ^= r3; r5 += r1 ^ r2; }
	return r1 + r2 + r3 + r4 + r5;
}
__attribute__((noinline)) static long vla(int n, long x) {
	long a[n];
	for (int i = 0; i < n; i++) a[i] = spin(x + i, 25);
	return a[n - 1] ^ a[0];
}
static const struct ops ops = { step, mix };
__attribute__((noinline)) static long dispatch(int k, long x, const struct ops *o) {
	long v[4] = { x, x + 1, x + 2, x + 3 };
	switch (k & 7) {
	case 0: return o->step(x, k);
	case 1: return o->mix(v, 4) + 1;
	case 2: return spin(x, 100) ^ 2;
	case 3: return o->step(x ^ 3, k) * 3;
	case 4: return o->mix(v, 3) - 4;
	case 5: return vla(3 + (k & 3), x);
	case 6: return spin(x + 5, 60);
	default: return x;
	}
}
__attribute__((noinline)) static long recurse(int depth, long x, const struct ops *o) {
	if (depth == 0) return dispatch((int)(x >> 2), x, o);
	long y = recurse(depth - 1, x * 31 + depth, o);
	sink = y;
	return y + depth;
}
__attribute__((noinline, noreturn)) static void die(long x) { for (;;) sink = x; }
__attribute__((noinline)) static long checked(long x, const struct ops *o) {
	if (x == 123456789) die(x);
	return recurse((int)(x & 3), x, o);
}
long nocfi_work(long x) {
	long s = 0;
	for (int i = 0; i < 64; i++) s += checked(x + i, &ops);
	return s;
}
`

const noCFIMainSrc = `long nocfi_work(long);
int main(void) {
	long s = 0;
	for (long i = 0;; i++) { s += nocfi_work(i); if (s == 42) break; }
	return (int)s;
}
`

// TestNoCFILibraryMatchesGDB: a library built without unwind tables and
// stripped (as musl's libc.so is: no CFI, no symbol for its hidden
// functions) stopped every stack at its first frame (no_unwind_info), as
// it does perf's and eu-stack's. ustack now decodes each such function
// from its start to the PC (how prologue): the start from its symbol, or,
// where none names it, found by sweeping from the nearest symbol or the
// section's start past the functions before it (returns, jumps, padding,
// direct calls' targets), following branches and a jump table.
//
// Truth: gdb reading the same cores with the library's unstripped build,
// whose CFI gives every frame: the same file with its .eh_frame, its code
// byte for byte the same. Cores of the program killed at moments spread
// over its run: every stack's pcs are gdb's, frame for frame, to main, and
// the walk goes on to _start. A return address after a call through a
// function pointer, or to another function that tail-called the frame's,
// proves nothing of the frame's function: such stacks are fp_guess, not
// outermost, with the frame named.
func TestNoCFILibraryMatchesGDB(t *testing.T) {
	p := fileCorePattern(t)
	if _, err := exec.LookPath("gdb"); err != nil {
		t.Skip("gdb is not installed (Debian package gdb)")
	}
	dir := t.TempDir()
	withCFI := testprog.Build(t, dir, "libnocfi.c", noCFILibSrc, "-O2", "-fPIC", "-shared", "-fomit-frame-pointer")
	libDir := filepath.Join(dir, "lib")
	require.NoError(t, os.Mkdir(libDir, 0o755))
	lib := filepath.Join(libDir, "libnocfi.so")
	testprog.Tool(t, "", "objcopy", "--remove-section=.eh_frame", "--remove-section=.eh_frame_hdr", "--strip-all", withCFI, lib)
	bin := testprog.Build(t, dir, "main.c", noCFIMainSrc, "-O2", "-g", "-L"+libDir, "-Wl,-rpath,"+libDir, "-Wl,--no-as-needed", "-lnocfi")

	var guessed, proven int
	for k := range 6 {
		run := filepath.Join(dir, "run"+string(rune('a'+k)))
		require.NoError(t, os.Mkdir(run, 0o755))
		var stderr bytes.Buffer
		cmd := exec.Command("sh", "-c", `ulimit -c unlimited && exec "$0"`, bin)
		cmd.Dir, cmd.Stderr = run, &stderr
		require.NoError(t, cmd.Start())
		time.Sleep(time.Duration(20+37*k) * time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGABRT))
		core := coreOf(t, cmd.Wait(), run, p, stderr.String())

		// gdb, with the library's CFI in place of the stripped file.
		stripped, err := os.ReadFile(lib)
		require.NoError(t, err)
		full, err := os.ReadFile(withCFI)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(lib, full, 0o755))
		frames := gdbCoreFrames(t, dir, bin, core)
		require.NoError(t, os.WriteFile(lib, stripped, 0o755))
		var want []uint64
		for _, f := range frames {
			if f.kind != "inline" {
				want = append(want, f.pc)
			}
		}
		require.Equal(t, "main", frames[len(frames)-1].name, "gdb's stack ends at main: %s", describeGDB(frames))

		opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}}
		js, _ := coreReport(t, core, "json", opts)
		samples := testprog.JSONLines[coreSample](t, js)
		require.Len(t, samples, 1)
		s := samples[0]
		var pcs []uint64
		var hows, names []string
		for _, f := range s.Frames {
			if !f.Inlined {
				pcs = append(pcs, hexAddr(t, f.PC))
				hows = append(hows, f.How)
				names = append(names, str(f.Symbol))
			}
		}
		t.Logf("core %d: %d frames, %s; hows %v", k, len(pcs), str(s.Stop), hows)
		require.GreaterOrEqual(t, len(pcs), len(want), "ustack's stack is shorter than gdb's (stop %s: %s)\n gdb:    %s", str(s.Stop), str(s.StopErr), describeGDB(frames))
		assert.Equal(t, hexList(want), hexList(pcs[:len(want)]), "ustack's frames against gdb's, to main (stop %s)", str(s.Stop))
		assert.Contains(t, hows, "prologue")
		assert.True(t, slices.Contains(names, "_start"), "the walk goes on past main to _start: %v", names)
		switch str(s.Stop) {
		case "outermost":
			proven++
		case "fp_guess":
			guessed++
			assert.Contains(t, str(s.StopErr), "not shown to be to its function")
		default:
			t.Errorf("stop %s (%s): want outermost or fp_guess", str(s.Stop), str(s.StopErr))
		}
	}
	t.Logf("%d stacks outermost, %d fp_guess", proven, guessed)
	assert.Positive(t, guessed, "frames reached only through a tail call or a function pointer are guesses")
}
