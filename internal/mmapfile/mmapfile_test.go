package mmapfile

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestMapOrRead maps a file and reads it, and checks that both give its
// bytes, also after the mapped pages were dropped and populated again; an
// empty file cannot be mapped.
func TestMapOrRead(t *testing.T) {
	want := bytes.Repeat([]byte("0123456789abcdef"), 3<<12) // 192 KB: many pages
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, want, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, read := range []bool{false, true} {
		data, unmap, err := MapOrRead(f, int64(len(want)), read)
		if err != nil {
			t.Fatalf("read %v: %v", read, err)
		}
		if !bytes.Equal(data, want) {
			t.Fatalf("read %v: the bytes differ from the file's", read)
		}
		if read && unmap != nil {
			t.Fatal("read bytes come with an unmap")
		}
		if unmap != nil {
			Drop(data)
			if !bytes.Equal(data, want) {
				t.Fatal("the bytes differ after Drop")
			}
			Populate(data[4096:])
			Sequential(data)
			if !bytes.Equal(data, want) {
				t.Fatal("the bytes differ after Populate")
			}
			if err := unmap(); err != nil {
				t.Fatal(err)
			}
		}
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := os.Open(empty)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, _, err := Map(e, 0); err == nil {
		t.Fatal("an empty file mapped")
	}
}
