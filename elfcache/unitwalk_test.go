package elfcache

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/ustack/ustack/internal/testfiles"
)

// TestUnitWalkerMatchesDebugDWARF reads every unit's call sites and
// scopes (functions and inlined calls with their names) twice, with the
// unitWalker and with debug/dwarf's reader alone, and checks that they are
// the same: glibc's debug file (C, thousands of units; libc6-dbg), a
// committed C++ program (namespaces, classes, templates, lambdas) and the
// committed Go program (DWARF from Go's linker).
func TestUnitWalkerMatchesDebugDWARF(t *testing.T) {
	testfiles.MustUnpack(t, testfiles.Dir())
	td := testfiles.Dir()
	paths := []string{filepath.Join(td, "minidumps", "x86_64", "bin", "cxx_threads"), filepath.Join(td, "objects", "x86_64", "goprog"), libcAMD64}
	walked := 0
	for _, path := range paths {
		needFile(t, path)
		read := func(off bool) ([]*cuLines, []*cuCallSites) {
			noUnitWalker = off
			defer func() { noUnitWalker = false }()
			return parseAll(t, path, Options{})
		}
		failed, decoded := unitWalkerFailed.Load(), unitsDecoded.Load()
		lines, sites := read(false)
		if n := unitWalkerFailed.Load() - failed; n != 0 {
			t.Errorf("%s: the walker gave %d units back to debug/dwarf", path, n)
		}
		// Each unit's lines, then its call sites: one reading of its
		// header and abbreviations for both (unitData's recent units).
		if n := unitsDecoded.Load() - decoded; n > int64(len(lines)) {
			t.Errorf("%s: %d units read alone %d times: the line and call-site readings of a unit do not share it", path, len(lines), n)
		}
		wantLines, wantSites := read(true)
		if len(lines) == 0 {
			t.Fatalf("%s: no units", path)
		}
		for i := range lines {
			if !reflect.DeepEqual(lines[i], wantLines[i]) {
				t.Errorf("%s: unit %d: scopes and lines differ from debug/dwarf's reading", path, i)
			}
			if !reflect.DeepEqual(sites[i], wantSites[i]) {
				t.Errorf("%s: unit %d: call sites differ from debug/dwarf's reading", path, i)
			}
		}
		walked += len(lines)
	}
	t.Logf("%d units read both ways", walked)
}
