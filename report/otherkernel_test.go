package report

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/kallsyms"
)

// syscallSrc opens and closes /dev/null in a loop: cpu-clock samples with
// kernel call chains.
const syscallSrc = `
#include <fcntl.h>
#include <unistd.h>
int main(void) {
	for (int i = 0; i < 40000; i++) close(open("/dev/null", O_RDONLY));
	return 0;
}
`

// otherKernel returns a copy of the recording data whose
// [kernel.kallsyms] build-id (HEADER_BUILD_ID) is fake instead of the
// running kernel's: the recording of a machine that runs another kernel.
func otherKernel(t *testing.T, data string, running, fake []byte) string {
	t.Helper()
	b, err := os.ReadFile(data)
	require.NoError(t, err)
	require.Equal(t, 1, bytes.Count(b, running), "%s names the running kernel's build-id %x once", data, running)
	out := strings.TrimSuffix(data, ".data") + "-other.data"
	require.NoError(t, os.WriteFile(out, bytes.ReplaceAll(b, running, fake), 0o600))
	return out
}

// renamedKallsyms writes /proc/kallsyms with every function's name
// prefixed "other_" (perf's reference symbols _text and _stext kept) to
// path: the symbols of another kernel, so that a name says which table it
// came from; the kernel image's (lines without a module) moved by shift,
// as another boot's KASLR offset moves them.
func renamedKallsyms(t *testing.T, path string, shift uint64) {
	t.Helper()
	b, err := os.ReadFile("/proc/kallsyms")
	require.NoError(t, err)
	var out bytes.Buffer
	for _, line := range strings.SplitAfter(string(b), "\n") {
		f := strings.SplitN(line, " ", 3)
		if len(f) != 3 {
			out.WriteString(line)
			continue
		}
		if addr, err := strconv.ParseUint(f[0], 16, 64); err == nil && shift != 0 && !strings.Contains(f[2], "[") {
			f[0] = fmt.Sprintf("%016x", addr+shift)
		}
		if (f[1] == "t" || f[1] == "T") && !strings.HasPrefix(f[2], "_text") && !strings.HasPrefix(f[2], "_stext") {
			f[2] = "other_" + f[2]
		}
		out.WriteString(strings.Join(f, " "))
	}
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, out.Bytes(), 0o600))
}

// kernelFrames returns each sample's kernel frames as perf script prints
// them (scriptFrames).
func kernelFrames(blocks [][]string) [][]scriptFrame {
	_, frames := scriptFrames(blocks)
	out := make([][]scriptFrame, len(frames))
	for i, fs := range frames {
		for _, f := range fs {
			if f.dso == "([kernel.kallsyms])" {
				out[i] = append(out[i], f)
			}
		}
	}
	return out
}

// TestReportOtherKernel: a recording whose [kernel.kallsyms] build-id is
// not the running kernel's is never named from this machine's
// /proc/kallsyms. As perf script does, ustack names its kernel frames from
// perf record's copy of that kernel's kallsyms in the build-id cache
// (~/.debug/[kernel.kallsyms]/ID/kallsyms, or an unpacked perf archive),
// and without one leaves them unnamed, saying so once with both
// build-ids. Each sample's kernel frames are compared with perf script's
// given the same build-id cache (HOME). A recording without build-ids
// (perf record -B) from another kernel release is named from this
// machine's table as perf names it, with a warning that says so.
func TestReportOtherKernel(t *testing.T) {
	requirePerf(t)
	runningHex := kallsyms.RunningBuildID()
	if runningHex == "" {
		t.Skip("the running kernel's build-id is not readable from /sys/kernel/notes")
	}
	running, err := hex.DecodeString(runningHex)
	require.NoError(t, err)
	fake := make([]byte, len(running))
	for i, c := range running {
		fake[i] = ^c
	}
	fakeHex := hex.EncodeToString(fake)
	dir := t.TempDir()
	bin := build(t, dir, "syscalls", syscallSrc, "-O1", "-g")
	data := testprog.Record(t, filepath.Join(dir, "k.data"), "-e", "cpu-clock", "-c", "100000", "-g", "--", bin)
	if !strings.Contains(testprog.Script(t, data), "([kernel.kallsyms])") {
		t.Skip("no kernel frames in the recording (kernel.perf_event_paranoid, kptr_restrict?)")
	}
	other := otherKernel(t, data, running, fake)

	// perfWith is perf script's kernel frames with HOME (its ~/.debug)
	// set to home.
	perfWith := func(file, home string) [][]scriptFrame {
		cmd := testprog.PerfCommand(t, "script", "-i", file, "-F", "comm,tid,time,event,ip,sym,symoff,dso")
		cmd.Env = append(os.Environ(), "HOME="+home)
		return kernelFrames(splitSamples(testprog.Output(t, cmd)))
	}
	ustackWith := func(file string, opts Options) ([][]scriptFrame, []string) {
		var warns []string
		opts.Warn = func(m string) { warns = append(warns, m) }
		blocks, _ := ustackScriptWith(t, file, opts)
		return kernelFrames(blocks), warns
	}
	compare := func(t *testing.T, perf, ustack [][]scriptFrame, wantPrefix string) {
		t.Helper()
		require.Equal(t, len(perf), len(ustack), "perf script and ustack print as many samples")
		n := 0
		for i := range perf {
			require.Equal(t, perf[i], ustack[i], "sample %d's kernel frames", i)
			for _, f := range perf[i] {
				require.True(t, strings.HasPrefix(f.sym, wantPrefix), "sample %d: kernel frame %s, want %s...", i, f.sym, wantPrefix)
				n++
			}
		}
		require.Greater(t, n, 20, "kernel frames compared")
		t.Logf("%d samples, %d kernel frames as perf script prints them", len(perf), n)
	}

	t.Run("no_copy", func(t *testing.T) {
		home := t.TempDir()
		perf := perfWith(other, home)
		u, warns := ustackWith(other, Options{BuildIDDir: filepath.Join(home, ".debug")})
		compare(t, perf, u, "[unknown]")
		var kernelWarns []string
		for _, w := range warns {
			if strings.Contains(w, "[kernel.kallsyms]") {
				kernelWarns = append(kernelWarns, w)
			}
		}
		require.Len(t, kernelWarns, 1, "one warning about the kernel: %q", warns)
		require.Contains(t, kernelWarns[0], fakeHex)
		require.Contains(t, kernelWarns[0], runningHex)
		require.Contains(t, kernelWarns[0], "not symbolized")
	})

	// The recording kernel's kallsyms: this machine's addresses, other
	// names, so that a name says which table it came from.
	home := t.TempDir()
	renamedKallsyms(t, kallsyms.PerfCachePath(filepath.Join(home, ".debug"), fakeHex), 0)
	perf := perfWith(other, home)
	t.Run("buildid_cache", func(t *testing.T) {
		u, warns := ustackWith(other, Options{BuildIDDir: filepath.Join(home, ".debug")})
		compare(t, perf, u, "other_")
		require.Empty(t, warns)
	})
	t.Run("perf_archive_dir", func(t *testing.T) {
		u, warns := ustackWith(other, Options{BuildIDDir: t.TempDir(), MoreBuildIDDirs: []string{filepath.Join(home, ".debug")}})
		compare(t, perf, u, "other_")
		require.Empty(t, warns)
	})
	t.Run("given_kallsyms", func(t *testing.T) {
		// --kallsyms FILE is used whatever kernel the recording names,
		// as perf script --kallsyms uses it.
		file := kallsyms.PerfCachePath(filepath.Join(home, ".debug"), fakeHex)
		cmd := testprog.PerfCommand(t, "script", "-i", other, "--kallsyms", file, "-F", "comm,tid,time,event,ip,sym,symoff,dso")
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
		perf := kernelFrames(splitSamples(testprog.Output(t, cmd)))
		u, _ := ustackWith(other, Options{Kallsyms: file, BuildIDDir: t.TempDir()})
		compare(t, perf, u, "other_")
	})

	t.Run("buildid_cache_other_boot", func(t *testing.T) {
		// perf record's copy of the kernel's kallsyms is from another
		// boot, its kernel 2 MB higher (KASLR): perf relocates the
		// recording's addresses by its _text; so must ustack.
		home := t.TempDir()
		renamedKallsyms(t, kallsyms.PerfCachePath(filepath.Join(home, ".debug"), fakeHex), 0x200000)
		perf := perfWith(other, home)
		u, warns := ustackWith(other, Options{BuildIDDir: filepath.Join(home, ".debug")})
		compare(t, perf, u, "other_")
		require.Empty(t, warns)
	})

	t.Run("no_buildid_other_release", func(t *testing.T) {
		rel, err := os.ReadFile("/proc/sys/kernel/osrelease")
		require.NoError(t, err)
		release := strings.TrimSpace(string(rel))
		nb := testprog.Record(t, filepath.Join(dir, "nb.data"), "-B", "-e", "cpu-clock", "-c", "100000", "-g", "--", bin)
		b, err := os.ReadFile(nb)
		require.NoError(t, err)
		// Another release of the same length, where the header keeps it.
		otherRel := "X" + release[1:]
		require.Equal(t, 1, bytes.Count(b, []byte(release+"\x00")), "the header's os release")
		nbOther := filepath.Join(dir, "nb-other.data")
		require.NoError(t, os.WriteFile(nbOther, bytes.Replace(b, []byte(release+"\x00"), []byte(otherRel+"\x00"), 1), 0o600))
		home := t.TempDir()
		perf := perfWith(nbOther, home)
		u, warns := ustackWith(nbOther, Options{BuildIDDir: filepath.Join(home, ".debug")})
		// perf names them from /proc/kallsyms; so does ustack, saying so.
		compare(t, perf, u, "")
		require.Len(t, warns, 1, "%q", warns)
		require.Contains(t, warns[0], otherRel)
		require.Contains(t, warns[0], "may be wrong")
	})
}
