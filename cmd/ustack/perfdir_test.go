package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

// TestReportPerfDirectory: perf record --threads writes a directory (the
// header file data, then one file of records per recording thread, each
// holding the side-band records and samples of its CPUs). Before, ustack
// report failed on it ("read DIR: is a directory"). Its report must be,
// byte for byte in text and JSON, the report of the one recording perf
// itself joins it into (perf inject -i DIR -o -), and hold every sample
// perf script finds in the directory (threadsSrc: two threads computing).
func TestReportPerfDirectory(t *testing.T) {
	testprog.NeedPerfEvents(t)
	perf := testprog.Perf(t)
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "threads.c", threadsSrc, "-O2", "-g", "-pthread")
	data := filepath.Join(dir, "thr.data")
	testprog.Record(t, data, "--threads", "-e", "cpu-clock", "-F", "999", "--call-graph", "dwarf", "--", bin)
	if st, err := os.Stat(data); err != nil || !st.IsDir() {
		t.Skipf("perf record --threads wrote no directory here (%v)", err)
	}
	parts, _ := filepath.Glob(filepath.Join(data, "data.*"))
	require.NotEmpty(t, parts, "no data.N file in %s", data)
	want := strings.Count(testprog.Script(t, data, "-F", "event"), "cpu-clock")
	require.NotZero(t, want, "perf script finds no sample in %s", data)

	joined := filepath.Join(dir, "joined.data")
	f, err := os.OpenFile(joined, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	require.NoError(t, err)
	var injectErr strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), testprog.Timeout)
	defer cancel()
	inject := exec.CommandContext(ctx, perf, "inject", "-i", data, "-o", "-")
	inject.Stdout, inject.Stderr = f, &injectErr
	err = inject.Run()
	f.Close()
	require.NoError(t, err, "%s", injectErr.String())

	for _, format := range []string{"text", "json"} {
		rc, fromDir, errs := run3([]string{"report", "-kallsyms", "-", "-format", format, "-i", data})
		require.Equal(t, exitOK, rc, errs)
		rc, fromJoined, errs := run3([]string{"report", "-kallsyms", "-", "-format", format, "-i", joined})
		require.Equal(t, exitOK, rc, errs)
		assert.Equal(t, fromJoined, fromDir, "%s: the directory's report is not the joined recording's", format)
		if format == "text" {
			assert.Equal(t, want, strings.Count(fromDir, "cpu-clock"), "samples of the directory")
			assert.Contains(t, fromDir, "leaf")
		}
	}
}
