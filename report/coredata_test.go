package report

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/coretruth"
	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/resolve"
)

// mapDataSrc maps the data file $DATA read-only (as glibc maps locale
// archives and gconv's module cache) and crashes with it mapped.
const mapDataSrc = `#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
volatile const char *table;
__attribute__((noipa)) void boom(char *p) { strcpy(p, (const char *)table); }
__attribute__((noipa)) void load(const char *path) {
	int fd = open(path, O_RDONLY);
	if (fd < 0) abort();
	table = mmap(0, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
	if (table == MAP_FAILED) abort();
	boom(NULL);
}
int main(int c, char **v) { load(getenv("DATA")); return 0; }
`

// TestCoreDataFileMappingIsNotCode: gdb's core (like gcore's) has no
// segment for a file mapped read-only and not written, so the core does
// not say whether the mapping is code. A file that is not ELF is data: the
// report must not list it among the objects without unwind or symbol
// information, and the stack is gdb's.
func TestCoreDataFileMappingIsNotCode(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "table.dat")
	require.NoError(t, os.WriteFile(data, bytes.Repeat([]byte("a data file, not code\n"), 400), 0o644))
	bin := testprog.Build(t, dir, "mapdata.c", mapDataSrc, "-O1", "-g")
	gdbFrames, core := crashUnderGDB(t, dir, bin, "DATA="+data)

	opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}}
	c, err := OpenCore(core, opts)
	require.NoError(t, err)
	mapped := false
	for _, m := range c.Mappings {
		mapped = mapped || m.Path == data
	}
	c.Close()
	require.True(t, mapped, "the core's NT_FILE lists %s", data)

	_, sum := coreReport(t, core, "text", opts)
	assert.NotContains(t, sum.Missing, data, "a data file is not an object without unwind information")
	for p, why := range sum.Missing {
		assert.NotContains(t, why, "not a valid ELF file", "%s is not ELF: data, not a missing object", p)
	}
	assertFramesMatchGDB(t, gdbFrames, reportFrames(t, core, opts))

	var info strings.Builder
	c, err = OpenCore(core, opts)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, WriteCoreInfo(&info, c, opts))
	assert.Contains(t, info.String(), data+" at ", "--core-info lists the mapped file")
	assert.Contains(t, info.String(), "not used (a data file, not an ELF object)")
}

// jitCrashSrc calls cb through a frame-pointer trampoline it writes into
// anonymous executable memory, as a JIT does; cb crashes.
const jitCrashSrc = `#include <string.h>
#include <sys/mman.h>
static volatile int sink;
__attribute__((noinline)) void cb(void) { *(volatile int *)(long)sink = 1; sink++; }
int main(int argc, char **argv) {
	/* push %rbp; mov %rsp,%rbp; call *%rdi; pop %rbp; ret */
	static const unsigned char code[] = {0x55, 0x48, 0x89, 0xe5, 0xff, 0xd7, 0x5d, 0xc3};
	unsigned char *p = mmap(0, 4096, PROT_READ|PROT_WRITE|PROT_EXEC, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
	memcpy(p, code, sizeof code);
	((void (*)(void (*)(void)))p)(cb);
	return 0;
}
`

// TestCoreJITFrameInAnonymousMemory: NT_FILE lists only file-backed
// memory, so JIT code (node's, the JVM's) is in no mapping the core names;
// its executable PT_LOAD is. A thread stopped under JIT code is unwound
// through it by its frame pointer, as eu-stack does, instead of ending at
// the JIT frame's return address with no_mapping. (gdb, without a symbol
// for the JIT code, takes the saved frame pointer for a return address and
// prints a frame that is not one: it is compared where it is right.)
func TestCoreJITFrameInAnonymousMemory(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the trampoline is x86_64 code")
	}
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "jit.c", jitCrashSrc, "-O2", "-g", "-fno-omit-frame-pointer")
	gdbFrames, core := crashUnderGDB(t, dir, bin)
	opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}}
	got := reportFrames(t, core, opts)
	t.Logf("gdb:    %s", describeGDB(gdbFrames))
	t.Logf("ustack: %s", describeFrames(got))
	require.GreaterOrEqual(t, len(got), 3, "cb, the JIT frame, main")
	assert.Equal(t, "cb", gdbFrames[0].name)
	assert.Equal(t, "cb", got[0].Symbol)
	assert.Equal(t, gdbFrames[0].pc, got[0].PC, "cb's pc")
	jit := got[1]
	assert.Equal(t, "//anon", jit.Module, "the JIT frame's mapping")
	assert.Equal(t, jit.Addr, jit.Offset, "anonymous memory's offset is its address, as perf prints it")
	assert.Equal(t, "main", got[2].Symbol)
	assert.Equal(t, resolve.HowFramePointer, got[2].How, "no CFI in JIT code: its caller by the frame pointer rule")
	assert.Equal(t, gdbFrames[len(gdbFrames)-1].name, "main")
	assert.Equal(t, gdbFrames[len(gdbFrames)-1].pc, got[2].PC, "main's pc")
	if eu := euStackFrames(t, core, bin, nil); eu != nil {
		assert.Equal(t, strings.Join(eu, " "), describeFrames(got), "eu-stack")
	}

	// --core-info shows the memory the JIT frame is in.
	var info strings.Builder
	c, err := OpenCore(core, opts)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, WriteCoreInfo(&info, c, opts))
	listed := false
	for _, line := range strings.Split(info.String(), "\n") {
		var lo, hi uint64
		if n, _ := fmt.Sscanf(line, "  %x-%x //anon", &lo, &hi); n == 2 && lo <= jit.PC && jit.PC < hi {
			listed = true
		}
	}
	assert.True(t, listed, "--core-info lists the anonymous memory holding %#x:\n%s", jit.PC, info.String())
}

// pauseSrc waits in pause() until killed.
const pauseSrc = `#include <unistd.h>
__attribute__((noinline)) void wait_here(void) { for (;;) pause(); }
int main(void) { wait_here(); }
`

// TestCoreDeletedMappedFile: a program whose file was deleted while it ran
// (replaced by a package upgrade, or rebuilt and put back) is mapped as
// "PATH (deleted)" in the core's NT_FILE. The file now at PATH is the one
// when its build-id is the core's: the stack is gdb's (given the file),
// nothing is missing; a file of another build there is refused.
func TestCoreDeletedMappedFile(t *testing.T) {
	if _, err := exec.LookPath("gcore"); err != nil {
		t.Skip("gcore is not installed (Debian package gdb)")
	}
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "paused.c", pauseSrc, "-O2", "-g")
	keep := bin + ".keep"
	data, err := os.ReadFile(bin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(keep, data, 0o755))
	cmd := exec.Command(bin)
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	waitSleeping(t, cmd.Process.Pid)
	// Deleted and put back: a new file at the path, the same build.
	require.NoError(t, os.Remove(bin))
	require.NoError(t, os.WriteFile(bin, data, 0o755))
	core := gcoreOf(t, dir, cmd)

	opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}}
	c, err := OpenCore(core, opts)
	require.NoError(t, err)
	deleted := false
	for _, m := range c.Mappings {
		deleted = deleted || m.Path == bin+" (deleted)"
	}
	c.Close()
	require.True(t, deleted, "the core maps %s (deleted)", bin)

	gdbFrames := gdbCoreFrames(t, dir, bin, core)
	_, sum := coreReport(t, core, "text", opts)
	assert.Empty(t, sum.Missing, "the file at the path is the deleted one's build")
	assertFramesMatchGDB(t, gdbFrames, reportFrames(t, core, opts))

	// Another build at the path is refused, naming both build-ids.
	testprog.Build(t, dir, "paused.c", pauseSrc+"int other;\n", "-O2", "-g", "-Wl,--build-id=sha1")
	var warnings []string
	opts.Warn = func(s string) { warnings = append(warnings, s) }
	_, sum = coreReport(t, core, "text", opts)
	assert.Contains(t, sum.Missing[bin+" (deleted)"], "build-id mismatch")
	assert.NotEmpty(t, warnings, "a mismatch is warned about")
}

// gcoreOf writes a core of the running cmd with gdb's gcore into dir,
// then kills cmd, and returns the core's path.
func gcoreOf(t *testing.T, dir string, cmd *exec.Cmd) string {
	t.Helper()
	core := filepath.Join(dir, "core")
	testprog.Tool(t, dir, "gcore", "-o", core, strconv.Itoa(cmd.Process.Pid))
	cmd.Process.Kill()
	cmd.Wait()
	return fmt.Sprintf("%s.%d", core, cmd.Process.Pid)
}

// waitSleeping waits until process pid sleeps (state S in /proc/PID/stat),
// for as long as a busy machine may take to start it (a minute at most).
func waitSleeping(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		asleep, err := statAsleep(fmt.Sprintf("/proc/%d/stat", pid))
		require.NoError(t, err)
		if asleep {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("process %d never slept", pid)
}

// statAsleep reports whether the task whose /proc stat file is path
// sleeps (state S).
func statAsleep(path string) (bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] == "S", nil
}

// crashSrc crashes two calls down from main.
const crashSrc = `volatile int *target;
__attribute__((noipa)) void boom(int n) { *target = n; }
__attribute__((noipa)) void mid(int n) { boom(n + 1); }
int main(int c, char **v) { mid(c); return 0; }
`

// TestCoreExeOverridesFileOfSameBuild: the core of a stripped program (as
// deployed) is reported with --exe naming the unstripped build, the same
// build-id: --exe is the program's object, not the stripped file still at
// the recorded path, and the frames are gdb's given that file. (--exe was
// used only where the recorded path had no file, silently ignored here.)
func TestCoreExeOverridesFileOfSameBuild(t *testing.T) {
	dir := t.TempDir()
	full := testprog.Build(t, dir, "crash.c", crashSrc, "-O2", "-g")
	stripped := full + ".stripped"
	testprog.Tool(t, dir, "strip", "-o", stripped, full)
	_, core := crashUnderGDB(t, dir, stripped)
	gdbFrames := gdbCoreFrames(t, dir, full, core)
	require.Equal(t, "boom", gdbFrames[0].name, "gdb names the frames from the unstripped build")

	opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}}
	before := reportFrames(t, core, opts)
	require.NotEmpty(t, before)
	assert.Empty(t, before[0].Symbol, "the stripped file has no symbol for boom: the test would show nothing")

	opts.Exe = full
	assertFramesMatchGDB(t, gdbFrames, reportFrames(t, core, opts))
	opts.ObjectSources = true
	_, sum := coreReport(t, core, "text", opts)
	found := false
	for _, o := range sum.Objects {
		if o.Path == stripped {
			found = true
			assert.Equal(t, resolve.FoundGiven, o.FoundIn, "where the program's object came from")
		}
	}
	assert.True(t, found, "the summary says where %s came from", stripped)
}

// deepSrc recurses 3000 calls deep before it crashes, as a runaway
// recursion does on its way to a stack overflow.
const deepSrc = `volatile int *target;
__attribute__((noinline)) int rec(int n) { volatile char buf[64]; buf[0] = n; if (n == 3000) *target = n; return rec(n + 1) + buf[0]; }
int main(void) { return rec(0); }
`

// TestCoreDeepStack: a stack deeper than the frame limit stops with depth
// and the summary says so and how to go deeper; with the limit raised the
// stack is gdb's, every one of its 3002 frames down to main.
func TestCoreDeepStack(t *testing.T) {
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "deep.c", deepSrc, "-O1", "-g")
	gdbFrames, core := crashUnderGDB(t, dir, bin)
	require.Len(t, gdbFrames, 3002, "rec 3001 times and main")

	opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}}
	_, sum := coreReport(t, core, "text", opts)
	assert.Equal(t, 1, sum.Stops["depth"], "the default limit (1024) cuts the stack")
	var b strings.Builder
	sum.WriteSummary(&b)
	assert.Contains(t, b.String(), "1 stacks reached the limit of 1024 frames and were cut there; --max-stack raises it")

	opts.MaxFrames = 5000
	_, sum = coreReport(t, core, "text", opts)
	assert.Zero(t, sum.Stops["depth"])
	got := reportFrames(t, core, opts)
	require.Len(t, got, len(gdbFrames), "frames against gdb's")
	for i, g := range gdbFrames {
		if g.name != plainName(got[i].Symbol) || g.pc != got[i].PC {
			t.Fatalf("frame %d: gdb %s@%#x, ustack %s@%#x", i, g.name, g.pc, got[i].Symbol, got[i].PC)
		}
	}
}

// ctorLibSrc is a shared library whose constructor waits in pause(): the
// program stops before main, in ld.so's _dl_init.
const ctorLibSrc = `#include <unistd.h>
__attribute__((noinline)) void lib_wait(void) { for (;;) pause(); }
__attribute__((constructor)) static void lib_init(void) { lib_wait(); }
int lib_value(void) { return 1; }
`

// TestCoreInLibraryConstructor: a process stopped in a shared library's
// constructor, which ld.so's entry code (_dl_start_user, no CFI, %rbp
// cleared to mark the outermost frame) called through _dl_init. Its stack
// is gdb's frame for frame down to _dl_start_user and ends there,
// outermost, with glibc's debug file (which names _dl_start_user) as
// without it. gdb walks on past _dl_start_user into the words of the
// process's initial stack (argc, argv[0], the NULL after argv): those are
// checked to be no code.
func TestCoreInLibraryConstructor(t *testing.T) {
	if _, err := exec.LookPath("gcore"); err != nil {
		t.Skip("gcore is not installed (Debian package gdb)")
	}
	dir := t.TempDir()
	testprog.Build(t, dir, "libctor.c", ctorLibSrc, "-O2", "-g", "-fPIC", "-shared")
	require.NoError(t, os.Rename(filepath.Join(dir, "libctor"), filepath.Join(dir, "libctor.so")))
	bin := testprog.Build(t, dir, "prog.c", "int lib_value(void);\nint main(void) { return lib_value(); }\n",
		"-O2", "-g", "-L"+dir, "-Wl,-rpath,"+dir, "-Wl,--no-as-needed", "-lctor")
	cmd := exec.Command(bin)
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	waitSleeping(t, cmd.Process.Pid)
	core := gcoreOf(t, dir, cmd)

	var want []gdbFrame
	var beyond []uint64
	for _, f := range gdbCoreFrames(t, dir, bin, core) {
		switch {
		case len(beyond) > 0 || (len(want) > 0 && want[len(want)-1].name == "_dl_start_user"):
			beyond = append(beyond, f.pc)
		case f.kind != "inline":
			want = append(want, f)
		}
	}
	require.NotEmpty(t, want)
	require.Equal(t, "lib_wait", want[1].name, "gdb: the thread waits in the constructor's callee")

	opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}}
	c, err := OpenCore(core, opts)
	require.NoError(t, err)
	defer c.Close()
	for _, pc := range beyond {
		assert.False(t, coretruth.InCode(c.Core, pc), "gdb's frame past _dl_start_user at %#x is no code", pc)
	}
	var got []Frame
	var stop, stopErr string
	_, err = RunCore(c, opts, func(s *Sample) error {
		for _, f := range s.Frames {
			if !f.Inlined && !f.Kernel {
				got = append(got, f)
			}
		}
		stop, stopErr = s.Stop, s.StopErr
		return nil
	})
	require.NoError(t, err)
	t.Logf("gdb:    %s (then %d words of the initial stack)", describeGDB(want), len(beyond))
	t.Logf("ustack: %s, %s %s", describeFrames(got), stop, stopErr)
	require.Len(t, got, len(want), "frames against gdb's")
	for i, g := range want {
		assert.Equal(t, fmt.Sprintf("%#x", g.pc), fmt.Sprintf("%#x", got[i].PC), "frame %d (%s) pc", i, g.name)
		if g.name != "" && got[i].Symbol != "" {
			assert.Equal(t, strings.TrimLeft(g.name, "_"), strings.TrimLeft(plainName(got[i].Symbol), "_"), "frame %d", i)
		}
	}
	assert.Equal(t, "outermost", stop, "the stack ends at ld.so's entry code: %s", stopErr)
}

// selfMapSrc maps a page of its own file past its loadable segments (a
// section the test adds) read-only, as a debugger maps the sections of the
// programs it debugs, then waits in pause().
const selfMapSrc = `#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>
volatile char sink;
__attribute__((noinline)) void wait_here(void) { for (;;) pause(); }
int main(void) {
	const ElfW(Phdr) *ph = (const ElfW(Phdr) *)getauxval(AT_PHDR);
	unsigned long n = getauxval(AT_PHNUM), end = 0;
	for (unsigned long i = 0; i < n; i++)
		if (ph[i].p_type == PT_LOAD && ph[i].p_offset + ph[i].p_filesz > end)
			end = ph[i].p_offset + ph[i].p_filesz;
	unsigned long off = (end + 0xffff) & ~0xfffful;
	int fd = open("/proc/self/exe", O_RDONLY);
	char *p = mmap(0, 4096, PROT_READ, MAP_PRIVATE, fd, off);
	if (p == MAP_FAILED) return 2;
	sink = p[0];
	printf("%#lx\n", off);
	fflush(stdout);
	wait_here();
}
`

// TestCoreDataMappingOfProgramFile: gcore writes no segment for an
// unmodified file mapping, so its permissions are unknown and a mapping of
// an object file is taken for code. One at a file offset no executable
// segment of the file holds (here the program's own section headers,
// mapped read-only; gdb maps the programs it debugs so) is data: nothing
// is missing (it was reported as an object "without unwind or symbol
// information": no loadable segment maps that offset), and the stack is
// complete.
func TestCoreDataMappingOfProgramFile(t *testing.T) {
	if _, err := exec.LookPath("gcore"); err != nil {
		t.Skip("gcore is not installed (Debian package gdb)")
	}
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "selfmap.c", selfMapSrc, "-O2", "-g")
	// 256 KiB the loader does not map, after the loadable segments.
	pad := filepath.Join(dir, "pad")
	require.NoError(t, os.WriteFile(pad, bytes.Repeat([]byte{0xaa}, 256<<10), 0o644))
	testprog.Tool(t, dir, "objcopy", "--add-section", ".pad="+pad, "--set-section-flags", ".pad=readonly", bin)
	cmd := exec.Command(bin)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	off, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, "0x")), 16, 64)
	require.NoError(t, err, "the program's output %q", line)
	waitSleeping(t, cmd.Process.Pid)
	core := gcoreOf(t, dir, cmd)

	opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}}
	c, err := OpenCore(core, opts)
	require.NoError(t, err)
	defer c.Close()
	mapped := false
	for _, m := range c.Mappings {
		mapped = mapped || (m.Path == bin && m.FileOffset == off)
	}
	require.True(t, mapped, "the core maps %s at file offset %#x", bin, off)
	var stop string
	var names []string
	sum, err := RunCore(c, opts, func(s *Sample) error {
		stop = s.Stop
		for _, f := range s.Frames {
			names = append(names, f.Symbol)
		}
		return nil
	})
	require.NoError(t, err)
	assert.Empty(t, sum.Missing, "the data mapping is no object missing")
	assert.Equal(t, "outermost", stop)
	assert.Contains(t, names, "wait_here")
	assert.Contains(t, names, "main")
}

// TestCoreMemfdProgram: the core of a program run from a memfd names no
// file for it. The report says that --exe gives it (the summary offered
// nothing: a memfd is no path --symfs can hold), and with --exe the
// stack is gdb's given the same program.
func TestCoreMemfdProgram(t *testing.T) {
	if _, err := exec.LookPath("gcore"); err != nil {
		t.Skip("gcore is not installed (Debian package gdb)")
	}
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "paused.c", pauseSrc, "-O2", "-g")
	launcher := testprog.Build(t, dir, "memfdexec.c", testprog.MemfdExecSrc, "-O2")
	cmd := exec.Command(launcher, bin)
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	waitSleeping(t, cmd.Process.Pid)
	core := gcoreOf(t, dir, cmd)

	const memfd = "/memfd:memfd-prog (deleted)"
	opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}}
	_, sum := coreReport(t, core, "text", opts)
	require.Contains(t, sum.Missing, memfd, "the program's mapping")
	assert.Contains(t, sum.MissingFix(), "--exe FILE gives the main executable")

	opts.Exe = bin
	gdbFrames := gdbCoreFrames(t, dir, bin, core)
	_, sum = coreReport(t, core, "text", opts)
	assert.Empty(t, sum.Missing)
	assert.Empty(t, sum.MissingFix())
	assertFramesMatchGDB(t, gdbFrames, reportFrames(t, core, opts))
}
