//go:build linux

package debuginfod_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/debuginfod"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/internal/debuginfodtest"
	"github.com/ustack/ustack/internal/testprog"
)

// progSource has inlined calls two deep, so that lines and inline chains
// come from the debug file.
const progSource = `
static inline __attribute__((always_inline)) int leaf(int x) { return x * x + %d; }
static inline __attribute__((always_inline)) int mid(int x) { return leaf(x + 1) * 3; }
__attribute__((noinline)) int top(int x) { return mid(x) - 5; }
int main(int argc, char **argv) { return top(argc); }
`

// TestRealServer runs Debian's debuginfod over a directory of the test's
// own files, inside a network namespace where only loopback exists (Debian
// 12's debuginfod listens on every address), and checks the client with
// elfcache: a stripped binary whose debug file exists only on the server
// gets the same source frames as with the file local; a second run answers
// from the cache without a request (counted on the server's /metrics); a
// missing build-id is cached as elfutils' negative entry; the server
// stopped halfway costs a warning, not the object.
func TestRealServer(t *testing.T) {
	if !debuginfodtest.InNetns(t, "gcc", "objcopy", "strip") {
		return
	}
	dir := t.TempDir()
	srvDir := filepath.Join(dir, "server")
	require.NoError(t, os.MkdirAll(srvDir, 0o755))
	// Two programs: one fetched while the server runs, one after it stops.
	progs := make([]testProg, 2)
	for i := range progs {
		progs[i] = buildProg(t, dir, srvDir, fmt.Sprintf("prog%d", i), i)
	}

	// Two more whose debug files dwz made share a supplementary file, all
	// three only on the server (as Debian serves dbgsym packages).
	var dwzProgs []testProg
	scanned := 2 * len(progs)
	if _, err := exec.LookPath("dwz"); err == nil {
		dwzDir := filepath.Join(dir, "dwz")
		require.NoError(t, os.MkdirAll(dwzDir, 0o755))
		var debugs []string
		for i := 2; i < 4; i++ {
			name := fmt.Sprintf("prog%d", i)
			dwzProgs = append(dwzProgs, buildProg(t, dir, dwzDir, name, i))
			debugs = append(debugs, filepath.Join(dwzDir, name+".debug"))
		}
		testprog.Tool(t, "", "dwz", append([]string{"-m", filepath.Join(dwzDir, "common.debug"), "-M", "/usr/lib/debug/.dwz/common.debug"}, debugs...)...)
		require.NoError(t, os.Rename(dwzDir, filepath.Join(srvDir, "dwz")))
		scanned += 2*len(dwzProgs) + 1
	} else {
		t.Log("dwz not installed: supplementary files from the server not tested")
	}

	srv := debuginfodtest.Start(t, srvDir, dir)
	base := srv.Base
	srv.WaitScanned(t, scanned)

	cacheDir := filepath.Join(dir, "cache")
	var warnMu sync.Mutex
	var warnings []string
	newClient := func() *debuginfod.Client {
		return debuginfod.New(debuginfod.Options{URLs: []string{base}, CacheDir: cacheDir,
			RequestTimeout: 5 * time.Second, TotalTimeout: 30 * time.Second,
			Warn: func(m string) { warnMu.Lock(); warnings = append(warnings, m); warnMu.Unlock() }})
	}

	p := progs[0]
	want := sourceFrames(t, p.full, elfcache.Options{NoDebugFile: true}, p)
	require.NotEmpty(t, want.inlined, "the local binary shows no inlined frame")

	t.Run("debug file only on the server", func(t *testing.T) {
		c := newClient()
		got := sourceFrames(t, p.stripped, elfcache.Options{DebugDirs: []string{}, Fetcher: c}, p)
		assert.Equal(t, want.frames, got.frames)
		assert.Equal(t, elfcache.OriginDebuginfod, got.sources.Lines)
		assert.Equal(t, elfcache.OriginDebuginfod, got.sources.Symbols)
		assert.Equal(t, 1, c.Requests())
		assert.Equal(t, 1, srv.Metric(t, `http_requests_total{type="debuginfo"}`))
		fi, err := os.Stat(c.CachePath(p.buildID, debuginfod.Debuginfo))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	})
	t.Run("no request for an unstripped binary", func(t *testing.T) {
		c := newClient()
		o, err := elfcache.Open(p.full, elfcache.Options{DebugDirs: []string{}, Fetcher: c})
		require.NoError(t, err)
		defer o.Close()
		assert.NotEmpty(t, o.SourceFrames(want.addrs[0], nil))
		assert.NoError(t, o.CFIError())
		assert.Zero(t, c.Requests())
	})
	t.Run("second run from the cache", func(t *testing.T) {
		c := newClient()
		got := sourceFrames(t, p.stripped, elfcache.Options{DebugDirs: []string{}, Fetcher: c}, p)
		assert.Equal(t, want.frames, got.frames)
		assert.Zero(t, c.Requests())
		assert.Equal(t, 1, srv.Metric(t, `http_requests_total{type="debuginfo"}`))
	})
	t.Run("executable by build-id", func(t *testing.T) {
		c := newClient()
		cache := elfcache.NewCache(elfcache.Options{DebugDirs: []string{}, Fetcher: c})
		defer cache.Close()
		o, err := cache.OpenBuildID("/usr/bin/prog-on-the-profiled-machine", p.buildID)
		require.NoError(t, err)
		assert.Equal(t, p.buildID, o.BuildID())
		assert.Equal(t, 1, srv.Metric(t, `http_requests_total{type="executable"}`))
		// Its debug file comes from the cache filled above.
		assert.NotEmpty(t, o.SourceFrames(want.addrs[0], nil))
		assert.Zero(t, srv.Metric(t, `http_requests_total{type="debuginfo"}`)-1)
	})
	t.Run("dwz supplementary file from the server", func(t *testing.T) {
		if len(dwzProgs) == 0 {
			t.Skip("dwz not installed")
		}
		before := srv.Metric(t, `http_requests_total{type="debuginfo"}`)
		c := newClient()
		q := dwzProgs[0]
		want := sourceFrames(t, q.full, elfcache.Options{NoDebugFile: true}, q)
		got := sourceFrames(t, q.stripped, elfcache.Options{DebugDirs: []string{}, Fetcher: c}, q)
		require.NotZero(t, want.inlined)
		assert.Equal(t, want.frames, got.frames)
		assert.NotEmpty(t, got.sources.Supplementary)
		// The debug file and the supplementary file.
		assert.Equal(t, before+2, srv.Metric(t, `http_requests_total{type="debuginfo"}`))
	})
	t.Run("not found is cached", func(t *testing.T) {
		before := srv.Metric(t, `http_requests_total{type="debuginfo"}`)
		c := newClient()
		missing := []byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4}
		_, err := c.Fetch(context.Background(), missing, debuginfod.Debuginfo)
		require.ErrorIs(t, err, debuginfod.ErrNotFound)
		fi, err := os.Stat(c.CachePath(missing, debuginfod.Debuginfo))
		require.NoError(t, err, "no negative cache entry")
		assert.Zero(t, fi.Size())
		_, err = newClient().Fetch(context.Background(), missing, debuginfod.Debuginfo)
		require.ErrorIs(t, err, debuginfod.ErrNotFound)
		assert.Equal(t, before+1, srv.Metric(t, `http_requests_total{type="debuginfo"}`))
	})
	warnMu.Lock()
	require.Empty(t, warnings, "warnings while the server was up")
	warnMu.Unlock()

	t.Run("server stopped halfway", func(t *testing.T) {
		c := newClient()
		srv.Stop()
		q := progs[1]
		start := time.Now()
		o, err := elfcache.Open(q.stripped, elfcache.Options{DebugDirs: []string{}, Fetcher: c})
		require.NoError(t, err)
		defer o.Close()
		assert.Empty(t, o.SourceFrames(q.addrs[0], nil), "frames without the debug file")
		assert.Nil(t, o.DebugFile())
		// The object still unwinds from its own .eh_frame.
		assert.NoError(t, o.CFIError())
		assert.Less(t, time.Since(start), 10*time.Second)
		warnMu.Lock()
		defer warnMu.Unlock()
		require.Len(t, warnings, 1)
		assert.Contains(t, warnings[0], base)
		// Already-fetched files still come from the cache.
		_, err = c.Fetch(context.Background(), p.buildID, debuginfod.Debuginfo)
		assert.NoError(t, err)
	})
}

type testProg struct {
	full, stripped string
	buildID        []byte
	addrs          []uint64 // every address of top()
}

// buildProg compiles progSource (variant v, so that build-ids differ),
// keeps the full binary (dir/full/name) for reference, and puts the
// stripped binary (dir/name) and its debug file (both needed: the server
// serves executables too) in srvDir.
func buildProg(t *testing.T, dir, srvDir, name string, v int) testProg {
	fullDir := filepath.Join(dir, "full")
	require.NoError(t, os.MkdirAll(fullDir, 0o755))
	p := testProg{stripped: filepath.Join(dir, name)}
	p.full = testprog.Build(t, fullDir, name+".c", fmt.Sprintf(progSource, v), "-g", "-O2", "-Wl,--build-id")
	testprog.Tool(t, "", "objcopy", "--only-keep-debug", p.full, filepath.Join(srvDir, name+".debug"))
	testprog.Tool(t, "", "strip", "--strip-all", "-o", p.stripped, p.full)
	data, err := os.ReadFile(p.stripped)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(srvDir, name), data, 0o755))
	o, err := elfcache.Open(p.full, elfcache.Options{NoDebugFile: true})
	require.NoError(t, err)
	defer o.Close()
	p.buildID = append([]byte(nil), o.BuildID()...)
	require.NotEmpty(t, p.buildID)
	for _, s := range o.Symbols() {
		if s.Name == "top" {
			for a := s.Addr; a < s.Addr+s.Size; a++ {
				p.addrs = append(p.addrs, a)
			}
		}
	}
	require.NotEmpty(t, p.addrs, "no function top in %s", p.full)
	return p
}

type frames struct {
	sources elfcache.Sources
	frames  [][]elfcache.SourceFrame
	inlined int
	addrs   []uint64
}

// sourceFrames opens path and returns the source frames at every address
// of p's top().
func sourceFrames(t *testing.T, path string, opts elfcache.Options, p testProg) frames {
	o, err := elfcache.Open(path, opts)
	require.NoError(t, err)
	defer o.Close()
	require.NoError(t, o.SourceError())
	var out frames
	out.addrs = p.addrs
	for _, a := range p.addrs {
		sf := o.SourceFrames(a, nil)
		for _, f := range sf {
			if f.Inlined {
				out.inlined++
			}
		}
		out.frames = append(out.frames, sf)
	}
	out.sources = o.Sources()
	return out
}
