package report

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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
// outermost, with the frame named. Two more cores are made by gdb, stopped
// at the recursive function's first instruction in a call of itself (the
// word at its SP is its own return address: a kill landed there once, on
// a busy machine, and the stack ended at its first frame), and in the part
// of a function gcc split off to .text.unlikely (dispatch.cold: a block
// only a jump from dispatch reaches, with dispatch's frame, which ended
// the stack, no_unwind_info, before).
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
	for k := range 8 {
		var core string
		switch k {
		case 6: // recurse's first instruction, in a call of itself
			core = gdbStopCore(t, dir, bin, withCFI, "nocfi_work", func(s string) bool { return strings.HasPrefix(s, "recurse") },
				"*(char **)$rsp > $fn && *(char **)$rsp < $fn + $size")
		case 7: // the part of dispatch gcc split off to .text.unlikely
			core = gdbStopCore(t, dir, bin, withCFI, "nocfi_work", func(s string) bool { return strings.HasSuffix(s, ".cold") }, "")
		default:
			core = killedCore(t, dir, p, time.Duration(20+37*k)*time.Millisecond, nil, bin)
		}
		frames, want := gdbFramesWithCFI(t, dir, bin, core, lib, withCFI)
		require.Equal(t, "main", frames[len(frames)-1].name, "gdb's stack ends at main: %s", describeGDB(frames))

		s, pcs, hows, names := noCFIReport(t, core)
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
			assert.Regexp(t, "not shown to be to its function|nothing shows that its function set up the frame pointer", str(s.StopErr))
		default:
			t.Errorf("stop %s (%s): want outermost or fp_guess", str(s.Stop), str(s.StopErr))
		}
	}
	t.Logf("%d stacks outermost, %d fp_guess", proven, guessed)
	assert.Positive(t, guessed, "frames reached only through a tail call or a function pointer are guesses")
}

// noCFIPythonWork keeps Debian's python3.11 busy in its interpreter, its
// parser of JSON and its sort.
const noCFIPythonWork = `import json, random
random.seed(1)
while True:
    data = [{"k": i, "v": [random.random() for _ in range(8)], "s": "x%d" % i} for i in range(2000)]
    back = json.loads(json.dumps(data))
    back.sort(key=lambda d: (d["v"][3], d["s"]))
`

// TestNoCFIPythonMatchesGDB: Debian's python3.11 with its CFI removed and
// stripped to its dynamic symbols (objcopy; its code byte for byte the
// same) stands for a real program built without unwind tables: a 2.8 MB
// interpreter of -O2 code (computed gotos, jump tables, functions of 55
// KB, hidden functions called through pointers). Cores of it killed at
// moments spread over its run; truth is gdb reading each core with the
// original file's CFI. Every stack's pcs are gdb's, frame for frame, to
// _start or to where the sweep cannot go on (before: one frame,
// no_unwind_info); none has a frame gdb does not have. Calls through
// Python's function pointers make them fp_guess. (Over a recording of
// the same program, 5,153 of 5,609 stacks were those of the CFI, the
// others shorter, none wrong.)
func TestNoCFIPythonMatchesGDB(t *testing.T) {
	p := fileCorePattern(t)
	if _, err := exec.LookPath("gdb"); err != nil {
		t.Skip("gdb is not installed (Debian package gdb)")
	}
	orig := "/usr/bin/python3.11"
	if _, err := os.Stat(orig); err != nil {
		t.Skip("python3.11 is not installed (Debian package python3.11-minimal)")
	}
	dir := t.TempDir()
	py := filepath.Join(dir, "bin", "python3.11")
	require.NoError(t, os.Mkdir(filepath.Dir(py), 0o755))
	testprog.Tool(t, "", "objcopy", "--remove-section=.eh_frame", "--remove-section=.eh_frame_hdr", "--strip-all", orig, py)
	work := filepath.Join(dir, "work.py")
	require.NoError(t, os.WriteFile(work, []byte(noCFIPythonWork), 0o644))

	complete := 0
	for k := range 4 {
		core := killedCore(t, dir, p, time.Duration(300+173*k)*time.Millisecond, []string{"PYTHONHOME=/usr"}, py, work)
		frames, want := gdbFramesWithCFI(t, dir, py, core, py, orig)
		require.Equal(t, "_start", frames[len(frames)-1].name, "gdb's stack goes past main (python3.11's is a tail call) to _start: %s", describeGDB(frames))

		s, pcs, _, _ := noCFIReport(t, core)
		t.Logf("core %d: %d frames (gdb %d), %s", k, len(pcs), len(want), str(s.Stop))
		// Code that follows a return and that no branch seen reaches
		// has no state the sweep can prove: such a frame ends the
		// stack early, never with a frame gdb does not have.
		n := min(len(pcs), len(want))
		assert.Equal(t, hexList(want[:n]), hexList(pcs[:n]), "ustack's frames against gdb's (stop %s)", str(s.Stop))
		switch str(s.Stop) {
		case "fp_guess", "outermost":
			complete++
			assert.Equal(t, hexList(want), hexList(pcs), "a stack that reached _start has all of gdb's frames")
		default:
			assert.Less(t, len(pcs), len(want))
			t.Logf("core %d stopped early: %s", k, str(s.StopErr))
		}
	}
	assert.Positive(t, complete, "no stack reached _start (before: one frame each)")
	t.Logf("%d of 4 stacks complete", complete)
}

// killedCore runs argv (with env added) in a new directory under dir,
// kills it with SIGABRT after delay and returns its core (core_pattern p).
func killedCore(t *testing.T, dir, p string, delay time.Duration, env []string, argv ...string) string {
	t.Helper()
	run, err := os.MkdirTemp(dir, "run")
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd := exec.Command("sh", append([]string{"-c", `ulimit -c unlimited && exec "$@"`, "sh"}, argv...)...)
	cmd.Dir, cmd.Stderr = run, &stderr
	cmd.Env = append(os.Environ(), env...)
	require.NoError(t, cmd.Start())
	time.Sleep(delay)
	require.NoError(t, cmd.Process.Signal(syscall.SIGABRT))
	return coreOf(t, cmd.Wait(), run, p, stderr.String())
}

// gdbStopCore runs bin under gdb to the first instruction of the function
// of lib (its unstripped build withCFI) whose symbol match takes, where
// gdb's condition cond holds ($fn is the function's address, $size its
// size; "" for none), and returns gdb's core of it. exported is a global
// function of lib, by which lib's load address is found.
func gdbStopCore(t *testing.T, dir, bin, withCFI, exported string, match func(string) bool, cond string) string {
	t.Helper()
	f, err := elf.Open(withCFI)
	require.NoError(t, err)
	syms, err := f.Symbols()
	f.Close()
	require.NoError(t, err)
	var exp, fn elf.Symbol
	for _, s := range syms {
		switch {
		case s.Name == exported:
			exp = s
		case match(s.Name) && elf.ST_TYPE(s.Info) == elf.STT_FUNC && fn.Value == 0:
			fn = s
		}
	}
	require.NotZero(t, exp.Value, "%s: no symbol %s", withCFI, exported)
	require.NotZero(t, fn.Size, "%s: no function to stop in", withCFI)
	core := filepath.Join(dir, "core."+fn.Name)
	if cond != "" {
		cond = " if " + cond
	}
	script := fmt.Sprintf(`set pagination off
set confirm off
break %s
run
delete
set $fn = (char *)&%s - %#x + %#x
set $size = %d
break *$fn%s
continue
gcore %s
kill
`, exported, exported, exp.Value, fn.Value, fn.Size, cond, core)
	gdbScript := filepath.Join(dir, "stop.gdb")
	require.NoError(t, os.WriteFile(gdbScript, []byte(script), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), testprog.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "gdb", "-nx", "-batch", "-x", gdbScript, bin)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "gdb: %s", out)
	require.FileExists(t, core, "gdb did not stop in %s: %s", fn.Name, out)
	return core
}

// gdbFramesWithCFI returns gdb's frames of core, whose program is exe,
// read while the stripped file at path is replaced by withCFI (the same
// code with its CFI): all of them, and the pcs of those not inlined.
func gdbFramesWithCFI(t *testing.T, dir, exe, core, path, withCFI string) ([]gdbFrame, []uint64) {
	t.Helper()
	stripped, err := os.ReadFile(path)
	require.NoError(t, err)
	full, err := os.ReadFile(withCFI)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, full, 0o755))
	frames := gdbCoreFrames(t, dir, exe, core)
	require.NoError(t, os.WriteFile(path, stripped, 0o755))
	var pcs []uint64
	for _, f := range frames {
		if f.kind != "inline" {
			pcs = append(pcs, f.pc)
		}
	}
	return frames, pcs
}

// noCFIReport reports core's one thread: its sample, and its frames' pcs,
// hows and symbols (inlined frames aside).
func noCFIReport(t *testing.T, core string) (s coreSample, pcs []uint64, hows, names []string) {
	t.Helper()
	opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}}
	js, _ := coreReport(t, core, "json", opts)
	samples := testprog.JSONLines[coreSample](t, js)
	require.Len(t, samples, 1)
	s = samples[0]
	for _, f := range s.Frames {
		if !f.Inlined {
			pcs = append(pcs, hexAddr(t, f.PC))
			hows = append(hows, f.How)
			names = append(names, str(f.Symbol))
		}
	}
	return s, pcs, hows, names
}
