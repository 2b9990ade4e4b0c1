package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
)

// frameFlags build progSrc with frame pointers.
var frameFlags = []string{"-O2", "-g", "-fno-omit-frame-pointer"}

// burnSrc is progSrc with leaf burning CPU long enough for cpu-clock.
var burnSrc = strings.Replace(progSrc, "i < 100000", "i < 20000000", 1)

// chainCount counts the samples of perf script or ustack report text
// output whose stack holds leaf, mid, top and main in this order.
func chainCount(out string) int {
	return testprog.ChainCount(out, "leaf", "mid", "top", "main")
}

// TestArchiveForPerf: ustack record, then ustack archive; the program is
// deleted and perf report runs with an empty HOME whose build-id cache is
// only the unpacked tarball: perf must name the program's functions from
// the exported objects.
func TestArchiveForPerf(t *testing.T) {
	testprog.Perf(t)
	// Recorded as perf records: perf script would print the kernel's
	// user chain before its own unwind (docs/DUMP_FORMAT.md).
	bin, data := recordCloseWith(t, []string{"--no-user-callchain"}, frameFlags...)
	var stdout, stderr bytes.Buffer
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
	cmd := testprog.PerfCommand(t, "script", "-i", data)
	cmd.Env = append(os.Environ(), "HOME="+home)
	out := testprog.Output(t, cmd)
	assert.Equal(t, 20, chainCount(out), "perf script with the exported cache names leaf <- mid <- top <- main in every close sample:\n%s", head(out))

	// The same through --buildid-dir.
	cache2 := filepath.Join(t.TempDir(), ".debug")
	stderr.Reset()
	require.Equal(t, 0, run([]string{"archive", "--buildid-dir", cache2, data}, &stdout, &stderr), stderr.String())
	cmd = testprog.PerfCommand(t, "--buildid-dir", cache2, "script", "-i", data)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	out = testprog.Output(t, cmd)
	assert.Equal(t, 20, chainCount(out), "perf --buildid-dir with the exported cache")
}

// TestReportPerfArchive: perf record, then perf archive; the program and
// perf's build-id cache are deleted, and ustack report, with no build-id
// cache and the program gone, must name leaf <- mid <- top <- main from
// the objects in perf.data.tar.bz2 alone. (perf archive keeps only objects
// that sampled IPs hit, so the program burns CPU under cpu-clock.)
func TestReportPerfArchive(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("recording tracepoints needs root")
	}
	testprog.Perf(t)
	if _, err := exec.LookPath("bzip2"); err != nil {
		t.Skip("perf archive needs bzip2")
	}
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "prog.c", burnSrc, frameFlags...)
	home := t.TempDir() // perf keeps its build-id cache in $HOME/.debug
	env := append(os.Environ(), "HOME="+home)
	data := filepath.Join(dir, "perf.data")
	rec := testprog.PerfCommand(t, "record", "-q", "-e", "cpu-clock", "-F", "2000", "--call-graph", "dwarf", "-o", data, "--", bin)
	rec.Env = env
	if out, err := rec.CombinedOutput(); err != nil {
		t.Skipf("perf record: %v\n%s", err, out)
	}
	arc := testprog.PerfCommand(t, "archive", data)
	arc.Env = env
	arc.Dir = dir
	out, err := arc.CombinedOutput()
	require.NoError(t, err, "perf archive: %s", out)
	require.FileExists(t, data+".tar.bz2")

	require.NoError(t, os.Remove(bin))
	require.NoError(t, os.RemoveAll(filepath.Join(home, ".debug")))
	empty := t.TempDir()
	var stdout, stderr bytes.Buffer
	rc := run([]string{"report", "-i", data, "--buildid-dir", empty, "--kallsyms", "-"}, &stdout, &stderr)
	require.Equal(t, 0, rc, stderr.String())
	unnamed := "[unknown] (" + bin + ")"
	assert.NotContains(t, stdout.String(), unnamed, "every frame in the program is named from the tarball")
	assert.Greater(t, chainCount(stdout.String()), 10, "samples unwound through leaf <- mid <- top <- main:\n%s", head(stdout.String()))

	// --verbose names the tarball, and the program as found in it (not
	// in a build-id cache); so does a report asked to do without the
	// recording's own archive (--archive -), since the tarball is one.
	used := "ustack report: using the perf archive " + data + ".tar.bz2 beside the recording (--perf-archive - for none)\n"
	for _, flag := range []string{"--verbose", "--archive=-"} {
		stderr.Reset()
		rc = run([]string{"report", "-i", data, "--buildid-dir", empty, "--kallsyms", "-", flag, "-o", filepath.Join(dir, "out")}, &stdout, &stderr)
		require.Equal(t, 0, rc, stderr.String())
		assert.Contains(t, stderr.String(), used, flag)
	}
	assert.NotContains(t, stderr.String(), "  "+bin+": object", "--archive - is not --verbose")
	stderr.Reset()
	rc = run([]string{"report", "-i", data, "--buildid-dir", empty, "--kallsyms", "-", "--verbose", "-o", filepath.Join(dir, "out")}, &stdout, &stderr)
	require.Equal(t, 0, rc, stderr.String())
	assert.Contains(t, stderr.String(), "\n  "+bin+": object perf archive, ")

	// Without the tarball the program's frames cannot be named, and the
	// summary says, once, which options could find it: not
	// --buildid-dir, given; DEBUGINFOD_URLS, unset.
	t.Setenv("DEBUGINFOD_URLS", "")
	stdout.Reset()
	stderr.Reset()
	run([]string{"report", "-i", data, "--buildid-dir", empty, "--kallsyms", "-", "--perf-archive", "-"}, &stdout, &stderr)
	assert.Zero(t, chainCount(stdout.String()), "the chain came from somewhere else than the tarball")
	assert.Contains(t, stdout.String(), unnamed)
	fix := "ustack: to use them: --symfs DIR finds them under DIR, a copy of the recording machine's root, holding DIR" + bin + "; " +
		"--perf-archive FILE finds them in the tarball that perf archive makes on the recording machine; " +
		"DEBUGINFOD_URLS=URL fetches them by build-id from a debuginfod server\n"
	assert.Regexp(t, "(?m)^  "+regexp.QuoteMeta(bin)+": not found.*\n"+regexp.QuoteMeta(fix), stderr.String())
	assert.Equal(t, 1, strings.Count(stderr.String(), "to use them"), stderr.String())

	// Without --buildid-dir (an empty ~/.debug) it is one more way.
	t.Setenv("HOME", t.TempDir())
	stderr.Reset()
	run([]string{"report", "-i", data, "--kallsyms", "-", "--perf-archive", "-", "-o", filepath.Join(dir, "out")}, &stdout, &stderr)
	assert.Contains(t, stderr.String(), "; --buildid-dir DIR finds them by build-id in DIR, a copy of the recording machine's ~/.debug; ")
}
