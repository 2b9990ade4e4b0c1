package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type tarMember struct {
	name, link string
	data       string
	dir        bool
}

func makeTar(t testing.TB, ms []tarMember, gz bool) []byte {
	var buf bytes.Buffer
	var w = &buf
	var zw *gzip.Writer
	tw := tar.NewWriter(w)
	if gz {
		zw = gzip.NewWriter(w)
		tw = tar.NewWriter(zw)
	}
	for _, m := range ms {
		h := &tar.Header{Name: m.name, Mode: 0o644, Size: int64(len(m.data)), Typeflag: tar.TypeReg}
		switch {
		case m.link != "":
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, m.link, 0
		case m.dir:
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		require.NoError(t, tw.WriteHeader(h))
		if h.Size > 0 {
			tw.Write([]byte(m.data))
		}
	}
	require.NoError(t, tw.Close())
	if zw != nil {
		require.NoError(t, zw.Close())
	}
	return buf.Bytes()
}

func extract(t *testing.T, tarball []byte) (string, int, error) {
	dir := t.TempDir()
	p := filepath.Join(dir, "perf.data.tar.bz2")
	require.NoError(t, os.WriteFile(p, tarball, 0o600))
	root := filepath.Join(dir, "cache")
	require.NoError(t, os.Mkdir(root, 0o700))
	n, err := ExtractPerfTarball(p, root, 1<<20)
	return root, n, err
}

// TestExtractPerfTarball unpacks perf archive's layout and refuses names,
// links and writes that would leave the cache directory.
func TestExtractPerfTarball(t *testing.T) {
	good := []tarMember{
		{name: ".build-id/ab/cdef", link: "../../usr/bin/prog/abcdef"},
		{name: "usr/bin/prog/abcdef/", dir: true},
		{name: "usr/bin/prog/abcdef/elf", data: "\x7fELF..."},
	}
	root, n, err := extract(t, makeTar(t, good, true))
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	b, err := os.ReadFile(filepath.Join(root, ".build-id/ab/cdef/elf"))
	require.NoError(t, err, "the object is reached by build-id through the link")
	assert.Equal(t, "\x7fELF...", string(b))

	for name, ms := range map[string][]tarMember{
		"dot-dot name":       {{name: "../escape", data: "x"}},
		"absolute link":      {{name: ".build-id/ab/cdef", link: "/etc"}},
		"escaping link":      {{name: ".build-id/ab/cdef", link: "../../../../etc"}},
		"write through link": {{name: ".build-id/ab/cdef", link: "../../usr"}, {name: ".build-id/ab/cdef/x", data: "x"}},
		"too large":          {{name: "big/elf", data: strings.Repeat("x", 2<<20)}},
	} {
		root, _, err := extract(t, makeTar(t, ms, false))
		assert.Error(t, err, name)
		_, statErr := os.Lstat(filepath.Join(filepath.Dir(root), "escape"))
		assert.True(t, os.IsNotExist(statErr), "%s: nothing written outside", name)
	}
	// A truncated tarball keeps what came before the damage.
	tb := makeTar(t, append(good, tarMember{name: "usr/lib/x/ID/elf", data: strings.Repeat("y", 4096)}), false)
	root, n, err = extract(t, tb[:len(tb)-3000])
	assert.Error(t, err)
	assert.Equal(t, 1, n)
	_, err = os.Stat(filepath.Join(root, "usr/bin/prog/abcdef/elf"))
	assert.NoError(t, err)
}

func FuzzExtractPerfTarball(f *testing.F) {
	f.Add(makeTar(f, []tarMember{
		{name: ".build-id/ab/cdef", link: "../../usr/bin/prog/abcdef"},
		{name: "usr/bin/prog/abcdef/elf", data: "\x7fELF"},
	}, false))
	f.Add(makeTar(f, []tarMember{{name: "a/b/debug", data: "zz"}}, true))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		p := filepath.Join(dir, "in.tar")
		os.WriteFile(p, data, 0o600)
		root := filepath.Join(dir, "cache")
		os.Mkdir(root, 0o700)
		ExtractPerfTarball(p, root, 1<<20)
		// Nothing may appear beside the cache directory.
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.Name() != "in.tar" && e.Name() != "cache" {
				t.Fatalf("extraction wrote %s outside the cache", e.Name())
			}
		}
	})
}
