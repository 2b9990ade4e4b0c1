package procmaps

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestUnlinked(t *testing.T) {
	for path, want := range map[string]bool{
		"/usr/lib/libc.so.6":                   false,
		"/usr/lib/libc.so.6 (deleted)":         true,
		"/memfd:sealed-91173221a7ea (deleted)": true,
		"/memfd:doublemapper":                  true,
		"[vdso]":                               false,
		"":                                     false,
		"/tmp/a (deleted) b":                   false,
		"/home/u/my (deleted)/libx.so":         false,
	} {
		if got := Unlinked(path); got != want {
			t.Errorf("Unlinked(%q) = %v, want %v", path, got, want)
		}
	}
}

// TestMappedFile maps a file, deletes it, and reads it back through the
// name MappedFile gives for the mapping that /proc/self/maps shows
// "(deleted)"; likewise for a memfd.
func TestMappedFile(t *testing.T) {
	want := bytes.Repeat([]byte("ustack mapped file\n"), 400)
	path := filepath.Join(t.TempDir(), "lib.so")
	if err := os.WriteFile(path, want, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, len(want), unix.PROT_READ, unix.MAP_PRIVATE)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.MemfdCreate("ustack-test", 0)
	if err != nil {
		t.Fatal(err)
	}
	mf := os.NewFile(uintptr(fd), "memfd")
	if _, err := mf.Write(want); err != nil {
		t.Fatal(err)
	}
	mb, err := unix.Mmap(fd, 0, len(want), unix.PROT_READ, unix.MAP_PRIVATE)
	mf.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mb)

	maps, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, m := range maps {
		if m.Path != path+" (deleted)" && m.Path != "/memfd:ustack-test (deleted)" {
			continue
		}
		found++
		if !Unlinked(m.Path) {
			t.Errorf("%s: not Unlinked", m.Path)
		}
		got, err := os.ReadFile(MappedFile(os.Getpid(), m.Start, m.End))
		if err != nil {
			if os.IsPermission(err) || err.(*os.PathError).Err == syscall.EPERM {
				t.Skipf("reading /proc/self/map_files needs CAP_SYS_ADMIN: %v", err)
			}
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: read %d bytes through %s, not the file's", m.Path, len(got), MappedFile(os.Getpid(), m.Start, m.End))
		}
	}
	if found != 2 {
		t.Fatalf("found %d of the 2 mappings in /proc/self/maps", found)
	}
}
