package report

import (
	"path/filepath"
	"runtime"
	"testing"
	"unsafe"
	"weak"

	"github.com/ustack/ustack/procmaps"
	"github.com/ustack/ustack/resolve"
)

// TestLiveNamerForget: the name of a frame an agent's namer gave is part
// of its object's string table, which the namer's memo keeps alive after
// a budget closed the object (readelf: goprog_stripped's text is mapped
// at 0x400000, its entry point 0x478e00); Forget lets go of it.
func TestLiveNamerForget(t *testing.T) {
	r := resolve.New(resolve.Options{CacheBudget: 1})
	defer r.Close()
	path := filepath.Join("..", "testdata", "objects", "x86_64", "goprog_stripped")
	space := r.NewSpace(1, []resolve.Mapping{{Map: procmaps.Map{Start: 0x400000, End: 0x47d000, Path: path,
		Exec: true, Prot: procmaps.ProtRead | procmaps.ProtExec}}})
	n := NewLiveNamer(nil)
	var s Sample
	n.Name(&s, space, nil, []uint64{0x478e00})
	if len(s.Frames) != 1 || s.Frames[0].Symbol == "" {
		t.Fatalf("frames %+v", s.Frames)
	}
	t.Logf("0x478e00: %s", s.Frames[0].Symbol)
	table := weak.Make(unsafe.StringData(s.Frames[0].Symbol))
	s = Sample{}
	space.Close() // over the budget: the object is closed
	if st := r.CacheStats(); st.Objects != 0 {
		t.Fatalf("the object is still open: %+v", st)
	}
	runtime.GC()
	if table.Value() == nil {
		t.Fatal("the name's string table was collected with the namer's memo holding it")
	}
	n.Forget()
	runtime.GC()
	if table.Value() != nil {
		t.Error("after Forget the string table of the closed object is still alive")
	}
	runtime.KeepAlive(n)
}
