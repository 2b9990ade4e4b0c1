package report

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

// abortChainSrc aborts three calls below main.
const abortChainSrc = `#include <stdlib.h>
__attribute__((noinline)) void c(void) { abort(); }
__attribute__((noinline)) void b(void) { c(); __asm__ volatile(""); }
__attribute__((noinline)) void a(void) { b(); __asm__ volatile(""); }
int main(void) { a(); return 0; }
`

// TestCoreStackNotDumped: a process whose /proc/PID/coredump_filter is 0
// dumps a core without its anonymous memory, its stack among it. The
// thread's stack ends early (truncated), as gdb's does (its frame 1 is
// 0x0), and the report says why: the stop's error and a warning name the
// coredump_filter, where before it said nothing (the glossary's advice for
// truncated is to record more stack). The same program with the default
// filter gives the whole chain: abort, c, b, a, main.
func TestCoreStackNotDumped(t *testing.T) {
	p := fileCorePattern(t)
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "abortchain.c", abortChainSrc, "-O1", "-g")
	crash := func(filter string) string {
		t.Helper()
		run := filepath.Join(dir, "run"+filter)
		require.NoError(t, os.Mkdir(run, 0o755))
		var stderr bytes.Buffer
		cmd := exec.Command("sh", "-c", `echo `+filter+` > /proc/self/coredump_filter && ulimit -c unlimited && exec "$0"`, bin)
		cmd.Dir, cmd.Stderr = run, &stderr
		return coreOf(t, cmd.Run(), run, p, stderr.String())
	}
	report := func(core string) (coreSample, []string) {
		t.Helper()
		var warnings []string
		opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir(), Warn: func(m string) { warnings = append(warnings, m) }}}
		js, _ := coreReport(t, core, "json", opts)
		samples := testprog.JSONLines[coreSample](t, js)
		require.Len(t, samples, 1)
		return samples[0], warnings
	}

	whole, warnings := report(crash("0x33")) // the kernel's default
	var names []string
	for _, f := range whole.Frames {
		names = append(names, str(f.Symbol))
	}
	assert.True(t, testprog.HasChain(names, []string{"c", "b", "a", "main"}), "default filter: %v", names)
	assert.Equal(t, "outermost", str(whole.Stop))
	assert.Empty(t, warnings)

	cut, warnings := report(crash("0"))
	assert.Equal(t, "truncated", str(cut.Stop))
	assert.Contains(t, str(cut.StopErr), "mapped but was not dumped")
	assert.Contains(t, str(cut.StopErr), "coredump_filter")
	assert.Less(t, len(cut.Frames), len(whole.Frames))
	joined := strings.Join(warnings, "\n")
	assert.Contains(t, joined, "holds no stack memory of 1 of 1 threads")
}
