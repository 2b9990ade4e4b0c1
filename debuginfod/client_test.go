package debuginfod_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/debuginfod"
	"github.com/ustack/ustack/elfcache"
)

// elfWithID is a committed ELF file with a GNU build-id, served as a valid
// answer.
const elfWithID = "../testdata/objects/x86_64/chain_gcc_O2"

func testELF(t testing.TB) (data, buildID []byte) {
	data, err := os.ReadFile(elfWithID)
	require.NoError(t, err)
	o, err := elfcache.OpenBytes("x", data, elfcache.Options{})
	require.NoError(t, err)
	require.NotEmpty(t, o.BuildID())
	return data, append([]byte(nil), o.BuildID()...)
}

// server is an httptest server that answers /buildid/ID/KIND with handle
// and counts requests.
func server(t testing.TB, handle func(w http.ResponseWriter, r *http.Request)) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		handle(w, r)
	}))
	t.Cleanup(s.Close)
	return s, &n
}

type warnings struct {
	mu  sync.Mutex
	all []string
}

func (w *warnings) add(m string) { w.mu.Lock(); w.all = append(w.all, m); w.mu.Unlock() }
func (w *warnings) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.all...)
}

func TestDisabledByEnvironment(t *testing.T) {
	_, id := testELF(t)
	s, n := server(t, func(w http.ResponseWriter, r *http.Request) {})
	for _, env := range []string{"", " "} {
		t.Setenv("DEBUGINFOD_URLS", env)
		c := debuginfod.New(debuginfod.Options{CacheDir: t.TempDir()})
		assert.False(t, c.Enabled())
		_, err := c.Fetch(context.Background(), id, debuginfod.Debuginfo)
		assert.ErrorIs(t, err, debuginfod.ErrDisabled)
	}
	os.Unsetenv("DEBUGINFOD_URLS")
	c := debuginfod.New(debuginfod.Options{CacheDir: t.TempDir()})
	assert.False(t, c.Enabled())
	t.Setenv("DEBUGINFOD_URLS", s.URL)
	c = debuginfod.New(debuginfod.Options{CacheDir: t.TempDir(), Off: true})
	assert.False(t, c.Enabled())
	_, err := c.Fetch(context.Background(), id, debuginfod.Debuginfo)
	assert.ErrorIs(t, err, debuginfod.ErrDisabled)
	assert.Zero(t, n.Load(), "requests made while disabled")
	assert.True(t, debuginfod.New(debuginfod.Options{CacheDir: t.TempDir()}).Enabled(), "DEBUGINFOD_URLS=%s ignored", s.URL)
}

func TestCacheDirFromEnvironment(t *testing.T) {
	t.Setenv("DEBUGINFOD_CACHE_PATH", "/a/b")
	assert.Equal(t, "/a/b", debuginfod.DefaultCacheDir())
	t.Setenv("DEBUGINFOD_CACHE_PATH", "")
	t.Setenv("XDG_CACHE_HOME", "/x")
	assert.Equal(t, "/x/debuginfod_client", debuginfod.DefaultCacheDir())
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "/home/u")
	assert.Equal(t, "/home/u/.cache/debuginfod_client", debuginfod.DefaultCacheDir())
}

// TestReusesElfutilsCache: a file another client (gdb, perf) left in the
// cache is used without a request, even with no server configured.
func TestReusesElfutilsCache(t *testing.T) {
	data, id := testELF(t)
	cache := t.TempDir()
	c := debuginfod.New(debuginfod.Options{URLs: []string{}, CacheDir: cache})
	p := c.CachePath(id, debuginfod.Debuginfo)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
	require.NoError(t, os.WriteFile(p, data, 0o600))
	got, err := c.Fetch(context.Background(), id, debuginfod.Debuginfo)
	require.NoError(t, err)
	assert.Equal(t, p, got)
}

func TestFailuresWarnAndStayOutOfTheCache(t *testing.T) {
	data, id := testELF(t)
	other := append([]byte(nil), id...)
	other[0] ^= 0xff
	cases := []struct {
		name    string
		handle  func(w http.ResponseWriter, r *http.Request)
		warning string
	}{
		{"garbage", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("<html>hello</html>")) }, "not a usable ELF file"},
		{"wrong build-id", func(w http.ResponseWriter, r *http.Request) { w.Write(data) }, "build-id"},
		{"truncated ELF", func(w http.ResponseWriter, r *http.Request) { w.Write(data[:100]) }, "answer refused"},
		{"server error", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) }, "500"},
		{"too big", func(w http.ResponseWriter, r *http.Request) { w.Write(make([]byte, 5000)) }, "limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, _ := server(t, c.handle)
			var w warnings
			cache := t.TempDir()
			opts := debuginfod.Options{URLs: []string{s.URL}, CacheDir: cache, Warn: w.add}
			if c.name == "too big" {
				opts.MaxSize = 4096
			}
			cl := debuginfod.New(opts)
			asked := id
			if c.name == "wrong build-id" {
				asked = other
			}
			_, err := cl.Fetch(context.Background(), asked, debuginfod.Debuginfo)
			require.Error(t, err)
			assert.NotErrorIs(t, err, debuginfod.ErrNotFound)
			ws := w.list()
			require.Len(t, ws, 1)
			assert.Contains(t, ws[0], c.warning)
			assert.Contains(t, ws[0], s.URL)
			assertEmptyCache(t, cache)
		})
	}
}

// assertEmptyCache checks that nothing but directories is left in the
// cache: no temporary file, no file for a refused answer.
func assertEmptyCache(t *testing.T, dir string) {
	t.Helper()
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			t.Errorf("left in the cache: %s (%d bytes)", p, fi.Size())
		}
		return nil
	})
}

// TestSlowServer: a server that does not answer costs one request timeout
// and a warning, and is not asked again.
func TestSlowServer(t *testing.T) {
	_, id := testELF(t)
	release := make(chan struct{})
	s, n := server(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	var w warnings
	c := debuginfod.New(debuginfod.Options{URLs: []string{s.URL}, CacheDir: t.TempDir(), Warn: w.add, RequestTimeout: 300 * time.Millisecond})
	start := time.Now()
	_, err := c.Fetch(context.Background(), id, debuginfod.Debuginfo)
	require.Error(t, err)
	// The server answers only when the test ends: the fetch returned by
	// the 300ms RequestTimeout, well before DefaultRequestTimeout (30s),
	// however busy the machine.
	assert.Less(t, time.Since(start), debuginfod.DefaultRequestTimeout*2/3)
	other := append([]byte{1}, id[1:]...)
	_, err = c.Fetch(context.Background(), other, debuginfod.Debuginfo)
	require.Error(t, err)
	assert.Equal(t, int64(1), n.Load(), "the slow server was asked again")
	ws := w.list()
	require.Len(t, ws, 1)
	assert.Contains(t, ws[0], s.URL)
	assert.Contains(t, ws[0], "not asking it again")
}

// TestTotalBudget: once the client's time is spent no request starts.
func TestTotalBudget(t *testing.T) {
	_, id := testELF(t)
	s, n := server(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(50 * time.Millisecond)
		w.WriteHeader(http.StatusNotFound)
	})
	var w warnings
	c := debuginfod.New(debuginfod.Options{URLs: []string{s.URL}, CacheDir: t.TempDir(), Warn: w.add, TotalTimeout: 100 * time.Millisecond})
	for i := 0; i < 10; i++ {
		c.Fetch(context.Background(), append([]byte{byte(i)}, id[1:]...), debuginfod.Debuginfo)
	}
	assert.LessOrEqual(t, n.Load(), int64(3))
	assert.Contains(t, strings.Join(w.list(), "\n"), "time budget")
}

// TestParallelServersAndSharedDownloads: all servers are asked at once and
// the valid answer wins over a 404; concurrent fetches of one file share
// one download; Prefetch runs downloads in parallel.
func TestParallelServersAndSharedDownloads(t *testing.T) {
	data, id := testELF(t)
	var inFlight, maxInFlight atomic.Int64
	// While Prefetch runs, each request waits until four are in flight
	// (or, should they never be, 20 seconds once): parallelism is shown by
	// the requests the server holds at once, not by a duration a busy
	// machine may exceed.
	var prefetching atomic.Bool
	four := make(chan struct{})
	var fourOnce sync.Once
	good, nGood := server(t, func(w http.ResponseWriter, r *http.Request) {
		cur := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := maxInFlight.Load()
			if cur <= m || maxInFlight.CompareAndSwap(m, cur) {
				break
			}
		}
		if prefetching.Load() {
			if cur >= 4 {
				fourOnce.Do(func() { close(four) })
			}
			select {
			case <-four:
			case <-time.After(20 * time.Second):
				fourOnce.Do(func() { close(four) })
			}
		}
		// Keeps the download in flight while the others ask: the shared
		// download, and a fifth at once had Parallel not been kept.
		time.Sleep(100 * time.Millisecond)
		if strings.Contains(r.URL.Path, "/"+hexID(id)+"/") {
			w.Write(data)
			return
		}
		w.WriteHeader(http.StatusNotFound)
	})
	bad, nBad := server(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNotFound) })
	var w warnings
	c := debuginfod.New(debuginfod.Options{URLs: []string{bad.URL, good.URL}, CacheDir: t.TempDir(), Warn: w.add, Parallel: 4})
	var wg sync.WaitGroup
	paths := make([]string, 8)
	for i := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := c.Fetch(context.Background(), id, debuginfod.Debuginfo)
			assert.NoError(t, err)
			paths[i] = p
		}()
	}
	wg.Wait()
	for _, p := range paths {
		assert.Equal(t, c.CachePath(id, debuginfod.Debuginfo), p)
	}
	assert.Equal(t, int64(1), nGood.Load(), "one download for concurrent fetches")
	assert.Equal(t, int64(1), nBad.Load())
	require.NoError(t, debuginfod.Verify(paths[0], id))

	var ids [][]byte
	for i := 0; i < 8; i++ {
		ids = append(ids, append([]byte{byte(i), 0xaa}, id[2:]...))
	}
	maxInFlight.Store(0)
	prefetching.Store(true)
	c.Prefetch(context.Background(), debuginfod.Executable, ids)
	assert.Equal(t, int64(4), maxInFlight.Load(), "requests in flight at once for 8 downloads, 4 at a time")
	assert.Empty(t, w.list())
}

func hexID(b []byte) string {
	const digits = "0123456789abcdef"
	var s strings.Builder
	for _, c := range b {
		s.WriteByte(digits[c>>4])
		s.WriteByte(digits[c&15])
	}
	return s.String()
}
