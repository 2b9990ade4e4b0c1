package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// buildTestProg compiles progSrc (leaf <- mid <- top <- main) into dir.
func buildTestProg(t *testing.T, dir string) string {
	t.Helper()
	src := filepath.Join(dir, "prog.c")
	require.NoError(t, os.WriteFile(src, []byte(progSrc), 0o644))
	bin := filepath.Join(dir, "prog")
	if out, err := exec.Command("gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-o", bin, src).CombinedOutput(); err != nil {
		t.Skipf("gcc: %v\n%s", err, out)
	}
	return bin
}

// chainCount counts the samples of perf script or ustack report text
// output whose stack holds leaf, mid, top and main in this order.
func chainCount(out string) int {
	n := 0
	for _, block := range strings.Split(out, "\n\n") {
		idx := func(s string) int { return strings.Index(block, s) }
		if l := idx(" leaf+"); l >= 0 && l < idx(" mid+") && idx(" mid+") < idx(" top+") && idx(" top+") < idx(" main+") {
			n++
		}
	}
	return n
}

// TestArchiveForPerf: ustack record, then ustack archive; the program is
// deleted and perf report runs with an empty HOME whose build-id cache is
// only the unpacked tarball: perf must name the program's functions from
// the exported objects.
func TestArchiveForPerf(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("recording tracepoints needs root")
	}
	perf, err := exec.LookPath("perf")
	if err != nil {
		t.Skip("perf not installed")
	}
	dir := t.TempDir()
	bin := buildTestProg(t, dir)
	data := filepath.Join(dir, "rec.data")
	var stdout, stderr bytes.Buffer
	if rc := run([]string{"record", "-q", "-e", "syscalls:sys_enter_close", "-o", data, "--", bin}, &stdout, &stderr); rc != 0 {
		t.Skipf("ustack record cannot record here (status %d): %s", rc, stderr.String())
	}
	stderr.Reset()
	require.Equal(t, 0, run([]string{"archive", data}, &stdout, &stderr), stderr.String())
	tarball := data + ".tar.gz"
	st, err := os.Stat(tarball)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	require.NoError(t, os.Remove(bin))
	home := t.TempDir()
	cache := filepath.Join(home, ".debug")
	require.NoError(t, os.MkdirAll(cache, 0o755))
	if out, err := exec.Command("tar", "xf", tarball, "-C", cache).CombinedOutput(); err != nil {
		t.Fatalf("tar xf %s: %v\n%s", tarball, err, out)
	}
	cmd := exec.Command(perf, "script", "-i", data)
	cmd.Env = append(os.Environ(), "HOME="+home)
	var perr bytes.Buffer
	cmd.Stderr = &perr
	out, err := cmd.Output()
	require.NoError(t, err, perr.String())
	assert.Equal(t, 20, chainCount(string(out)), "perf script with the exported cache names leaf <- mid <- top <- main in every close sample:\n%s", head(string(out)))

	// The same through --buildid-dir.
	cache2 := filepath.Join(t.TempDir(), ".debug")
	stderr.Reset()
	require.Equal(t, 0, run([]string{"archive", "--buildid-dir", cache2, data}, &stdout, &stderr), stderr.String())
	cmd = exec.Command(perf, "--buildid-dir", cache2, "script", "-i", data)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	out, err = cmd.Output()
	require.NoError(t, err)
	assert.Equal(t, 20, chainCount(string(out)), "perf --buildid-dir with the exported cache")
}
