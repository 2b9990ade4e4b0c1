package report

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

// coroutineSrc runs coro_fn on a stack of its own made by makecontext and
// writes through a NULL pointer three calls deep in it. The context it
// returns to (uc_link) is main's with an argument, none without.
const coroutineSrc = `#include <ucontext.h>
#include <stdlib.h>
static ucontext_t mainctx, co;
__attribute__((noinline)) void deep3(int *p) { *p = 7; __asm__ volatile(""); }
__attribute__((noinline)) void deep2(int *p) { deep3(p); __asm__ volatile(""); }
__attribute__((noinline)) void coro_fn(int a) { deep2((int *)(long)(a - 1)); __asm__ volatile(""); }
int main(int argc, char **argv) {
	char *stk = malloc(1 << 16);
	getcontext(&co);
	co.uc_stack.ss_sp = stk;
	co.uc_stack.ss_size = 1 << 16;
	co.uc_link = argc > 1 ? &mainctx : 0;
	makecontext(&co, (void (*)(void))coro_fn, 1, 1);
	swapcontext(&mainctx, &co);
	return 0;
}
`

// TestCoroutineStackEndsAtStartContext crashes a makecontext coroutine
// under gdb. makecontext gives the coroutine's function a return address at
// the first instruction of glibc's __start_context, which no call precedes:
// gdb, looking up the caller at the return address minus one, shows "??"
// there; the frame-pointer fallback followed the frame pointer getcontext
// had saved and put main's callers under the coroutine, "outermost". The
// stack is deep3, deep2, coro_fn (gdb's frames, same pcs), then
// __start_context at gdb's return address (the name gdb's "info symbol"
// gives it), the coroutine stack's first frame; nothing of main's stack.
func TestCoroutineStackEndsAtStartContext(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
		args  []string
	}{
		{"O2-no-link", []string{"-O2"}, nil},
		{"O2-link", []string{"-O2"}, []string{"link"}},
		{"O2-fp-link", []string{"-O2", "-fno-omit-frame-pointer"}, []string{"link"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := testprog.Build(t, dir, "coro.c", coroutineSrc, append(tc.flags, "-g")...)
			gdbFrames, core := crashUnderGDBArgs(t, dir, bin, tc.args...)
			var want []gdbFrame
			for _, g := range gdbFrames {
				want = append(want, g)
				if g.name == "coro_fn" {
					break
				}
			}
			require.Equal(t, "coro_fn", want[len(want)-1].name, "gdb's frames: %s", describeGDB(gdbFrames))
			require.Greater(t, len(gdbFrames), len(want), "gdb shows the return address above coro_fn")
			entry := gdbFrames[len(want)].pc
			entryName := gdbSymbolAt(t, bin, core, entry)

			got, stop, _ := firstCoreStack(t, core)
			t.Logf("gdb:    %s", describeGDB(gdbFrames))
			t.Logf("ustack: %s (%s)", describeFrames(got), stop)
			require.Len(t, got, len(want)+1, "gdb's frames to coro_fn, then the function makecontext returns it to")
			for i, g := range want {
				assert.Equal(t, fmt.Sprintf("%#x", g.pc), fmt.Sprintf("%#x", got[i].PC), "frame %d pc", i)
				assert.Equal(t, g.name, plainName(got[i].Symbol), "frame %d", i)
			}
			last := got[len(want)]
			assert.Equal(t, fmt.Sprintf("%#x", entry), fmt.Sprintf("%#x", last.PC), "the return address makecontext left")
			if entryName == "__start_context" {
				assert.Equal(t, "__start_context", last.Symbol)
				assert.Equal(t, "outermost", stop, "__start_context begins the coroutine's stack")
			} else {
				// Without glibc's debug file nothing names it: the
				// stack must not be called complete through it.
				t.Logf("gdb names %#x %q (no libc6-dbg?): only the frames are compared", entry, entryName)
				assert.NotEqual(t, "outermost", stop)
			}
		})
	}
}

// gdbSymbolAt returns the function gdb's "info symbol" names at addr in
// core (empty when none).
func gdbSymbolAt(t *testing.T, bin, core string, addr uint64) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testprog.Timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "gdb", "-nx", "-batch", "-ex", fmt.Sprintf("info symbol %#x", addr), bin, core).CombinedOutput()
	require.NoError(t, err, "gdb: %s", out)
	for _, line := range strings.Split(string(out), "\n") {
		if name, _, ok := strings.Cut(line, " in section "); ok {
			return strings.TrimSpace(name)
		}
	}
	return ""
}
