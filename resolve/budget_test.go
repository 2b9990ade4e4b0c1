package resolve_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/internal/fixture"
	"github.com/ustack/ustack/procmaps"
	"github.com/ustack/ustack/resolve"
	"github.com/ustack/ustack/unwinder"
)

// budgetFixtures loads the x86_64 fixtures whose mappings are all objects
// or anonymous memory, with the union of their debug directories.
func budgetFixtures(t *testing.T) ([]*fixture.Fixture, []string) {
	paths, err := fixture.Glob("x86_64")
	if err != nil {
		t.Fatal(err)
	}
	var out []*fixture.Fixture
	dirs := map[string]bool{}
	var dirList []string
	for _, p := range paths {
		f, err := fixture.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		ok := true
		for _, m := range f.Maps {
			ok = ok && m.Code == ""
		}
		if !ok {
			continue
		}
		out = append(out, f)
		for _, d := range f.DebugDirPaths() {
			if !dirs[d] {
				dirs[d] = true
				dirList = append(dirList, d)
			}
		}
	}
	if len(out) < 4 {
		t.Fatalf("%d fixtures", len(out))
	}
	return out, dirList
}

// fixtureStack unwinds a fixture in a Space of r and returns its frames,
// symbolized, one line each; the Space is returned for the caller to close.
func fixtureStack(t *testing.T, r *resolve.Resolver, f *fixture.Fixture) (string, *resolve.Space) {
	var maps []resolve.Mapping
	for _, m := range f.Maps {
		rm := resolve.Mapping{Map: procmaps.Map{Start: m.Start, End: m.End, PgOff: m.Offset, Path: m.Name,
			Exec: strings.Contains(m.Perms, "x")}}
		if m.Object != "" {
			// By path, not Mapping.File: found (and found again
			// after an eviction) as a process's objects are.
			rm.Path = f.Abs(m.Object)
		}
		maps = append(maps, rm)
	}
	s := r.NewSpace(1, maps)
	var regs arch.Regs
	for _, reg := range f.Regs {
		if reg.Dwarf >= 0 && reg.Dwarf < arch.MaxRegs {
			regs.Set(reg.Dwarf, reg.Value)
		}
	}
	stack := unwinder.Stack{Addr: f.Stack.Addr, Data: f.Stack.Data}
	for _, e := range f.ExtraStacks {
		stack.Extra = append(stack.Extra, unwinder.Region{Addr: e.Addr, Data: e.Data})
	}
	frames := make([]unwinder.Frame, 128)
	var cache unwinder.Cache
	res := unwinder.New(arch.AMD64, unwinder.Options{}).Unwind(&cache, s.AddressSpace(), &regs, &stack, frames)
	sym := resolve.NewSymbolizer()
	var out []resolve.Frame
	for i := 0; i < res.Frames; i++ {
		out = sym.Append(out, s, &frames[i], resolve.HowOf(frames[i].Method))
	}
	var b strings.Builder
	for _, fr := range out {
		fmt.Fprintf(&b, "%#x %s+%#x %s %s:%d %v\n", fr.PC, fr.Symbol, fr.SymOff, fr.Module, filepath.Base(fr.File), fr.Line, fr.Inlined)
	}
	fmt.Fprintf(&b, "stop %v\n", res.Stop)
	return b.String(), s
}

// TestStacksAfterEviction unwinds and symbolizes every fixture with one
// Resolver whose cache has a one-byte budget, closing each Space after
// its stack, three times over: every object is closed when its Space is
// and opened again for the next round, and every stack is the one a
// Resolver without a budget gives (TestFixtures checks those against
// gdb). A Space kept open keeps its objects open throughout.
func TestStacksAfterEviction(t *testing.T) {
	fixtures, dirs := budgetFixtures(t)
	plain := resolve.New(resolve.Options{Cache: elfcache.NewCache(elfcache.Options{DebugDirs: dirs})})
	defer plain.Close()
	want := make([]string, len(fixtures))
	for i, f := range fixtures {
		want[i], _ = fixtureStack(t, plain, f)
		if !strings.Contains(want[i], "+0x") {
			t.Fatalf("%s: no frame named in\n%s", f.Name, want[i])
		}
	}

	r := resolve.New(resolve.Options{DebugDirs: dirs, CacheBudget: 1})
	defer r.Close()
	// The first fixture's Space stays open: its objects must stay open.
	kept, keptSpace := fixtureStack(t, r, fixtures[0])
	keptObjs := spaceObjects(keptSpace)
	for round := 0; round < 3; round++ {
		for i, f := range fixtures[1:] {
			got, s := fixtureStack(t, r, f)
			if got != want[i+1] {
				t.Errorf("round %d, %s: after evictions\n%s\nwithout a budget\n%s", round, f.Name, got, want[i+1])
			}
			s.Close()
			for _, o := range keptObjs {
				if o.Closed() {
					t.Fatalf("%s: an object of a Space still open was closed", o.Path())
				}
			}
		}
	}
	if kept != want[0] {
		t.Errorf("kept Space: %s, want %s", kept, want[0])
	}
	again, s := fixtureStack(t, r, fixtures[0])
	if again != want[0] {
		t.Errorf("kept Space again: %s, want %s", again, want[0])
	}
	s.Close()
	st := r.CacheStats()
	t.Logf("%d fixtures: %+v", len(fixtures), st)
	if st.Evictions == 0 || st.Reopens == 0 {
		t.Errorf("no evictions or re-opens: %+v", st)
	}
	if st.Objects != len(keptObjs) || st.InUse != len(keptObjs) {
		t.Errorf("open %d, in use %d; the kept Space holds %d", st.Objects, st.InUse, len(keptObjs))
	}
	keptSpace.Close()
	if st := r.CacheStats(); st.Objects != 0 || st.HeldBytes != 0 {
		t.Errorf("after every Space closed: %+v", st)
	}
	for _, o := range keptObjs {
		if !o.Closed() {
			t.Errorf("%s: open after its Space closed, over the budget", o.Path())
		}
	}
}

// TestSpacePin closes a pinned Space: its objects stay open until the
// last Unpin, and a closed Space cannot be pinned.
func TestSpacePin(t *testing.T) {
	fixtures, dirs := budgetFixtures(t)
	r := resolve.New(resolve.Options{DebugDirs: dirs, CacheBudget: 1})
	defer r.Close()
	_, s := fixtureStack(t, r, fixtures[0])
	objs := spaceObjects(s)
	if len(objs) == 0 {
		t.Fatal("no objects")
	}
	if !s.Pin() || !s.Pin() {
		t.Fatal("Pin of an open Space failed")
	}
	s.Close()
	if s.Pin() {
		t.Error("Pin of a closed Space succeeded")
	}
	s.Unpin()
	for _, o := range objs {
		if o.Closed() {
			t.Fatalf("%s closed while its Space is pinned", o.Path())
		}
	}
	s.Unpin()
	for _, o := range objs {
		if !o.Closed() {
			t.Errorf("%s open after the last Unpin of its closed Space", o.Path())
		}
	}
	s.Close() // twice: harmless
}

// spaceObjects returns the distinct objects of a Space's mappings.
func spaceObjects(s *resolve.Space) []*elfcache.Object {
	var out []*elfcache.Object
	seen := map[*elfcache.Object]bool{}
	for i := 0; i < s.AddressSpace().Len(); i++ {
		if o := s.Object(i); o != nil && !seen[o] {
			seen[o] = true
			out = append(out, o)
		}
	}
	return out
}
