package coredump_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/coredump"
	"github.com/ustack/ustack/internal/coretruth"
	"github.com/ustack/ustack/internal/testfiles"
)

// truth is a testdata/cores/<arch>/<name>.json file (testdata/cores/README.md).
type truth struct{ coretruth.Truth }

func hex(t testing.TB, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	require.NoError(t, err, "hex %q", s)
	return v
}

// testdataDir returns the repository's testdata/ with its packed objects
// (glibc's, which the cores map) unpacked.
func testdataDir() string {
	d := testfiles.Dir()
	if err := testfiles.Unpack(d); err != nil {
		panic(err)
	}
	return d
}

// fixtures returns every core truth file.
func fixtures(t testing.TB) []*truth {
	t.Helper()
	all, err := coretruth.Load(testdataDir())
	require.NoError(t, err)
	out := make([]*truth, len(all))
	for i, tr := range all {
		out[i] = &truth{*tr}
	}
	return out
}

// options opens mapped files from their committed copies.
func (tr *truth) options() *coredump.Options {
	return &coredump.Options{OpenMapped: func(path string) (coredump.ReaderAt, error) {
		rel, ok := tr.Files[path]
		if !ok {
			return nil, os.ErrNotExist
		}
		return os.Open(filepath.Join(testdataDir(), rel))
	}}
}

func (tr *truth) corePath() string { return filepath.Join(testdataDir(), tr.Core) }

func (tr *truth) open(t testing.TB) *coredump.Core {
	t.Helper()
	c, err := coredump.Open(tr.corePath(), tr.options())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}
