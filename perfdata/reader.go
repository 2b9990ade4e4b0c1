package perfdata

import (
	"bufio"
	"encoding/binary"
	"io"
	"math/bits"
	"os"

	"github.com/ustack/ustack/internal/mmapfile"
)

const (
	magicLE        = 0x32454c4946524550 // "PERFILE2" read little-endian
	magicBE        = 0x50455246494c4532 // "PERFILE2" written big-endian
	fileHeaderSize = 104
	pipeHeaderSize = 16
	// bufSize must hold the largest record (64 KiB) so Peek can return it whole.
	bufSize = 256 << 10
	// maxSection bounds the bytes read for one header or feature section.
	maxSection = 256 << 20
)

var le = binary.LittleEndian

// Reader streams the records of a perf.data file or pipe, one at a time, in
// file order. It holds at most one record (64 KiB) plus a fixed read buffer
// in memory, whatever the file's size.
//
// The Record returned by Next, and every slice in it, belongs to the Reader
// and is valid only until the next call to Next; Clone (or Sample.Detach)
// copies what must be kept.
type Reader struct {
	s    *Session
	path string

	ra       io.ReaderAt // file mode; nil for a pure stream
	src      io.Reader
	br       *bufio.Reader
	off      int64 // offset of the next record
	end      int64 // end of the data section; -1 when unbounded (pipe)
	closer   io.Closer
	err      error // sticky
	featErr  error // a feature section could not be read
	nonSamp  *Attr // attr whose layout locates ids in trailers and samples
	multi    bool  // more than one attr: ids must be looked up
	rec      recs
	cpuBuf   []int
	pendSkip int64 // bytes to skip before the next record (AUXTRACE, TRACING_DATA)
	last     []byte
	// pendTrace is set when the pendSkip bytes are a pipe-mode
	// TRACING_DATA payload, to keep rather than skip.
	pendTrace bool
	z         *zstdStream // the COMPRESSED records' stream, once one is met
	zerr      error       // decompression error, returned once its records are out
	// mm is the whole file when OpenMapped mapped it: records are then
	// decoded in place, without a read or a copy. unmap releases it.
	mm    []byte
	unmap func() error
	// inMap says that the record last returned by next lies in mm (not
	// in decompressed data): its byte slices stay valid until Close.
	inMap bool
	// ck is the chunk being read from, when the file is read in chunks
	// (chunk.go); free holds chunks released for reuse. inChunk says that
	// the record last returned by next lies in ck.
	ck      *chunk
	free    chan *chunk
	inChunk bool
	// dropped is the offset up to which the pages of mm were dropped
	// from memory (mmapfile.Drop) after they were read.
	dropped int64
	// pf maps the pages ahead of the reader.
	pf prefetcher

	// Resynchronisation after damage (resync.go).
	size     int64    // the file's size (file mode)
	lastOff  int64    // offset of the last record read from the file; -1 before the first
	tmin     uint64   // the earliest non-zero time read, 0 before one
	damages  []Damage // the first maxDamages
	nDamaged int
	resumed  int64  // where reading last resumed
	win      []byte // bytes at winOff read for a scan
	winOff   int64
	winBuf   []byte
	scan     int64 // the offset being scanned

	// parts read the data.N files of perf's directory format after the
	// data file's own records (dirformat.go); ownDone says those are
	// read, ownErr what ended them if not io.EOF.
	parts   []*Reader
	ownDone bool
	ownErr  error
}

// Pages of a mapped file are dropped from memory in steps of dropStep,
// dropLag behind the record being read, so that the resident set stays
// small however large the file: records still referenced (queued in a
// Sorter) are read back from the file if needed. A few MB resident is
// enough: the large bench recording (330 MB) reads as fast with 2 MB as
// with 16 MB, and peaks 16 MB lower.
const (
	dropStep = 2 << 20
	dropLag  = 2 << 20
)

// recs are the reused record values Next returns.
type recs struct {
	sample   Sample
	mmap     Mmap
	comm     Comm
	fork     Fork
	exit     Exit
	lost     Lost
	lostS    LostSamples
	throttle Throttle
	read     Read
	aux      Aux
	sw       Switch
	ksym     Ksymbol
	bpf      BPFEvent
	cgroup   Cgroup
	poke     TextPoke
	idx      IDIndex
	tmap     ThreadMap
	cmap     CPUMap
	stat     Stat
	auxtrace Auxtrace
	tconv    TimeConv
	raw      Raw
}

// Open opens a perf.data file (file or pipe mode) for reading. Close the
// Reader to close the file.
func Open(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if st.IsDir() {
		f.Close()
		return openDir(path)
	}
	r, err := NewFileReader(f, st.Size())
	if err != nil {
		f.Close()
		return nil, withPath(err, path)
	}
	r.closer = f
	r.path = path
	return r, nil
}

// OpenMapped is Open for reading a whole file at speed: records are
// decoded in place, and the byte slices of a Sample (StackData, Raw,
// AuxData) that a Sorter queues share the Reader's memory instead of being
// copied. A file under 16 MB is mapped into memory (no read system calls or
// copies), and the queued samples' slices are valid until Close. A larger
// one is read in chunks of 1 MB with pread, since touching every page of a
// mapping costs more than copying it: the queued samples' slices are then
// valid while the sample is referenced, and Sample.Release lets the Reader
// read into a chunk again once every sample of it is released (otherwise
// it allocates new ones). A file that cannot be mapped (a pipe, an empty
// file) is read as Open reads it. The file must not shrink while it is
// read (perf.data being written is appended to, not truncated).
func OpenMapped(path string) (*Reader, error) {
	r, err := Open(path)
	if err != nil || r.s.Pipe {
		return r, err
	}
	f, ok := r.closer.(*os.File)
	if !ok {
		return r, nil
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return r, nil
	}
	if st.Size() >= chunkedFromSize {
		r.free = make(chan *chunk, freeChunks)
		return r, nil
	}
	if m, unmap, err := mmapfile.Map(f, st.Size()); err == nil {
		mmapfile.Sequential(m)
		r.mm, r.unmap = m, unmap
	}
	return r, nil
}

// Mapped reports whether the Reader decodes records in place from a
// mapping of the file (OpenMapped, a file under 16 MB).
func (r *Reader) Mapped() bool { return r.mm != nil }

// NewFileReader reads perf.data held in ra, size bytes long. It reads the
// header, the attrs and the feature sections, then streams the data section.
// Pipe-mode data saved to a file is accepted too.
//
// Damage in a feature section does not stop reading: the records are
// returned and the feature error is returned by Next at the end instead of
// io.EOF (and by FeatureError).
func NewFileReader(ra io.ReaderAt, size int64) (*Reader, error) {
	var h [fileHeaderSize]byte
	n, err := ra.ReadAt(h[:], 0)
	if n < pipeHeaderSize {
		if err == nil || err == io.EOF {
			return nil, truncErr(0, "file of %d bytes has no perf.data header", size)
		}
		return nil, err
	}
	if err := checkMagic(h[:]); err != nil {
		return nil, err
	}
	hsize := int64(le.Uint64(h[8:]))
	if hsize == pipeHeaderSize {
		r := newPipe(io.NewSectionReader(ra, pipeHeaderSize, size-pipeHeaderSize))
		r.off = pipeHeaderSize
		return r, nil
	}
	if n < fileHeaderSize && hsize >= fileHeaderSize {
		return nil, truncErr(int64(n), "file header needs %d bytes, file has %d", fileHeaderSize, size)
	}
	if hsize != fileHeaderSize && hsize != 72 {
		return nil, formatErr(8, "header size %d: want %d (file) or %d (pipe)", hsize, fileHeaderSize, pipeHeaderSize)
	}
	s := &Session{HeaderSize: hsize}
	r := &Reader{s: s, ra: ra, end: -1, size: size, lastOff: -1}
	attrSize := le.Uint64(h[16:])
	attrsOff, attrsLen := le.Uint64(h[24:]), le.Uint64(h[32:])
	dataOff, dataLen := le.Uint64(h[40:]), le.Uint64(h[48:])
	var feat [4]uint64
	if hsize == fileHeaderSize {
		for i := range feat {
			feat[i] = le.Uint64(h[72+8*i:])
		}
	}
	if err := checkSection(attrsOff, attrsLen, size, 24, "attrs"); err != nil {
		return nil, err
	}
	if err := checkSection(dataOff, dataLen, size, 40, "data"); err != nil {
		// The data section runs past the end of a truncated file: read what
		// is there and report the truncation where the data stops.
		if dataOff > uint64(size) {
			return nil, err
		}
	}
	if attrSize < AttrSizeVer0+16 || attrSize > attrSizeLimit {
		return nil, formatErr(16, "attr size %d out of range", attrSize)
	}
	if attrsLen%attrSize != 0 {
		return nil, formatErr(32, "attrs section size %d is not a multiple of attr size %d", attrsLen, attrSize)
	}
	if err := r.readAttrs(int64(attrsOff), int(attrsLen/attrSize), int(attrSize), size); err != nil {
		return nil, err
	}
	s.DataOffset, s.DataSize = int64(dataOff), int64(dataLen)
	end := dataOff + dataLen
	if end < dataOff || end > 1<<62 {
		// A data size no file has (the truncation is reported where the
		// data stops): kept positive, so that the end is not taken for a
		// stream's.
		end = 1 << 62
	}
	r.end = int64(end)
	if dataLen == 0 && feat == [4]uint64{} {
		// Never finalized (perf record was killed): read to the end.
		r.end = size
	} else {
		r.featErr = r.readFeatures(feat, int64(dataOff+dataLen), size)
		if r.featErr != nil && dataLen == 0 && int64(dataOff) < size {
			// perf record writes the header, its features flagged,
			// as it starts, and the data size and the feature
			// sections only as it ends: killed, it left data size 0
			// and records where the feature table would be.
			s.Features = Features{}
			r.end = size
			r.featErr = formatErr(48, "data size 0, feature sections flagged but none where they would be: the header was never finished (perf record was killed?); the records from %#x to the end of the file are read", dataOff)
		}
	}
	s.applyEventDesc()
	r.off = int64(dataOff)
	r.src = io.NewSectionReader(ra, r.off, max(0, min(r.end, size)-r.off))
	r.br = bufio.NewReaderSize(r.src, bufSize)
	r.layout()
	return r, nil
}

// NewReader reads pipe-mode perf.data (perf record -o -) from a stream. The
// Session fills in as header records (attrs, features) arrive. File-mode data
// needs random access: if rd is an io.ReaderAt and io.Seeker (an *os.File),
// NewReader hands it to NewFileReader; otherwise it reports an error.
func NewReader(rd io.Reader) (*Reader, error) {
	if ra, ok := rd.(interface {
		io.ReaderAt
		io.Seeker
	}); ok {
		size, err := ra.Seek(0, io.SeekEnd)
		if err == nil {
			var h [pipeHeaderSize]byte
			if n, _ := ra.ReadAt(h[:], 0); n == pipeHeaderSize && checkMagic(h[:]) == nil && le.Uint64(h[8:]) != pipeHeaderSize {
				return NewFileReader(ra, size)
			}
			if _, err := ra.Seek(0, io.SeekStart); err != nil {
				return nil, err
			}
		}
	}
	var h [pipeHeaderSize]byte
	if n, err := io.ReadFull(rd, h[:]); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, truncErr(int64(n), "stream ended after %d bytes of the 16-byte pipe header", n)
		}
		return nil, err
	}
	if err := checkMagic(h[:]); err != nil {
		return nil, err
	}
	if hs := le.Uint64(h[8:]); hs != pipeHeaderSize {
		return nil, formatErr(8, "header size %d: file-mode data (perf record -o FILE) in a stream that cannot seek, which needs pipe-mode data (perf record -o -, header size 16): give the file itself (from Go: Open or NewFileReader)", hs)
	}
	r := newPipe(rd)
	r.off = pipeHeaderSize
	return r, nil
}

func newPipe(rd io.Reader) *Reader {
	r := &Reader{s: &Session{Pipe: true, HeaderSize: pipeHeaderSize}, src: rd, end: -1, lastOff: -1}
	r.br = bufio.NewReaderSize(rd, bufSize)
	return r
}

func checkMagic(h []byte) error {
	switch m := le.Uint64(h); m {
	case magicLE:
		return nil
	case magicBE:
		return formatErr(0, "big-endian perf.data is not supported")
	default:
		if string(h[:8]) == "PERFFILE" {
			return formatErr(0, "perf.data version 1 (magic PERFFILE) is not supported")
		}
		return formatErr(0, "not a perf.data file: magic %q", h[:8])
	}
}

func checkSection(off, n uint64, size int64, at int64, what string) error {
	if off > uint64(size) || n > uint64(size)-off {
		return truncErr(at, "%s section [%#x, +%#x) exceeds file size %#x", what, off, n, size)
	}
	return nil
}

// readAttrs reads the attrs section: nr perf_file_attr entries of stride bytes.
func (r *Reader) readAttrs(off int64, nr, stride int, size int64) error {
	buf := make([]byte, stride)
	for i := 0; i < nr; i++ {
		at := off + int64(i*stride)
		if _, err := r.ra.ReadAt(buf, at); err != nil {
			return truncErr(at, "attr %d: %v", i, err)
		}
		ab := buf[:stride-16]
		a := decodeAttr(ab[:attrLen(ab)])
		idsOff, idsLen := le.Uint64(buf[stride-16:]), le.Uint64(buf[stride-8:])
		if err := checkSection(idsOff, idsLen, size, at+int64(stride-16), "ids"); err != nil {
			return err
		}
		if idsLen%8 != 0 {
			return formatErr(at+int64(stride-8), "attr %d: ids section size %d is not a multiple of 8", i, idsLen)
		}
		if idsLen > 0 {
			ib := make([]byte, idsLen)
			if _, err := r.ra.ReadAt(ib, int64(idsOff)); err != nil {
				return truncErr(int64(idsOff), "attr %d ids: %v", i, err)
			}
			a.IDs = make([]uint64, idsLen/8)
			for j := range a.IDs {
				a.IDs[j] = le.Uint64(ib[8*j:])
			}
		}
		r.s.addAttr(a)
	}
	return nil
}

// readFeatures reads the feature sections described by the table at off.
func (r *Reader) readFeatures(feat [4]uint64, off, size int64) error {
	nf := 0
	for _, w := range feat {
		nf += bits.OnesCount64(w)
	}
	if nf == 0 {
		return nil
	}
	tlen := int64(nf) * 16
	if off > size || tlen > size-off {
		return truncErr(off, "feature table of %d entries exceeds file size %#x", nf, size)
	}
	table := make([]byte, tlen)
	if _, err := r.ra.ReadAt(table, off); err != nil {
		return truncErr(off, "feature table: %v", err)
	}
	var first error
	i := 0
	for f := Feature(0); f < featBits; f++ {
		if feat[f/64]&(1<<(uint(f)%64)) == 0 {
			continue
		}
		ent := off + int64(i*16)
		so, sl := le.Uint64(table[i*16:]), le.Uint64(table[i*16+8:])
		i++
		r.s.Features.set(f)
		// Every section, known or not, must lie in the file: one that
		// runs past the end means the file was truncated.
		if err := checkSection(so, sl, size, ent, "feature"); err != nil {
			first = cmpErr(first, err)
			continue
		}
		if !knownFeature(f) && !extraFeature(f) {
			continue
		}
		if sl > maxSection {
			first = cmpErr(first, formatErr(ent, "feature %d: section of %d bytes is too large", f, sl))
			continue
		}
		b := make([]byte, sl)
		if _, err := r.ra.ReadAt(b, int64(so)); err != nil {
			first = cmpErr(first, truncErr(int64(so), "feature %d: %v", f, err))
			continue
		}
		var err error
		if extraFeature(f) {
			err = r.s.parseExtraFeature(f, b, int64(so))
		} else {
			err = r.s.parseFeature(f, b, int64(so))
		}
		if err != nil {
			first = cmpErr(first, err)
		}
	}
	return first
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

func knownFeature(f Feature) bool {
	switch f {
	case FeatBuildID, FeatHostname, FeatOSRelease, FeatVersion, FeatArch, FeatNrCPUs,
		FeatCPUDesc, FeatCPUID, FeatTotalMem, FeatCmdline, FeatEventDesc, FeatClockID, FeatSampleTime:
		return true
	}
	return false
}

// extraFeature reports the features parsed by parseExtraFeature.
func extraFeature(f Feature) bool { return f == FeatCompressed || f == FeatTracingData }

// parseExtraFeature decodes the COMPRESSED and TRACING_DATA features.
func (s *Session) parseExtraFeature(f Feature, b []byte, off int64) error {
	s.Features.set(f)
	switch f {
	case FeatCompressed:
		c, err := parseCompression(b, off)
		s.Features.Compression = c
		return err
	case FeatTracingData:
		s.Features.TracingData = b
	}
	return nil
}

// SetName names the input in the errors and Damages that follow, as Open
// names its file: for a Reader made by NewReader or NewFileReader
// ("standard input", a pipe's path).
func (r *Reader) SetName(name string) { r.path = name }

// Session returns what the file says about itself. In pipe mode it grows as
// Next consumes header records.
func (r *Reader) Session() *Session { return r.s }

// FeatureError returns the error met reading feature sections, if any.
func (r *Reader) FeatureError() error { return r.featErr }

// Offset returns the file (stream) offset of the next record.
func (r *Reader) Offset() int64 { return r.off }

// RawRecord returns the bytes of the record last returned by Next, its
// 8-byte header included (not the AUXTRACE payload). It is valid until the
// next call to Next.
func (r *Reader) RawRecord() []byte { return r.last }

// Close closes the file opened by Open and stops the decompression of
// COMPRESSED records; it does nothing else for other Readers.
func (r *Reader) Close() error {
	if r.z != nil {
		r.z.close()
	}
	var err error
	for _, p := range r.parts {
		if perr := p.Close(); err == nil {
			err = perr
		}
	}
	r.parts = nil
	r.pf.stop()
	if r.unmap != nil {
		err = r.unmap()
		r.unmap, r.mm = nil, nil
	}
	if r.closer != nil {
		c := r.closer
		r.closer = nil
		if cerr := c.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// layout recomputes how ids are located after the attrs changed.
func (r *Reader) layout() {
	r.multi = len(r.s.Attrs) > 1
	r.nonSamp = nil
	if len(r.s.Attrs) > 0 {
		r.nonSamp = r.s.Attrs[0]
	}
}

// fail records a sticky error.
func (r *Reader) fail(err error) (Record, error) {
	if r.path != "" {
		err = withPath(err, r.path)
	}
	r.err = err
	if r.z != nil {
		r.z.close()
	}
	return nil, err
}

// eof ends the records: with the feature error if there was one, an error
// if decompressed data ends inside a record, io.EOF otherwise.
func (r *Reader) eof() (Record, error) {
	if r.z != nil {
		if p := r.z.pending(); len(p) > 0 {
			return r.fail(truncErr(r.z.chunkOff, "compressed data ends inside a record: %d bytes left after the COMPRESSED record at %#x", len(p), r.z.chunkOff))
		}
		r.z.close()
	}
	if r.featErr != nil {
		return r.fail(r.featErr)
	}
	r.err = io.EOF
	return nil, io.EOF
}

// skip discards n bytes of the stream.
func (r *Reader) skip(n int64, what string) error {
	start := r.off
	if r.end >= 0 && (n > r.end-r.off) {
		return truncErr(start, "%s of %d bytes runs past the end of the data section at %#x", what, n, r.end)
	}
	if r.mm != nil || r.free != nil {
		r.off += n
		return nil
	}
	if r.ra != nil && r.end >= 0 && n > int64(r.br.Buffered()) {
		// Seek instead of reading through.
		r.off += n
		r.src = io.NewSectionReader(r.ra, r.off, r.end-r.off)
		r.br.Reset(r.src)
		return nil
	}
	for n > 0 {
		chunk := min(n, int64(1<<30))
		d, err := r.br.Discard(int(chunk))
		r.off += int64(d)
		n -= int64(d)
		if err != nil {
			if err == io.EOF {
				return truncErr(start, "%s: stream ended after %d of %d bytes", what, r.off-start, r.off-start+n)
			}
			return err
		}
	}
	return nil
}

// Next returns the next record in file order, or io.EOF after the last one.
// The record is valid until the next call (see Reader). After an error,
// Next keeps returning it.
//
// COMPRESSED records (perf record -z) are not returned: the records they
// hold are, in order, each with the Offset of the COMPRESSED record that
// completed it (as perf reports them).
func (r *Reader) Next() (Record, error) {
	if len(r.parts) == 0 {
		return r.nextOwn()
	}
	if !r.ownDone {
		rec, err := r.nextOwn()
		if err == nil {
			return rec, nil
		}
		r.ownDone = true
		if err != io.EOF {
			r.ownErr = err
		}
	}
	rec, err := r.nextPart()
	if err == io.EOF && r.ownErr != nil {
		return nil, r.ownErr
	}
	return rec, err
}

// nextOwn returns the next record of the Reader's own file or stream.
func (r *Reader) nextOwn() (Record, error) {
	if r.err != nil {
		return nil, r.err
	}
	for {
		r.inMap, r.inChunk = false, false
		if r.z != nil {
			rec, err := r.nextDecompressed()
			if rec != nil || err != nil {
				if err != nil {
					return r.fail(err)
				}
				return rec, nil
			}
		}
		rec, err := r.next()
		if rec != nil || err != nil {
			return rec, err
		}
	}
}

// next reads the next record of the file or stream. It returns nil, nil
// after consuming a COMPRESSED record.
func (r *Reader) next() (Record, error) {
	if r.pendSkip > 0 {
		n := r.pendSkip
		r.pendSkip = 0
		if r.pendTrace {
			r.pendTrace = false
			if err := r.readTracingData(n); err != nil {
				return r.fail(err)
			}
		} else if err := r.skip(n, "record payload"); err != nil {
			return r.fail(err)
		}
	}
	if r.end >= 0 && r.off >= r.end {
		return r.eof()
	}
	if r.mm != nil {
		return r.nextMapped()
	}
	if r.free != nil {
		return r.nextChunked()
	}
	hb, err := r.br.Peek(8)
	if err != nil {
		if err == io.EOF && len(hb) == 0 && r.end < 0 {
			return r.eof()
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return r.fail(truncErr(r.off, "input ends inside a record header (%d of 8 bytes)", len(hb)))
		}
		return r.fail(err)
	}
	typ, misc, size, err := r.recordHeader(hb)
	if err != nil {
		return r.damaged(r.off, err)
	}
	b, err := r.br.Peek(size)
	if err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return r.damaged(r.off, truncErr(r.off, "record type %v: input ends after %d of its %d bytes", typ, len(b), size))
		}
		return r.fail(err)
	}
	r.br.Discard(size)
	return r.record(typ, misc, b)
}

// recordHeader decodes the record header hb (8 bytes) at r.off: an error
// where its size cannot be right.
func (r *Reader) recordHeader(hb []byte) (typ RecordType, misc uint16, size int, err error) {
	typ, misc, size = RecordType(le.Uint32(hb)), le.Uint16(hb[4:]), int(le.Uint16(hb[6:]))
	if size < 8 {
		return typ, misc, size, formatErr(r.off, "record type %v: size %d is less than the 8-byte header", typ, size)
	}
	if r.end >= 0 && int64(size) > r.end-r.off {
		return typ, misc, size, truncErr(r.off, "record type %v of %d bytes runs past the end of the data section at %#x", typ, size, r.end)
	}
	return typ, misc, size, nil
}

// nextMapped is next for a mapped file: the record is decoded where it
// lies, with the errors the buffered path gives.
func (r *Reader) nextMapped() (Record, error) {
	avail := max(0, min(r.end, int64(len(r.mm)))-r.off)
	if avail < 8 {
		return r.fail(truncErr(r.off, "input ends inside a record header (%d of 8 bytes)", avail))
	}
	hb := r.mm[r.off : r.off+8]
	typ, misc, size, err := r.recordHeader(hb)
	if err != nil {
		return r.damaged(r.off, err)
	}
	if int64(size) > avail {
		return r.damaged(r.off, truncErr(r.off, "record type %v: input ends after %d of its %d bytes", typ, avail, size))
	}
	r.inMap = true
	r.pf.advance(r.mm, r.off)
	if r.off-r.dropped > dropStep+dropLag {
		end := (r.off - dropLag) &^ (1<<16 - 1)
		r.pf.drop(r.mm[r.dropped:end])
		r.dropped = end
	}
	return r.record(typ, misc, r.mm[r.off:r.off+int64(size):r.off+int64(size)])
}

// record decodes the record b (header included) read at r.off, and moves
// past it.
func (r *Reader) record(typ RecordType, misc uint16, b []byte) (Record, error) {
	size := len(b)
	off := r.off
	if !knownType(typ) && r.end >= 0 && !r.chainAt(off+int64(size)) && off+int64(size) != r.limit() {
		// A type perf does not write, followed by no valid record:
		// most likely a header read where no record starts.
		return r.damaged(off, formatErr(off, "record of unknown type %v (%d bytes) is not followed by valid records", typ, size))
	}
	r.last = b
	r.off += int64(size)
	h := RecordHeader{Type: typ, Misc: misc, Size: uint16(size), Offset: off}
	if typ == RecordCompressed || typ == RecordCompressed2 {
		r.lastOff = off
		return nil, r.decompress(h, b[8:])
	}
	rec, err := r.decode(h, b[8:])
	if err == nil && typ < RecordHeaderAttr && !r.plausible(rec.Header(), false) {
		err = formatErr(off, "record %v: pid %d, tid %d: no such pid", typ, rec.Header().Pid, rec.Header().Tid)
	}
	if err != nil {
		return r.damaged(off, err)
	}
	r.lastOff = off
	if t := rec.Header().Time; t != 0 && (r.tmin == 0 || t < r.tmin) {
		r.tmin = t
	}
	switch typ {
	case RecordHeaderTracingData:
		r.pendTrace = r.pendSkip > 0
	case RecordHeaderFeature:
		if f := Feature(le.Uint64(b[8:])); extraFeature(f) && f != FeatTracingData {
			if err := r.s.parseExtraFeature(f, b[16:], off+16); err != nil && r.featErr == nil {
				r.featErr = err
			}
		}
	}
	return rec, nil
}

// readTracingData keeps the n-byte payload of a pipe-mode TRACING_DATA
// record as the Session's tracing data.
func (r *Reader) readTracingData(n int64) error {
	start := r.off
	if n > maxSection {
		return formatErr(start, "TRACING_DATA: payload of %d bytes is too large", n)
	}
	if r.end >= 0 && n > r.end-r.off {
		return truncErr(start, "TRACING_DATA payload of %d bytes runs past the end of the data section at %#x", n, r.end)
	}
	var b []byte
	var err error
	if r.mm != nil {
		from := min(r.off, int64(len(r.mm)))
		b = append([]byte(nil), r.mm[from:from+min(n, int64(len(r.mm))-from)]...)
	} else if r.free != nil {
		b = make([]byte, min(n, max(0, r.limit()-r.off)))
		var k int
		k, err = r.ra.ReadAt(b, r.off)
		if b = b[:k]; err == io.EOF {
			err = nil
		}
	} else {
		// ReadAll grows with the data actually there, not with n.
		b, err = io.ReadAll(io.LimitReader(r.br, n))
	}
	r.off += int64(len(b))
	if err != nil {
		return err
	}
	if int64(len(b)) < n {
		return truncErr(start, "TRACING_DATA: stream ended after %d of %d payload bytes", len(b), n)
	}
	r.s.Features.set(FeatTracingData)
	r.s.Features.TracingData = b
	return nil
}
