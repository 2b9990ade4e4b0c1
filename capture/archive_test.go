package capture

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// writeTestArchive writes a small archive and returns its bytes.
func writeTestArchive(t testing.TB, dir string, compact bool) []byte {
	p := filepath.Join(dir, "a.ustack")
	aw, err := CreateArchive(p, ArchiveMeta{Hostname: "h", Arch: "x86_64"}, false)
	if err != nil {
		t.Fatal(err)
	}
	aw.AddObject([]byte{0xde, 0xad, 0xbe, 0xef}, "/usr/bin/x", []byte("\x7fELF object bytes"))
	aw.AddObject(nil, "/opt/no build id", []byte("no id"))
	aw.AddVDSO([]byte{1, 2, 3}, []byte("vdso image"))
	aw.AddKallsyms([]byte("ffffffff81000000 T _text\n"))
	aw.AddDebugFile([]byte{0xde, 0xad, 0xbe, 0xef}, "/usr/lib/debug/.build-id/de/adbeef.debug", []byte("debug"))
	if err := aw.Close(); err != nil {
		t.Fatal(err)
	}
	if compact {
		if err := CompactArchive(p); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestArchiveRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, compact := range []bool{false, true} {
		b := writeTestArchive(t, dir, compact)
		checkMode(t, filepath.Join(dir, "a.ustack"))
		a, err := ReadArchive(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		if m := a.Meta(); m.Version != ArchiveVersion || m.Hostname != "h" {
			t.Errorf("meta %+v", m)
		}
		if d, p, ok := a.Object([]byte{0xde, 0xad, 0xbe, 0xef}); !ok || p != "/usr/bin/x" || string(d) != "\x7fELF object bytes" {
			t.Errorf("Object: %q %q %v", d, p, ok)
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
		if a.Err() != nil {
			t.Errorf("Err: %v", a.Err())
		}
		// A truncated archive keeps every complete member.
		for cut := 600; cut < len(b); cut += 97 {
			a, err := ReadArchive(bytes.NewReader(b[:cut]), int64(cut))
			if err != nil {
				if cut < 2048 { // inside the first member
					continue
				}
				t.Fatalf("cut %d: %v", cut, err)
			}
			for _, e := range a.Entries() {
				if e.Kind == KindObject && e.BuildID == "deadbeef" {
					if _, _, ok := a.Object([]byte{0xde, 0xad, 0xbe, 0xef}); !ok {
						t.Fatalf("cut %d: indexed object unreadable", cut)
					}
				}
			}
		}
	}
}

// FuzzReadArchive: no input makes the archive reader panic, hang or
// allocate without bound.
func FuzzReadArchive(f *testing.F) {
	f.Add(writeTestArchive(f, f.TempDir(), false))
	f.Add(writeTestArchive(f, f.TempDir(), true))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ReadArchive(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		for _, e := range a.Entries() {
			_ = e
		}
		a.Object([]byte{0xde, 0xad, 0xbe, 0xef})
		a.ObjectByPath("/usr/bin/x")
		a.VDSO()
		if k := a.Kallsyms(); k != nil {
			io.Copy(io.Discard, k)
		}
		a.DebugFile([]byte{0xde, 0xad, 0xbe, 0xef})
	})
}

func TestParseProcMaps(t *testing.T) {
	in := "55d0c0a00000-55d0c0a01000 r-xp 00001000 fe:00 9978825                    /tmp/a b/prog\n" +
		"7ffd8e780000-7ffd8e7a1000 rw-p 00000000 00:00 0                          [stack]\n" +
		"7f0000000000-7f0000001000 rw-p 00000000 00:00 0 \n"
	m := ParseProcMaps([]byte(in))
	if len(m) != 3 || m[0].Path != "/tmp/a b/prog" || !m[0].Exec() || m[0].PgOff != 0x1000 || m[0].Ino != 9978825 ||
		m[0].Maj != 0xfe || m[1].Path != "[stack]" || m[2].Path != "" {
		t.Errorf("%+v", m)
	}
}
