package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Version is the version of the archive format this package writes
// (docs/DUMP_FORMAT.md).
const Version = 1

// Kinds of archive member (the USTACK.kind PAX record).
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
	// paxSum is the CRC-32C of the uncompressed contents, paxHSum the
	// CRC-32C of the member's name and ustack records (hsum); both 8 hex
	// digits. Archives written before they existed have neither.
	paxSum  = "USTACK.crc32c"
	paxHSum = "USTACK.hcrc32c"
)

// unsetSum is the value of the checksum records of a streamed member until
// its data is written; a reader takes it as "no checksum".
const unsetSum = "--------"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Entry describes one member of an archive.
type Entry struct {
	// Kind is one of KindObject, KindDebug, KindVDSO, KindKallsyms, ...
	Kind string `json:"kind"`
	// BuildID is the object's GNU build-id as lower-case hex ("" when the
	// object has none).
	BuildID string `json:"build_id,omitempty"`
	// Path is the object's path on the recording machine.
	Path string `json:"path,omitempty"`
	// Member is the tar member name.
	Member string `json:"member"`
	// Size is the uncompressed size in bytes (-1 when unknown: a member
	// found without its PAX records).
	Size int64 `json:"size"`
	// Gzip says the member's data is gzip-compressed.
	Gzip bool `json:"gzip"`

	hdrOff      int64  // offset of the member's first header block
	off, csize  int64  // position and stored size of the member's data
	sum         uint32 // CRC-32C of the contents, when hasSum
	hasSum      bool
	noPAXRecord bool // its PAX records were lost: kind and build-id come from the name
}

// hsum is the checksum of what an entry's header says about it.
func hsum(member, kind, buildID, path string, size int64, sum string) uint32 {
	h := crc32.New(castagnoli)
	for _, s := range []string{member, kind, buildID, path, strconv.FormatInt(size, 10), sum} {
		io.WriteString(h, s)
		h.Write([]byte{0})
	}
	return h.Sum32()
}

func hex8(v uint32) string { return fmt.Sprintf("%08x", v) }

// Meta is the content of the first member, ustack-archive.json.
type Meta struct {
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
// so an archive whose writer was killed is still usable; when present it
// names the members that damage cost.
type Manifest struct {
	Version int     `json:"version"`
	Entries []Entry `json:"entries"`
}

// Writer writes an archive. Members are written whole and flushed one at a
// time, so a truncated archive keeps every complete member. It is safe for
// concurrent use.
type Writer struct {
	// Compress makes members written from now on gzip-compressed (their
	// names then end in ".gz"). The recorder leaves it off while recording,
	// so archiving costs the recorded program little CPU, and compresses
	// the archive at the end (Compact).
	Compress bool

	mu      sync.Mutex
	f       *os.File
	cw      *countWriter
	tw      *tar.Writer
	entries []Entry
	seen    map[string]bool
	closed  bool
}

// countWriter counts the bytes written to the file and, while rec is set,
// keeps them (a member's header blocks, to find where its checksum records
// lie).
type countWriter struct {
	w    io.Writer
	n    int64
	rec  bool
	kept []byte
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if c.rec {
		c.kept = append(c.kept, p[:n]...)
	}
	c.n += int64(n)
	return n, err
}

// Create creates (mode 0600) an archive at path and writes its first
// member from meta. compress sets Compress.
func Create(path string, meta Meta, compress bool) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, err
	}
	cw := &countWriter{w: f}
	a := &Writer{f: f, cw: cw, tw: tar.NewWriter(cw), seen: map[string]bool{}, Compress: compress}
	meta.Version = Version
	if meta.Created == "" {
		meta.Created = time.Now().UTC().Format(time.RFC3339)
	}
	b, _ := json.MarshalIndent(meta, "", "  ")
	if err := a.add(Entry{Kind: KindMeta, Member: "ustack-archive.json"}, b); err != nil {
		f.Close()
		return nil, err
	}
	return a, nil
}

// Path returns the name of the archive's file.
func (a *Writer) Path() string { return a.f.Name() }

// header returns the tar header of e, whose stored data is csize bytes;
// sum is the contents' checksum (unsetSum when not yet known).
func header(e *Entry, csize int64, sum string) *tar.Header {
	h := &tar.Header{
		Typeflag: tar.TypeReg, Name: e.Member, Mode: 0o600, Size: csize,
		ModTime: time.Now(), Format: tar.FormatPAX,
		PAXRecords: map[string]string{paxKind: e.Kind, paxSize: strconv.FormatInt(e.Size, 10), paxSum: sum},
	}
	if e.BuildID != "" {
		h.PAXRecords[paxBuildID] = e.BuildID
	}
	if e.Path != "" {
		h.PAXRecords[paxPath] = e.Path
	}
	h.PAXRecords[paxHSum] = unsetSum
	if sum != unsetSum {
		h.PAXRecords[paxHSum] = hex8(hsum(e.Member, e.Kind, e.BuildID, e.Path, e.Size, sum))
	}
	return h
}

func (a *Writer) add(e Entry, data []byte) error {
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
	e.sum, e.hasSum = crc32.Checksum(data, castagnoli), true
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
	e.hdrOff = a.cw.n
	if err := a.tw.WriteHeader(header(&e, int64(len(payload)), hex8(e.sum))); err != nil {
		return err
	}
	e.off, e.csize = a.cw.n, int64(len(payload))
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
// The checksums, known only once the data is written, are written into the
// member's PAX records in place.
func (a *Writer) addStream(e Entry, r io.Reader, size int64, buf []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return errors.New("archive is closed")
	}
	if a.seen[e.Member] {
		return nil
	}
	e.Size = size
	e.hdrOff = a.cw.n
	a.cw.rec, a.cw.kept = true, a.cw.kept[:0]
	err := a.tw.WriteHeader(header(&e, size, unsetSum))
	a.cw.rec = false
	if err != nil {
		return err
	}
	sumAt := bytes.Index(a.cw.kept, []byte(" "+paxSum+"="+unsetSum+"\n"))
	hsumAt := bytes.Index(a.cw.kept, []byte(" "+paxHSum+"="+unsetSum+"\n"))
	if sumAt < 0 || hsumAt < 0 {
		return errors.New("archive: checksum records not found in the member header")
	}
	e.off, e.csize = a.cw.n, size
	h := crc32.New(castagnoli)
	n, err := io.CopyBuffer(io.MultiWriter(a.tw, h), io.LimitReader(r, size), buf)
	if err != nil && n == 0 {
		return err
	}
	for n < size {
		k := min(int64(len(buf)), size-n)
		clear(buf[:k])
		h.Write(buf[:k])
		if _, err := a.tw.Write(buf[:k]); err != nil {
			return err
		}
		n += k
	}
	if err := a.tw.Flush(); err != nil {
		return err
	}
	e.sum, e.hasSum = h.Sum32(), true
	sum := hex8(e.sum)
	if _, err := a.f.WriteAt([]byte(sum), e.hdrOff+int64(sumAt)+int64(len(paxSum))+2); err != nil {
		return err
	}
	hs := hex8(hsum(e.Member, e.Kind, e.BuildID, e.Path, e.Size, sum))
	if _, err := a.f.WriteAt([]byte(hs), e.hdrOff+int64(hsumAt)+int64(len(paxHSum))+2); err != nil {
		return err
	}
	a.seen[e.Member] = true
	a.entries = append(a.entries, e)
	return nil
}

// AddObjectFile is AddObject for an open file of size bytes, copied
// through buf (nil: a 256 KiB buffer) and stored uncompressed.
func (a *Writer) AddObjectFile(buildID []byte, path string, r io.Reader, size int64, buf []byte) error {
	if buf == nil {
		buf = make([]byte, 256<<10)
	}
	return a.addStream(Entry{Kind: KindObject, BuildID: hex.EncodeToString(buildID), Path: path,
		Member: objectMember("objects", buildID, path)}, r, size, buf)
}

// AddDebugFileStream is AddDebugFile for an open file, like AddObjectFile.
func (a *Writer) AddDebugFileStream(buildID []byte, path string, r io.Reader, size int64, buf []byte) error {
	if buf == nil {
		buf = make([]byte, 256<<10)
	}
	return a.addStream(Entry{Kind: KindDebug, BuildID: hex.EncodeToString(buildID), Path: path,
		Member: objectMember("debug", buildID, path)}, r, size, buf)
}

// AddObject stores an ELF object's file contents under its build-id (or,
// without one, under a name derived from its path) with its original path.
func (a *Writer) AddObject(buildID []byte, path string, data []byte) error {
	return a.add(Entry{Kind: KindObject, BuildID: hex.EncodeToString(buildID), Path: path,
		Member: objectMember("objects", buildID, path)}, data)
}

// AddDebugFile stores the separate debug file of the object with buildID.
func (a *Writer) AddDebugFile(buildID []byte, path string, data []byte) error {
	return a.add(Entry{Kind: KindDebug, BuildID: hex.EncodeToString(buildID), Path: path,
		Member: objectMember("debug", buildID, path)}, data)
}

// AddVDSO stores the vDSO image.
func (a *Writer) AddVDSO(buildID []byte, data []byte) error {
	return a.add(Entry{Kind: KindVDSO, BuildID: hex.EncodeToString(buildID), Path: "[vdso]",
		Member: objectMember("vdso", buildID, "[vdso]")}, data)
}

// AddKallsyms stores the kernel symbol table (the text of /proc/kallsyms).
func (a *Writer) AddKallsyms(data []byte) error {
	return a.add(Entry{Kind: KindKallsyms, Path: "/proc/kallsyms", Member: "kallsyms"}, data)
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
func (a *Writer) Entries() []Entry {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Entry(nil), a.entries...)
}

// Close writes manifest.json and the tar trailer, and closes the file.
func (a *Writer) Close() error {
	a.mu.Lock()
	entries := append([]Entry(nil), a.entries...)
	a.mu.Unlock()
	b, _ := json.MarshalIndent(Manifest{Version: Version, Entries: entries}, "", "  ")
	err := a.add(Entry{Kind: KindManifest, Member: "manifest.json"}, b)
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

// Compact rewrites the archive at path with every member gzip-compressed
// (members already compressed are recompressed from their checked
// contents), in place: the new archive replaces the old one only once
// complete. A damaged member fails the compaction, leaving the archive as
// it was.
func Compact(path string) error { return Rewrite(path, nil) }

// Rewrite is Compact keeping only the members keep accepts (all with a nil
// keep): a bundled recording's archive without the recording machine's
// kallsyms, say. The metadata and manifest are always rewritten.
func Rewrite(path string, keep func(Entry) bool) error {
	a, err := Open(path, Options{})
	if err != nil {
		return err
	}
	defer a.Close()
	if err := a.Err(); err != nil {
		return err
	}
	tmp := path + ".tmp"
	aw, err := Create(tmp, a.Meta(), true)
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
		if e.Kind == KindMeta || e.Kind == KindManifest || keep != nil && !keep(e) {
			continue
		}
		data, err := a.read(i)
		if err != nil {
			return fail(err)
		}
		ne := Entry{Kind: e.Kind, BuildID: e.BuildID, Path: e.Path, Member: strings.TrimSuffix(e.Member, ".gz")}
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
