package procmaps

import (
	"reflect"
	"testing"
)

// The expectations below follow the kernel's mmap semantics: a new mapping
// replaces the overlapped part of older ones, fork copies the maps, exec
// drops them.
func TestTracker(t *testing.T) {
	tr := NewTracker()
	tr.Mmap(10, Map{Start: 0x1000, End: 0x5000, PgOff: 0, Path: "/bin/a", Exec: true})
	tr.Mmap(10, Map{Start: 0x7000, End: 0x8000, Path: "[vdso]", Exec: true})
	v1 := tr.Maps(10)
	// Map something over the middle of /bin/a.
	tr.Mmap(10, Map{Start: 0x2000, End: 0x3000, PgOff: 0x10000, Path: "/lib/b"})
	want := []Map{
		{Start: 0x1000, End: 0x2000, Path: "/bin/a", Exec: true},
		{Start: 0x2000, End: 0x3000, PgOff: 0x10000, Path: "/lib/b"},
		{Start: 0x3000, End: 0x5000, PgOff: 0x2000, Path: "/bin/a", Exec: true},
		{Start: 0x7000, End: 0x8000, Path: "[vdso]", Exec: true},
	}
	got := tr.Maps(10)
	if !reflect.DeepEqual(got.Maps, want) {
		t.Fatalf("maps after overlap:\n got %+v\nwant %+v", got.Maps, want)
	}
	if len(v1.Maps) != 2 || v1.Version == got.Version {
		t.Errorf("older snapshot changed: %+v", v1)
	}
	if m := got.Find(0x3fff); m == nil || m.Path != "/bin/a" || m.PgOff != 0x2000 {
		t.Errorf("Find(0x3fff) = %+v", m)
	}
	if m := got.Find(0x5000); m != nil {
		t.Errorf("Find(0x5000) = %+v; want nil", m)
	}

	tr.Fork(11, 10)
	tr.Fork(10, 10) // a thread: no change
	if !reflect.DeepEqual(tr.Maps(11).Maps, want) || tr.Maps(10) != got {
		t.Errorf("fork: child %+v", tr.Maps(11).Maps)
	}
	tr.Exec(11)
	if len(tr.Maps(11).Maps) != 0 || len(tr.Maps(10).Maps) != 4 {
		t.Errorf("exec of the child touched the parent or kept maps")
	}
	tr.Exit(10)
	if len(tr.Maps(10).Maps) != 0 || tr.Processes() != 1 {
		t.Errorf("exit: %d processes", tr.Processes())
	}
}
