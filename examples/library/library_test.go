// Package library holds the tests of the four programs beside it, written
// against ustack's Examples alone; each compares a program's output with
// gdb's backtrace of the same stop.
package library

import (
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
)

// build builds the program in directory name and returns its path.
func build(t *testing.T, name string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	b, err := exec.Command("go", "build", "-o", out, "./"+name).CombinedOutput()
	require.NoError(t, err, "%s", b)
	return out
}

// run runs a program and returns its standard output as lines.
func run(t *testing.T, stdin string, prog string, args ...string) []string {
	t.Helper()
	cmd := exec.Command(prog, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s", stderr.String())
	t.Logf("%s stderr: %s", filepath.Base(prog), stderr.String())
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// cPaused waits in pause() at the end of a chain with a function inlined.
const cPaused = `#include <stdio.h>
#include <unistd.h>
volatile int sink;
__attribute__((noinline)) void leaf(void) { printf("ready\n"); fflush(stdout); for (;;) pause(); }
static inline __attribute__((always_inline)) void inl(int n) { sink = n; leaf(); sink++; }
__attribute__((noinline)) void middle(int n) { inl(n * 2); sink--; }
__attribute__((noinline)) void outer(int n) { middle(n + 1); sink -= 3; }
int main(int c, char **v) { outer(c); return sink; }
`

// paused starts cPaused and returns the program and its pid, in pause().
func paused(t *testing.T) (string, int) {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Skip("livestack reads x86_64 registers")
	}
	bin := testprog.Build(t, t.TempDir(), "paused.c", cPaused, "-O2", "-g")
	return bin, testprog.StartPaused(t, "ready", 34, bin).Process.Pid
}

func TestPerfStacks(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "recordings", "static_close")
	got := run(t, "", build(t, "perfstacks"), filepath.Join(dir, "perf.data"), filepath.Join(dir, "symfs"))
	gdb, err := os.ReadFile(filepath.Join(dir, "gdb-bt.txt"))
	require.NoError(t, err)
	want := []string{}
	for _, m := range regexp.MustCompile(`(?m)^#\d+\s+0x[0-9a-f]+ in (\S+) \(`).FindAllStringSubmatch(string(gdb), -1) {
		want = append(want, m[1])
	}
	// gdb names glibc's __libc_close by its alias close (the resolve
	// package's Example says the same).
	require.Len(t, got, 1)
	fields := strings.Fields(got[0])
	require.GreaterOrEqual(t, len(fields), 2)
	if fields[2] == "__libc_close" {
		fields[2] = "close"
	}
	assert.Equal(t, want, fields[2:], "%s", got[0])
}

func TestLiveStack(t *testing.T) {
	_, pid := paused(t)
	var got []string
	for _, l := range run(t, "", build(t, "livestack"), strconv.Itoa(pid)) {
		got = append(got, strings.Fields(l)[0])
	}
	assert.Equal(t, testprog.GDBFunctions(t, "-p", strconv.Itoa(pid)), got)
}

// TestSymbolizeElsewhere: the addresses livestack normalized are named
// by symbolize with the objects' paths out of reach (an absent directory
// prepended) and copies of them only in a directory by build-id.
func TestSymbolizeElsewhere(t *testing.T) {
	_, pid := paused(t)
	lines := run(t, "", build(t, "livestack"), strconv.Itoa(pid))
	ids := t.TempDir()
	var in strings.Builder
	for _, l := range lines {
		f := strings.Fields(l)
		require.Len(t, f, 5, "line %q", l)
		if f[1] == "true" {
			continue // an inlined function: its physical frame's address follows
		}
		f = f[2:]
		_, err := hex.DecodeString(f[1])
		require.NoError(t, err)
		require.NotEmpty(t, f[1], "%s has no build-id", f[0])
		b, err := os.ReadFile(f[0])
		require.NoError(t, err)
		dst := filepath.Join(ids, ".build-id", f[1][:2], f[1][2:])
		require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
		require.NoError(t, os.WriteFile(dst, b, 0o644))
		in.WriteString("/gone" + f[0] + " " + f[1] + " " + f[2] + "\n")
	}
	got := run(t, in.String(), build(t, "symbolize"), ids)
	assert.Equal(t, testprog.GDBFunctions(t, "-p", strconv.Itoa(pid)), got)
}

// TestCoreStacks: gdb's gcore writes a core of the paused program;
// corestacks's frames equal gdb's backtrace of that core.
func TestCoreStacks(t *testing.T) {
	bin, pid := paused(t)
	core := filepath.Join(t.TempDir(), "core")
	testprog.Tool(t, "", "gdb", "-nx", "-batch", "-p", strconv.Itoa(pid), "-ex", "gcore "+core)
	got := run(t, "", build(t, "corestacks"), core)
	require.Len(t, got, 1)
	fields := strings.Fields(got[0])
	assert.Equal(t, strconv.Itoa(pid)+":", fields[0])
	assert.Equal(t, testprog.GDBFunctions(t, bin, core), fields[1:])
}
