package main

import (
	"context"
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

// TestReportPerfDirectory: perf record --threads writes a directory (the
// header file data, one file of records per thread), which ustack does
// not read. Before, the report failed with "read DIR: is a directory";
// now it says what the directory is and how to join it, with no report
// on standard output. The command it gives, run, makes a recording whose
// report has every sample perf script finds in the directory (threadsSrc:
// two threads computing).
func TestReportPerfDirectory(t *testing.T) {
	testprog.NeedPerfEvents(t)
	perf := testprog.Perf(t)
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "threads.c", threadsSrc, "-O2", "-g", "-pthread")
	data := filepath.Join(dir, "thr.data")
	testprog.Record(t, data, "--threads", "-e", "cpu-clock", "-F", "500", "--call-graph", "dwarf", "--", bin)
	if st, err := os.Stat(data); err != nil || !st.IsDir() {
		t.Skipf("perf record --threads wrote no directory here (%v)", err)
	}
	want := strings.Count(testprog.Script(t, data, "-F", "event"), "cpu-clock")
	require.NotZero(t, want, "perf script finds no sample in %s", data)

	rc, out, errs := run3([]string{"report", "-kallsyms", "-", "-i", data})
	assert.Equal(t, exitError, rc, errs)
	assert.Empty(t, out)
	assert.Contains(t, errs, data+" is a directory in perf's directory format (perf record --threads)")
	m := regexp.MustCompile(`perf inject -i (\S+) -o - > (\S+) joins`).FindStringSubmatch(errs)
	require.NotNil(t, m, "no command to join it: %s", errs)
	require.Equal(t, data, m[1])

	f, err := os.OpenFile(m[2], os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	require.NoError(t, err)
	var injectErr strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), testprog.Timeout)
	defer cancel()
	inject := exec.CommandContext(ctx, perf, "inject", "-i", m[1], "-o", "-")
	inject.Stdout, inject.Stderr = f, &injectErr
	err = inject.Run()
	f.Close()
	require.NoError(t, err, "%s", injectErr.String())
	rc, out, errs = run3([]string{"report", "-kallsyms", "-", "-i", m[2]})
	require.Equal(t, exitOK, rc, errs)
	assert.Equal(t, want, strings.Count(out, "cpu-clock"), "samples of the joined recording")
	assert.Contains(t, out, "leaf")
}
