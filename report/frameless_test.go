package report

import (
	"context"
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
	if _, err := exec.LookPath("gdb"); err != nil {
		t.Skip("gdb is not installed (Debian package gdb)")
	}
	dir := t.TempDir()
	bin := build(t, dir, "spawn", spawnSrc, "-O2", "-g", "-pthread")

	py := filepath.Join(dir, "frames.py")
	require.NoError(t, os.WriteFile(py, []byte(gdbFramesPy), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), testprog.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "gdb", "-nx", "-batch", "-ex", "set debuginfod enabled off", "-ex", "set backtrace past-main on",
		"-ex", "catch syscall clone3", "-ex", "run", "-x", py, "--args", bin)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "gdb: %s", out)
	var want []gdbFrame
	for _, f := range parseGDBFrames(t, out) {
		if f.kind != "inline" {
			want = append(want, f)
		}
	}
	require.NotEmpty(t, want)
	require.Equal(t, "clone3", strings.TrimLeft(want[0].name, "_"), "gdb stopped in clone3: %s", out)

	// Without address space randomization, as gdb runs it: the same
	// addresses.
	setarch := testprog.Tool(t, "", "uname", "-m")
	data := testprog.Record(t, filepath.Join(dir, "clone3.data"), "-e", "syscalls:sys_enter_clone3", "--call-graph", "dwarf", "--",
		"setarch", strings.TrimSpace(setarch), "-R", bin)
	_, js, _, _, _ := runAll(t, data, Options{BuildIDDir: t.TempDir(), NoTailCall: true})
	samples := testprog.JSONLines[coreSample](t, js)
	require.Len(t, samples, 1, "one clone3 system call")
	s := samples[0]
	var pcs []uint64
	var hows []string
	for _, f := range s.Frames {
		if !f.Inlined && f.How != "kernel" {
			pcs = append(pcs, hexAddr(t, f.PC))
			hows = append(hows, f.How)
		}
	}
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
