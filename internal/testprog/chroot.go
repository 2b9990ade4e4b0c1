package testprog

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// BuildID returns the build-id readelf -n prints for file, skipping t
// without readelf and failing it when there is none.
func BuildID(t testing.TB, file string) string {
	t.Helper()
	out := Tool(t, "", "readelf", "-n", file)
	m := regexp.MustCompile(`Build ID: ([0-9a-f]+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("readelf -n %s prints no build-id:\n%s", file, out)
	}
	return m[1]
}

// ChrootRoot lays out a root for chroot(8) to run bin in, in a new
// directory: bin as /prog, and copies of the libraries ldd names at their
// paths, libc's with its build-id changed (another build of the same code,
// as a container's libc is to its host's). It returns the root and libc's
// path (as the process maps it, in the root and on the host). It skips t
// without ldd or readelf, or when ldd names no libc.
func ChrootRoot(t testing.TB, bin string) (root, libc string) {
	t.Helper()
	root = filepath.Join(t.TempDir(), "root")
	copyFile := func(from, to string) {
		b, err := os.ReadFile(from)
		if err == nil {
			err = os.MkdirAll(filepath.Dir(to), 0o755)
		}
		if err == nil {
			err = os.WriteFile(to, b, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	copyFile(bin, filepath.Join(root, "prog"))
	ldd := Tool(t, "", "ldd", bin)
	for _, m := range regexp.MustCompile(`(?m)(?:=> )?(/\S+) \(0x`).FindAllStringSubmatch(ldd, -1) {
		copyFile(m[1], filepath.Join(root, m[1]))
		if strings.HasPrefix(filepath.Base(m[1]), "libc.so") {
			libc = m[1]
		}
	}
	if libc == "" {
		t.Skipf("ldd names no libc.so for %s:\n%s", bin, ldd)
	}
	// Another build-id: the note's descriptor, its bytes inverted.
	id, err := hex.DecodeString(BuildID(t, libc))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, libc)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, id); n != 1 {
		t.Fatalf("%s holds its build-id %x %d times, want once", libc, id, n)
	}
	other := make([]byte, len(id))
	for i, c := range id {
		other[i] = ^c
	}
	if err := os.WriteFile(file, bytes.Replace(b, id, other, 1), 0o755); err != nil {
		t.Fatal(err)
	}
	return root, libc
}
