package report

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/unwinder"
)

// altstackSrc handles SIGUSR1 on an alternate signal stack, far from the
// thread's stack, and calls getppid there; main raises the signal three
// calls down.
const altstackSrc = `#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
static void handler(int sig) { (void)sig; getppid(); __asm__ volatile(""); }
__attribute__((noinline)) void deep(void) { raise(SIGUSR1); __asm__ volatile(""); }
__attribute__((noinline)) void middle(void) { deep(); __asm__ volatile(""); }
int main(void) {
	stack_t ss = {.ss_sp = malloc(1 << 16), .ss_size = 1 << 16};
	sigaltstack(&ss, 0);
	struct sigaction sa = {.sa_handler = handler, .sa_flags = SA_ONSTACK};
	sigaction(SIGUSR1, &sa, 0);
	for (int i = 0; i < 3; i++) middle();
	return 0;
}
`

// TestSignalOnAltStackRecording: a recording taken in a signal handler
// running on an alternate signal stack (syscalls:sys_enter_getppid) holds
// that stack only. Each of the three samples unwinds through the handler
// and the sigreturn trampoline to the interrupted frame in raise (libc),
// with perf script's addresses (perf ends with a junk frame), and stops there (truncated or bad_memory:
// the thread's stack is elsewhere) with the error that says so; the
// summary counts them as signal_stack_missing and not among the stacks a
// larger snapshot would carry further (snapshot_cut).
func TestSignalOnAltStackRecording(t *testing.T) {
	requirePerf(t)
	testprog.NeedTracefs(t, "syscalls/sys_enter_getppid")
	dir := t.TempDir()
	bin := build(t, dir, "altstack", altstackSrc, "-O2", "-g")
	data := testprog.Record(t, filepath.Join(dir, "alt.data"), "-e", "syscalls:sys_enter_getppid", "--call-graph", "dwarf", "--", bin)
	// perf script's user frames of each sample, junk aside.
	var perf [][]string
	for _, block := range strings.Split(strings.TrimSpace(testprog.Script(t, data, "--no-inline", "-F", "ip,dso")), "\n\n") {
		var pcs []string
		for _, l := range strings.Split(block, "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] != "ffffffffffffffff" && !strings.Contains(l, "kernel.kallsyms") {
				pcs = append(pcs, f[0])
			}
		}
		perf = append(perf, pcs)
	}
	r, _ := openRecording(t, data)
	n := 0
	sum, err := Run(r, Options{BuildIDDir: t.TempDir(), Warn: func(string) {}}, func(s *Sample) error {
		n++
		var names, pcs []string
		for _, f := range s.Frames {
			if !f.Kernel && !f.Inlined {
				names = append(names, f.Symbol)
				pcs = append(pcs, fmt.Sprintf("%x", f.Offset))
			}
		}
		if assert.Less(t, n-1, len(perf), "perf script has sample %d", n) {
			// perf prints the trampoline at its address minus one
			// (PERF_DIFFERENCES); the rest alike.
			want := slices.Clone(perf[n-1])
			if k := slices.Index(names, "__restore_rt"); k >= 0 && k < len(want) {
				at, _ := strconv.ParseUint(pcs[k], 16, 64)
				assert.Equal(t, fmt.Sprintf("%x", at-1), want[k], "sample %d: perf's trampoline, one byte before", n)
				want[k] = pcs[k]
			}
			assert.Equal(t, want, pcs, "sample %d: perf script's addresses", n)
		}
		k := slices.Index(names, "handler")
		require.GreaterOrEqual(t, k, 0, "sample %d: no handler frame: %v", n, names)
		require.Greater(t, len(names), k+2, "sample %d: nothing past the handler: %v (%s)", n, names, s.StopErr)
		assert.Equal(t, "__restore_rt", names[k+1], "sample %d: %v", n, names)
		assert.Contains(t, []string{"truncated", "bad_memory"}, s.Stop, "sample %d: %v", n, names)
		assert.Equal(t, unwinder.ErrInterruptedStackNotCaptured.Error(), s.StopErr, "sample %d: %v", n, names)
		assert.False(t, slices.Contains(names, "main"), "sample %d: main is on the thread's stack, not captured: %v", n, names)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 3, n, "samples")
	assert.Equal(t, 3, sum.SignalStackMissing)
	assert.Zero(t, sum.SnapshotCut)

}
