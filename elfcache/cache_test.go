package elfcache

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ustack/ustack/cfi"
	"github.com/ustack/ustack/internal/testprog"
)

// TestCacheConcurrent opens one library from many goroutines at once and
// uses the shared object concurrently (run with -race).
func TestCacheConcurrent(t *testing.T) {
	needFile(t, libcAMD64)
	c := NewCache(Options{})
	defer c.Close()
	const n = 64
	objs := make([]*Object, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			o, err := c.Open(libcAMD64)
			if err != nil {
				t.Error(err)
				return
			}
			objs[i] = o
			// Exercise the lazy pieces concurrently.
			o.Symbolize(0x30000 + uint64(i)*0x1000)
			o.ReadCode(0x30000, make([]byte, 16))
			o.DebugFile()
			if i%8 == 0 {
				o.CFIError()
				var row cfi.Row
				o.pltRow(o.PLTs()[".plt"].Start, &row)
			}
		}(i)
	}
	close(start)
	wg.Wait()
	for i := 1; i < n; i++ {
		if objs[i] != objs[0] {
			t.Fatalf("goroutine %d got another object", i)
		}
	}
	if c.Len() != 1 {
		t.Errorf("Len = %d", c.Len())
	}
}

// TestCacheKeys checks that objects are shared by build-id across paths,
// and by path, size and modification time when there is no build-id.
func TestCacheKeys(t *testing.T) {
	needFile(t, libcAMD64)
	dir := t.TempDir()
	c := NewCache(Options{DebugDirs: []string{}})
	defer c.Close()
	link := filepath.Join(dir, "libc-link.so")
	if err := os.Symlink(libcAMD64, link); err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(dir, "libc-copy.so")
	mustCopy(t, libcAMD64, cp)
	a, _ := c.Open(libcAMD64)
	b, _ := c.Open(link)
	d, _ := c.Open(cp)
	if a == nil || a != b || a != d {
		t.Errorf("same build-id, different objects: %p %p %p", a, b, d)
	}

	// Without a build-id.
	bin := testprog.Build(t, dir, "nobid.c", cProgram, "-O1", "-Wl,--build-id=none")
	bin2 := filepath.Join(dir, "nobid2")
	mustCopy(t, bin, bin2)
	x, err := c.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	if x.BuildID() != nil {
		t.Fatal("has a build-id")
	}
	y, _ := c.Open(bin)
	z, _ := c.Open(bin2)
	if x != y || x == z {
		t.Errorf("path keys: %p %p %p", x, y, z)
	}
	// A replaced file is opened anew.
	later := time.Now().Add(time.Hour)
	os.Chtimes(bin, later, later)
	w, _ := c.Open(bin)
	if w == x {
		t.Error("changed file not reopened")
	}
	if c.Len() != 4 {
		t.Errorf("Len = %d, want 4", c.Len())
	}
	// Errors are reported with the path, and remembered.
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("not elf"), 0o644)
	if _, err := c.Open(bad); err == nil {
		t.Error("opened a non-ELF file")
	}
	if _, err := c.Open(filepath.Join(dir, "missing")); err == nil {
		t.Error("opened a missing file")
	}
	c.Close()
	if _, err := c.Open(libcAMD64); err == nil {
		t.Error("Open after Close")
	}
}
