package testfiles

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ulikunitz/xz"
)

// writeXZ writes data xz-compressed to path.
func writeXZ(t *testing.T, path string, data []byte) {
	t.Helper()
	var buf bytes.Buffer
	w, err := xz.NewWriter(&buf)
	require.NoError(t, err)
	_, err = w.Write(data)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
}

func TestUnpack(t *testing.T) {
	dir := t.TempDir()
	obj := filepath.Join(dir, "objects", "x86_64")
	bin := filepath.Join(dir, "cores", "x86_64", "bin")
	rec := filepath.Join(dir, "recordings")
	for _, d := range []string{obj, bin, rec} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	lib := bytes.Repeat([]byte("\x7fELF library "), 1000)
	writeXZ(t, filepath.Join(obj, "lib.so.xz"), lib)
	writeXZ(t, filepath.Join(bin, "prog.xz"), []byte("prog"))
	writeXZ(t, filepath.Join(rec, "perf.data.xz"), []byte("stays packed"))

	require.NoError(t, Unpack(dir))
	got, err := os.ReadFile(filepath.Join(obj, "lib.so"))
	require.NoError(t, err)
	assert.Equal(t, lib, got)
	got, err = os.ReadFile(filepath.Join(bin, "prog"))
	require.NoError(t, err)
	assert.Equal(t, "prog", string(got))
	assert.NoFileExists(t, filepath.Join(rec, "perf.data"), "only objects/ and cores/*/bin/ are unpacked")
	entries, err := os.ReadDir(obj)
	require.NoError(t, err)
	assert.Len(t, entries, 2, "no temporary file is left behind: %v", entries)

	// A newer .xz replaces the unpacked file; an unpacked file at least
	// as new as its .xz is kept.
	newer := []byte("\x7fELF rebuilt")
	writeXZ(t, filepath.Join(obj, "lib.so.xz"), newer)
	future := time.Now().Add(time.Hour)
	require.NoError(t, os.Chtimes(filepath.Join(obj, "lib.so.xz"), future, future))
	require.NoError(t, unpackTree(dir))
	got, err = os.ReadFile(filepath.Join(obj, "lib.so"))
	require.NoError(t, err)
	assert.Equal(t, newer, got)
	require.NoError(t, os.WriteFile(filepath.Join(bin, "prog"), []byte("edited"), 0o644))
	require.NoError(t, unpackTree(dir))
	got, err = os.ReadFile(filepath.Join(bin, "prog"))
	require.NoError(t, err)
	assert.Equal(t, "edited", string(got), "an unpacked file newer than its .xz is not rewritten")
}

func TestUnpackDamaged(t *testing.T) {
	dir := t.TempDir()
	obj := filepath.Join(dir, "objects", "aarch64")
	require.NoError(t, os.MkdirAll(obj, 0o755))
	writeXZ(t, filepath.Join(obj, "libc.so.6.xz"), bytes.Repeat([]byte("glibc"), 5000))
	raw, err := os.ReadFile(filepath.Join(obj, "libc.so.6.xz"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(obj, "libc.so.6.xz"), raw[:len(raw)/2], 0o644))
	first := Unpack(dir)
	require.Error(t, first)
	assert.Contains(t, first.Error(), filepath.Join(obj, "libc.so.6.xz"))
	assert.NoFileExists(t, filepath.Join(obj, "libc.so.6"), "a damaged .xz leaves no plain file")
	entries, err := os.ReadDir(obj)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file is left behind: %v", entries)
	assert.Equal(t, first, Unpack(dir), "later calls return the first call's result")
}

// TestCommittedObjects unpacks the repository's testdata and checks that
// every packed object becomes an ELF file whose build-id note is intact,
// and that each unpacked object is named in testdata/.gitignore.
func TestCommittedObjects(t *testing.T) {
	dir := Dir()
	require.NoError(t, Unpack(dir))
	ignore, err := os.ReadFile(filepath.Join(dir, ".gitignore"))
	require.NoError(t, err)
	n := 0
	for _, pattern := range packedDirs {
		packed, err := filepath.Glob(filepath.Join(dir, filepath.FromSlash(pattern), "*.xz"))
		require.NoError(t, err)
		for _, p := range packed {
			n++
			plain := strings.TrimSuffix(p, ".xz")
			f, err := elf.Open(plain)
			if !assert.NoError(t, err, plain) {
				continue
			}
			assert.NotNil(t, f.Section(".note.gnu.build-id"), "%s: no build-id note", plain)
			f.Close()
			rel, err := filepath.Rel(dir, plain)
			require.NoError(t, err)
			assert.Contains(t, string(ignore), "/"+filepath.ToSlash(rel)+"\n", "testdata/.gitignore")
		}
	}
	assert.NotZero(t, n, "no packed objects under %s", dir)
}
