package procmaps

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

func TestParse(t *testing.T) {
	in := "55d0c0a00000-55d0c0a01000 r-xp 00001000 fe:00 9978825                    /tmp/a b/prog\n" +
		"7ffd8e780000-7ffd8e7a1000 rw-p 00000000 00:00 0                          [stack]\n" +
		"7f0000000000-7f0000001000 rw-s 00000000 00:00 0 \n"
	m, err := Parse("maps", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Map{
		{Start: 0x55d0c0a00000, End: 0x55d0c0a01000, PgOff: 0x1000, Maj: 0xfe, Ino: 9978825, Path: "/tmp/a b/prog", Prot: ProtRead | ProtExec, Exec: true},
		{Start: 0x7ffd8e780000, End: 0x7ffd8e7a1000, Path: "[stack]", Prot: ProtRead | ProtWrite},
		{Start: 0x7f0000000000, End: 0x7f0000001000, Prot: ProtRead | ProtWrite, Shared: true},
	}
	if len(m) != len(want) {
		t.Fatalf("%d maps, want %d: %+v", len(m), len(want), m)
	}
	for i := range want {
		if m[i].Path != want[i].Path || m[i].Start != want[i].Start || m[i].End != want[i].End || m[i].PgOff != want[i].PgOff ||
			m[i].Maj != want[i].Maj || m[i].Ino != want[i].Ino || m[i].Prot != want[i].Prot || m[i].Exec != want[i].Exec || m[i].Shared != want[i].Shared {
			t.Errorf("map %d: %+v, want %+v", i, m[i], want[i])
		}
	}
}

// TestParseErrorNamesLine: a damaged line is named by file, line and
// offset, and the other lines are kept.
func TestParseErrorNamesLine(t *testing.T) {
	in := "1000-2000 r-xp 00000000 08:01 12 /bin/a\nzz-2000 r-xp 0 08:01 12 /bin/b\n3000-4000 r--p 0 08:01 12 /bin/c\n"
	m, err := Parse("/proc/7/maps", []byte(in))
	if err == nil || !strings.Contains(err.Error(), "/proc/7/maps: line 2 (offset 40): bad start address") {
		t.Fatalf("error %v", err)
	}
	if len(m) != 2 || m[0].Path != "/bin/a" || m[1].Path != "/bin/c" {
		t.Errorf("%+v", m)
	}
}

// TestReadSelf maps a file at an address the kernel picks and finds it in
// this process's maps with the inode os.Stat gives and the offset asked
// for.
func TestReadSelf(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file with space")
	page := os.Getpagesize()
	if err := os.WriteFile(path, make([]byte, 3*page), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := syscall.Mmap(int(f.Fd()), int64(page), 2*page, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(b)
	st, _ := f.Stat()
	ino := st.Sys().(*syscall.Stat_t).Ino
	maps, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	start := uint64(uintptr(unsafe.Pointer(&b[0])))
	for _, m := range maps {
		if m.Start == start {
			if m.Path != path || m.End != start+uint64(2*page) || m.PgOff != uint64(page) || m.Ino != ino || m.Prot != ProtRead || !m.Shared || m.Exec {
				t.Errorf("%+v, want %s at %#x inode %d", m, path, start, ino)
			}
			return
		}
	}
	t.Errorf("no mapping at %#x in %+v", start, maps)
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("55d0c0a00000-55d0c0a01000 r-xp 00001000 fe:00 9978825   /tmp/a b/prog\n7ffd8e780000-7ffd8e7a1000 rw-p 00000000 00:00 0  [stack]\n"))
	f.Add([]byte("1000-2000 r-xp 0 0:0 1\n\n2000-1000 ---- 0 0:0 1 x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		maps, err := Parse("fuzz", b)
		for _, m := range maps {
			if m.End < m.Start || m.Exec != (m.Prot&ProtExec != 0) {
				t.Fatalf("bad map %+v", m)
			}
		}
		if err != nil && !strings.HasPrefix(err.Error(), "fuzz: line ") {
			t.Fatalf("error does not name the file and line: %v", err)
		}
	})
}
