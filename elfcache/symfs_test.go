package elfcache

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// symfsTree builds a symfs directory holding an ELF object at
// /usr/lib/libx.so, and next to it (outside the symfs) a "secret" ELF file
// that no path from a recording may reach.
func symfsTree(t *testing.T) (symfs, secret string) {
	t.Helper()
	obj, err := os.ReadFile(filepath.Join("..", "testdata", "objects", "x86_64", "vdso-dddf5758da86.so"))
	if err != nil {
		t.Fatal(err)
	}
	top := t.TempDir()
	symfs = filepath.Join(top, "symfs")
	secret = filepath.Join(top, "secret.so")
	for _, d := range []string{"usr/lib", "lib64", "links", "etc"} {
		if err := os.MkdirAll(filepath.Join(symfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{filepath.Join(symfs, "usr/lib/libx.so"), filepath.Join(symfs, "secret.so"), secret} {
		if err := os.WriteFile(p, obj, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"links/abs-out":   secret,                 // absolute, outside: read as <symfs>/<secret>
		"links/rel-out":   "../../secret.so",      // relative, climbing out
		"links/deep-out":  "../../../../../../..", // a directory link above the root
		"lib64/ld.so":     "/usr/lib/libx.so",     // a sysroot's absolute link, meant inside
		"links/rel-in":    "../usr/lib/libx.so",   // relative, inside
		"links/loop":      "loop",                 // ELOOP
		"links/dir-out":   filepath.Dir(secret),   // absolute directory link
		"etc/passwd-link": "/../../../../secret.so",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(symfs, name)); err != nil {
			t.Fatal(err)
		}
	}
	return symfs, secret
}

func TestSymFSNoEscape(t *testing.T) {
	symfs, secret := symfsTree(t)
	realSymfs, _ := filepath.EvalSymlinks(symfs)
	opts := Options{SymFS: symfs, NoDebugFile: true, DebugDirs: []string{}}
	for _, tc := range []struct {
		path string
		want string // the file opened, relative to symfs; "" when nothing may be opened
	}{
		{"/usr/lib/libx.so", "usr/lib/libx.so"},
		{"usr/lib/libx.so", "usr/lib/libx.so"},
		{"/lib64/ld.so", "usr/lib/libx.so"},
		{"/links/rel-in", "usr/lib/libx.so"},
		{"../../secret.so", "secret.so"},
		{"/x/../../../secret.so", "secret.so"},
		{"/usr/lib/../../../../secret.so", "secret.so"},
		{"/links/rel-out", "secret.so"},
		{"/links/deep-out/secret.so", "secret.so"},
		{"/etc/passwd-link", "secret.so"},
		{"/links/abs-out", ""},           // <symfs>/<secret's path> does not exist
		{"/links/dir-out/secret.so", ""}, // likewise
		{"/links/loop", ""},              // too many links
		{"/../../etc/shadow", ""},        // <symfs>/etc/shadow does not exist
		{"/x/../../../etc/passwd", ""},   // <symfs>/etc/passwd does not exist
		{filepath.Dir(secret) + "/secret.so", ""},
	} {
		file, err := opts.symfsPath(tc.path)
		if err == nil && !within(realSymfs, file) {
			t.Errorf("%q resolves to %s, outside %s", tc.path, file, realSymfs)
		}
		o, err := Open(tc.path, opts)
		if tc.want == "" {
			if err == nil {
				t.Errorf("%q: opened %s; want an error", tc.path, o.file)
				o.Close()
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.path, err)
			continue
		}
		if want := filepath.Join(realSymfs, tc.want); o.file != want {
			t.Errorf("%q: opened %s; want %s", tc.path, o.file, want)
		}
		o.Close()
	}

	// The cache goes through the same resolution.
	c := NewCache(opts)
	defer c.Close()
	if _, err := c.Open("/links/abs-out"); err == nil {
		t.Error("cache opened a link pointing outside the symfs")
	}
	if o, err := c.Open("/x/../../secret.so"); err != nil || !strings.HasPrefix(o.file, realSymfs+"/") {
		t.Errorf("cache: %v", err)
	}
}

func TestSymFSRootIsLink(t *testing.T) {
	symfs, _ := symfsTree(t)
	alias := filepath.Join(t.TempDir(), "alias")
	if err := os.Symlink(symfs, alias); err != nil {
		t.Fatal(err)
	}
	o := Options{SymFS: alias}
	if _, err := o.symfsPath("/usr/lib/libx.so"); err != nil {
		t.Fatal(err)
	}
	if p, err := o.symfsPath("/links/abs-out"); err != nil || !strings.HasPrefix(p, mustReal(t, symfs)) {
		t.Errorf("abs-out: %s, %v", p, err)
	}
}

func mustReal(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestWithin(t *testing.T) {
	for _, tc := range []struct {
		root, p string
		ok      bool
	}{
		{"/a", "/a", true}, {"/a", "/a/b", true}, {"/a", "/ab", false}, {"/a", "/", false},
		{"/a", "/a/..b", true}, {"/a/b", "/a", false},
	} {
		if got := within(tc.root, tc.p); got != tc.ok {
			t.Errorf("within(%q, %q) = %v", tc.root, tc.p, got)
		}
	}
}

// TestSymFSPathHostPathInRoot: a path of this machine that lies in the
// symfs (qemu-user's -L ROOT records such paths for files its guest
// found by their host path) is found where it lies; a path to the same
// place through "..", or to the file outside the symfs, is not.
func TestSymFSPathHostPathInRoot(t *testing.T) {
	symfs, secret := symfsTree(t)
	want := filepath.Join(symfs, "usr/lib/libx.so")
	for _, p := range []string{"/usr/lib/libx.so", filepath.Join(symfs, "usr/lib/libx.so")} {
		got, err := SymFSPath(symfs, p)
		if err != nil || got != want {
			t.Errorf("SymFSPath(%q) = %q, %v; want %q", p, got, err, want)
		}
	}
	for _, p := range []string{secret, symfs + "/../secret.so", symfs + "/links/abs-out"} {
		got, err := SymFSPath(symfs, p)
		if err == nil && got == secret {
			t.Errorf("SymFSPath(%q) = %q: outside the symfs", p, got)
		}
	}
	if got, _ := SymFSPath("", "/usr/lib/libx.so"); got != "/usr/lib/libx.so" {
		t.Errorf("no symfs: %q", got)
	}
}

// TestSymFSSelfLinkSaysWhy: a symfs made of links to this machine's
// directories (usr -> /usr) loops, since an absolute target is taken
// inside the symfs; the error says so, naming the symfs.
func TestSymFSSelfLinkSaysWhy(t *testing.T) {
	symfs := t.TempDir()
	if err := os.Symlink("/usr", filepath.Join(symfs, "usr")); err != nil {
		t.Fatal(err)
	}
	_, err := SymFSPath(symfs, "/usr/lib/libc.so.6")
	if err == nil || !strings.Contains(err.Error(), "too many levels of symbolic links under the symfs "+mustReal(t, symfs)) ||
		!strings.Contains(err.Error(), "usr -> /usr points at itself") {
		t.Fatalf("err = %v; want the loop explained", err)
	}
}
