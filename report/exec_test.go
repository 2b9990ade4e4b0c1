package report

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

// execSrc execs /bin/true two calls down from main.
const execSrc = `#include <unistd.h>
__attribute__((noinline)) void do_exec(void) { execl("/bin/true", "true", (char *)0); __asm__ volatile(""); }
__attribute__((noinline)) void prepare(void) { do_exec(); __asm__ volatile(""); }
int main(void) { prepare(); return 1; }
`

// TestExecSamplesBeforeReplacement: kmem:kmalloc samples inside execve's
// ELF loader (load_elf_binary). Those taken before the kernel replaced the
// address space (reading the program headers: load_elf_phdrs) carry a copy
// of the old program's stack and are unwound, to the outermost frame, with
// the same addresses as perf script's (in their objects, as perf prints
// them); those taken after it (mapping the new
// program) have no stack copy and still stop with exec, no user frame
// shown.
func TestExecSamplesBeforeReplacement(t *testing.T) {
	data := recordExec(t, "kmem:kmalloc")

	// perf's user frames of each sample, by time.
	perf := map[string][]string{}
	for _, s := range strings.Split(testprog.Script(t, data, "--no-inline", "-F", "time,ip,dso"), "\n\n") {
		lines := strings.Split(strings.Trim(s, "\n"), "\n")
		if len(lines) == 0 || lines[0] == "" {
			continue
		}
		var user []string
		for _, l := range lines[1:] {
			if f := strings.Fields(l); len(f) >= 2 && !strings.Contains(l, "[kernel.kallsyms]") {
				user = append(user, f[0])
			}
		}
		perf[strings.TrimSuffix(strings.TrimSpace(lines[0]), ":")] = user
	}

	_, js, _, _, _ := runAll(t, data, Options{BuildIDDir: t.TempDir(), NoTailCall: true})
	type frame struct {
		Offset, Symbol string
		Kernel         bool
		Inline         bool `json:"inlined"`
	}
	type sample struct {
		Time   uint64
		Stop   *string
		Frames []frame
	}
	before, after, phdrs := 0, 0, 0
	for _, s := range testprog.JSONLines[sample](t, js) {
		var kernel, user, pcs []string
		for _, f := range s.Frames {
			switch {
			case f.Kernel:
				kernel = append(kernel, f.Symbol)
			case !f.Inline:
				user = append(user, f.Symbol)
				pcs = append(pcs, strings.TrimPrefix(f.Offset, "0x"))
			}
		}
		if !slices.Contains(kernel, "load_elf_binary") {
			continue
		}
		stop := str(s.Stop)
		if stop != StopExec {
			before++
			if slices.Contains(kernel, "load_elf_phdrs") {
				phdrs++
			}
			key := fmt.Sprintf("%d.%06d", s.Time/1e9, s.Time%1e9/1e3)
			want, ok := perf[key]
			require.True(t, ok, "perf script has the sample at %s", key)
			var wantPCs []string
			for _, a := range want {
				wantPCs = append(wantPCs, strings.TrimLeft(a, "0"))
			}
			assert.Equal(t, "outermost", stop)
			assert.Equal(t, wantPCs, trimmed(pcs), "sample at %s: perf's addresses", key)
			assert.True(t, testprog.HasChain(user, []string{"do_exec", "prepare", "main"}), "the old program's stack: %v", user)
			continue
		}
		after++
		assert.Empty(t, user, "an exec stop shows no user frame")
	}
	require.NotZero(t, phdrs, "samples of load_elf_phdrs, before the address space is replaced, unwound")
	t.Logf("%d samples before the replacement unwound, %d after it not", before, after)
}

// TestExecSamplesNotNoMaps: between an exec's COMM record and the new
// program's first MMAP the recording holds no maps of the process. Samples
// there (mmap_lock:mmap_lock_acquire_returned, the first taken in
// setup_arg_pages, before the new stack's MMAP) stop exec, and the summary
// does not count them among the samples of processes whose maps the
// recording lacks (perf record -C), which it did.
func TestExecSamplesNotNoMaps(t *testing.T) {
	data := recordExec(t, "mmap_lock:mmap_lock_acquire_returned")
	r, _ := openRecording(t, data)
	sum, err := Run(r, Options{BuildIDDir: t.TempDir(), Warn: func(string) {}}, func(*Sample) error { return nil })
	require.NoError(t, err)
	require.Positive(t, sum.Stops[StopExec], "samples inside execve")
	assert.Empty(t, sum.NoMaps, "samples counted as of processes the recording holds no maps of")
	assert.Zero(t, sum.noMapsSamples)
}

// recordExec records execSrc's program, which execs /bin/true, at the
// tracepoint event (system:name) with --call-graph dwarf.
func recordExec(t *testing.T, event string) string {
	t.Helper()
	requirePerf(t)
	testprog.NeedTracefs(t, strings.Replace(event, ":", "/", 1))
	dir := t.TempDir()
	bin := build(t, dir, "execer", execSrc, "-O2", "-g")
	return testprog.Record(t, filepath.Join(dir, "exec.data"), "-e", event, "--call-graph", "dwarf", "--", bin)
}

// trimmed drops leading zeros of hex addresses.
func trimmed(pcs []string) []string {
	out := make([]string, len(pcs))
	for i, p := range pcs {
		out[i] = strings.TrimLeft(p, "0")
	}
	return out
}
