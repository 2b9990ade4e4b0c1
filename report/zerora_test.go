package report

import (
	"bytes"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

// smashSrc overruns a buffer with zeros over victim's saved registers and
// return address, then aborts: a stack smashed by a buffer overflow.
const smashSrc = `
#include <stdlib.h>
#include <string.h>
void *(*volatile my_memset)(void *, int, size_t) = memset;
__attribute__((noinline)) void victim(int n) {
	char buf[16];
	my_memset(buf, 0, n);
	abort();
}
__attribute__((noinline)) void caller2(int n) { victim(n); abort(); }
__attribute__((noinline)) void caller1(int n) { caller2(n); abort(); }
int main(void) { caller1(256); return 0; }
`

// TestZeroReturnAddressNotOutermost: a return address of zero read where
// a frame's CFI says it lies ends a stack only in a function that begins
// one (_start, a thread's start, Go's goexit). Before, any zero was taken
// for the end: the core of a program whose buffer overflow zeroed victim's
// return address gave abort's frames and victim as a complete stack, and
// the summary counted it unwound to the outermost frame. gdb shows a
// caller at 0 there. Now the stack stops at victim with no_mapping, pc 0.
func TestZeroReturnAddressNotOutermost(t *testing.T) {
	p := fileCorePattern(t)
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "smash.c", smashSrc, "-O1", "-g", "-fno-stack-protector", "-U_FORTIFY_SOURCE")
	run, err := os.MkdirTemp(dir, "run")
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd := exec.Command("sh", "-c", `ulimit -c unlimited && exec "$@"`, "sh", bin)
	cmd.Dir, cmd.Stderr = run, &stderr
	core := coreOf(t, cmd.Run(), run, p, stderr.String())

	var gdbNames []string
	if _, err := exec.LookPath("gdb"); err == nil {
		frames := gdbCoreFrames(t, dir, bin, core)
		i := 0
		for i < len(frames) && frames[i].name != "victim" {
			gdbNames = append(gdbNames, frames[i].name)
			i++
		}
		require.Less(t, i+1, len(frames), "gdb's frames: %s", describeGDB(frames))
		assert.Zero(t, frames[i+1].pc, "gdb's caller of victim: %s", describeGDB(frames))
	}

	js, sum := coreReport(t, core, "json", CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}})
	samples := testprog.JSONLines[coreSample](t, js)
	require.Len(t, samples, 1)
	s := samples[0]
	var names []string
	for _, f := range s.Frames {
		if !f.Inlined && f.Symbol != nil {
			names = append(names, *f.Symbol)
		}
	}
	require.NotEmpty(t, names)
	assert.Equal(t, "victim", names[len(names)-1], "frames %q", names)
	assert.Equal(t, "no_mapping", str(s.Stop), "frames %q", names)
	assert.Contains(t, str(s.StopErr), "pc 0x0 ")
	assert.Zero(t, sum.Stops["outermost"], "stops %v", sum.Stops)
	if gdbNames != nil {
		// The frames under victim are abort's, as gdb names them.
		assert.Equal(t, len(gdbNames)+1, len(names), "frames %q; gdb %q", names, gdbNames)
	}
}
