package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReportPictureFlags runs the README's flame graph command on the
// bundled recording with every flame graph flag, and the speedscope format:
// the flags reach the pictures, and a bad grouping is a usage error.
func TestReportPictureFlags(t *testing.T) {
	data := filepath.Join("..", "..", "perfdata", "testdata", "dwarf.data")
	out := filepath.Join(t.TempDir(), "flame.svg")
	var stdout, stderr bytes.Buffer
	st := run([]string{"report", "-i", data, "--kallsyms", "-", "--archive", "-", "--format", "flamegraph", "-o", out,
		"--title", "dash & co", "--inverted", "--width", "800", "--minwidth", "2", "--group-by", "thread"}, &stdout, &stderr)
	require.Equal(t, exitOK, st, stderr.String())
	svg, err := os.ReadFile(out)
	require.NoError(t, err)
	s := string(svg)
	assert.Contains(t, s, `<svg version="1.1" width="800"`)
	assert.Contains(t, s, `data-inverted="true"`)
	assert.Contains(t, s, `>dash &amp; co</text>`)
	assert.Regexp(t, `<title>sh-\d+/\d+ \(\d+ samples`, s, "no comm-PID/TID group box")
	// No box narrower than 2 pixels.
	rects := regexp.MustCompile(`<rect x="[\d.]+" y="\d+" width="([\d.]+)"`).FindAllStringSubmatch(s, -1)
	require.Greater(t, len(rects), 10)
	for _, m := range rects {
		assert.False(t, strings.HasPrefix(m[1], "0.") || strings.HasPrefix(m[1], "1."), "box %s pixels wide", m[1])
	}

	stdout.Reset()
	stderr.Reset()
	st = run([]string{"report", "-i", data, "--kallsyms", "-", "--archive", "-", "--format", "speedscope", "--title", "dash"}, &stdout, &stderr)
	require.Equal(t, exitOK, st, stderr.String())
	var f struct {
		Schema   string `json:"$schema"`
		Name     string
		Profiles []struct{ Type string }
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &f))
	assert.Equal(t, "https://www.speedscope.app/file-format-schema.json", f.Schema)
	assert.Equal(t, "dash", f.Name)
	assert.NotEmpty(t, f.Profiles)

	stderr.Reset()
	st = run([]string{"report", "-i", data, "--kallsyms", "-", "--format", "flamegraph", "--group-by", "cpu"}, &stdout, &stderr)
	assert.Equal(t, exitUsage, st)
	assert.Contains(t, stderr.String(), `unknown grouping "cpu"`)
}
