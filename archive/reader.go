package archive

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sort"
	"sync"
)

// maxMember bounds the uncompressed size of one member read back.
const maxMember = 4 << 30

// maxRatio bounds a gzip member's uncompressed size against its stored
// size (deflate's limit is about 1032:1), so a damaged size record cannot
// make a reader allocate more than the data can hold.
const maxRatio = 1100

// Options configures a Reader. The zero value works.
type Options struct {
	// Name is the archive's file name in messages (Open sets it to the path).
	Name string
	// Warn, when set, receives the message of each damage as it is
	// found: while indexing, and when a member's data fails its checksum
	// or decompression (once per member). Reader.Damage returns the same
	// damage as *FormatErrors, with file and offset. (Warn takes a
	// message, as every Warn of ustack's packages does.)
	Warn func(msg string)
}

// Reader is an archive opened for reading. Its methods are safe for
// concurrent use.
type Reader struct {
	ra       io.ReaderAt
	size     int64
	closer   io.Closer
	opts     Options
	meta     Meta
	entries  []Entry
	byID     map[string]int  // build-id hex -> object entry
	debug    map[string]int  // build-id hex -> debug entry
	byPath   map[string]int  // path -> object entry
	gaps     []gap           // stretches skipped while indexing
	rejected map[string]bool // members whose header was found damaged

	mu      sync.Mutex
	damage  []error
	indexed bool         // Warn is called from now on (before: at the end of NewReader)
	bad     map[int]bool // entries whose data proved damaged
}

// Open opens an archive written by ustack record (<output>.ustack). A
// damaged archive yields every member found intact (Damage says what was
// lost); only an archive with no readable member at all is an error.
func Open(path string, opts Options) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if opts.Name == "" {
		opts.Name = path
	}
	a, err := NewReader(f, st.Size(), opts)
	if err != nil {
		f.Close()
		return nil, err
	}
	a.closer = f
	return a, nil
}

// NewReader indexes an archive held in ra (size bytes). Member data is read
// from ra when asked for, so ra must stay usable. The error, when the input
// holds no ustack member at all, unwraps to ErrNotArchive.
func NewReader(ra io.ReaderAt, size int64, opts Options) (*Reader, error) {
	a := &Reader{ra: ra, size: size, opts: opts, byID: map[string]int{}, debug: map[string]int{},
		byPath: map[string]int{}, bad: map[int]bool{}, rejected: map[string]bool{}}
	if err := a.index(); err != nil {
		return nil, err // the damage found on the way is not news: there was nothing to find
	}
	a.mu.Lock()
	a.indexed = true
	found := append([]error(nil), a.damage...)
	a.mu.Unlock()
	if opts.Warn != nil {
		for _, err := range found {
			opts.Warn(err.Error())
		}
	}
	for i := range a.entries {
		e := &a.entries[i]
		switch e.Kind {
		case KindObject, KindVDSO:
			if e.BuildID != "" {
				if _, dup := a.byID[e.BuildID]; !dup {
					a.byID[e.BuildID] = i
				}
			}
			if e.Path != "" && !e.noPAXRecord {
				a.byPath[e.Path] = i
			}
		case KindDebug:
			if e.BuildID != "" {
				a.debug[e.BuildID] = i
			}
		}
	}
	return a, nil
}

// report records a damage and passes it to Options.Warn.
func (a *Reader) report(off int64, member, format string, args ...any) {
	err := &FormatError{Path: a.opts.Name, Offset: off, Member: member, Msg: fmt.Sprintf(format, args...)}
	a.mu.Lock()
	a.damage = append(a.damage, err)
	warn := a.indexed
	a.mu.Unlock()
	if warn && a.opts.Warn != nil {
		a.opts.Warn(err.Error())
	}
}

// read returns the uncompressed data of entry i, checked against its
// checksum. A damaged member is reported once and fails every time.
func (a *Reader) read(i int) ([]byte, error) {
	e := &a.entries[i]
	a.mu.Lock()
	bad := a.bad[i]
	a.mu.Unlock()
	if bad {
		return nil, fmt.Errorf("archive %s: member %s is damaged", a.opts.Name, e.Member)
	}
	b, err := a.readData(e)
	if err == nil && e.hasSum {
		if got := crc32.Checksum(b, castagnoli); got != e.sum {
			err = fmt.Errorf("contents fail their CRC-32C check (recorded %08x, read %08x)", e.sum, got)
		}
	}
	if err != nil {
		a.mu.Lock()
		first := !a.bad[i]
		a.bad[i] = true
		a.mu.Unlock()
		if first {
			a.report(e.off, e.Member, "%s%s; it is not used", describe(e), err)
		}
		return nil, &FormatError{Path: a.opts.Name, Offset: e.off, Member: e.Member, Msg: err.Error()}
	}
	return b, nil
}

// describe names what an entry held, for messages: "object /usr/bin/x: ".
func describe(e *Entry) string {
	if e.Path != "" && !e.noPAXRecord {
		return e.Kind + " " + e.Path + ": "
	}
	return e.Kind + ": "
}

func (a *Reader) readData(e *Entry) ([]byte, error) {
	sr := io.NewSectionReader(a.ra, e.off, e.csize)
	if !e.Gzip {
		b := make([]byte, e.csize)
		if _, err := io.ReadFull(sr, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	zr, err := gzip.NewReader(sr)
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	limit := min(maxMember, maxRatio*e.csize+(64<<10))
	if e.Size >= 0 {
		limit = min(limit, e.Size)
	}
	// Never trust the declared size for the allocation beyond a bound.
	buf := bytes.NewBuffer(make([]byte, 0, min(limit, 1<<20)))
	n, err := io.Copy(buf, io.LimitReader(zr, limit+1))
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	if e.Size >= 0 && n != e.Size {
		return nil, fmt.Errorf("%d bytes uncompressed, its header says %d", n, e.Size)
	}
	if n > limit {
		return nil, fmt.Errorf("more than %d bytes uncompressed", limit)
	}
	return buf.Bytes(), nil
}

// Meta returns the archive's ustack-archive.json (zero when it was lost).
func (a *Reader) Meta() Meta { return a.meta }

// Entries returns every member found, in archive order.
func (a *Reader) Entries() []Entry { return append([]Entry(nil), a.entries...) }

// Damage returns every damage found so far, each a *FormatError: while
// indexing, and in members read since.
func (a *Reader) Damage() []error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]error(nil), a.damage...)
}

// Err joins Damage into one error, nil when none was found.
func (a *Reader) Err() error { return errors.Join(a.Damage()...) }

// ObjectByID returns the file contents of the object (or vDSO) with the
// given build-id and its path on the recording machine.
func (a *Reader) ObjectByID(buildID []byte) (data []byte, path string, ok bool) {
	i, found := a.byID[hex.EncodeToString(buildID)]
	if !found {
		return nil, "", false
	}
	b, err := a.read(i)
	if err != nil {
		return nil, "", false
	}
	return b, a.entries[i].Path, true
}

// ObjectByPath returns the contents and build-id of the object recorded
// under path (for objects without a build-id, or when only the path is known).
func (a *Reader) ObjectByPath(path string) (data []byte, buildID []byte, ok bool) {
	i, found := a.byPath[path]
	if !found {
		return nil, nil, false
	}
	b, err := a.read(i)
	if err != nil {
		return nil, nil, false
	}
	id, _ := hex.DecodeString(a.entries[i].BuildID)
	return b, id, true
}

// Object returns the object a process mapped from path with buildID (empty
// when the recording gave none) and the name to open it under: by build-id
// first, then the vDSO for "[vdso]", then by path when the build-ids agree.
// It is the form report.ObjectSource asks for.
func (a *Reader) Object(buildID []byte, path string) (data []byte, name string, ok bool) {
	if len(buildID) > 0 {
		if data, name, ok := a.ObjectByID(buildID); ok {
			return data, name, true
		}
	}
	if path == "[vdso]" {
		if data, id, ok := a.VDSO(); ok && (len(buildID) == 0 || bytes.Equal(id, buildID)) {
			return data, "[vdso]", true
		}
		return nil, "", false
	}
	if data, id, ok := a.ObjectByPath(path); ok && (len(buildID) == 0 || bytes.Equal(id, buildID)) {
		return data, path, true
	}
	return nil, "", false
}

// DebugFile returns the separate debug file stored for the object with
// buildID, if the recorder found one.
func (a *Reader) DebugFile(buildID []byte) (data []byte, ok bool) {
	i, found := a.debug[hex.EncodeToString(buildID)]
	if !found {
		return nil, false
	}
	b, err := a.read(i)
	return b, err == nil
}

// Kallsyms returns the recorded /proc/kallsyms, or nil when the archive
// has none (or it was damaged).
func (a *Reader) Kallsyms() io.Reader {
	for i := range a.entries {
		if a.entries[i].Kind == KindKallsyms {
			b, err := a.read(i)
			if err != nil {
				return nil
			}
			return bytes.NewReader(b)
		}
	}
	return nil
}

// VDSO returns the recorded vDSO image and its build-id.
func (a *Reader) VDSO() (data []byte, buildID []byte, ok bool) {
	for i := range a.entries {
		if a.entries[i].Kind == KindVDSO {
			b, err := a.read(i)
			if err != nil {
				return nil, nil, false
			}
			id, _ := hex.DecodeString(a.entries[i].BuildID)
			return b, id, true
		}
	}
	return nil, nil, false
}

// BuildIDs returns the build-ids (hex) of the stored objects, sorted.
func (a *Reader) BuildIDs() []string {
	out := make([]string, 0, len(a.byID))
	for id := range a.byID {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Close closes the file opened by Open.
func (a *Reader) Close() error {
	if a.closer != nil {
		return a.closer.Close()
	}
	return nil
}
