package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNoSamplesNoFile: a report of a recording without samples (exit
// status 4) leaves no empty flame graph or profile behind, and a file it
// would have replaced is where it was.
func TestNoSamplesNoFile(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.data")
	writeRecording(t, empty, nil)
	for _, format := range []string{"flamegraph", "pprof", "text", "speedscope"} {
		out := filepath.Join(dir, "out."+format)
		rc, _, errs := runReport(empty, "--format", format, "-o", out)
		require.Equal(t, exitNoSamples, rc, errs)
		assert.NoFileExists(t, out, "--format %s", format)
		assert.NoFileExists(t, out+".old", "--format %s", format)

		require.NoError(t, os.WriteFile(out, []byte("an earlier report\n"), 0o644))
		rc, _, errs = runReport(empty, "--format", format, "-o", out)
		require.Equal(t, exitNoSamples, rc, errs)
		b, err := os.ReadFile(out)
		require.NoError(t, err)
		assert.Equal(t, "an earlier report\n", string(b), "--format %s replaced the earlier file", format)
		assert.NoFileExists(t, out+".old", "--format %s", format)
	}
	// A report that has samples still keeps the earlier file as .old.
	out := filepath.Join(dir, "kept.txt")
	require.NoError(t, os.WriteFile(out, []byte("an earlier report\n"), 0o644))
	rc, _, errs := runReport(dwarfData, "-o", out)
	require.Equal(t, exitOK, rc, errs)
	assert.FileExists(t, out+".old")
}

// TestRefusedNotIgnored: flags and arguments that would do nothing are
// refused with a usage error that names them, not silently ignored.
func TestRefusedNotIgnored(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"report", dwarfData, "--srcline", "--format", "flamegraph"}, "--srcline is for the text format: --format flamegraph has no room for source lines"},
		{[]string{"report", dwarfData, "--srcline", "--format", "json"}, "--srcline is for the text format: --format json carries every frame's file and line already"},
		{[]string{"report", dwarfData, "--max-stack", "0"}, "--max-stack 0: a stack has at least one frame"},
		{[]string{"report", dwarfData, "--max-stack=-3"}, "--max-stack -3"},
		{[]string{"unwind", "--max-frames", "0", "x.json"}, "--max-frames 0"},
		{[]string{"version", "junk"}, `ustack version: takes no arguments, got ["junk"]`},
		{[]string{"help", "report", "junk"}, "ustack help: one command at a time"},
	} {
		rc, out, errs := run3(c.args)
		assert.Equal(t, exitUsage, rc, "%v: %s", c.args, errs)
		assert.Empty(t, out, "%v", c.args)
		assert.Contains(t, errs, c.want, "%v", c.args)
	}
	// --srcline with the text format is what it is for.
	rc, _, errs := run3([]string{"report", "-kallsyms", "-", dwarfData, "--srcline"})
	assert.Equal(t, exitOK, rc, errs)
}

// TestUnwindFlagsAfterFiles: ustack unwind takes its flags after the
// fixtures too, as ustack report takes them after its input; after --
// every argument is a fixture.
func TestUnwindFlagsAfterFiles(t *testing.T) {
	fixtures, err := filepath.Glob("../../testdata/fixtures/x86_64/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, fixtures)
	fx := fixtures[0]
	rc, before, errs := run3([]string{"unwind", "-json", fx})
	require.Equal(t, 0, rc, errs)
	require.Contains(t, before, `"frames":`)
	rc, after, errs := run3([]string{"unwind", fx, "-json"})
	require.Equal(t, 0, rc, errs)
	assert.Equal(t, before, after, "a flag after the fixture is not parsed")
	rc, _, errs = run3([]string{"unwind", "--", "-json"})
	assert.Equal(t, 1, rc, "after --, -json is a fixture's name")
	assert.Contains(t, errs, "-json")
}
