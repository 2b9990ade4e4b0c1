package report

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

// debugLinkSrc writes through a NULL pointer five calls deep.
const debugLinkSrc = `__attribute__((noinline)) void f5(int *p) { *p = 1; __asm__ volatile(""); }
__attribute__((noinline)) void f4(int *p) { f5(p); __asm__ volatile(""); }
__attribute__((noinline)) void f3(int *p) { f4(p); __asm__ volatile(""); }
__attribute__((noinline)) void f2(int *p) { f3(p); __asm__ volatile(""); }
__attribute__((noinline)) void f1(int *p) { f2(p); __asm__ volatile(""); }
int main(int argc, char **argv) { f1((int *)(long)(argc - 1)); return 0; }
`

// TestExeFindsItsDebugLink reports, with --exe, the core of a stripped
// program whose symbols and CFI are only in a separate debug file beside it
// (objcopy --only-keep-debug, then --strip-all --add-gnu-debuglink; built
// without .eh_frame, so the debug file's .debug_frame is all the CFI there
// is). gdb finds the debug file by the link; so does ustack without --exe.
// With --exe the program's image came from the Resolver's given source,
// opened with no debug directory: one unnamed frame, no_unwind_info. The
// frames must be gdb's, named and at its pcs, to main.
func TestExeFindsItsDebugLink(t *testing.T) {
	for _, tool := range []string{"objcopy", "gdb"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (Debian packages binutils, gdb)", tool)
		}
	}
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "chain.c", debugLinkSrc, "-O2", "-g", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables")
	debug := bin + ".debug"
	ctx, cancel := context.WithTimeout(context.Background(), testprog.Timeout)
	defer cancel()
	for _, args := range [][]string{
		{"--only-keep-debug", bin, debug},
		{"--strip-all", "--add-gnu-debuglink=" + filepath.Base(debug), bin},
	} {
		cmd := exec.CommandContext(ctx, "objcopy", args...)
		cmd.Dir = dir // the link names the debug file by its base name
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "objcopy %v: %s", args, out)
	}
	gdbFrames, core := crashUnderGDBArgs(t, dir, bin)
	require.GreaterOrEqual(t, len(gdbFrames), 6, "gdb's frames: %s", describeGDB(gdbFrames))

	for _, exe := range []string{"", bin} {
		t.Run(fmt.Sprintf("exe=%v", exe != ""), func(t *testing.T) {
			opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}, Exe: exe}
			got := reportFrames(t, core, opts)
			t.Logf("gdb:    %s", describeGDB(gdbFrames))
			t.Logf("ustack: %s", describeFrames(got))
			require.Len(t, got, 6, "f5 f4 f3 f2 f1 main")
			for i, g := range gdbFrames[:6] {
				assert.Equal(t, fmt.Sprintf("%#x", g.pc), fmt.Sprintf("%#x", got[i].PC), "frame %d pc", i)
				assert.Equal(t, g.name, plainName(got[i].Symbol), "frame %d", i)
			}
		})
	}
}
