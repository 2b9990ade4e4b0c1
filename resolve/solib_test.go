package resolve

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/internal/testprog"
)

// TestLibraryPaths lays out a machine's root as a Crashpad minidump's
// modules would need it found: the program in /opt/app/bin, whose RUNPATH
// ($ORIGIN/../lib) holds libA.so, whose own RUNPATH names /opt/private,
// where libB.so is; another build of libB.so (another build-id) sits in
// the system's library directory, searched before /opt/private is known.
// Each is found where it was put, by its build-id, never the other
// build's; a name nothing holds, a file of another architecture, and a
// name without a build-id (which could be any build) are not found.
func TestLibraryPaths(t *testing.T) {
	root := t.TempDir()
	build := func(dir, name, id string, flags ...string) string {
		t.Helper()
		src := t.TempDir()
		out := testprog.Build(t, src, "lib.c", "int f(void) { return 1; }\n",
			append([]string{"-shared", "-fPIC", "-Wl,--build-id=0x" + id, "-Wl,--enable-new-dtags"}, flags...)...)
		dst := filepath.Join(root, dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
		require.NoError(t, os.Rename(out, dst))
		return filepath.Join("/", dir, name)
	}
	const (
		idA     = "aa01020304050607080910111213141516171819"
		idB     = "bb01020304050607080910111213141516171819"
		idOther = "cc01020304050607080910111213141516171819"
		idProg  = "dd01020304050607080910111213141516171819"
	)
	prog := build("opt/app/bin", "prog", idProg, "-Wl,-rpath,$ORIGIN/../lib")
	libA := build("opt/app/lib", "libA.so", idA, "-Wl,-rpath,/opt/private")
	libB := build("opt/private", "libB.so", idB)
	build("usr/lib/x86_64-linux-gnu", "libB.so", idOther)
	a64, err := os.ReadFile(filepath.Join("..", "testdata", "objects", "aarch64", "vdso-6.1.0-57-arm64.so"))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(root, "usr", "lib"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "usr", "lib", "libwrong.so"), a64, 0o644))

	id := func(s string) []byte {
		b, err := hex.DecodeString(s)
		require.NoError(t, err)
		return b
	}
	got := LibraryPaths(arch.AMD64, root, []string{prog}, []LibraryQuery{
		{Name: "libB.so", BuildID: id(idB)},
		{Name: "libA.so", BuildID: id(idA)},
		{Name: "libB.so", BuildID: id(idOther)},
		{Name: "libB.so", BuildID: id(idB)[:16], BuildIDPrefix: true},
		{Name: "libnone.so.1", BuildID: id(idA)},
		{Name: "libwrong.so"},
		{Name: "libA.so"},
		{Name: "libA.so", BuildID: id(idOther)},
	})
	assert.Equal(t, []string{libB, libA, "/usr/lib/x86_64-linux-gnu/libB.so", libB, "", "", "", ""}, got)

	got = LibraryPaths(arch.ARM64, root, nil, []LibraryQuery{
		{Name: "libwrong.so", BuildID: id("92a4c03c5ff6411b56978d97a42ee4500f224ba9")},
		{Name: "libA.so", BuildID: id(idA)},
	})
	assert.Equal(t, []string{"/usr/lib/libwrong.so", ""}, got, "an aarch64 object is found for arm64 only; no x86_64 one is")
}
