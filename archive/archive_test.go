package archive

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeTestArchive writes a small archive and returns its bytes.
func writeTestArchive(t testing.TB, dir string, compact bool) []byte {
	p := filepath.Join(dir, "a.ustack")
	aw, err := Create(p, Meta{Hostname: "h", Arch: "x86_64"}, false)
	require.NoError(t, err)
	aw.AddObject([]byte{0xde, 0xad, 0xbe, 0xef}, "/usr/bin/x", []byte("\x7fELF object bytes"))
	aw.AddObject(nil, "/opt/no build id", []byte("no id"))
	aw.AddVDSO([]byte{1, 2, 3}, []byte("vdso image"))
	aw.AddKallsyms([]byte("ffffffff81000000 T _text\n"))
	aw.AddDebugFileStream([]byte{0xde, 0xad, 0xbe, 0xef}, "/usr/lib/debug/.build-id/de/adbeef.debug",
		strings.NewReader("debug"), 5, nil)
	require.NoError(t, aw.Close())
	if compact {
		require.NoError(t, Compact(p))
	}
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return b
}

func TestArchiveRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, compact := range []bool{false, true} {
		b := writeTestArchive(t, dir, compact)
		st, err := os.Stat(filepath.Join(dir, "a.ustack"))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
		a, err := NewReader(bytes.NewReader(b), int64(len(b)), Options{})
		require.NoError(t, err)
		if m := a.Meta(); m.Version != Version || m.Hostname != "h" {
			t.Errorf("meta %+v", m)
		}
		if d, p, ok := a.ObjectByID([]byte{0xde, 0xad, 0xbe, 0xef}); !ok || p != "/usr/bin/x" || string(d) != "\x7fELF object bytes" {
			t.Errorf("ObjectByID: %q %q %v", d, p, ok)
		}
		if d, id, ok := a.ObjectByPath("/opt/no build id"); !ok || len(id) != 0 || string(d) != "no id" {
			t.Errorf("ObjectByPath: %q %x %v", d, id, ok)
		}
		if d, id, ok := a.VDSO(); !ok || string(d) != "vdso image" || !bytes.Equal(id, []byte{1, 2, 3}) {
			t.Errorf("VDSO: %q %x %v", d, id, ok)
		}
		if k, _ := io.ReadAll(a.Kallsyms()); string(k) != "ffffffff81000000 T _text\n" {
			t.Errorf("Kallsyms: %q", k)
		}
		if d, ok := a.DebugFile([]byte{0xde, 0xad, 0xbe, 0xef}); !ok || string(d) != "debug" {
			t.Errorf("DebugFile: %q %v", d, ok)
		}
		assert.NoError(t, a.Err())
		for _, e := range a.Entries() {
			assert.True(t, e.hasSum, "member %s has no checksum", e.Member)
			assert.Equal(t, compact && e.Kind != KindMeta && e.Kind != KindManifest, e.Gzip, e.Member)
		}
	}
}

// TestRewriteDrops: Rewrite keeps every member keep accepts, byte for byte
// and checked, and only those.
func TestRewriteDrops(t *testing.T) {
	dir := t.TempDir()
	writeTestArchive(t, dir, false)
	p := filepath.Join(dir, "a.ustack")
	require.NoError(t, Rewrite(p, func(e Entry) bool { return e.Kind != KindKallsyms }))
	a, err := Open(p, Options{})
	require.NoError(t, err)
	defer a.Close()
	require.NoError(t, a.Err())
	assert.Nil(t, a.Kallsyms(), "kallsyms kept")
	d, path, ok := a.ObjectByID([]byte{0xde, 0xad, 0xbe, 0xef})
	assert.True(t, ok)
	assert.Equal(t, "/usr/bin/x", path)
	assert.Equal(t, "\x7fELF object bytes", string(d))
	v, _, ok := a.VDSO()
	assert.True(t, ok)
	assert.Equal(t, "vdso image", string(v))
	dbg, ok := a.DebugFile([]byte{0xde, 0xad, 0xbe, 0xef})
	assert.True(t, ok)
	assert.Equal(t, "debug", string(dbg))
	kinds := map[string]int{}
	for _, e := range a.Entries() {
		kinds[e.Kind]++
	}
	assert.Zero(t, kinds[KindKallsyms])
	assert.Equal(t, 2, kinds[KindObject])
}

// TestObject checks the resolver's form: by build-id, the vdso by name,
// and by path only when the build-ids agree.
func TestObject(t *testing.T) {
	b := writeTestArchive(t, t.TempDir(), true)
	a, err := NewReader(bytes.NewReader(b), int64(len(b)), Options{})
	require.NoError(t, err)
	id := []byte{0xde, 0xad, 0xbe, 0xef}
	d, name, ok := a.Object(id, "/elsewhere/x")
	assert.True(t, ok)
	assert.Equal(t, "/usr/bin/x", name)
	assert.Equal(t, "\x7fELF object bytes", string(d))
	d, name, ok = a.Object(nil, "[vdso]")
	assert.True(t, ok)
	assert.Equal(t, "[vdso]", name)
	assert.Equal(t, "vdso image", string(d))
	_, _, ok = a.Object([]byte{9}, "[vdso]")
	assert.False(t, ok, "a vdso of another build-id")
	d, name, ok = a.Object(nil, "/opt/no build id")
	assert.True(t, ok)
	assert.Equal(t, "/opt/no build id", name)
	assert.Equal(t, "no id", string(d))
	_, _, ok = a.Object([]byte{1, 1}, "/usr/bin/x")
	assert.False(t, ok, "the path's object has another build-id")
}

// TestOldArchiveReadable reads an archive as version-1 writers made it
// before members carried checksums (no USTACK.crc32c / USTACK.hcrc32c).
func TestOldArchiveReadable(t *testing.T) {
	b := writeTestArchive(t, t.TempDir(), true)
	old := stripSums(t, b)
	a, err := NewReader(bytes.NewReader(old), int64(len(old)), Options{})
	require.NoError(t, err)
	assert.NoError(t, a.Err())
	d, ok := a.DebugFile([]byte{0xde, 0xad, 0xbe, 0xef})
	assert.True(t, ok)
	assert.Equal(t, "debug", string(d))
	for _, e := range a.Entries() {
		assert.False(t, e.hasSum, e.Member)
	}
}

// FuzzReadArchive: no input makes the archive reader panic, hang or
// allocate without bound.
func FuzzReadArchive(f *testing.F) {
	f.Add(writeTestArchive(f, f.TempDir(), false))
	f.Add(writeTestArchive(f, f.TempDir(), true))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := NewReader(bytes.NewReader(b), int64(len(b)), Options{})
		if err != nil {
			return
		}
		for _, e := range a.Entries() {
			if e.off+e.csize > int64(len(b)) {
				t.Fatalf("member %s runs past the input", e.Member)
			}
		}
		a.ObjectByID([]byte{0xde, 0xad, 0xbe, 0xef})
		a.ObjectByPath("/usr/bin/x")
		a.Object(nil, "[vdso]")
		if k := a.Kallsyms(); k != nil {
			io.Copy(io.Discard, k)
		}
		a.DebugFile([]byte{0xde, 0xad, 0xbe, 0xef})
		for _, err := range a.Damage() {
			if !strings.Contains(err.Error(), "offset 0x") {
				t.Fatalf("damage without an offset: %v", err)
			}
		}
	})
}

// stripSums rewrites an archive without the checksum records, as writers
// before them made it.
func stripSums(t *testing.T, b []byte) []byte {
	var out bytes.Buffer
	tr := tar.NewReader(bytes.NewReader(b))
	tw := tar.NewWriter(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		delete(h.PAXRecords, paxSum)
		delete(h.PAXRecords, paxHSum)
		require.NoError(t, tw.WriteHeader(h))
		_, err = io.Copy(tw, tr)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return out.Bytes()
}
