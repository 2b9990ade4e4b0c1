package debuginfod

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ustack/ustack/elfcache"
)

// The kinds of file a server serves by build-id (the last element of the
// request path, and the file name in the cache).
const (
	// Debuginfo is the separate debug file (DWARF, .symtab).
	Debuginfo = "debuginfo"
	// Executable is the executable or shared library itself.
	Executable = "executable"
)

// Defaults for the zero Options.
const (
	DefaultRequestTimeout = 30 * time.Second
	DefaultTotalTimeout   = 2 * time.Minute
	DefaultParallel       = 4
	DefaultMaxSize        = 4 << 30
	// DefaultCacheMiss is how long a negative cache entry holds, as
	// elfutils' cache_miss_s default.
	DefaultCacheMiss = 600 * time.Second
)

// ErrNotFound is returned when no server has the file (or the cache holds
// a fresh negative entry for it).
var ErrNotFound = errors.New("debuginfod: not found")

// ErrDisabled is returned by Fetch on a client without servers.
var ErrDisabled = errors.New("debuginfod: no servers (DEBUGINFOD_URLS unset or empty)")

// ErrBudget is returned once the client's total time is spent.
var ErrBudget = errors.New("debuginfod: time budget spent")

// Options configure a Client. The zero Options reads the environment as
// elfutils' client does.
type Options struct {
	// URLs are the server base URLs. Nil means $DEBUGINFOD_URLS split at
	// spaces; an empty non-nil slice means no servers.
	URLs []string
	// Off disables the client whatever the URLs (ustack's --no-debuginfod).
	Off bool
	// CacheDir is the client cache. "" means $DEBUGINFOD_CACHE_PATH, else
	// $XDG_CACHE_HOME/debuginfod_client, else ~/.cache/debuginfod_client.
	CacheDir string
	// RequestTimeout bounds one request, from connecting to the last byte
	// (0: $DEBUGINFOD_TIMEOUT seconds, else DefaultRequestTimeout).
	RequestTimeout time.Duration
	// TotalTimeout bounds the time the client spends from its first
	// request; afterwards Fetch only answers from the cache (0:
	// DefaultTotalTimeout).
	TotalTimeout time.Duration
	// Parallel bounds the downloads in flight (0: DefaultParallel).
	Parallel int
	// MaxSize bounds one file (0: $DEBUGINFOD_MAXSIZE bytes, else
	// DefaultMaxSize).
	MaxSize int64
	// Warn, when set, receives one line per problem (a server down, slow or
	// answering garbage). Each distinct problem is reported once.
	Warn func(msg string)
	// Progress, when set, is called as downloads start and end, with the
	// number of downloads started and finished so far, for a progress
	// line on a terminal.
	Progress func(started, finished int)
	// Transport is the HTTP transport (nil: a default one, no proxy from
	// the environment).
	Transport http.RoundTripper
}

// Client fetches files from debuginfod servers into the shared cache. It is
// safe for concurrent use.
type Client struct {
	off       bool
	urls      []string
	cache     string
	cacheMiss time.Duration
	reqTime   time.Duration
	total     time.Duration
	maxSize   int64
	warn      func(string)
	progress  func(int, int)
	http      *http.Client
	sem       chan struct{}

	mu       sync.Mutex
	inflight map[string]*call
	down     map[string]bool // servers not to ask again
	warned   map[string]bool
	deadline time.Time // zero until the first request

	requests atomic.Int64
	started  atomic.Int64
	finished atomic.Int64
}

type call struct {
	done chan struct{}
	path string
	err  error
}

// New returns a client configured by opts and the environment. A client
// without servers is valid and fetches nothing (Enabled reports false).
func New(opts Options) *Client {
	c := &Client{
		off:      opts.Off,
		cache:    opts.CacheDir,
		reqTime:  opts.RequestTimeout,
		total:    opts.TotalTimeout,
		maxSize:  opts.MaxSize,
		warn:     opts.Warn,
		progress: opts.Progress,
		inflight: map[string]*call{},
		down:     map[string]bool{},
		warned:   map[string]bool{},
	}
	urls := opts.URLs
	if urls == nil {
		urls = strings.Fields(os.Getenv("DEBUGINFOD_URLS"))
	}
	if !opts.Off {
		for _, u := range urls {
			pu, err := url.Parse(u)
			if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
				c.warnf("debuginfod: ignoring server %q: not an http or https URL", u)
				continue
			}
			c.urls = append(c.urls, strings.TrimRight(u, "/"))
		}
	}
	if c.cache == "" {
		c.cache = DefaultCacheDir()
	}
	if c.reqTime <= 0 {
		c.reqTime = envSeconds("DEBUGINFOD_TIMEOUT", DefaultRequestTimeout)
	}
	if c.total <= 0 {
		c.total = DefaultTotalTimeout
	}
	if c.maxSize <= 0 {
		c.maxSize = DefaultMaxSize
		if n, err := strconv.ParseInt(os.Getenv("DEBUGINFOD_MAXSIZE"), 10, 64); err == nil && n > 0 {
			c.maxSize = n
		}
	}
	c.cacheMiss = DefaultCacheMiss
	if b, err := os.ReadFile(filepath.Join(c.cache, "cache_miss_s")); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 {
			c.cacheMiss = time.Duration(n) * time.Second
		}
	}
	par := opts.Parallel
	if par <= 0 {
		par = DefaultParallel
	}
	c.sem = make(chan struct{}, par)
	tr := opts.Transport
	if tr == nil {
		tr = &http.Transport{
			ResponseHeaderTimeout: c.reqTime,
			MaxIdleConnsPerHost:   par,
			IdleConnTimeout:       30 * time.Second,
		}
	}
	c.http = &http.Client{Transport: tr}
	return c
}

func envSeconds(name string, def time.Duration) time.Duration {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return def
}

// DefaultCacheDir returns the cache directory elfutils' client uses:
// $DEBUGINFOD_CACHE_PATH, else $XDG_CACHE_HOME/debuginfod_client, else
// $HOME/.cache/debuginfod_client.
func DefaultCacheDir() string {
	if p := os.Getenv("DEBUGINFOD_CACHE_PATH"); p != "" {
		return p
	}
	if p := os.Getenv("XDG_CACHE_HOME"); p != "" {
		return filepath.Join(p, "debuginfod_client")
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		home = "/"
	}
	return filepath.Join(home, ".cache", "debuginfod_client")
}

// Enabled reports whether the client has servers to ask.
func (c *Client) Enabled() bool { return c != nil && len(c.urls) > 0 }

// URLs returns the servers the client asks.
func (c *Client) URLs() []string { return append([]string(nil), c.urls...) }

// CacheDir returns the cache directory.
func (c *Client) CacheDir() string { return c.cache }

// Requests returns how many HTTP requests the client has made.
func (c *Client) Requests() int { return int(c.requests.Load()) }

// CachePath returns where the cache keeps the file of the kind for the
// build-id (whether or not it is there).
func (c *Client) CachePath(buildID []byte, kind string) string {
	return filepath.Join(c.cache, hex.EncodeToString(buildID), kind)
}

// Fetch returns the path of a local copy of the file of the kind
// (Debuginfo or Executable) with the build-id: from the cache, or else
// downloaded from the servers into it. It returns ErrNotFound when no
// server has it; ErrDisabled with Options.Off, and without servers once
// the cache (which gdb or perf may have filled) has not got the file, so
// that nothing is fetched then; and other errors (already reported through
// Options.Warn) when servers fail.
func (c *Client) Fetch(ctx context.Context, buildID []byte, kind string) (string, error) {
	if kind != Debuginfo && kind != Executable {
		return "", fmt.Errorf("debuginfod: unknown kind %q", kind)
	}
	if len(buildID) == 0 || len(buildID) > 64 {
		return "", fmt.Errorf("debuginfod: build-id of %d bytes", len(buildID))
	}
	if c == nil || c.off {
		return "", ErrDisabled
	}
	id := hex.EncodeToString(buildID)
	path := filepath.Join(c.cache, id, kind)
	if p, err, ok := c.fromCache(path); ok {
		return p, err
	}
	if !c.Enabled() {
		return "", ErrDisabled
	}
	key := id + "/" + kind
	c.mu.Lock()
	if cl, ok := c.inflight[key]; ok {
		c.mu.Unlock()
		select {
		case <-cl.done:
			return cl.path, cl.err
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	cl := &call{done: make(chan struct{})}
	c.inflight[key] = cl
	c.mu.Unlock()

	cl.path, cl.err = c.download(ctx, buildID, id, kind, path)

	c.mu.Lock()
	delete(c.inflight, key)
	c.mu.Unlock()
	close(cl.done)
	return cl.path, cl.err
}

// fromCache answers from the cache: ok is false when the servers must be
// asked.
func (c *Client) fromCache(path string) (string, error, bool) {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return "", nil, false
	}
	if fi.Size() > 0 {
		return path, nil, true
	}
	if time.Since(fi.ModTime()) < c.cacheMiss {
		return "", ErrNotFound, true
	}
	os.Remove(path) // a stale negative entry: ask again
	return "", nil, false
}

// download asks every server at once and keeps the first valid answer.
func (c *Client) download(ctx context.Context, buildID []byte, id, kind, path string) (string, error) {
	c.mu.Lock()
	if c.deadline.IsZero() {
		c.deadline = time.Now().Add(c.total)
	}
	deadline := c.deadline
	var urls []string
	for _, u := range c.urls {
		if !c.down[u] {
			urls = append(urls, u)
		}
	}
	c.mu.Unlock()
	if time.Now().After(deadline) {
		c.warnf("debuginfod: time budget of %v spent; not asking for more files", c.total)
		return "", ErrBudget
	}
	if len(urls) == 0 {
		return "", fmt.Errorf("debuginfod: every server failed earlier")
	}
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	defer func() { <-c.sem }()
	c.report(&c.started)
	defer c.report(&c.finished)

	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		c.warnf("debuginfod: cannot create the cache directory: %v", err)
		return "", err
	}
	type answer struct {
		tmp string
		err error
	}
	answers := make(chan answer, len(urls))
	for _, u := range urls {
		go func() {
			tmp, err := c.get(ctx, u, buildID, id, kind, dir)
			answers <- answer{tmp, err}
		}()
	}
	var winner string
	notFound := 0
	var firstErr error
	for range urls {
		a := <-answers
		switch {
		case a.err == nil && winner == "":
			winner = a.tmp
			cancel() // the others are no longer needed
		case a.err == nil:
			os.Remove(a.tmp)
		case errors.Is(a.err, ErrNotFound):
			notFound++
		case winner == "" && firstErr == nil:
			firstErr = a.err
		}
	}
	if winner != "" {
		if err := os.Rename(winner, path); err != nil {
			os.Remove(winner)
			c.warnf("debuginfod: cannot store %s: %v", path, err)
			return "", err
		}
		return path, nil
	}
	if notFound == len(urls) {
		// elfutils' negative entry: an empty file, trusted for cache_miss_s.
		if f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
			f.Close()
		}
		return "", ErrNotFound
	}
	if firstErr == nil {
		firstErr = ErrNotFound
	}
	return "", firstErr
}

func (c *Client) report(n *atomic.Int64) {
	n.Add(1)
	if c.progress != nil {
		c.progress(int(c.started.Load()), int(c.finished.Load()))
	}
}

// get makes one request and returns the temporary file holding the valid
// body.
func (c *Client) get(ctx context.Context, base string, buildID []byte, id, kind, dir string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.reqTime)
	defer cancel()
	u := base + "/buildid/" + id + "/" + kind
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("User-Agent", "ustack")
	c.requests.Add(1)
	resp, err := c.http.Do(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return "", err // another server answered first, or the caller gave up
		}
		c.markDown(base, fmt.Sprintf("debuginfod: %s: %v; not asking it again", base, shortErr(err)))
		return "", err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return "", ErrNotFound
	case resp.StatusCode != http.StatusOK:
		err := fmt.Errorf("debuginfod: %s: %s", u, resp.Status)
		c.warnf("%v", err)
		return "", err
	}
	if resp.ContentLength > c.maxSize {
		err := fmt.Errorf("debuginfod: %s: %d bytes, more than the limit %d", u, resp.ContentLength, c.maxSize)
		c.warnf("%v", err)
		return "", err
	}
	tmp, err := os.CreateTemp(dir, "."+kind+".*.tmp") // mode 0600
	if err != nil {
		c.warnf("debuginfod: cannot write to the cache: %v", err)
		return "", err
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	n, err := io.Copy(tmp, io.LimitReader(resp.Body, c.maxSize+1))
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return "", err
		}
		c.markDown(base, fmt.Sprintf("debuginfod: %s: reading %s: %v; not asking it again", base, u, shortErr(err)))
		return "", err
	}
	if n > c.maxSize {
		err := fmt.Errorf("debuginfod: %s: more than the limit of %d bytes", u, c.maxSize)
		c.warnf("%v", err)
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := Verify(tmp.Name(), buildID); err != nil {
		err = fmt.Errorf("debuginfod: %s: answer refused: %w", u, err)
		c.warnf("%v", err)
		return "", err
	}
	ok = true
	return tmp.Name(), nil
}

// Verify checks that the file at path is an ELF file whose GNU build-id is
// buildID: what a server's answer must be before it enters the cache.
func Verify(path string, buildID []byte) error {
	o, err := elfcache.Open(path, elfcache.Options{NoDebugFile: true})
	if err != nil {
		return fmt.Errorf("not a usable ELF file: %w", err)
	}
	defer o.Close()
	if got := o.BuildID(); !bytes.Equal(got, buildID) {
		if got == nil {
			return fmt.Errorf("ELF file without a build-id, want %x", buildID)
		}
		return fmt.Errorf("build-id %x, want %x", got, buildID)
	}
	return nil
}

func (c *Client) markDown(base, msg string) {
	c.mu.Lock()
	c.down[base] = true
	c.mu.Unlock()
	c.warnf("%s", msg)
}

func (c *Client) warnf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	c.mu.Lock()
	seen := c.warned[msg]
	c.warned[msg] = true
	c.mu.Unlock()
	if !seen && c.warn != nil {
		c.warn(msg)
	}
}

// shortErr drops the request line Go's HTTP client puts in front of
// transport errors.
func shortErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// Prefetch fetches the files of the kind for all the build-ids at once (at
// most Options.Parallel at a time) and returns when all are done; the
// files are then found in the cache by Fetch. Failures are reported as
// Fetch reports them.
func (c *Client) Prefetch(ctx context.Context, kind string, buildIDs [][]byte) {
	var wg sync.WaitGroup
	for _, id := range buildIDs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Fetch(ctx, id, kind)
		}()
	}
	wg.Wait()
}

// Close closes the client's idle connections. Fetch still works afterwards.
func (c *Client) Close() { c.http.CloseIdleConnections() }
