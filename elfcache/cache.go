package elfcache

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
)

// Cache shares opened objects between the users of many profiles: a file is
// opened once and the same *Object is returned to every caller. Objects are
// keyed by build-id when they have one (so the same library reached through
// different paths, or a container's copy of it, is opened once) and else by
// path, size and modification time (so a file replaced on disk is opened
// anew). A Cache is safe for concurrent use; concurrent opens of one file
// wait for a single open.
type Cache struct {
	opts Options

	mu     sync.Mutex
	byFile map[fileKey]*cacheEntry
	byID   map[string]*Object
	all    []*Object
	closed bool
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
	return &Cache{opts: opts, byFile: make(map[fileKey]*cacheEntry), byID: make(map[string]*Object)}
}

// Open returns the object for the file at path (beneath the cache's SymFS),
// opening it on first use. An error met opening an unchanged file is
// remembered and returned again.
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
	key.dev, key.ino = fileID(fi)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, newErr(path, "", -1, ErrClosed)
	}
	if e, ok := c.byFile[key]; ok {
		c.mu.Unlock()
		<-e.done
		return e.obj, e.err
	}
	e := &cacheEntry{done: make(chan struct{})}
	c.byFile[key] = e
	c.mu.Unlock()

	obj, err := Open(path, c.opts)

	c.mu.Lock()
	switch {
	case err != nil:
	case c.closed:
		obj.Close()
		obj, err = nil, newErr(path, "", -1, ErrClosed)
	case obj.buildIDHex != "":
		if prev, ok := c.byID[obj.buildIDHex]; ok && prev.arch == obj.arch {
			obj.Close()
			obj = prev
		} else {
			c.byID[obj.buildIDHex] = obj
			c.all = append(c.all, obj)
		}
	default:
		c.all = append(c.all, obj)
	}
	e.obj, e.err = obj, err
	c.mu.Unlock()
	close(e.done)
	return obj, err
}

// Len returns the number of distinct objects in the cache.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.all)
}

// Close closes every object of the cache. The objects must no longer be in
// use; later calls to Open fail.
func (c *Cache) Close() error {
	c.mu.Lock()
	all := c.all
	c.all, c.closed = nil, true
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
// machine, for reports). The fetched file's build-id must match.
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
	defer c.mu.Unlock()
	if c.closed {
		o.Close()
		return nil, newErr(path, "", -1, ErrClosed)
	}
	if prev, ok := c.byID[id]; ok {
		o.Close()
		return prev, nil
	}
	c.byID[id] = o
	c.all = append(c.all, o)
	return o, nil
}
