package capture

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ArchiveVersion is the version of the archive format this package writes
// (docs/DUMP_FORMAT.md).
const ArchiveVersion = 1

// Entry kinds of an archive member (the USTACK.kind PAX record).
const (
	KindObject   = "object"   // an ELF object mapped by a recorded process
	KindDebug    = "debug"    // the separate debug file of an object
	KindVDSO     = "vdso"     // the kernel's vDSO image
	KindKallsyms = "kallsyms" // /proc/kallsyms
	KindMeta     = "meta"     // ustack-archive.json, the first member
	KindManifest = "manifest" // manifest.json, the last member
)

// PAX record keys ustack sets on each member.
const (
	paxKind    = "USTACK.kind"
	paxBuildID = "USTACK.buildid"
	paxPath    = "USTACK.path"
	paxSize    = "USTACK.size"
)

// maxMember bounds the uncompressed size of one member read back.
const maxMember = 4 << 30

// ArchiveEntry describes one member of an archive.
type ArchiveEntry struct {
	// Kind is one of KindObject, KindDebug, KindVDSO, KindKallsyms, ...
	Kind string `json:"kind"`
	// BuildID is the object's GNU build-id as lower-case hex ("" when the
	// object has none).
	BuildID string `json:"build_id,omitempty"`
	// Path is the object's path on the recording machine.
	Path string `json:"path,omitempty"`
	// Member is the tar member name.
	Member string `json:"member"`
	// Size is the uncompressed size in bytes.
	Size int64 `json:"size"`
	// Gzip says the member's data is gzip-compressed.
	Gzip bool `json:"gzip"`

	off, csize int64 // position of the member's data in the archive
}

// ArchiveMeta is the content of the first member, ustack-archive.json.
type ArchiveMeta struct {
	Version   int    `json:"version"`
	Created   string `json:"created"`
	Hostname  string `json:"hostname,omitempty"`
	OSRelease string `json:"os_release,omitempty"`
	Arch      string `json:"arch,omitempty"`
	// KernelBuildID is the running kernel's build-id (hex), when known.
	KernelBuildID string `json:"kernel_build_id,omitempty"`
}

// Manifest is the content of the last member, manifest.json: every other
// member. Readers do not need it (each member's PAX records say the same),
// so an archive whose writer was killed is still usable.
type Manifest struct {
	Version int            `json:"version"`
	Entries []ArchiveEntry `json:"entries"`
}

// ArchiveWriter writes a companion archive. Members are written whole and
// flushed one at a time, so a truncated archive keeps every complete member.
// It is safe for concurrent use.
type ArchiveWriter struct {
	// Compress makes members written from now on gzip-compressed (their
	// names then end in ".gz"). The recorder leaves it off while recording,
	// so archiving costs the recorded program little CPU, and compresses
	// the archive at the end (CompactArchive).
	Compress bool

	mu      sync.Mutex
	f       *os.File
	tw      *tar.Writer
	entries []ArchiveEntry
	seen    map[string]bool
	closed  bool
}

// CreateArchive creates (mode 0600) an archive at path and writes its
// first member from meta. compress sets Compress.
func CreateArchive(path string, meta ArchiveMeta, compress bool) (*ArchiveWriter, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, err
	}
	a := &ArchiveWriter{f: f, tw: tar.NewWriter(f), seen: map[string]bool{}, Compress: compress}
	meta.Version = ArchiveVersion
	if meta.Created == "" {
		meta.Created = time.Now().UTC().Format(time.RFC3339)
	}
	b, _ := json.MarshalIndent(meta, "", "  ")
	if err := a.add(ArchiveEntry{Kind: KindMeta, Member: "ustack-archive.json"}, b); err != nil {
		f.Close()
		return nil, err
	}
	return a, nil
}

func (a *ArchiveWriter) add(e ArchiveEntry, data []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	compress := a.Compress && e.Kind != KindMeta && e.Kind != KindManifest
	if compress {
		e.Member += ".gz"
	}
	if a.closed {
		return errors.New("archive is closed")
	}
	if a.seen[e.Member] {
		return nil
	}
	e.Size = int64(len(data))
	payload := data
	if compress {
		var buf bytes.Buffer
		buf.Grow(len(data) / 3)
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		zw.Write(data)
		zw.Close()
		payload = buf.Bytes()
		e.Gzip = true
	}
	h := &tar.Header{
		Typeflag: tar.TypeReg, Name: e.Member, Mode: 0o600, Size: int64(len(payload)),
		ModTime: time.Now(), Format: tar.FormatPAX,
		PAXRecords: map[string]string{paxKind: e.Kind, paxSize: strconv.FormatInt(e.Size, 10)},
	}
	if e.BuildID != "" {
		h.PAXRecords[paxBuildID] = e.BuildID
	}
	if e.Path != "" {
		h.PAXRecords[paxPath] = e.Path
	}
	if err := a.tw.WriteHeader(h); err != nil {
		return err
	}
	if _, err := a.tw.Write(payload); err != nil {
		return err
	}
	if err := a.tw.Flush(); err != nil {
		return err
	}
	a.seen[e.Member] = true
	a.entries = append(a.entries, e)
	return nil
}

// addStream writes an uncompressed member of size bytes read from r,
// through buf, without holding the data in memory. A reader that comes up
// short (the file shrank) is padded with zeros so the archive stays valid.
func (a *ArchiveWriter) addStream(e ArchiveEntry, r io.Reader, size int64, buf []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return errors.New("archive is closed")
	}
	if a.seen[e.Member] {
		return nil
	}
	e.Size = size
	h := &tar.Header{
		Typeflag: tar.TypeReg, Name: e.Member, Mode: 0o600, Size: size,
		ModTime: time.Now(), Format: tar.FormatPAX,
		PAXRecords: map[string]string{paxKind: e.Kind, paxSize: strconv.FormatInt(size, 10)},
	}
	if e.BuildID != "" {
		h.PAXRecords[paxBuildID] = e.BuildID
	}
	if e.Path != "" {
		h.PAXRecords[paxPath] = e.Path
	}
	if err := a.tw.WriteHeader(h); err != nil {
		return err
	}
	n, err := io.CopyBuffer(a.tw, io.LimitReader(r, size), buf)
	if err != nil && n == 0 {
		return err
	}
	for n < size {
		k := min(int64(len(buf)), size-n)
		clear(buf[:k])
		if _, err := a.tw.Write(buf[:k]); err != nil {
			return err
		}
		n += k
	}
	if err := a.tw.Flush(); err != nil {
		return err
	}
	a.seen[e.Member] = true
	a.entries = append(a.entries, e)
	return nil
}

// AddObjectFile is AddObject for an open file of size bytes, copied
// through buf (nil: a 256 KiB buffer) and stored uncompressed.
func (a *ArchiveWriter) AddObjectFile(buildID []byte, path string, r io.Reader, size int64, buf []byte) error {
	if buf == nil {
		buf = make([]byte, 256<<10)
	}
	return a.addStream(ArchiveEntry{Kind: KindObject, BuildID: hex.EncodeToString(buildID), Path: path,
		Member: objectMember("objects", buildID, path)}, r, size, buf)
}

// AddDebugFileStream is AddDebugFile for an open file, like AddObjectFile.
func (a *ArchiveWriter) AddDebugFileStream(buildID []byte, path string, r io.Reader, size int64, buf []byte) error {
	if buf == nil {
		buf = make([]byte, 256<<10)
	}
	return a.addStream(ArchiveEntry{Kind: KindDebug, BuildID: hex.EncodeToString(buildID), Path: path,
		Member: objectMember("debug", buildID, path)}, r, size, buf)
}

// AddObject stores an ELF object's file contents under its build-id (or,
// without one, under a name derived from its path) with its original path.
func (a *ArchiveWriter) AddObject(buildID []byte, path string, data []byte) error {
	return a.add(ArchiveEntry{Kind: KindObject, BuildID: hex.EncodeToString(buildID), Path: path,
		Member: objectMember("objects", buildID, path)}, data)
}

// AddDebugFile stores the separate debug file of the object with buildID.
func (a *ArchiveWriter) AddDebugFile(buildID []byte, path string, data []byte) error {
	return a.add(ArchiveEntry{Kind: KindDebug, BuildID: hex.EncodeToString(buildID), Path: path,
		Member: objectMember("debug", buildID, path)}, data)
}

// AddVDSO stores the vDSO image.
func (a *ArchiveWriter) AddVDSO(buildID []byte, data []byte) error {
	return a.add(ArchiveEntry{Kind: KindVDSO, BuildID: hex.EncodeToString(buildID), Path: "[vdso]",
		Member: objectMember("vdso", buildID, "[vdso]")}, data)
}

// AddKallsyms stores the kernel symbol table (the text of /proc/kallsyms).
func (a *ArchiveWriter) AddKallsyms(data []byte) error {
	return a.add(ArchiveEntry{Kind: KindKallsyms, Path: "/proc/kallsyms", Member: "kallsyms"}, data)
}

// objectMember names a member: DIR/<buildid>, or DIR/path-<escaped path>
// (add appends ".gz" to compressed members).
func objectMember(dir string, buildID []byte, path string) string {
	if len(buildID) > 0 {
		return dir + "/" + hex.EncodeToString(buildID)
	}
	esc := strings.NewReplacer("/", "_", " ", "_").Replace(strings.TrimPrefix(path, "/"))
	if len(esc) > 80 {
		esc = esc[len(esc)-80:]
	}
	return dir + "/path-" + esc
}

// Entries returns the members written so far.
func (a *ArchiveWriter) Entries() []ArchiveEntry {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]ArchiveEntry(nil), a.entries...)
}

// Close writes manifest.json and the tar trailer, and closes the file.
func (a *ArchiveWriter) Close() error {
	a.mu.Lock()
	entries := append([]ArchiveEntry(nil), a.entries...)
	a.mu.Unlock()
	b, _ := json.MarshalIndent(Manifest{Version: ArchiveVersion, Entries: entries}, "", "  ")
	err := a.add(ArchiveEntry{Kind: KindManifest, Member: "manifest.json"}, b)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return err
	}
	a.closed = true
	if e := a.tw.Close(); err == nil {
		err = e
	}
	if e := a.f.Sync(); err == nil {
		err = e
	}
	if e := a.f.Close(); err == nil {
		err = e
	}
	return err
}

// Archive is a companion archive opened for reading. Its methods are safe
// for concurrent use.
type Archive struct {
	ra      io.ReaderAt
	closer  io.Closer
	meta    ArchiveMeta
	entries []ArchiveEntry
	byID    map[string]int // build-id hex -> object entry
	debug   map[string]int // build-id hex -> debug entry
	byPath  map[string]int // path -> object entry
	err     error
}

// OpenArchive opens an archive written by ustack record (<output>.ustack).
// A truncated archive (its writer was killed) yields every complete member.
func OpenArchive(path string) (*Archive, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	a, err := ReadArchive(f, st.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	a.closer = f
	return a, nil
}

// ReadArchive reads the index of an archive held in ra (size bytes). Member
// data is read from ra when asked for, so ra must stay usable.
func ReadArchive(ra io.ReaderAt, size int64) (*Archive, error) {
	a := &Archive{ra: ra, byID: map[string]int{}, debug: map[string]int{}, byPath: map[string]int{}}
	sr := io.NewSectionReader(ra, 0, size)
	tr := tar.NewReader(sr)
	first := true
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if first {
				return nil, fmt.Errorf("not a ustack archive: %w", err)
			}
			a.err = err // truncated or damaged: keep what came before
			break
		}
		off, _ := sr.Seek(0, io.SeekCurrent)
		if h.Typeflag != tar.TypeReg || h.Size < 0 || off+h.Size > size {
			if off+h.Size > size {
				a.err = io.ErrUnexpectedEOF
				break
			}
			continue
		}
		e := ArchiveEntry{Kind: h.PAXRecords[paxKind], BuildID: strings.ToLower(h.PAXRecords[paxBuildID]),
			Path: h.PAXRecords[paxPath], Member: h.Name, off: off, csize: h.Size,
			Gzip: strings.HasSuffix(h.Name, ".gz")}
		e.Size, _ = strconv.ParseInt(h.PAXRecords[paxSize], 10, 64)
		if !e.Gzip {
			e.Size = h.Size
		}
		if e.Size < 0 || e.Size > maxMember {
			continue
		}
		if first {
			if e.Kind != KindMeta {
				return nil, errors.New("not a ustack archive: first member is not ustack-archive.json")
			}
			first = false
			if e.csize <= 1<<20 {
				if b, err := a.read(&e); err == nil {
					json.Unmarshal(b, &a.meta)
				}
			}
		}
		i := len(a.entries)
		a.entries = append(a.entries, e)
		switch e.Kind {
		case KindObject, KindVDSO:
			if e.BuildID != "" {
				if _, dup := a.byID[e.BuildID]; !dup {
					a.byID[e.BuildID] = i
				}
			}
			if e.Path != "" {
				a.byPath[e.Path] = i
			}
		case KindDebug:
			if e.BuildID != "" {
				a.debug[e.BuildID] = i
			}
		}
	}
	if first {
		return nil, errors.New("not a ustack archive: empty")
	}
	return a, nil
}

// read returns the uncompressed data of an entry.
func (a *Archive) read(e *ArchiveEntry) ([]byte, error) {
	sr := io.NewSectionReader(a.ra, e.off, e.csize)
	if !e.Gzip {
		b := make([]byte, e.csize)
		_, err := io.ReadFull(sr, b)
		return b, err
	}
	zr, err := gzip.NewReader(sr)
	if err != nil {
		return nil, fmt.Errorf("member %s: %w", e.Member, err)
	}
	// Never trust the declared size for the allocation beyond a bound.
	buf := bytes.NewBuffer(make([]byte, 0, min(e.Size, 1<<20)))
	n, err := io.Copy(buf, io.LimitReader(zr, e.Size+1))
	if err != nil {
		return nil, fmt.Errorf("member %s: %w", e.Member, err)
	}
	if n != e.Size {
		return nil, fmt.Errorf("member %s: %d bytes, manifest says %d", e.Member, n, e.Size)
	}
	return buf.Bytes(), nil
}

// Meta returns the archive's ustack-archive.json.
func (a *Archive) Meta() ArchiveMeta { return a.meta }

// Entries returns every member, in archive order.
func (a *Archive) Entries() []ArchiveEntry { return append([]ArchiveEntry(nil), a.entries...) }

// Err returns the damage met while indexing (a truncated archive), or nil.
func (a *Archive) Err() error { return a.err }

// Object returns the file contents of the object (or vDSO) with the given
// build-id and its path on the recording machine.
func (a *Archive) Object(buildID []byte) (data []byte, path string, ok bool) {
	i, found := a.byID[hex.EncodeToString(buildID)]
	if !found {
		return nil, "", false
	}
	b, err := a.read(&a.entries[i])
	if err != nil {
		return nil, "", false
	}
	return b, a.entries[i].Path, true
}

// ObjectByPath returns the contents and build-id of the object recorded
// under path (for objects without a build-id, or when only the path is known).
func (a *Archive) ObjectByPath(path string) (data []byte, buildID []byte, ok bool) {
	i, found := a.byPath[path]
	if !found {
		return nil, nil, false
	}
	b, err := a.read(&a.entries[i])
	if err != nil {
		return nil, nil, false
	}
	id, _ := hex.DecodeString(a.entries[i].BuildID)
	return b, id, true
}

// DebugFile returns the separate debug file stored for the object with
// buildID, if the recorder found one.
func (a *Archive) DebugFile(buildID []byte) (data []byte, ok bool) {
	i, found := a.debug[hex.EncodeToString(buildID)]
	if !found {
		return nil, false
	}
	b, err := a.read(&a.entries[i])
	return b, err == nil
}

// Kallsyms returns the recorded /proc/kallsyms, or nil when the archive has none.
func (a *Archive) Kallsyms() io.Reader {
	for i := range a.entries {
		if a.entries[i].Kind == KindKallsyms {
			b, err := a.read(&a.entries[i])
			if err != nil {
				return nil
			}
			return bytes.NewReader(b)
		}
	}
	return nil
}

// VDSO returns the recorded vDSO image and its build-id.
func (a *Archive) VDSO() (data []byte, buildID []byte, ok bool) {
	for i := range a.entries {
		if a.entries[i].Kind == KindVDSO {
			b, err := a.read(&a.entries[i])
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
func (a *Archive) BuildIDs() []string {
	out := make([]string, 0, len(a.byID))
	for id := range a.byID {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Close closes the file opened by OpenArchive.
func (a *Archive) Close() error {
	if a.closer != nil {
		return a.closer.Close()
	}
	return nil
}

// CompactArchive rewrites the archive at path with every member
// gzip-compressed (members already compressed are copied as they are), in
// place: the new archive replaces the old one only once complete.
func CompactArchive(path string) error {
	a, err := OpenArchive(path)
	if err != nil {
		return err
	}
	defer a.Close()
	tmp := path + ".tmp"
	aw, err := CreateArchive(tmp, a.Meta(), true)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		aw.Close()
		os.Remove(tmp)
		return err
	}
	for i := range a.entries {
		e := a.entries[i]
		if e.Kind == KindMeta || e.Kind == KindManifest {
			continue
		}
		data, err := a.read(&e)
		if err != nil {
			return fail(err)
		}
		ne := ArchiveEntry{Kind: e.Kind, BuildID: e.BuildID, Path: e.Path, Member: strings.TrimSuffix(e.Member, ".gz")}
		if err := aw.add(ne, data); err != nil {
			return fail(err)
		}
	}
	if err := aw.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}
