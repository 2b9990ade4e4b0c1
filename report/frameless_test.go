package report

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

// spawnSrc starts a thread two calls down from main.
const spawnSrc = `#include <pthread.h>
static void *worker(void *a) { return a; }
__attribute__((noinline)) void spawn(void) {
	pthread_t t;
	pthread_create(&t, 0, worker, 0);
	pthread_join(t, 0);
	__asm__ volatile("");
}
int main(void) { spawn(); return 0; }
`

// TestFramelessClone3MatchesGDB: glibc's clone3 gives its instructions
// from the system call on no CFI (the child's unwind would be wrong), so a
// sample at the clone3 system call (its tracepoint) ended at clone3,
// no_unwind_info, where gdb, stopped at the same system call, shows the
// whole stack. clone3 pushes nothing: its return address is the word at
// its SP, after a call to clone3 itself, and the report now takes it (how
// frameless): the same pcs as gdb's, frame for frame, to _start.
func TestFramelessClone3MatchesGDB(t *testing.T) {
	requirePerf(t)
	testprog.NeedTracefs(t, "syscalls/sys_enter_clone3")
	dir := t.TempDir()
	bin := build(t, dir, "spawn", spawnSrc, "-O2", "-g", "-pthread")

	want := gdbAtSyscall(t, dir, "clone3", bin)
	require.Equal(t, "clone3", strings.TrimLeft(want[0].name, "_"), "gdb stopped in clone3: %s", describeGDB(want))

	// Without address space randomization, as gdb runs it: the same
	// addresses.
	setarch := testprog.Tool(t, "", "uname", "-m")
	data := testprog.Record(t, filepath.Join(dir, "clone3.data"), "-e", "syscalls:sys_enter_clone3", "--call-graph", "dwarf", "--",
		"setarch", strings.TrimSpace(setarch), "-R", bin)
	_, js, _, _, _ := runAll(t, data, Options{BuildIDDir: t.TempDir(), NoTailCall: true})
	samples := testprog.JSONLines[coreSample](t, js)
	require.Len(t, samples, 1, "one clone3 system call")
	s := samples[0]
	pcs, hows := userFrames(t, s)
	var wantPCs []uint64
	for _, f := range want {
		wantPCs = append(wantPCs, f.pc)
	}
	t.Logf("gdb:    %s", describeGDB(want))
	assert.Equal(t, hexList(wantPCs), hexList(pcs), "the stack at clone3's system call against gdb's (stop %s %s)", str(s.Stop), str(s.StopErr))
	assert.Equal(t, "outermost", str(s.Stop), str(s.StopErr))
	require.GreaterOrEqual(t, len(hows), 2)
	assert.Equal(t, "frameless", hows[1], "clone3's caller, from the word at its SP")
}

// TestCloneChildFirstFrame: clone3's return tracepoint fires twice for a
// thread: in the parent, where rax holds the new thread's id, and in the
// new thread at its first instruction, with rax 0, on its new stack, of
// which the kernel copies nothing (the stack pointer is at its top). The
// parent's stack goes on through spawn to main, outermost. The child's is
// clone3 alone, and that is all of it: the kernel started the thread
// there. Before, the walk found nothing above clone3 (no stack bytes to
// read a caller from, and no CFI past the system call) and ended
// truncated, the stack called incomplete; perf script shows clone3 alone.
func TestCloneChildFirstFrame(t *testing.T) {
	requirePerf(t)
	testprog.NeedTracefs(t, "syscalls/sys_exit_clone3")
	dir := t.TempDir()
	bin := build(t, dir, "spawn", spawnSrc, "-O2", "-g", "-pthread")
	data := testprog.Record(t, filepath.Join(dir, "clone3.data"), "-e", "syscalls:sys_exit_clone3", "--call-graph", "dwarf", "--", bin)
	_, js, _, _, _ := runAll(t, data, Options{BuildIDDir: t.TempDir(), NoTailCall: true})
	samples := testprog.JSONLines[coreSample](t, js)
	require.Len(t, samples, 2, "clone3 returns twice: in the parent and in the thread")
	for _, s := range samples {
		var user []string
		for _, f := range s.Frames {
			if !f.Inlined && f.How != "kernel" && f.Symbol != nil {
				user = append(user, strings.TrimLeft(*f.Symbol, "_"))
			}
		}
		require.NotEmpty(t, user, "tid %d", s.Tid)
		assert.Equal(t, "clone3", user[0], "tid %d: %v", s.Tid, user)
		assert.Equal(t, "outermost", str(s.Stop), "tid %d: %v (%s)", s.Tid, user, str(s.StopErr))
		if s.Tid == s.Pid {
			i := slices.Index(user, "spawn")
			assert.True(t, i > 0 && i+1 < len(user) && user[i+1] == "main", "the parent's stack %v: clone3 ... spawn, main", user)
		} else {
			assert.Equal(t, []string{"clone3"}, user, "the new thread's stack")
		}
	}
}

// destructorSrc has a destructor without CFI that makes a system call: the
// dynamic loader's _dl_call_fini calls it through the executable's
// .fini_array (call *(%rbx), %rbx at the slot).
const destructorSrc = `#include <unistd.h>
static volatile int sink;
__attribute__((destructor)) static void fin(void) { sink = getppid(); }
int main(void) { return 0; }
`

// TestDestructorCallerMatchesGDB: a program's destructor built without
// CFI, stopped at the system call it makes at exit. Its caller, found by
// the prologue analysis, is glibc's _dl_call_fini, whose call reads its
// target from the executable's .fini_array: a call through memory, which
// proved nothing, so every stack through a destructor or constructor
// without CFI (crtstuff's __do_global_dtors_aux and frame_dummy, in every
// program and library; 1,477 of 100,332 samples of a shell loop's exits)
// was fp_guess, never complete. The slot the call read (from %rbx, which
// the destructor keeps) holds the destructor's address in the file: the
// call went to it. gdb, without CFI for the destructor, shows nothing past
// it (a caller at pc 0); built with CFI (the same code: .eh_frame follows
// .text), it shows the whole stack. ustack's stack of the program without
// that CFI is gdb's of the one with it, frame for frame, and outermost; so
// too with the program stripped, where only the .fini_array shows where
// the destructor begins.
func TestDestructorCallerMatchesGDB(t *testing.T) {
	requirePerf(t)
	testprog.NeedTracefs(t, "syscalls/sys_enter_getppid")
	dir := t.TempDir()
	bin := build(t, dir, "dtor", destructorSrc, "-O2", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-fomit-frame-pointer")
	withCFI := build(t, dir, "dtor-cfi", destructorSrc, "-O2", "-fasynchronous-unwind-tables", "-fomit-frame-pointer")
	require.Equal(t, sectionData(t, withCFI, ".text"), sectionData(t, bin, ".text"), "the same code with and without CFI")
	require.Equal(t, sectionData(t, withCFI, ".fini_array"), sectionData(t, bin, ".fini_array"), "the same destructors")
	stripped := filepath.Join(dir, "dtor-stripped")
	testprog.Tool(t, "", "strip", "-o", stripped, bin)

	want := gdbAtSyscall(t, dir, "getppid", withCFI)
	var wantPCs []uint64
	for _, f := range want {
		wantPCs = append(wantPCs, f.pc)
	}
	require.GreaterOrEqual(t, len(wantPCs), 5, "gdb: %s", describeGDB(want))
	t.Logf("gdb:    %s", describeGDB(want))

	setarch := strings.TrimSpace(testprog.Tool(t, "", "uname", "-m"))
	for _, prog := range []string{bin, stripped} {
		t.Run(filepath.Base(prog), func(t *testing.T) {
			// Without address space randomization, as gdb runs it:
			// the same addresses (strip moves no code).
			data := testprog.Record(t, filepath.Join(dir, filepath.Base(prog)+".data"), "-e", "syscalls:sys_enter_getppid", "--call-graph", "dwarf", "--",
				"setarch", setarch, "-R", prog)
			_, js, _, _, _ := runAll(t, data, Options{BuildIDDir: t.TempDir(), NoTailCall: true})
			samples := testprog.JSONLines[coreSample](t, js)
			require.Len(t, samples, 1, "one getppid system call")
			s := samples[0]
			pcs, hows := userFrames(t, s)
			assert.Equal(t, hexList(wantPCs), hexList(pcs), "the stack at the destructor's system call against gdb's (stop %s %s)", str(s.Stop), str(s.StopErr))
			assert.Equal(t, "outermost", str(s.Stop), str(s.StopErr))
			require.GreaterOrEqual(t, len(hows), 3)
			assert.Contains(t, []string{"prologue", "frameless"}, hows[2], "the destructor's caller, by its code")
		})
	}
}

// gdbAtSyscall runs bin under gdb (after its commands) to its first system
// call named syscall and returns the frames gdb shows there, inline and
// tail-call ones (DWARF call sites, which NoTailCall leaves out) left out.
func gdbAtSyscall(t *testing.T, dir, syscall, bin string, commands ...string) []gdbFrame {
	t.Helper()
	if _, err := exec.LookPath("gdb"); err != nil {
		t.Skip("gdb is not installed (Debian package gdb)")
	}
	py := filepath.Join(dir, "frames.py")
	require.NoError(t, os.WriteFile(py, []byte(gdbFramesPy), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), testprog.Timeout)
	defer cancel()
	args := []string{"-nx", "-batch", "-ex", "set debuginfod enabled off", "-ex", "set backtrace past-main on"}
	for _, c := range commands {
		args = append(args, "-ex", c)
	}
	args = append(args, "-ex", "catch syscall "+syscall, "-ex", "run", "-x", py, "--args", bin)
	cmd := exec.CommandContext(ctx, "gdb", args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "gdb: %s", out)
	var frames []gdbFrame
	for _, f := range parseGDBFrames(t, out) {
		if f.kind != "inline" && f.kind != "tailcall" {
			frames = append(frames, f)
		}
	}
	require.NotEmpty(t, frames, "gdb: %s", out)
	return frames
}

// userFrames returns the pcs and hows of a sample's user frames, inline
// ones left out.
func userFrames(t *testing.T, s coreSample) (pcs []uint64, hows []string) {
	t.Helper()
	for _, f := range s.Frames {
		if !f.Inlined && f.How != "kernel" {
			pcs = append(pcs, hexAddr(t, f.PC))
			hows = append(hows, f.How)
		}
	}
	return pcs, hows
}

// sectionData returns the contents of the named section of the ELF file path.
func sectionData(t *testing.T, path, name string) []byte {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	s := f.Section(name)
	require.NotNil(t, s, "%s: no %s", path, name)
	b, err := s.Data()
	require.NoError(t, err)
	return b
}

// sigreturnSrc returns from a signal handler five times, in loop.
const sigreturnSrc = `#include <signal.h>
static volatile int n;
static void h(int s) { n++; }
__attribute__((noinline)) void loop(void) { for (int i = 0; i < 5; i++) raise(SIGUSR1); }
int main(void) { signal(SIGUSR1, h); loop(); return n == 5 ? 0 : 1; }
`

// TestSigreturnEntryMatchesGDB: at rt_sigreturn's entry (its tracepoint:
// a tracer of every system call meets one at each signal handler's
// return) the PC is after the system call, which ends glibc's
// __restore_rt and its CFI: every such stack stopped there,
// no_unwind_info (perf script shows __restore_rt alone). The row at the
// system call applies: the signal frame it is about to restore gives the
// interrupted frames, gdb's, frame for frame, outermost.
func TestSigreturnEntryMatchesGDB(t *testing.T) {
	requirePerf(t)
	testprog.NeedTracefs(t, "syscalls/sys_enter_rt_sigreturn")
	dir := t.TempDir()
	bin := build(t, dir, "sigret", sigreturnSrc, "-O2", "-g")
	want := gdbAtSyscall(t, dir, "rt_sigreturn", bin, "handle SIGUSR1 nostop noprint pass")
	t.Logf("gdb:    %s", describeGDB(want))
	var wantPCs []uint64
	for _, f := range want {
		wantPCs = append(wantPCs, f.pc)
	}
	setarch := strings.TrimSpace(testprog.Tool(t, "", "uname", "-m"))
	data := testprog.Record(t, filepath.Join(dir, "sigret.data"), "-e", "syscalls:sys_enter_rt_sigreturn", "--call-graph", "dwarf", "--",
		"setarch", setarch, "-R", bin)
	_, js, _, _, _ := runAll(t, data, Options{BuildIDDir: t.TempDir(), NoTailCall: true})
	samples := testprog.JSONLines[coreSample](t, js)
	require.Len(t, samples, 5, "five returns from the handler")
	for i, s := range samples {
		pcs, _ := userFrames(t, s)
		if i == 0 {
			assert.Equal(t, hexList(wantPCs), hexList(pcs), "the first return's stack against gdb's (stop %s %s)", str(s.Stop), str(s.StopErr))
		}
		assert.Equal(t, "outermost", str(s.Stop), "sample %d: %s", i, str(s.StopErr))
		assert.Len(t, pcs, len(wantPCs), "sample %d", i)
	}
}

// TestSigreturnEntryMusl: musl's __restore_rt has no CFI; at its system
// call's entry it is known by its code ending at the PC (mov $15,%rax;
// syscall). Its signal frame gives the interrupted frames: raise, loop,
// main (gdb shows nothing past the trampoline there: a caller at pc 7).
// musl's libc has no CFI, so the stack is reached through guesses
// (fp_guess), never stopped at the trampoline (no_unwind_info, as before).
func TestSigreturnEntryMusl(t *testing.T) {
	requirePerf(t)
	testprog.NeedTracefs(t, "syscalls/sys_enter_rt_sigreturn")
	if _, err := exec.LookPath("musl-gcc"); err != nil {
		t.Skip("musl-gcc is not installed (Debian package musl-tools)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "sigret.c")
	require.NoError(t, os.WriteFile(src, []byte(sigreturnSrc), 0o644))
	bin := filepath.Join(dir, "sigret")
	testprog.Tool(t, dir, "musl-gcc", "-O2", "-g", "-o", bin, src)
	data := testprog.Record(t, filepath.Join(dir, "sigret.data"), "-e", "syscalls:sys_enter_rt_sigreturn", "--call-graph", "dwarf", "--", bin)
	_, js, _, _, _ := runAll(t, data, Options{BuildIDDir: t.TempDir(), NoTailCall: true})
	samples := testprog.JSONLines[coreSample](t, js)
	require.Len(t, samples, 5, "five returns from the handler")
	for i, s := range samples {
		var names, hows []string
		for _, f := range s.Frames {
			if !f.Inlined && f.How != "kernel" {
				name := ""
				if f.Symbol != nil {
					name = *f.Symbol
				}
				names, hows = append(names, name), append(hows, f.How)
			}
		}
		require.GreaterOrEqual(t, len(hows), 5, "sample %d: %q (stop %s %s)", i, names, str(s.Stop), str(s.StopErr))
		assert.Equal(t, "signal", hows[1], "sample %d: the interrupted frame, from the signal frame: %q", i, names)
		k := slices.Index(names, "raise")
		assert.True(t, k >= 2 && k+2 < len(names) && names[k+1] == "loop" && names[k+2] == "main", "sample %d: %q", i, names)
		assert.Contains(t, []string{"outermost", "fp_guess"}, str(s.Stop), "sample %d: %s", i, str(s.StopErr))
	}
}
