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

// TestThreadExit: a process's maps stay while a thread of it known to the
// tracker runs after its leader's EXIT, and go with the last of them.
func TestThreadExit(t *testing.T) {
	tr := NewTracker()
	m := Map{Start: 0x1000, End: 0x2000, Path: "/bin/x", Exec: true}
	tr.Mmap(10, m)
	tr.Thread(10, 11)
	tr.Thread(10, 12)
	if tr.ThreadExit(10, 10) || len(tr.Maps(10).Maps) != 1 {
		t.Fatalf("the leader's exit dropped the maps while threads 11 and 12 run")
	}
	if tr.ThreadExit(10, 11) || len(tr.Maps(10).Maps) != 1 {
		t.Fatalf("thread 11's exit dropped the maps while thread 12 runs")
	}
	if !tr.ThreadExit(10, 12) || len(tr.Maps(10).Maps) != 0 {
		t.Fatalf("the last thread's exit left the maps")
	}
	// Threads first, then the leader: the leader's exit ends the process.
	tr.Mmap(20, m)
	tr.Thread(20, 21)
	if tr.ThreadExit(20, 21) || len(tr.Maps(20).Maps) != 1 {
		t.Fatalf("a thread's exit dropped a live leader's maps")
	}
	if !tr.ThreadExit(20, 20) || len(tr.Maps(20).Maps) != 0 {
		t.Fatalf("the leader's exit, the last thread, left the maps")
	}
	// A new process at a pid forgets the threads of the last one.
	tr.Thread(30, 31)
	tr.Fork(30, 1)
	tr.Mmap(30, m)
	if !tr.ThreadExit(30, 30) {
		t.Fatalf("pid 30's new process kept its predecessor's thread 31")
	}
}
