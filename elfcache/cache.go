package elfcache

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/ustack/ustack/internal/filestamp"
)

// Cache shares opened objects between the users of many profiles: a file is
// opened once and the same *Object is returned to every caller. Objects are
// keyed by build-id when they have one (so the same library reached through
// different paths, or a container's copy of it, is opened once) and else by
// path, size and modification time (so a file replaced on disk is opened
// anew). A Cache is safe for concurrent use; concurrent opens of one file
// wait for a single open.
//
// Each Open, OpenBuildID and successful Acquire takes a reference to the
// object it returns; Release gives it back. With a budget (SetBudget), the
// objects no one holds a reference to are closed, least recently released
// first, while the bytes the cache's objects hold (Object.HeldBytes)
// exceed it; an object someone holds is never closed under them, so the
// budget can be exceeded by the objects in use. A later Open of an evicted
// object opens it again (a new *Object). Without a budget, or for callers
// that never Release, every object stays open until Close.
type Cache struct {
	opts Options

	mu     sync.Mutex
	byFile map[fileKey]*cacheEntry
	byID   map[string]*Object
	state  map[*Object]*objectState // every open object of the cache
	closed bool
	budget int64
	clock  uint64 // counts releases, for the least recently released
	// gone are the identities (build-id, else path) of evicted objects,
	// to count re-opens; cleared when it grows past maxGone.
	gone                       map[string]struct{}
	evictions, misses, reopens uint64
}

// maxGone bounds Cache.gone.
const maxGone = 1 << 14

// objectState is the cache's book of one open object.
type objectState struct {
	refs  int
	used  uint64    // clock at the last release
	files []fileKey // the byFile entries that lead to it
	id    string    // its key in byID, "" for none
}

type fileKey struct {
	path     string
	size     int64
	mtime    int64
	dev, ino uint64
}

type cacheEntry struct {
	done chan struct{}
	obj  *Object
	err  error
}

// NewCache returns an empty cache whose objects are opened with opts.
func NewCache(opts Options) *Cache {
	return &Cache{opts: opts, byFile: make(map[fileKey]*cacheEntry), byID: make(map[string]*Object),
		state: make(map[*Object]*objectState), gone: map[string]struct{}{}}
}

// SetBudget sets how many bytes the objects of the cache may hold
// (Object.HeldBytes) before those not in use are closed; 0 or less is no
// budget (the default): nothing is closed before Close. Objects over the
// new budget are closed at once.
func (c *Cache) SetBudget(bytes int64) {
	c.mu.Lock()
	c.budget = bytes
	evict := c.trimLocked()
	c.mu.Unlock()
	closeAll(evict)
}

// Open returns the object for the file at path (beneath the cache's SymFS),
// opening it on first use, with a reference the caller gives back with
// Release. An error met opening an unchanged file is remembered and
// returned again.
func (c *Cache) Open(path string) (*Object, error) {
	file, err := c.opts.symfsPath(path)
	if err != nil {
		return nil, newErr(path, "", -1, err)
	}
	fi, err := os.Stat(file)
	if err != nil {
		return nil, newErr(path, "", -1, err)
	}
	key := fileKey{path: path, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	key.dev, key.ino = filestamp.FileID(fi)
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, newErr(path, "", -1, ErrClosed)
		}
		e, ok := c.byFile[key]
		if !ok {
			break // opened below, c.mu held
		}
		c.mu.Unlock()
		<-e.done
		if e.err != nil {
			return nil, e.err
		}
		if c.Acquire(e.obj) {
			return e.obj, nil
		}
		// Evicted since: its entry is gone; open it again.
	}
	e := &cacheEntry{done: make(chan struct{})}
	c.byFile[key] = e
	c.misses++
	c.mu.Unlock()

	obj, err := Open(path, c.opts)

	c.mu.Lock()
	var evict []*Object
	switch {
	case err != nil:
	case c.closed:
		obj.Close()
		obj, err = nil, newErr(path, "", -1, ErrClosed)
	case obj.buildIDHex != "":
		if prev, ok := c.byID[obj.buildIDHex]; ok && prev.arch == obj.arch {
			obj.Close()
			obj = prev
			st := c.state[prev]
			st.refs++
			st.files = append(st.files, key)
		} else {
			c.byID[obj.buildIDHex] = obj
			c.addLocked(obj, key, obj.buildIDHex)
		}
		evict = c.trimLocked()
	default:
		c.addLocked(obj, key, "")
		evict = c.trimLocked()
	}
	e.obj, e.err = obj, err
	c.mu.Unlock()
	close(e.done)
	closeAll(evict)
	return obj, err
}

// addLocked enters a newly opened object with one reference.
func (c *Cache) addLocked(obj *Object, key fileKey, id string) {
	st := &objectState{refs: 1, id: id}
	if key != (fileKey{}) {
		st.files = []fileKey{key}
	}
	c.state[obj] = st
	name := id
	if name == "" {
		name = key.path
	}
	if _, ok := c.gone[name]; ok {
		c.reopens++
	}
}

// Acquire takes another reference to obj, an object the cache returned,
// and reports whether it could: false when obj has been evicted (or was
// never the cache's), and must not be used.
func (c *Cache) Acquire(obj *Object) bool {
	c.mu.Lock()
	st, ok := c.state[obj]
	if !ok {
		c.mu.Unlock()
		return false
	}
	st.refs++
	// The objects in use grew since the last open or release: trim the
	// others to the budget.
	evict := c.trimLocked()
	c.mu.Unlock()
	closeAll(evict)
	return true
}

// Release gives back a reference that Open, OpenBuildID or Acquire took.
// An object no one holds may be closed from then on (with a budget), so
// the caller must not use it after.
func (c *Cache) Release(obj *Object) {
	if obj == nil {
		return
	}
	c.mu.Lock()
	st, ok := c.state[obj]
	if !ok || st.refs <= 0 {
		c.mu.Unlock()
		return
	}
	st.refs--
	c.clock++
	st.used = c.clock
	evict := c.trimLocked()
	c.mu.Unlock()
	closeAll(evict)
}

// trimLocked removes, least recently released first, the objects no one
// holds while the cache's objects hold more than the budget, and returns
// them to be closed once c.mu is released.
func (c *Cache) trimLocked() []*Object {
	if c.budget <= 0 || c.closed {
		return nil
	}
	var total int64
	for o := range c.state {
		total += o.HeldBytes()
	}
	var out []*Object
	for total > c.budget {
		var old *Object
		var oldUsed uint64
		for o, st := range c.state {
			if st.refs == 0 && (old == nil || st.used < oldUsed) {
				old, oldUsed = o, st.used
			}
		}
		if old == nil {
			break // the rest are in use
		}
		total -= old.HeldBytes()
		c.removeLocked(old)
		out = append(out, old)
	}
	return out
}

// removeLocked takes an evicted object out of the cache's maps.
func (c *Cache) removeLocked(o *Object) {
	st := c.state[o]
	delete(c.state, o)
	for _, k := range st.files {
		if e, ok := c.byFile[k]; ok && e.obj == o {
			delete(c.byFile, k)
		}
	}
	name := st.id
	if name != "" && c.byID[name] == o {
		delete(c.byID, name)
	}
	if name == "" {
		name = o.path
	}
	if len(c.gone) >= maxGone {
		clear(c.gone)
	}
	c.gone[name] = struct{}{}
	c.evictions++
}

func closeAll(objs []*Object) {
	for _, o := range objs {
		o.Close()
	}
}

// CacheStats are a Cache's counters, for a tracer to export.
type CacheStats struct {
	// Objects is how many objects are open, InUse how many of them
	// someone holds a reference to.
	Objects, InUse int
	// HeldBytes is what the open objects hold in memory
	// (Object.HeldBytes), MappedBytes the size of the files they map
	// (Object.MappedBytes); Budget is SetBudget's (0: none).
	HeldBytes, MappedBytes, Budget int64
	// Misses counts the opens that opened a file (first opens and
	// re-opens), Reopens those of objects evicted before, Evictions the
	// objects closed to keep to the budget.
	Misses, Reopens, Evictions uint64
}

// Stats returns the cache's counters.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := CacheStats{Objects: len(c.state), Budget: c.budget, Misses: c.misses, Reopens: c.reopens, Evictions: c.evictions}
	for o, st := range c.state {
		if st.refs > 0 {
			s.InUse++
		}
		s.HeldBytes += o.HeldBytes()
		s.MappedBytes += o.MappedBytes()
	}
	return s
}

// Len returns the number of distinct objects open in the cache.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.state)
}

// Close closes every object of the cache. The objects must no longer be in
// use; later calls to Open fail.
func (c *Cache) Close() error {
	c.mu.Lock()
	all := make([]*Object, 0, len(c.state))
	for o := range c.state {
		all = append(all, o)
	}
	c.closed = true
	c.state = map[*Object]*objectState{}
	c.byFile, c.byID = map[fileKey]*cacheEntry{}, map[string]*Object{}
	c.mu.Unlock()
	var err error
	for _, o := range all {
		if e := o.Close(); e != nil && err == nil {
			err = e
		}
	}
	return err
}

// OpenBuildID returns the object with the GNU build-id for a file that is
// missing or differs on this machine: the one already in the cache, or
// else the file that Options.Fetcher gets (a debuginfod server's
// "executable"), opened under the name path (the path on the profiled
// machine, for reports). The fetched file's build-id must match. The
// caller holds a reference to it, as with Open.
func (c *Cache) OpenBuildID(path string, buildID []byte) (*Object, error) {
	if len(buildID) == 0 {
		return nil, newErr(path, "", -1, errors.New("no build-id to fetch the object by"))
	}
	id := hex.EncodeToString(buildID)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, newErr(path, "", -1, ErrClosed)
	}
	if o, ok := c.byID[id]; ok {
		c.state[o].refs++
		c.mu.Unlock()
		return o, nil
	}
	c.mu.Unlock()
	if c.opts.Fetcher == nil {
		return nil, newErr(path, "", -1, fmt.Errorf("object with build-id %s not found (no debuginfod)", id))
	}
	file, err := c.opts.Fetcher.Fetch(context.Background(), buildID, "executable")
	if err != nil {
		return nil, newErr(path, "", -1, fmt.Errorf("object with build-id %s: %w", id, err))
	}
	src, _, err := openSource(file, c.opts.NoMmap)
	if err != nil {
		return nil, newErr(path, "", -1, err)
	}
	o, err := newObject(path, file, src, c.opts, false)
	if err != nil {
		src.close()
		return nil, err
	}
	if !bytes.Equal(o.buildID, buildID) {
		o.Close()
		return nil, newErr(path, "", -1, fmt.Errorf("fetched %s has build-id %x, want %s", file, o.buildID, id))
	}
	o.fetched = true
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		o.Close()
		return nil, newErr(path, "", -1, ErrClosed)
	}
	if prev, ok := c.byID[id]; ok {
		c.state[prev].refs++
		c.mu.Unlock()
		o.Close()
		return prev, nil
	}
	c.byID[id] = o
	c.misses++
	c.addLocked(o, fileKey{}, id)
	evict := c.trimLocked()
	c.mu.Unlock()
	closeAll(evict)
	return o, nil
}
