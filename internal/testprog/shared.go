package testprog

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// shared holds the programs Shared built in this test binary run, by
// compiler flags and source.
var shared sync.Map // key string -> *sharedBuild

type sharedBuild struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// RemoveShared deletes the directories of every program Shared built in
// this test binary run, and forgets them (a later Shared builds again). A
// package whose tests call Shared calls it from TestMain after m.Run, or
// a test's Cleanup, so that runs leave nothing behind in os.TempDir.
func RemoveShared() {
	shared.Range(func(k, v any) bool {
		if b := v.(*sharedBuild); b.dir != "" {
			os.RemoveAll(b.dir)
		}
		shared.Delete(k)
		return true
	})
}

// Shared is Build done once per test binary run for each file, source and
// flags: every test asking for the same program gets the same path, in a
// directory of its own under os.TempDir that outlives each test until
// RemoveShared (no test may modify or delete the program; copy it first). A missing compiler
// skips every caller; a compiler error fails every caller.
func Shared(t testing.TB, file, src string, flags ...string) string {
	t.Helper()
	cc := compilerFor(t, file)
	need(t, cc)
	key := fmt.Sprintf("%s\x00%q\x00%s", file, flags, src)
	v, _ := shared.LoadOrStore(key, new(sharedBuild))
	b := v.(*sharedBuild)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "ustack-testprog-")
		if err != nil {
			b.err = err
			return
		}
		b.dir = dir
		b.path, b.err = compile(cc, filepath.Join(dir, file), src, flags)
	})
	if b.err != nil {
		t.Fatalf("building the test program: %v", b.err)
	}
	return b.path
}
