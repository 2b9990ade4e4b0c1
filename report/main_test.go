package report

import (
	"os"
	"sync"
	"testing"

	"github.com/ustack/ustack/elfcache"
)

// TestMain removes what the tests shared (testSections) when they end.
func TestMain(m *testing.M) {
	code := m.Run()
	if cacheObj != nil {
		cacheObj.Close()
	}
	if sectionsDir != "" {
		os.RemoveAll(sectionsDir)
	}
	os.Exit(code)
}

var (
	sectionsOnce sync.Once
	sectionsDir  string
	sectionsSC   *elfcache.SectionCache
	sectionsErr  error
)

// testSections returns a section cache that every test of this binary
// shares, so that the tests that run a report many times (the damaged
// recordings: about 1,500 runs) inflate the host's compressed debug
// sections (libc6-dbg's) once, not once a run: they spent two thirds of
// their time doing that.
func testSections(t testing.TB) *elfcache.SectionCache {
	t.Helper()
	sectionsOnce.Do(func() {
		sectionsDir, sectionsErr = os.MkdirTemp("", "ustack-report-sections")
		if sectionsErr == nil {
			sectionsSC, sectionsErr = elfcache.NewSectionCache(sectionsDir, 0)
		}
	})
	if sectionsErr != nil {
		t.Fatal(sectionsErr)
	}
	return sectionsSC
}

var (
	cacheOnce sync.Once
	cacheObj  *elfcache.Cache
)

// testCache returns an object cache that every test of this binary shares
// (report.Options.Cache), opening files beneath symfs: the damaged-recording
// tests run some 1,500 reports of the same objects, and built libc's
// symbol, line and call-site tables in each (four fifths of their time).
// Every caller must pass the same symfs.
func testCache(t testing.TB, symfs string) *elfcache.Cache {
	t.Helper()
	sc := testSections(t)
	cacheOnce.Do(func() {
		cacheObj = elfcache.NewCache(elfcache.Options{SymFS: symfs, SectionCache: sc})
	})
	return cacheObj
}
