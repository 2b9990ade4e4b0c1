package main

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

// unlinkedLibSrc is the library of unlinkedProgSrc; OTHER builds another
// one (other code at other addresses, another build-id).
const unlinkedLibSrc = `
#include <fcntl.h>
#include <unistd.h>
#ifdef OTHER
int pad_function(int x) { return x * 7 + 3; }
#endif
__attribute__((noinline)) int dinner(int x) { int r = close(open("/dev/null", O_RDONLY)); return r + x; }
__attribute__((noinline)) int douter(int x) { volatile int pad[10]; pad[2] = x; return dinner(x + pad[2]) + 1; }
`

// unlinkedProgSrc says "ready" and then, until killed, closes a file
// through the library's douter and dinner every 2 ms.
const unlinkedProgSrc = `
#include <stdio.h>
#include <unistd.h>
int douter(int);
__attribute__((noinline)) int dcaller(int x) { return douter(x) * 2; }
int main(int argc, char **argv) {
	printf("ready\n");
	fflush(stdout);
	for (;;) { dcaller(argc); usleep(2000); }
}
`

// TestRecordUnlinkedObjects records, with ustack record -p, a running
// process whose objects no path reaches any more, and reports each
// recording:
//   - its library deleted while mapped and another build put at its path
//     (a library upgraded under a running service): the maps say
//     "libd.so (deleted)";
//   - the program run from a memfd.
//
// ustack record reads such files through /proc/PID/map_files while the
// process lives, for its archive and for its live unwinder (--unwind). Every close sample must unwind, hand-checked from the
// source, dinner, douter, dcaller, main to the outermost frame, with no
// frame named from the build now at the library's path. Before, the stacks
// stopped at the first frame in the library (no_unwind_info, "not found"),
// as perf script's do on the same process.
func TestRecordUnlinkedObjects(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("recording tracepoints of another process and reading /proc/PID/map_files need root")
	}
	testprog.NeedTracefs(t, "syscalls/sys_enter_close")
	dir := t.TempDir()
	lib := testprog.Build(t, dir, "libd.c", unlinkedLibSrc, "-shared", "-fPIC", "-O2", "-g")
	other := testprog.Build(t, dir, "libother.c", unlinkedLibSrc, "-shared", "-fPIC", "-O0", "-g", "-DOTHER")
	copyFile(t, lib, filepath.Join(dir, "libd.so"))
	prog := testprog.Build(t, dir, "prog.c", unlinkedProgSrc, "-O2", "-g", "-Wl,--no-as-needed", "-L"+dir, "-l:libd.so", "-Wl,-rpath,"+dir)
	launcher := testprog.Build(t, dir, "memfdexec.c", testprog.MemfdExecSrc, "-O2")

	start := func(name string, args ...string) int {
		cmd := exec.Command(name, args...)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		line, err := bufio.NewReader(out).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "ready\n", line)
		return cmd.Process.Pid
	}
	// check records pid and reports it: every sample of pid whose stack
	// holds dinner holds the whole chain, and every stack is outermost.
	check := func(t *testing.T, pid int, unlinked string) {
		maps, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
		require.NoError(t, err)
		require.Contains(t, string(maps), unlinked, "the process's maps")
		data := filepath.Join(t.TempDir(), "rec.data")
		rc, _, errs := run3([]string{"record", "-q", "-e", "syscalls:sys_enter_close", "-p", strconv.Itoa(pid), "-d", "700ms", "-o", data})
		if rc != 0 {
			t.Skipf("ustack record cannot record here (status %d): %s", rc, errs)
		}
		rc, out, errs := run3([]string{"report", "-i", data, "--kallsyms", "-"})
		require.Equal(t, exitOK, rc, errs)
		samples := closeChains(t, data, out, errs)
		assert.NotContains(t, out, "pad_function")
		assert.NotContains(t, errs, "not found", "a missing object")
		m := regexp.MustCompile(`ustack: (\d+) samples, (\d+) unwound to the outermost frame\n`).FindStringSubmatch(errs)
		require.NotNil(t, m, "the summary line\n%s", errs)
		assert.Equal(t, m[1], m[2], "every stack outermost\n%s", errs)
		assert.Equal(t, strconv.Itoa(len(samples)), m[1])
		assert.Contains(t, out, "("+unlinked+")", "the frames' module is the mapping's name")
		// The program's frames give file offsets, as perf script does
		// for a file (in a PIE's text, its symbols' link-time values):
		// not the addresses that anonymous memory would give.
		f, err := elf.Open(prog)
		require.NoError(t, err)
		defer f.Close()
		syms, err := f.Symbols()
		require.NoError(t, err)
		var dcaller uint64
		for _, sym := range syms {
			if sym.Name == "dcaller" {
				dcaller = sym.Value
			}
		}
		fm := regexp.MustCompile(`(?m)^\s+([0-9a-f]+) dcaller\+0x([0-9a-f]+) \(`).FindStringSubmatch(out)
		require.NotNil(t, fm, "no dcaller frame\n%s", head(out))
		at, _ := strconv.ParseUint(fm[1], 16, 64)
		off, _ := strconv.ParseUint(fm[2], 16, 64)
		assert.Equal(t, dcaller+off, at, "dcaller's frame: offset %s+%#x in %s", fm[1], off, prog)
	}

	t.Run("deleted", func(t *testing.T) {
		pid := start(prog)
		libPath := filepath.Join(dir, "libd.so")
		require.NoError(t, os.Remove(libPath))
		copyFile(t, other, libPath)
		check(t, pid, libPath+" (deleted)")

		// Unwound while recording (--unwind): the live unwinder reads
		// the library the same way.
		data := filepath.Join(t.TempDir(), "unwound.data")
		rc, _, errs := run3([]string{"record", "-q", "--unwind", "-e", "syscalls:sys_enter_close", "-p", strconv.Itoa(pid), "-d", "500ms", "-o", data})
		require.Equal(t, exitOK, rc, errs)
		rc, out, errs := run3([]string{"report", "-i", data, "--kallsyms", "-"})
		require.Equal(t, exitOK, rc, errs)
		closeChains(t, data, out, errs)
	})
	// perf record cannot read a deleted library either: its recording
	// names no build-id for it. The report must not name its frames from
	// the other build now at the path, and must say why; with --symfs
	// holding a copy of the mapped build at the library's path (DIR/...,
	// without " (deleted)"), the stacks are whole.
	t.Run("perf record", func(t *testing.T) {
		copyFile(t, lib, filepath.Join(dir, "libd.so"))
		pid := start(prog)
		libPath := filepath.Join(dir, "libd.so")
		require.NoError(t, os.Remove(libPath))
		copyFile(t, other, libPath)
		data := testprog.Record(t, filepath.Join(t.TempDir(), "perf.data"), "-e", "syscalls:sys_enter_close", "--call-graph", "dwarf",
			"-p", strconv.Itoa(pid), "--", "sleep", "0.5")

		rc, out, errs := run3([]string{"report", "-i", data, "--kallsyms", "-"})
		require.Equal(t, exitOK, rc, errs)
		assert.NotContains(t, out, "pad_function")
		assert.NotContains(t, out, "dinner", "named from the build now at the path")
		assert.Contains(t, errs, "the process mapped "+libPath+", deleted since")
		assert.Regexp(t, `ustack: \d+ samples, 0 of \d+ unwound to the outermost frame`, errs)

		root := t.TempDir()
		for _, d := range []string{"usr", "lib", "lib64"} {
			require.NoError(t, os.Symlink("/"+d, filepath.Join(root, d)))
		}
		require.NoError(t, os.MkdirAll(filepath.Join(root, dir), 0o755))
		copyFile(t, prog, filepath.Join(root, prog))
		copyFile(t, lib, filepath.Join(root, libPath))
		rc, out, errs = run3([]string{"report", "-i", data, "--kallsyms", "-", "--symfs", root})
		require.Equal(t, exitOK, rc, errs)
		closeChains(t, data, out, errs)
		m := regexp.MustCompile(`ustack: (\d+) samples, (\d+) unwound to the outermost frame\n`).FindStringSubmatch(errs)
		require.NotNil(t, m, "the summary line\n%s", errs)
		assert.Equal(t, m[1], m[2], "every stack outermost\n%s", errs)
	})
	// perf record of the program run from a memfd: perf cannot read it,
	// and the report must say the program's object is missing, not that
	// its stacks stopped in JIT code.
	t.Run("perf record, memfd", func(t *testing.T) {
		copyFile(t, lib, filepath.Join(dir, "libd.so"))
		pid := start(launcher, prog)
		data := testprog.Record(t, filepath.Join(t.TempDir(), "perf.data"), "-e", "syscalls:sys_enter_close", "--call-graph", "dwarf",
			"-p", strconv.Itoa(pid), "--", "sleep", "0.5")
		rc, out, errs := run3([]string{"report", "-i", data, "--kallsyms", "-"})
		require.Equal(t, exitOK, rc, errs)
		require.Contains(t, out, "douter", "the library's frames\n%s", head(out))
		assert.Contains(t, errs, "/memfd:memfd-prog (deleted): not found")
		assert.NotContains(t, errs, "JIT code")
	})
	t.Run("memfd", func(t *testing.T) {
		copyFile(t, lib, filepath.Join(dir, "libd.so")) // the first build again
		pid := start(launcher, prog)
		check(t, pid, "/memfd:memfd-prog (deleted)")
	})
}

// closeChains returns the samples of the text report out (of data) and
// checks that each one's stack holds the library's dinner, douter and the
// program's dcaller, main after the close.
func closeChains(t *testing.T, data, out, errs string) []testprog.ScriptSample {
	t.Helper()
	samples := testprog.ParseScript(out)
	require.NotEmpty(t, samples, "no sample in %s\n%s", data, errs)
	for _, s := range samples {
		i := slices.Index(s.Syms, "dinner")
		require.True(t, i > 0 && testprog.HasChain(s.Syms[i:], []string{"dinner", "douter", "dcaller", "main"}),
			"a close sample's stack in %s: %q\n%s\n%s", data, s.Syms, head(out), errs)
	}
	return samples
}
