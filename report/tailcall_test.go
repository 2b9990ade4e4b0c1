package report

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/resolve"
)

// tailCallShape is a program whose crash (a store through NULL in boom)
// comes through tail calls, and what gdb is expected to make of it. The
// expectation only documents the shape: the test's truth is gdb's own
// backtrace of the same run.
type tailCallShape struct {
	name string
	src  string
	lib  string // a shared library's source, linked as libtc.so
	cxx  bool   // src is C++
	// gdbTail are the functions gdb's backtrace is expected to show as
	// tail call frames, innermost first.
	gdbTail []string
	// tailSites is how many tail call sites readelf must find in the
	// program and its library: the shape compiled as meant.
	tailSites int
}

const tailCallCommon = `#include <string.h>
volatile int sink;
__attribute__((noipa)) void boom(char *p) { strcpy(p, "x"); }
`

var tailCallShapes = []tailCallShape{
	{name: "single", src: tailCallCommon + `
__attribute__((noipa)) void mid(int n) { if (n) boom(NULL); }
int main(int c, char **v) { mid(c); sink = 0; return 0; }
`, gdbTail: []string{"mid"}, tailSites: 1},
	{name: "chain_of_two", src: tailCallCommon + `
__attribute__((noipa)) void b(int n) { sink = n; boom(NULL); }
__attribute__((noipa)) void a(int n) { sink = n + 1; b(n); }
int main(int c, char **v) { a(c); sink = 0; return 0; }
`, gdbTail: []string{"b", "a"}, tailSites: 2},
	{name: "shared_library", lib: `#include <string.h>
volatile int lsink;
__attribute__((noipa)) void lib_boom(char *p) { strcpy(p, "x"); }
__attribute__((noipa)) void lib_entry(int n) { lsink = n; lib_boom(NULL); }
`, src: `void lib_entry(int);
volatile int sink;
int main(int c, char **v) { lib_entry(c); sink = 0; return 0; }
`, gdbTail: []string{"lib_entry"}, tailSites: 1},
	// Two hops, the first through the PLT into the library, the second
	// there (a program's do_join: jmp pthread_join@plt; glibc's
	// pthread_join: jmp __pthread_clockjoin_ex): gdb shows both.
	{name: "shared_library_two_hops", lib: `#include <string.h>
volatile int lsink;
__attribute__((noipa)) void lib_boom(char *p) { strcpy(p, "x"); }
__attribute__((noipa)) void lib_entry(int n) { lsink = n; lib_boom(NULL); }
`, src: `void lib_entry(int);
volatile int sink;
__attribute__((noipa)) void hop(int n) { sink = n; lib_entry(n); }
int main(int c, char **v) { hop(c); sink = 0; return 0; }
`, gdbTail: []string{"lib_entry", "hop"}, tailSites: 2},
	// Two chains (a->x->boom, a->y->boom) share no call site: gdb shows
	// neither x nor y, nor a.
	{name: "ambiguous", src: tailCallCommon + `
__attribute__((noipa)) void x(int n) { sink = n; boom(NULL); }
__attribute__((noipa)) void y(int n) { sink = -n; boom(NULL); }
__attribute__((noipa)) void a(int n) { if (n > 5) x(n); else y(n); }
int main(int c, char **v) { a(c); sink = 0; return 0; }
`, tailSites: 4},
	// Two chains (a->b->x->boom, a->b->y->boom) share their first call
	// site: gdb shows a and leaves out the rest.
	{name: "ambiguous_common_prefix", src: tailCallCommon + `
__attribute__((noipa)) void x(int n) { sink = n; boom(NULL); }
__attribute__((noipa)) void y(int n) { sink = -n; boom(NULL); }
__attribute__((noipa)) void b(int n) { if (n > 5) x(n); else y(n); }
__attribute__((noipa)) void a(int n) { sink = n; b(n); }
int main(int c, char **v) { a(c); sink = 0; return 0; }
`, gdbTail: []string{"a"}, tailSites: 5},
	// Two chains (a->x->c->boom, a->y->c->boom) share their last call
	// site: gdb shows c and leaves out the rest.
	{name: "ambiguous_common_suffix", src: tailCallCommon + `
__attribute__((noipa)) void c(int n) { sink = n; boom(NULL); }
__attribute__((noipa)) void x(int n) { sink = n; c(n); }
__attribute__((noipa)) void y(int n) { sink = -n; c(n); }
__attribute__((noipa)) void a(int n) { if (n > 5) x(n); else y(n); }
int main(int c, char **v) { a(c); sink = 0; return 0; }
`, gdbTail: []string{"c"}, tailSites: 5},
	// Two chains (a->b->x->c->boom, a->b->y->c->boom) share their first
	// and their last call site: gdb shows c and a, not what is between.
	{name: "ambiguous_common_prefix_and_suffix", src: tailCallCommon + `
__attribute__((noipa)) void c(int n) { sink = n; boom(NULL); }
__attribute__((noipa)) void x(int n) { sink = n; c(n); }
__attribute__((noipa)) void y(int n) { sink = -n; c(n); }
__attribute__((noipa)) void b(int n) { if (n > 5) x(n); else y(n); }
__attribute__((noipa)) void a(int n) { sink = n; b(n); }
int main(int c, char **v) { a(c); sink = 0; return 0; }
`, gdbTail: []string{"c", "a"}, tailSites: 6},
	// C++: the call site's origin is the definition of a member function
	// declared in its class (DW_AT_specification).
	{name: "cxx_member", cxx: true, src: `#include <cstring>
volatile int sink;
namespace ns {
struct K { static void boom(char *p); void mid(int n); };
__attribute__((noipa)) void K::boom(char *p) { std::strcpy(p, "x"); }
__attribute__((noipa)) void K::mid(int n) { sink = n; boom(nullptr); }
}
int main(int c, char **v) { ns::K k; k.mid(c); sink = 0; return 0; }
`, gdbTail: []string{"ns::K::mid"}, tailSites: 1},
	// main calls mid through a pointer: the call site's target is a
	// register, so nothing leads to mid.
	{name: "indirect_call", src: tailCallCommon + `
__attribute__((noipa)) void mid(int n) { if (n) boom(NULL); }
void (*volatile fp)(int) = mid;
int main(int c, char **v) { fp(c); sink = 0; return 0; }
`, tailSites: 1},
	// mid tail-calls through a pointer: gdb gives up on the chain.
	{name: "indirect_tail_call", src: tailCallCommon + `
void (*volatile bp)(char *) = boom;
__attribute__((noipa)) void mid(int n) { if (n) bp(NULL); }
int main(int c, char **v) { mid(c); sink = 0; return 0; }
`, tailSites: 1},
}

// gdbFramesPy prints gdb's frames, one line each: pc, kind, function.
const gdbFramesPy = `
f = gdb.newest_frame()
while f is not None:
    kind = {gdb.TAILCALL_FRAME: "tailcall", gdb.INLINE_FRAME: "inline"}.get(f.type(), "normal")
    print("FRAME %#x %s %s" % (f.pc(), kind, f.name()))
    f = f.older()
`

type gdbFrame struct {
	pc         uint64
	kind, name string
}

// crashUnderGDB runs bin under gdb to its SIGSEGV and returns gdb's
// frames (newest first, to main) and a core gdb wrote of that moment.
func crashUnderGDB(t *testing.T, dir, bin string, env ...string) ([]gdbFrame, string) {
	t.Helper()
	return crashUnderGDBWith(t, dir, bin, env, []string{"1"})
}

// crashUnderGDBArgs is crashUnderGDB with the program's arguments.
func crashUnderGDBArgs(t *testing.T, dir, bin string, args ...string) ([]gdbFrame, string) {
	t.Helper()
	return crashUnderGDBWith(t, dir, bin, nil, args)
}

func crashUnderGDBWith(t *testing.T, dir, bin string, env, args []string) ([]gdbFrame, string) {
	t.Helper()
	if _, err := exec.LookPath("gdb"); err != nil {
		t.Skip("gdb is not installed (Debian package gdb)")
	}
	py := filepath.Join(dir, "frames.py")
	require.NoError(t, os.WriteFile(py, []byte(gdbFramesPy), 0o644))
	core := filepath.Join(dir, "core")
	ctx, cancel := context.WithTimeout(context.Background(), testprog.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "gdb", "-nx", "-batch", "-ex", "run", "-ex", "bt", "-x", py,
		"-ex", "generate-core-file "+core, "--args", bin)
	cmd.Args = append(cmd.Args, args...)
	cmd.Env = append(append(os.Environ(), "LC_ALL=C"), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "gdb: %s", out)
	t.Logf("gdb:\n%s", out)
	frames := parseGDBFrames(t, out)
	require.FileExists(t, core)
	return frames, core
}

// parseGDBFrames reads the lines gdbFramesPy printed in gdb's output.
func parseGDBFrames(t *testing.T, out []byte) []gdbFrame {
	t.Helper()
	var frames []gdbFrame
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.SplitN(line, " ", 4) // C++ names have spaces
		if len(f) != 4 || f[0] != "FRAME" {
			continue
		}
		pc, err := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
		require.NoError(t, err, line)
		frames = append(frames, gdbFrame{pc, f[2], f[3]})
	}
	require.NotEmpty(t, frames, "gdb printed no frames: %s", out)
	return frames
}

// reportFrames reports core and returns the signalled thread's frames,
// inlined frames left out, down to main.
func reportFrames(t *testing.T, core string, opts CoreOptions) []Frame {
	t.Helper()
	var frames []Frame
	for _, f := range signalledFrames(t, core, opts) {
		if f.Inlined || f.Kernel {
			continue
		}
		frames = append(frames, f)
		if f.Symbol == "main" {
			break
		}
	}
	return frames
}

// signalledFrames reports core and returns all the frames of its
// signalled thread (the first).
func signalledFrames(t *testing.T, core string, opts CoreOptions) []Frame {
	t.Helper()
	c, err := OpenCore(core, opts)
	require.NoError(t, err)
	defer c.Close()
	var frames []Frame
	n := 0
	_, err = RunCore(c, opts, func(s *Sample) error {
		if n++; n == 1 {
			frames = append(frames, s.Frames...)
		}
		return nil
	})
	require.NoError(t, err)
	return frames
}

// assertFramesMatchGDB: ustack's frames (reportFrames') are gdb's, by
// name (without parameters) and pc.
func assertFramesMatchGDB(t *testing.T, gdbFrames []gdbFrame, got []Frame) {
	t.Helper()
	t.Logf("gdb:    %s", describeGDB(gdbFrames))
	t.Logf("ustack: %s", describeFrames(got))
	require.Len(t, got, len(gdbFrames), "frames against gdb's")
	for i, g := range gdbFrames {
		assert.Equal(t, g.name, plainName(got[i].Symbol), "frame %d", i)
		assert.Equal(t, fmt.Sprintf("%#x", g.pc), fmt.Sprintf("%#x", got[i].PC), "frame %d (%s) pc", i, g.name)
	}
}

func describeGDB(fs []gdbFrame) string {
	var b []string
	for _, f := range fs {
		s := fmt.Sprintf("%s@%#x", f.name, f.pc)
		if f.kind == "tailcall" {
			s += "(tailcall)"
		}
		b = append(b, s)
	}
	return strings.Join(b, " ")
}

func describeFrames(fs []Frame) string {
	var b []string
	for _, f := range fs {
		s := fmt.Sprintf("%s@%#x", plainName(f.Symbol), f.PC)
		if f.How == resolve.HowTailCall {
			s += "(tailcall)"
		}
		b = append(b, s)
	}
	return strings.Join(b, " ")
}

// readelfTailSites counts the tail call sites (DW_AT_call_tail_call,
// DW_AT_GNU_tail_call) readelf finds in dir's tc and libtc.so.
func readelfTailSites(t *testing.T, dir string) int {
	t.Helper()
	if _, err := exec.LookPath("readelf"); err != nil {
		t.Skip("readelf is not installed (Debian package binutils)")
	}
	n := 0
	for _, f := range []string{"tc", "libtc.so"} {
		p := filepath.Join(dir, f)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		out, err := exec.Command("readelf", "--debug-dump=info", p).Output()
		require.NoError(t, err)
		n += strings.Count(string(out), "DW_AT_call_tail_call") + strings.Count(string(out), "DW_AT_GNU_tail_call")
	}
	return n
}

// euStackFrames returns eu-stack's frames of the core's first thread down
// to main, as name@pc (@pc for a frame in no symbol); nil when eu-stack is
// not installed.
func euStackFrames(t *testing.T, core, bin string, env []string) []string {
	t.Helper()
	if _, err := exec.LookPath("eu-stack"); err != nil {
		t.Log("eu-stack is not installed (Debian package elfutils): not compared")
		return nil
	}
	cmd := exec.Command("eu-stack", "--core", core, "-e", bin)
	cmd.Env = append(os.Environ(), env...)
	out, _ := cmd.Output() // exit 1 when some thread's walk ended badly
	var frames []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || len(f) > 3 || !strings.HasPrefix(f[0], "#") {
			continue
		}
		pc, err := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
		require.NoError(t, err, line)
		name := "" // a frame in no symbol (JIT code) has no name
		if len(f) == 3 {
			name, _, _ = strings.Cut(f[2], "(") // C++ names come with parameters
		}
		frames = append(frames, fmt.Sprintf("%s@%#x", name, pc))
		if name == "main" {
			break
		}
	}
	require.NotEmpty(t, frames, "eu-stack: %s", out)
	return frames
}

// plainName is a frame's name as gdb's Python frame.name() gives it: C++
// names demangled, without their parameters.
func plainName(sym string) string {
	name, _, _ := strings.Cut(elfcache.Demangle(sym), "(")
	return name
}

// buildTailCallShape compiles a shape with gcc -O2 -g and the extra flags,
// returning the program and the environment that finds its library.
func buildTailCallShape(t *testing.T, dir string, sh tailCallShape, flags ...string) (string, []string) {
	t.Helper()
	cflags := append([]string{"-O2", "-g"}, flags...)
	var env []string
	if sh.lib != "" {
		testprog.Build(t, dir, "libtc.c", sh.lib, append(cflags, "-shared", "-fPIC")...)
		require.NoError(t, os.Rename(filepath.Join(dir, "libtc"), filepath.Join(dir, "libtc.so")))
		cflags = append(cflags, "-L"+dir, "-Wl,-rpath,"+dir, "-Wl,--no-as-needed")
		env = append(env, "LD_LIBRARY_PATH="+dir)
		bin := testprog.Build(t, dir, "tc.c", sh.src, append(cflags, "-ltc")...)
		return bin, env
	}
	file := "tc.c"
	if sh.cxx {
		file = "tc.cc"
	}
	return testprog.Build(t, dir, file, sh.src, cflags...), env
}

// TestTailCallFramesMatchGDB crashes programs whose stacks lost frames to
// tail calls under gdb, and compares the report of the core gdb wrote with
// gdb's backtrace frame for frame: each frame's function, each frame's pc
// (for a tail call frame the pc gdb gives it, its call site's return pc),
// and which frames are tail call frames. With NoTailCall the report is
// gdb's backtrace without its tail call frames, which is what eu-stack
// gives for the same core (compared where it is installed). DWARF 5 (gcc 12's default) and DWARF 4 (the GNU call site
// forms).
func TestTailCallFramesMatchGDB(t *testing.T) {
	for _, dwarfVersion := range []string{"5", "4"} {
		for _, sh := range tailCallShapes {
			t.Run("dwarf"+dwarfVersion+"/"+sh.name, func(t *testing.T) {
				dir := t.TempDir()
				bin, env := buildTailCallShape(t, dir, sh, "-gdwarf-"+dwarfVersion)
				gdbFrames, core := crashUnderGDB(t, dir, bin, env...)
				var gdbTail []string
				for _, f := range gdbFrames {
					if f.kind == "tailcall" {
						gdbTail = append(gdbTail, f.name)
					}
				}
				// The shape compiled as meant (else the test would
				// prove nothing about it).
				assert.Equal(t, sh.gdbTail, gdbTail, "gdb's tail call frames")
				assert.Equal(t, sh.tailSites, readelfTailSites(t, dir), "tail call sites readelf finds")
				assert.Contains(t, []string{"boom", "lib_boom", "ns::K::boom"}, gdbFrames[0].name)

				opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}}
				got := reportFrames(t, core, opts)
				assertFramesMatchGDB(t, gdbFrames, got)
				for i, g := range gdbFrames {
					assert.Equal(t, g.kind == "tailcall", got[i].How == resolve.HowTailCall, "frame %d (%s) is a tail call frame", i, g.name)
				}

				opts.NoTailCall = true
				before := reportFrames(t, core, opts)
				t.Logf("ustack --no-tailcall: %s", describeFrames(before))
				var want []string
				for _, g := range gdbFrames {
					if g.kind != "tailcall" {
						want = append(want, fmt.Sprintf("%s@%#x", g.name, g.pc))
					}
				}
				assert.Equal(t, strings.Join(want, " "), describeFrames(before))
				if eu := euStackFrames(t, core, bin, env); eu != nil {
					// eu-stack, like ustack before, has no tail call
					// frames.
					assert.Equal(t, strings.Join(want, " "), strings.Join(eu, " "), "eu-stack")
				}
			})
		}
	}
}

// tailCallSpinSrc spins in boom, which mid reaches by a tail call: the
// stack of a sample in boom has no frame of mid's.
const tailCallSpinSrc = `volatile long sink;
__attribute__((noipa)) void boom(long n) { for (long i = 0; i < n; i++) sink += i; }
__attribute__((noipa)) void mid(long n) { sink = n; boom(n * 100000000); }
int main(int c, char **v) { mid(c); sink = 0; return 0; }
`

// TestTailCallFramesInPerfRecording records a program spinning in boom,
// reached by a tail call from mid, with perf record --call-graph dwarf
// (address space randomization off, as under gdb), and compares the
// report's user frames of each sample in boom with gdb's backtrace at a
// breakpoint in boom: the functions, the pcs of the callers (a sample's
// own pc is wherever the loop was), and mid as a tail call frame. perf
// script's samples in boom go straight to main.
func TestTailCallFramesInPerfRecording(t *testing.T) {
	requirePerf(t)
	if _, err := exec.LookPath("setarch"); err != nil {
		t.Skip("setarch is not installed (Debian package util-linux)")
	}
	if _, err := exec.LookPath("gdb"); err != nil {
		t.Skip("gdb is not installed (Debian package gdb)")
	}
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "tc.c", tailCallSpinSrc, "-O2", "-g")

	py := filepath.Join(dir, "frames.py")
	require.NoError(t, os.WriteFile(py, []byte(gdbFramesPy), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), testprog.Timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "gdb", "-nx", "-batch", "-ex", "break boom", "-ex", "run",
		"-ex", "bt", "-x", py, "-ex", "kill", "--args", bin, "1").CombinedOutput()
	require.NoError(t, err, "gdb: %s", out)
	t.Logf("gdb:\n%s", out)
	var want []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "FRAME" {
			pc, err := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
			require.NoError(t, err)
			s := fmt.Sprintf("%s@%#x", f[3], pc)
			if f[2] == "tailcall" {
				s += "(tailcall)"
			}
			want = append(want, s)
		}
	}
	require.Regexp(t, `^boom@0x[0-9a-f]+ mid@0x[0-9a-f]+\(tailcall\) main@`, strings.Join(want, " "),
		"gdb stopped in boom, with mid as a tail call frame")

	data := testprog.Record(t, filepath.Join(dir, "perf.data"), "-e", "cpu-clock", "-c", "1000000",
		"--call-graph", "dwarf", "--", "setarch", "-R", bin, "1")
	r, err := perfdata.Open(data)
	require.NoError(t, err)
	defer r.Close()
	n := 0
	_, err = Run(r, Options{Kallsyms: "-", BuildIDDir: t.TempDir()}, func(s *Sample) error {
		var user []Frame
		for _, f := range s.Frames {
			if f.Kernel || f.Inlined {
				continue
			}
			user = append(user, f)
			if f.Symbol == "main" {
				break
			}
		}
		if len(user) == 0 || user[0].Symbol != "boom" {
			return nil // start-up, exit
		}
		got := strings.Fields(describeFrames(user))
		if n++; n == 1 {
			t.Logf("ustack: %s", strings.Join(got, " "))
		}
		assert.Equal(t, want[1:], got[1:], "sample %d's callers against gdb", n)
		return nil
	})
	require.NoError(t, err)
	if n == 0 {
		t.Skip("perf recorded no sample in boom (a loaded machine?)")
	}
	t.Logf("%d samples in boom", n)
	// perf script goes from boom to main.
	inBoom := 0
	for _, smp := range splitSamples(testprog.Script(t, data, "-F", "ip,sym")) {
		if len(smp) > 1 && strings.HasSuffix(smp[0], " boom") {
			inBoom++
			assert.True(t, strings.HasSuffix(smp[1], " main"), "perf script: %q", smp)
		}
	}
	assert.Positive(t, inBoom, "perf script's samples in boom")
}

// TestTextTailCallMarker checks how a tail call frame prints: like an
// inlined one, "(tailcall)" where the object would be, and with
// --srcline the object on the frame line and "(tailcall)" after the source
// line, as perf script prints "(inlined)".
func TestTextTailCallMarker(t *testing.T) {
	s := &Sample{Comm: "tc", Tid: 7, Time: 1000000000, Event: CoreEvent, Frames: []Frame{
		{Offset: 0x1145, Module: "/tmp/tc", Symbol: "boom", SymOff: 5, File: "/src/tc.c", Line: 3, HasSource: true, How: "context"},
		{Offset: 0x116b, Module: "/tmp/tc", Symbol: "mid", SymOff: 0xb, File: "/src/tc.c", Line: 4, HasSource: true, How: resolve.HowTailCall},
		{Offset: 0x1044, Module: "/tmp/tc", Symbol: "main", SymOff: 4, File: "/src/tc.c", Line: 5, HasSource: true, How: "cfi"},
	}}
	for _, srcline := range []bool{false, true} {
		var b strings.Builder
		w := NewTextWriter(&b, 4, false)
		w.Srcline = srcline
		require.NoError(t, w.Write(s))
		require.NoError(t, w.Flush())
		lines := strings.Split(b.String(), "\n")
		if !srcline {
			assert.Equal(t, []string{"\t            1145 boom+0x5 (/tmp/tc)", "\t            116b mid+0xb (tailcall)",
				"\t            1044 main+0x4 (/tmp/tc)"}, lines[1:4])
			continue
		}
		assert.Equal(t, []string{"\t            1145 boom+0x5 (/tmp/tc)", "  tc.c:3", "\t            116b mid+0xb (/tmp/tc)",
			"  tc.c:4 (tailcall)", "\t            1044 main+0x4 (/tmp/tc)", "  tc.c:5"}, lines[1:7])
	}
}
