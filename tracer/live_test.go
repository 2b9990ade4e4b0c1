package tracer_test

import (
	"bufio"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/tracer"
	"golang.org/x/sys/unix"
)

// cLive waits in pause() at the end of a chain with a function inlined
// in it, after saying it is there.
const cLive = `#include <stdio.h>
#include <unistd.h>
volatile int sink;
__attribute__((noinline)) void leaf(void) { printf("ready\n"); fflush(stdout); for (;;) pause(); }
static inline __attribute__((always_inline)) void inl(int n) { sink = n; leaf(); sink++; }
__attribute__((noinline)) void middle(int n) { inl(n * 2); sink--; }
__attribute__((noinline)) void outer(int n) { middle(n + 1); sink -= 3; }
int main(int c, char **v) { outer(c); return sink; }
`

// captureThread stops thread pid with ptrace as a tracer would, and
// returns its registers and the bytes of its stack from the stack
// pointer up (at most max).
func captureThread(t testing.TB, pid int, max int) (*arch.Regs, []byte) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.NoError(t, unix.PtraceSeize(pid))
	defer unix.PtraceDetach(pid)
	require.NoError(t, unix.PtraceInterrupt(pid))
	var ws unix.WaitStatus
	_, err := unix.Wait4(pid, &ws, unix.WALL, nil)
	require.NoError(t, err)
	var r unix.PtraceRegs
	require.NoError(t, unix.PtraceGetRegs(pid, &r))
	regs := new(arch.Regs)
	for name, v := range map[string]uint64{"rax": r.Rax, "rdx": r.Rdx, "rcx": r.Rcx, "rbx": r.Rbx, "rsi": r.Rsi, "rdi": r.Rdi,
		"rbp": r.Rbp, "rsp": r.Rsp, "r8": r.R8, "r9": r.R9, "r10": r.R10, "r11": r.R11, "r12": r.R12, "r13": r.R13,
		"r14": r.R14, "r15": r.R15, "rip": r.Rip} {
		n, ok := arch.AMD64.RegByName(name)
		require.True(t, ok, name)
		regs.Set(n, v)
	}
	mem, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mem")
	require.NoError(t, err)
	defer mem.Close()
	stack := make([]byte, max)
	n, _ := mem.ReadAt(stack, int64(r.Rsp)) // stops at the end of the stack mapping
	if n == 0 {
		// Short reads at the top of the stack: page by page.
		for n < max {
			k, err := mem.ReadAt(stack[n:n+4096-int((r.Rsp+uint64(n))%4096)], int64(r.Rsp)+int64(n))
			n += k
			if err != nil {
				break
			}
		}
	}
	require.NotZero(t, n, "no stack bytes read at %#x", r.Rsp)
	return regs, stack[:n]
}

// liveCapture runs cLive, captures its thread in pause() and returns its
// pid, a Tracer (closed at the end of the test) with the process read.
func liveCapture(t testing.TB) (int, *tracer.Tracer, *tracer.Process, *arch.Regs, []byte) {
	t.Helper()
	return liveCaptureWith(t, tracer.Options{Warn: func(msg string) { t.Logf("warning: %s", msg) }})
}

// liveCaptureWith is liveCapture with a Tracer of opts.
func liveCaptureWith(t testing.TB, opts tracer.Options) (int, *tracer.Tracer, *tracer.Process, *arch.Regs, []byte) {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Skip("the capture is x86_64's ptrace registers")
	}
	bin := testprog.Build(t, t.TempDir(), "live.c", cLive, "-O2", "-g")
	cmd := testprog.StartPaused(t, "ready", 34, bin)
	pid := cmd.Process.Pid
	regs, stack := captureThread(t, pid, 32<<10)
	tr := tracer.New(opts)
	t.Cleanup(func() { tr.Close() })
	p, err := tr.Process(pid)
	require.NoError(t, err)
	return pid, tr, p, regs, stack
}

// TestLiveProcessAsGDB unwinds a stack captured with ptrace in a live
// process through the front door and compares its frames with gdb's
// backtrace of the same stopped process, function by function, inline
// frames included; then checks the warm path allocates nothing.
func TestLiveProcessAsGDB(t *testing.T) {
	pid, tr, p, regs, stack := liveCapture(t)
	w := tr.NewWalker()
	st := w.Unwind(p, regs, stack)
	var got []string
	for _, f := range st.Frames {
		got = append(got, f.Symbol)
	}
	want := testprog.GDBFunctions(t, "-p", strconv.Itoa(pid))
	assert.Equal(t, want, got)
	assert.Equal(t, "outermost", st.Stop.String(), "%v", st.Err)
	for _, f := range st.Frames {
		if f.Symbol == "inl" {
			assert.True(t, f.Inlined)
			assert.True(t, strings.HasSuffix(f.File, "live.c"))
		}
	}

	if n := testing.AllocsPerRun(100, func() { w.Unwind(p, regs, stack) }); n != 0 {
		t.Errorf("the warm path allocated %.1f times per stack", n)
	}
	// Normalizing and symbolizing normalized addresses, warm.
	addrs := []uint64{st.Frames[0].Addr, st.Frames[len(st.Frames)-1].Addr}
	ns := p.Normalize(nil, addrs...)
	w.SymbolizeNormalized(ns[0])
	w.SymbolizeNormalized(ns[1])
	if n := testing.AllocsPerRun(100, func() {
		ns = p.Normalize(ns[:0], addrs...)
		w.SymbolizeNormalized(ns[0])
		w.SymbolizeNormalized(ns[1])
		w.Symbolize(p, addrs[0])
	}); n != 0 {
		t.Errorf("normalizing and symbolizing allocated %.1f times", n)
	}
}

// cLate maps its library after it was told to go on (after the tracer
// read its maps), and waits in pause() in the library.
const cLate = `#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>
int main(int c, char **v) {
	char b;
	printf("started\n"); fflush(stdout);
	if (read(0, &b, 1) != 1) return 1;
	void *h = dlopen(v[1], RTLD_NOW);
	if (!h) return 2;
	void (*f)(void) = (void (*)(void))dlsym(h, "late_leaf");
	f();
	return 0;
}
`

const cLateLib = `#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) void late_leaf(void) { printf("ready\n"); fflush(stdout); for (;;) pause(); }
`

// TestLiveProcessMapsNew: a library mapped after the tracer read the
// process's maps is found when a stack runs through it (the maps are read
// again), and the stack equals gdb's.
func TestLiveProcessMapsNew(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the capture is x86_64's ptrace registers")
	}
	dir := t.TempDir()
	lib := testprog.Build(t, dir, "late.c", cLateLib, "-O2", "-g", "-shared", "-fPIC", "-o", dir+"/liblate.so")
	bin := testprog.Build(t, dir, "main.c", cLate, "-O2", "-g", "-ldl")
	cmd := exec.Command(bin, lib)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	r := bufio.NewReader(out)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "started\n", line)

	tr := tracer.New(tracer.Options{})
	defer tr.Close()
	pid := cmd.Process.Pid
	p, err := tr.Process(pid)
	require.NoError(t, err)
	for i := 0; i < p.Space().AddressSpace().Len(); i++ {
		require.NotContains(t, p.Space().AddressSpace().Mapping(i).Name, "liblate", "mapped before it was told to go on")
	}
	_, err = in.Write([]byte{1})
	require.NoError(t, err)
	line, err = r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	testprog.WaitSyscall(t, pid, 34)
	regs, stack := captureThread(t, pid, 32<<10)
	st := tr.NewWalker().Unwind(p, regs, stack)
	var got []string
	for _, f := range st.Frames {
		got = append(got, f.Symbol)
	}
	assert.Equal(t, testprog.GDBFunctions(t, "-p", strconv.Itoa(pid)), got)
	assert.Contains(t, got, "late_leaf")
}

// TestWalkersShareATracer: Walkers on several goroutines, one Tracer,
// one process: every stack equals the first (run with -race).
func TestWalkersShareATracer(t *testing.T) {
	_, tr, p, regs, stack := liveCapture(t)
	var want []string
	for _, f := range tr.NewWalker().Unwind(p, regs, stack).Frames {
		want = append(want, f.Symbol)
	}
	errs := make(chan string, 4)
	for g := 0; g < 4; g++ {
		go func() {
			w := tr.NewWalker()
			for i := 0; i < 200; i++ {
				st := w.Unwind(p, regs, stack)
				if len(st.Frames) != len(want) {
					errs <- "frames differ"
					return
				}
				for k, f := range st.Frames {
					if f.Symbol != want[k] {
						errs <- f.Symbol + " != " + want[k]
						return
					}
				}
				if i%50 == 0 {
					p.Refresh()
				}
			}
			errs <- ""
		}()
	}
	for g := 0; g < 4; g++ {
		assert.Empty(t, <-errs)
	}
}

// TestLiveProcessInMountNamespace: a process in a mount namespace of its
// own (a container's case) whose libc is another build bind-mounted at the
// host libc's path: its objects are read through /proc/PID/root, so its
// libc frames normalize to that libc's build-id (readelf), not the host's.
func TestLiveProcessInMountNamespace(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the capture is x86_64's ptrace registers")
	}
	if os.Geteuid() != 0 {
		t.Skip("a mount namespace and a bind mount need root")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1) (Debian package util-linux)")
	}
	bin := testprog.Build(t, t.TempDir(), "live.c", cLive, "-O2", "-g")
	root, libc := testprog.ChrootRoot(t, bin)
	cmd := testprog.StartPaused(t, "ready", 34, unshare, "-m", "--propagation", "private", "sh", "-c",
		"mount --bind "+filepath.Join(root, libc)+" "+libc+" && exec "+bin)
	pid := cmd.Process.Pid
	regs, stack := captureThread(t, pid, 32<<10)
	tr := tracer.New(tracer.Options{})
	defer tr.Close()
	p, err := tr.Process(pid)
	require.NoError(t, err)
	st := tr.NewWalker().Unwind(p, regs, stack)
	var got []string
	var libcFrame *tracer.Frame
	for i, f := range st.Frames {
		got = append(got, f.Symbol)
		if strings.HasSuffix(f.Module, filepath.Base(libc)) && libcFrame == nil {
			libcFrame = &st.Frames[i]
		}
	}
	assert.True(t, testprog.HasChain(got, []string{"leaf", "inl", "middle", "outer", "main"}), "%q", got)
	require.NotNil(t, libcFrame, "no frame in %s: %q", libc, got)
	n := p.Normalize(nil, libcFrame.Addr)[0]
	assert.Equal(t, testprog.BuildID(t, filepath.Join(root, libc)), hex.EncodeToString(n.BuildID), "the namespace's libc")
	assert.NotEqual(t, testprog.BuildID(t, libc), hex.EncodeToString(n.BuildID), "the host's libc")
}

// TestForgetReleasesObjects: with a budget, the objects of a process are
// closed once it is forgotten, its stack having been right before; the
// forgotten Process gives no frames.
func TestForgetReleasesObjects(t *testing.T) {
	pid, tr, p, regs, stack := liveCaptureWith(t, tracer.Options{CacheBudget: 1})
	w := tr.NewWalker()
	var got []string
	for _, f := range w.Unwind(p, regs, stack).Frames {
		got = append(got, strings.Clone(f.Symbol))
	}
	assert.True(t, testprog.HasChain(got, []string{"leaf", "inl", "middle", "outer", "main"}), "%q", got)
	st := tr.CacheStats()
	assert.Positive(t, st.Objects)
	assert.Equal(t, st.Objects, st.InUse, "%+v", st)
	assert.Greater(t, st.HeldBytes, st.Budget, "the objects in use are kept over the budget")
	// An inlined frame's name comes from the DWARF the object parsed
	// (the heap): after the object is closed, the Walker must not keep
	// it alive (its Symbolizer's memo, its last frames).
	var inlined weak.Pointer[byte]
	for _, f := range w.Unwind(p, regs, stack).Frames {
		if f.Inlined && inlined.Value() == nil {
			inlined = weak.Make(unsafe.StringData(f.Symbol))
		}
	}
	require.NotNil(t, inlined.Value(), "no inlined frame")
	tr.Forget(pid)
	st = tr.CacheStats()
	assert.Zero(t, st.Objects, "%+v", st)
	assert.Positive(t, st.Evictions)
	s := w.Unwind(p, regs, stack)
	assert.Empty(t, s.Frames)
	assert.ErrorIs(t, s.Err, tracer.ErrForgotten)
	runtime.GC()
	assert.Nil(t, inlined.Value(), "the Walker keeps the names of a closed object alive")
	// The pid read again: its objects opened again, the same stack.
	p, err := tr.Process(pid)
	require.NoError(t, err)
	var again []string
	for _, f := range w.Unwind(p, regs, stack).Frames {
		again = append(again, f.Symbol)
	}
	assert.Equal(t, got, again)
	assert.Positive(t, tr.CacheStats().Reopens)
}

// TestLiveProcessDeletedProgram: the program's file was deleted while it
// ran and another build put at its path (a service upgraded under a
// running process: its maps say "PATH (deleted)"). The tracer reads the
// code through /proc/PID/map_files, and the stack equals gdb's backtrace
// of the same stop taken before the file was deleted (after, gdb prints
// ?? for the program's frames); the build now at the path names nothing.
func TestLiveProcessDeletedProgram(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the capture is x86_64's ptrace registers")
	}
	if os.Geteuid() != 0 {
		t.Skip("reading /proc/PID/map_files needs CAP_SYS_ADMIN")
	}
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "live.c", cLive, "-O2", "-g")
	other := testprog.Build(t, t.TempDir(), "live.c", strings.ReplaceAll(cLive, "volatile int sink;", "volatile int sink; int pad_function(int x) { return x * 7 + sink; }"), "-O0", "-g")
	cmd := testprog.StartPaused(t, "ready", 34, bin)
	pid := cmd.Process.Pid
	// gdb's backtrace while the file is there (with it gone, gdb prints
	// ?? for the program's frames); the program then waits in pause()
	// again, on the same stack.
	want := testprog.GDBFunctions(t, "-p", strconv.Itoa(pid))
	testprog.WaitSyscall(t, pid, 34)
	require.NoError(t, os.Remove(bin))
	data, err := os.ReadFile(other)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, data, 0o755))
	maps, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
	require.NoError(t, err)
	require.Contains(t, string(maps), bin+" (deleted)")

	regs, stack := captureThread(t, pid, 32<<10)
	tr := tracer.New(tracer.Options{Warn: func(msg string) { t.Logf("warning: %s", msg) }})
	defer tr.Close()
	p, err := tr.Process(pid)
	require.NoError(t, err)
	st := tr.NewWalker().Unwind(p, regs, stack)
	var got []string
	for _, f := range st.Frames {
		got = append(got, f.Symbol)
	}
	assert.Equal(t, want, got)
	assert.Contains(t, got, "outer")
	assert.NotContains(t, got, "pad_function")
	assert.Equal(t, "outermost", st.Stop.String(), "%v", st.Err)
}
