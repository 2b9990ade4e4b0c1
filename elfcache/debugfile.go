package elfcache

import (
	"bytes"
	"context"
	"debug/elf"
	"hash/crc32"
	"os"
	"path/filepath"
)

// DebugFile returns the separate debug file found for the object, searching
// for it on first use, or nil when there is none. The search order is:
// for each debug directory D, D/.build-id/xx/yyyy.debug; then, when the
// object has a .gnu_debuglink NAME, DIR/NAME, DIR/.debug/NAME,
// D/DIR/NAME for each D, and D/NAME for each D, where DIR is the object's
// directory. A candidate
// whose build-id differs from the object's, or whose CRC-32 differs from the
// debug link's (for candidates found through the link, when build-ids do
// not settle it), is refused.
func (o *Object) DebugFile() *Object {
	o.loadDebug()
	return o.debug
}

// DebugPath returns the path of the separate debug file (beneath SymFS), or
// "" when there is none.
func (o *Object) DebugPath() string {
	if d := o.DebugFile(); d != nil {
		return d.file
	}
	return ""
}

func (o *Object) loadDebug() {
	o.debugOnce.Do(func() {
		if o.isDebug || o.opts.NoDebugFile || o.closed.Load() {
			return
		}
		o.debug, o.debugErr = o.findDebug()
		o.held.debug.Store(o.debug)
	})
}

func (o *Object) findDebug() (*Object, error) {
	if o.opts.DebugData != nil && len(o.buildID) > 0 {
		if data, ok := o.opts.DebugData(o.buildID); ok && len(data) > 0 {
			src := &source{data: data, size: int64(len(data))}
			d, err := newObject(o.path+".debug", o.path+".debug", src, o.opts, true)
			if err == nil && d.arch == o.arch && bytes.Equal(d.buildID, o.buildID) {
				d.archive = true
				return d, nil
			}
		}
	}
	self, _ := os.Stat(o.file)
	if len(o.buildIDHex) >= 4 {
		for _, p := range o.opts.inDebugDirs(filepath.Join(".build-id", o.buildIDHex[:2], o.buildIDHex[2:]+".debug")) {
			if dbg := o.tryDebug(p, self, false); dbg != nil {
				return dbg, nil
			}
		}
	}
	if !o.hasLink {
		return o.fetchDebug(self), nil
	}
	dir := filepath.Dir(o.path)
	// Paths on the profiled machine; the debug link comes from the object
	// and may hold "..", so each whole path is resolved beneath SymFS.
	var cands []string
	for _, c := range []string{filepath.Join(dir, o.debugLink), filepath.Join(dir, ".debug", o.debugLink)} {
		if p, err := o.opts.symfsPath(c); err == nil {
			cands = append(cands, p)
		}
	}
	cands = append(cands, o.opts.inDebugDirs(filepath.Join(dir, o.debugLink))...)
	// Last, D/NAME: where gdb also looks, and where a debug file copied
	// off another machine without its directory tree usually lands.
	cands = append(cands, o.opts.inDebugDirs(o.debugLink)...)
	for _, p := range cands {
		if dbg := o.tryDebug(p, self, true); dbg != nil {
			return dbg, nil
		}
	}
	return o.fetchDebug(self), nil
}

// fetchDebug asks Options.Fetcher for the debug file by build-id, last of
// all searches.
func (o *Object) fetchDebug(self os.FileInfo) *Object {
	if o.opts.Fetcher == nil || len(o.buildID) == 0 || o.hasOwn(".debug_info") && o.hasOwn(".symtab") {
		return nil // nothing to fetch: the object has its DWARF and symbols
	}
	p, err := o.opts.Fetcher.Fetch(context.Background(), o.buildID, "debuginfo")
	if err != nil || p == "" {
		return nil
	}
	d := o.tryDebug(p, self, false)
	if d != nil {
		d.fetched = true
	}
	return d
}

// tryDebug opens the candidate debug file p and checks that it belongs to o.
func (o *Object) tryDebug(p string, self os.FileInfo, checkCRC bool) *Object {
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() || sameFile(fi, self) {
		return nil
	}
	src, _, err := openSource(p, o.opts.NoMmap)
	if err != nil {
		return nil
	}
	d, err := newObject(p, p, src, o.opts, true)
	if err != nil {
		src.close()
		return nil
	}
	ok := d.arch == o.arch
	if ok && o.buildID != nil && d.buildID != nil && !bytes.Equal(o.buildID, d.buildID) {
		ok = false
	}
	if ok && o.buildID != nil && d.buildID == nil && !checkCRC {
		ok = false
	}
	if ok && checkCRC && (o.buildID == nil || d.buildID == nil) {
		// A matching build-id is stronger evidence than the CRC; without
		// one on both sides, the CRC decides.
		ok = fileCRC(src) == o.debugCRC
	}
	if !ok {
		d.Close()
		return nil
	}
	return d
}

// fileCRC returns the CRC-32 (IEEE) of the whole file, as .gnu_debuglink
// records it.
func fileCRC(src *source) uint32 {
	if src.data != nil {
		return crc32.ChecksumIEEE(src.data)
	}
	h := crc32.NewIEEE()
	buf := make([]byte, 1<<16)
	for off := int64(0); off < src.size; {
		n := src.readAt(buf, uint64(off))
		if n == 0 {
			break
		}
		h.Write(buf[:n])
		off += int64(n)
	}
	return h.Sum32()
}

// hasOwn reports whether the object has the section with contents.
func (o *Object) hasOwn(name string) bool {
	s := o.section(name)
	return s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0
}
