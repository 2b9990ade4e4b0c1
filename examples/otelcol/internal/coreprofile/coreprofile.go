// Package coreprofile makes, for tests, ustack report's OpenTelemetry
// profile of a core dump fixture of ustack's testdata.
package coreprofile

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/ustack/ustack/internal/coretruth"
	"github.com/ustack/ustack/report"
)

// Of reports the core fixture name ("x86_64/threads") of testdata as
// ustack report --format otlp does, without tail call frames (a
// symbolizer sees addresses, not unwinds), and returns the request and a
// symfs holding the fixture's objects.
func Of(t testing.TB, testdata, name string) (pprofile.Profiles, string) {
	t.Helper()
	all, err := coretruth.Load(testdata)
	require.NoError(t, err)
	var tr *coretruth.Truth
	for _, c := range all {
		if c.Arch+"/"+c.Name == name {
			tr = c
		}
	}
	require.NotNil(t, tr, name)
	symfs := t.TempDir()
	_, err = tr.Symfs(symfs, testdata)
	require.NoError(t, err)
	opts := report.CoreOptions{Options: report.Options{SymFS: symfs, Kallsyms: "-", NoTailCall: true}}
	c, err := report.OpenCore(filepath.Join(testdata, tr.Core), opts)
	require.NoError(t, err)
	defer c.Close()
	var buf bytes.Buffer
	w, err := report.NewWriter("otlp", &buf, report.WriterOptions{})
	require.NoError(t, err)
	_, err = report.RunCore(c, opts, w.Write)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	var u pprofile.ProtoUnmarshaler
	p, err := u.UnmarshalProfiles(buf.Bytes())
	require.NoError(t, err)
	return p, symfs
}
