package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

const vdsoSrc = `#include <time.h>
static volatile long sink;
__attribute__((noinline)) void leaf(void) {
	struct timespec ts;
	for (int i = 0; i < 20000000; i++) { clock_gettime(CLOCK_MONOTONIC, &ts); sink += ts.tv_nsec; }
}
__attribute__((noinline)) void mid(void) { leaf(); sink++; }
int main(void) { mid(); return 0; }
`

// TestPipeRecordingUsesRunningVDSO records a program that spends its time
// in the vdso's clock_gettime with perf in pipe mode and an empty HOME:
// the stream carries no vdso and perf's build-id cache has none. perf
// script then names the vdso's functions from its own vdso (the kernel is
// the one recorded); ustack report must do the same, say where the image
// came from, and keep unwinding through it to main.
func TestPipeRecordingUsesRunningVDSO(t *testing.T) {
	if testing.Short() {
		t.Skip("records with perf")
	}
	requirePerfRecord(t)
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "vd.c", vdsoSrc, "-O2", "-g")
	home := filepath.Join(dir, "home")
	require.NoError(t, os.Mkdir(home, 0o700))
	data := filepath.Join(dir, "pipe.data")
	f, err := os.OpenFile(data, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	require.NoError(t, err)
	rec := testprog.PerfCommand(t, "record", "-q", "-o", "-", "-e", "cpu-clock", "-F", "999", "--call-graph", "dwarf", "--", bin)
	rec.Env = append(os.Environ(), "HOME="+home)
	var recErr strings.Builder
	rec.Stdout, rec.Stderr = f, &recErr
	if err := rec.Run(); err != nil {
		f.Close()
		t.Skipf("perf record in pipe mode: %v\n%s", err, recErr.String())
	}
	f.Close()

	script := testprog.PerfCommand(t, "script", "-i", data)
	script.Env = append(os.Environ(), "HOME="+home)
	want := testprog.ParseScript(testprog.Output(t, script))
	var out, errb bytes.Buffer
	rc := run([]string{"report", "-kallsyms", "-", "-no-debuginfod", "-buildid-dir", home, "-verbose", "-i", data}, &out, &errb)
	require.Equal(t, exitOK, rc, errb.String())
	got := testprog.ParseScript(out.String())
	require.Equal(t, len(want), len(got), "samples")
	inVDSO := 0
	for i := range want {
		if len(want[i].Syms) == 0 || !strings.HasPrefix(want[i].Syms[0], "__vdso_") {
			continue
		}
		inVDSO++
		require.NotEmpty(t, got[i].Syms, "sample %d", i)
		assert.Equal(t, want[i].Syms[0], got[i].Syms[0], "sample %d: the vdso frame", i)
		assert.True(t, testprog.HasChain(got[i].Syms, []string{"leaf", "mid", "main"}), "sample %d does not reach main through the vdso: %v", i, got[i].Syms)
	}
	require.Greater(t, inVDSO, 10, "too few samples in the vdso to compare")
	assert.Contains(t, errb.String(), "running kernel", "--verbose does not say where the vdso came from")
	assert.NotContains(t, errb.String(), "[vdso]: not found")
}
