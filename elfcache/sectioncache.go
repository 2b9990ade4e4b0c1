package elfcache

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ustack/ustack/internal/filestamp"
	"github.com/ustack/ustack/internal/mmapfile"
)

// SectionCache keeps decompressed debug sections on disk, so that the
// second report that needs glibc's line tables maps them instead of
// inflating megabytes again, and tables built from an object's sections
// (its sorted symbol table and function names: symcache.go; the index of
// its DWARF units: unitcache.go; what parsing each unit made:
// unitparsecache.go), so that it maps them instead of sorting thousands
// of symbols, walking a thousand unit headers or parsing units again. An entry is keyed by the object's build-id and
// the section's name, and records the length and a checksum of the
// compressed bytes it was made from (their first and last 4 KB: a debug
// file rewritten by dwz keeps its build-id, not its sections' bytes) and a
// checksum of its own contents, read in full on use unless the entry's file
// is exactly as when a use last did (a stamp beside it: internal/filestamp): an
// entry made from other bytes or damaged on disk is ignored and rebuilt,
// never trusted. Entries are written to a temporary
// file and renamed into place, so concurrent reports never see a partial
// entry. The cache is bounded in size; the oldest entries go first.
//
// A SectionCache is safe for concurrent use.
type SectionCache struct {
	dir      string
	maxBytes int64

	mu      sync.Mutex
	written int64 // bytes written since the last trim
}

// DefaultSectionCacheSize bounds a SectionCache made with maxBytes 0.
const DefaultSectionCacheSize = 2 << 30

// DefaultSectionCacheDir is where ustack keeps decompressed sections:
// $XDG_CACHE_HOME/ustack/sections, else ~/.cache/ustack/sections.
func DefaultSectionCacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "ustack", "sections"), nil
}

// NewSectionCache returns a cache in dir holding at most maxBytes (0:
// DefaultSectionCacheSize). The directory is created 0700 when missing.
func NewSectionCache(dir string, maxBytes int64) (*SectionCache, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultSectionCacheSize
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("section cache: %w", err)
	}
	return &SectionCache{dir: dir, maxBytes: maxBytes}, nil
}

// Dir returns the cache's directory.
func (c *SectionCache) Dir() string { return c.dir }

// The entry layout: a fixed header, then the decompressed bytes.
//
//	magic   [8]byte "USTKSEC2"
//	size    u64     decompressed size
//	srcLen  u64     compressed size
//	srcCRC  u32     CRC-32C of the compressed bytes' first and last 4 KB
//	dataCRC u32     CRC-32C of the decompressed bytes
const (
	sectionMagic    = "USTKSEC2"
	sectionHdrSize  = 32
	maxCachedSecLen = 1 << 32
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// srcSumSpan is how much of each end of the compressed bytes srcSum reads:
// a page. dwz's rewriting changes a section's first bytes (and mostly its
// length); checking 64 KB at each end instead cost a warm report 2-5 ms of
// its 35 in checksums over a dozen sections.
const srcSumSpan = 4 << 10

// srcSum is the checksum an entry keeps of the compressed bytes it was made
// from: of their first and last srcSumSpan bytes (all of them when fewer),
// so that checking an entry does not read megabytes of a debug file that a
// report then never needs. With the length and the build-id it tells a
// rewritten section from the one the entry was made from.
func srcSum(src []byte) uint32 {
	if len(src) <= 2*srcSumSpan {
		return crc32.Checksum(src, castagnoli)
	}
	return srcSumEnds(src[:srcSumSpan], src[len(src)-srcSumSpan:])
}

// srcSumEnds is srcSum of bytes longer than 2*srcSumSpan given their first
// and last srcSumSpan bytes.
func srcSumEnds(head, tail []byte) uint32 {
	return crc32.Update(crc32.Checksum(head, castagnoli), castagnoli, tail)
}

// path returns the entry file of a section, or "" when the object has no
// build-id to key it by.
func (c *SectionCache) path(buildID []byte, section string) string {
	if len(buildID) < 4 || section == "" {
		return ""
	}
	id := hex.EncodeToString(buildID)
	name := strings.Map(func(r rune) rune {
		if r == '/' || r == 0 || r == '\\' {
			return '_'
		}
		return r
	}, strings.TrimLeft(section, "."))
	return filepath.Join(c.dir, id[:2], id[2:], name)
}

// get returns the cached decompressed bytes of a section made from src,
// mapped read-only, and the function that unmaps them. A missing, stale
// or damaged entry gives ok false (a damaged one is removed).
// With size anySize, the entry may have any size (its header says which).
func (c *SectionCache) get(buildID []byte, section string, src []byte, size uint64) (data []byte, release func() error, ok bool) {
	return c.getEntry(buildID, section, src, size, true)
}

// getEntry is get; without checkData it trusts the entry's data without
// reading it for the checksum: for an entry putFrom has just written (and
// checksummed as it wrote), whose pages are still the ones written.
func (c *SectionCache) getEntry(buildID []byte, section string, src []byte, size uint64, checkData bool) (data []byte, release func() error, ok bool) {
	p := c.path(buildID, section)
	if p == "" {
		return nil, nil, false
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, nil, false
	}
	defer f.Close()
	st, err := f.Stat()
	if err == nil && size == anySize {
		size = uint64(max(st.Size()-sectionHdrSize, 0))
	}
	if err != nil || size >= maxCachedSecLen || st.Size() != sectionHdrSize+int64(size) {
		c.drop(p, err == nil)
		return nil, nil, false
	}
	m, unmap, err := mmapfile.Map(f, st.Size())
	if err != nil {
		return nil, nil, false
	}
	le := binary.LittleEndian
	good := entryHeaderOK(m, size, src)
	if good && checkData && !filestamp.Checked(p, st, le.Uint32(m[28:])) {
		sum, ok := fileSum(f, sectionHdrSize, int64(size))
		good = ok && le.Uint32(m[28:]) == sum
		if good {
			filestamp.Stamp(p, st, sum)
		}
	}
	if !good {
		unmap()
		c.drop(p, true)
		return nil, nil, false
	}
	return m[sectionHdrSize:], unmap, true
}

// entryHeaderOK reports whether h begins with the header of an entry of
// size bytes made from src.
func entryHeaderOK(h []byte, size uint64, src []byte) bool {
	le := binary.LittleEndian
	return len(h) >= sectionHdrSize && string(h[:8]) == sectionMagic && le.Uint64(h[8:]) == size &&
		le.Uint64(h[16:]) == uint64(len(src)) && le.Uint32(h[24:]) == srcSum(src)
}

// maxReadEntry bounds the entries getRead reads itself.
const maxReadEntry = 1 << 20

// getRead is get for a small entry of any size, read into buf (grown when
// too small) rather than mapped, its checksum computed from what was read:
// for the many
// entries of a few kilobytes (a unit's parsing: unitparsecache.go), where
// mapping, stamps and unmapping would cost more system calls than the
// reading.
func (c *SectionCache) getRead(buildID []byte, section string, src []byte, buf []byte) (data []byte, ok bool) {
	p := c.path(buildID, section)
	if p == "" {
		return nil, false
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	st, err := f.Stat()
	if err == nil && st.Size() > maxReadEntry {
		// A large one (a unit of a hundred thousand rows) as get reads
		// it, then copied.
		data, release, ok := c.getEntry(buildID, section, src, anySize, true)
		if !ok {
			return nil, false
		}
		defer release()
		return append(buf[:0], data...), true
	}
	if err != nil || st.Size() < sectionHdrSize {
		c.drop(p, err == nil)
		return nil, false
	}
	b := buf[:0]
	if cap(b) < int(st.Size()) {
		b = make([]byte, st.Size())
	}
	b = b[:st.Size()]
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, false
	}
	if !entryHeaderOK(b, uint64(len(b)-sectionHdrSize), src) ||
		binary.LittleEndian.Uint32(b[28:]) != crc32.Checksum(b[sectionHdrSize:], castagnoli) {
		c.drop(p, true)
		return nil, false
	}
	return b[sectionHdrSize:], true
}

// An entry whose data a use read in full and found matching its checksum
// is stamped (internal/filestamp: its file's identity and status beside
// it), and a later use whose entry file is exactly as stamped skips
// reading it again; an entry changed less than filestamp.MinAge ago is not
// stamped. Where files have no change time (not unix), every use checks
// the data.

// entriesSummed counts the entries fileSum read in full (tests).
var entriesSummed atomic.Int64

// sumBufs are the buffers fileSum reads entries through.
var sumBufs = sync.Pool{New: func() any { return new([64 << 10]byte) }}

// fileSum returns the CRC-32C of n bytes of f from off, read with pread
// through a small reused buffer rather than from the entry's mapping: the
// checksum reads every byte of an entry of which a report uses a part, and
// reading through the mapping would map every page of it (a page fault
// each, costly in a VM) for nothing. ok is false when the bytes cannot be
// read.
func fileSum(f *os.File, off, n int64) (sum uint32, ok bool) {
	entriesSummed.Add(1)
	buf := sumBufs.Get().(*[64 << 10]byte)
	defer sumBufs.Put(buf)
	for n > 0 {
		k := min(n, int64(len(buf)))
		if _, err := f.ReadAt(buf[:k], off); err != nil {
			return 0, false
		}
		sum = crc32.Update(sum, castagnoli, buf[:k])
		off += k
		n -= k
	}
	return sum, true
}

// anySize asks get for an entry whatever its size: one made by ustack from
// what it read (a symbol table), whose size is not known beforehand.
const anySize = ^uint64(0)

// drop removes a bad entry.
func (c *SectionCache) drop(p string, exists bool) {
	if exists {
		os.Remove(p)
		os.Remove(filestamp.Path(p))
	}
}

// put stores a section's decompressed bytes, made from src, and says
// whether it did. Errors are not fatal to anyone: the cache is an
// optimization.
func (c *SectionCache) put(buildID []byte, section string, src, data []byte) bool {
	return c.putFrom(buildID, section, src, bytes.NewReader(data), uint64(len(data)))
}

// putFrom is put with the decompressed bytes read from r, size of them,
// as they are decompressed: a first report never holds a whole section in
// its heap. It says false, and stores nothing, when r ends early or fails
// (the caller decompresses again to say why) or the entry cannot be
// written.
func (c *SectionCache) putFrom(buildID []byte, section string, src []byte, r io.Reader, size uint64) bool {
	p := c.path(buildID, section)
	if p == "" || size >= maxCachedSecLen || int64(size) > c.maxBytes/4 {
		return false
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return false
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return false
	}
	var hdr [sectionHdrSize]byte
	_, err = tmp.Write(hdr[:]) // filled in below, once the checksum is known
	sum := crc32.New(castagnoli)
	if err == nil {
		var n int64
		n, err = io.CopyN(io.MultiWriter(tmp, sum), r, int64(size))
		if err == nil && uint64(n) != size {
			err = io.ErrUnexpectedEOF
		}
	}
	if err == nil {
		copy(hdr[:], sectionMagic)
		le := binary.LittleEndian
		le.PutUint64(hdr[8:], size)
		le.PutUint64(hdr[16:], uint64(len(src)))
		le.PutUint32(hdr[24:], srcSum(src))
		le.PutUint32(hdr[28:], sum.Sum32())
		_, err = tmp.WriteAt(hdr[:], 0)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return false
	}
	c.mu.Lock()
	c.written += int64(size)
	trim := c.written > c.maxBytes/8
	if trim {
		c.written = 0
	}
	c.mu.Unlock()
	if trim {
		c.Trim()
	}
	return true
}

// Trim removes the oldest entries (by modification time) until the cache
// holds at most its size bound, and leftovers of interrupted writes.
func (c *SectionCache) Trim() error {
	type entry struct {
		path string
		size int64
		mod  int64
	}
	var entries []entry
	var total int64
	err := filepath.WalkDir(c.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".tmp-") {
			// Another writer's file in progress, or one left behind: only
			// old ones are removed.
			if info.ModTime().Unix() < time.Now().Unix()-3600 {
				os.Remove(p)
			}
			return nil
		}
		if entryName, ok := strings.CutPrefix(d.Name(), ".ok-"); ok {
			// A stamp goes with its entry; one whose entry is gone is
			// removed.
			if _, err := os.Lstat(filepath.Join(filepath.Dir(p), entryName)); errors.Is(err, fs.ErrNotExist) {
				os.Remove(p)
			}
			return nil
		}
		entries = append(entries, entry{p, info.Size(), info.ModTime().UnixNano()})
		total += info.Size()
		return nil
	})
	sort.Slice(entries, func(i, j int) bool { return entries[i].mod < entries[j].mod })
	var errs []error
	for _, e := range entries {
		if total <= c.maxBytes {
			break
		}
		if err := os.Remove(e.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		os.Remove(filestamp.Path(e.path))
		total -= e.size
	}
	return errors.Join(append(errs, err)...)
}
