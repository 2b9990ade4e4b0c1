package perfdata

import (
	"errors"
	"fmt"
	"io"
	"iter"
	"runtime"

	"github.com/klauspost/compress/zstd"
)

// CompZstd is the compression type of the COMPRESSED feature for zstd, the
// only one perf writes.
const CompZstd uint32 = 1

// Compression is the COMPRESSED feature (HEADER_COMPRESSED) of a file made
// by perf record -z: how the COMPRESSED records were made.
type Compression struct {
	Version uint32
	// Type is CompZstd.
	Type  uint32
	Level uint32
	// Ratio is perf's compression ratio (0 in pipe mode).
	Ratio uint32
	// MmapLen is the size of perf's ring buffers: no COMPRESSED record
	// decompresses to more than this.
	MmapLen uint32
}

// parseCompression decodes the COMPRESSED feature section.
func parseCompression(b []byte, off int64) (Compression, error) {
	if len(b) < 20 {
		return Compression{}, truncErr(off, "COMPRESSED feature: section of %d bytes, want 20", len(b))
	}
	c := Compression{Version: le.Uint32(b), Type: le.Uint32(b[4:]), Level: le.Uint32(b[8:]),
		Ratio: le.Uint32(b[12:]), MmapLen: le.Uint32(b[16:])}
	if c.Type != CompZstd {
		return c, formatErr(off+4, "COMPRESSED feature: compression type %d, only zstd (%d) is known", c.Type, CompZstd)
	}
	return c, nil
}

const (
	// maxZstdWindow is the largest zstd window accepted: perf record -z 22
	// (the highest level) compresses with a 128 MiB window.
	maxZstdWindow = 1 << 27
	// defaultChunkLimit bounds one COMPRESSED record's output when the
	// file has no COMPRESSED feature to say how large perf's buffers were.
	defaultChunkLimit = 16 << 20
	// maxChunkLimit caps the feature's mmap_len.
	maxChunkLimit = 1 << 30
	// maxRatio and ratioSlack bound the decompressed total against the
	// compressed input: total out <= maxRatio*in + ratioSlack. Real
	// recordings compress 10 to 100 times; a bomb stops here.
	maxRatio   = 2048
	ratioSlack = 64 << 20
)

var (
	errZstdStopped = errors.New("zstd stream closed")
	errChunkLimit  = errors.New("decompressed data exceeds the bound")
)

// zstdStream decodes the one zstd stream that all the COMPRESSED records of
// a session carry (perf keeps one compression context for the whole
// recording, so a frame, a block or a record can continue in the next
// COMPRESSED record). Each COMPRESSED record is decompressed as it is read,
// as perf does: the records it completes are delivered before the next
// outer record. The decoder runs synchronously in a coroutine (iter.Pull)
// that pauses whenever it has consumed the whole chunk, so all output that
// a chunk can produce is out before the next chunk is read.
type zstdStream struct {
	dec   *zstd.Decoder
	in    []byte // the current chunk's compressed bytes not yet consumed
	out   []byte // decompressed bytes; records not yet returned are out[pos:]
	pos   int
	limit int // bound on len(out)-pos while a chunk is decompressed
	// totalIn and totalOut count compressed and decompressed bytes.
	totalIn, totalOut int64
	yield             func(struct{}) bool
	next              func() (struct{}, bool)
	stop              func()
	err               error // the decoder's error, sticky
	// chunkOff is the file offset of the COMPRESSED record being decoded;
	// recOff that of the one that completed the last record returned.
	chunkOff int64
	// skip is payload (AUXTRACE data) still to drop from the output.
	skip int64
}

func newZstdStream(chunkLimit int) (*zstdStream, error) {
	z := &zstdStream{limit: chunkLimit}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(maxZstdWindow), zstd.WithDecoderMaxMemory(maxZstdWindow))
	if err != nil {
		return nil, err
	}
	if err := dec.Reset(zstdInput{z}); err != nil {
		return nil, err
	}
	z.dec = dec
	z.next, z.stop = iter.Pull(func(yield func(struct{}) bool) {
		z.yield = yield
		_, err := dec.WriteTo(zstdOutput{z})
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		z.err = err
	})
	return z, nil
}

// zstdInput feeds the decoder the current chunk, pausing the coroutine
// when the chunk is used up.
type zstdInput struct{ z *zstdStream }

func (f zstdInput) Read(p []byte) (int, error) {
	z := f.z
	for len(z.in) == 0 {
		if !z.yield(struct{}{}) {
			return 0, errZstdStopped
		}
	}
	n := copy(p, z.in)
	z.in = z.in[n:]
	return n, nil
}

// zstdOutput collects the decoder's output, bounded per chunk and in total.
type zstdOutput struct{ z *zstdStream }

func (w zstdOutput) Write(p []byte) (int, error) {
	z := w.z
	if len(z.out)-z.pos+len(p) > z.limit {
		return 0, fmt.Errorf("%w: a COMPRESSED record decompresses to more than %d bytes", errChunkLimit, z.limit)
	}
	z.totalOut += int64(len(p))
	if z.totalOut > maxRatio*z.totalIn+ratioSlack {
		return 0, fmt.Errorf("%w: %d bytes decompressed from %d (more than %d times the input)", errChunkLimit, z.totalOut, z.totalIn, maxRatio)
	}
	z.out = append(z.out, p...)
	return len(p), nil
}

// feed decompresses one COMPRESSED record's payload (at file offset off).
// The output completes records from earlier chunks and starts new ones.
// On an error the output decoded before the damage stays available.
func (z *zstdStream) feed(chunk []byte, off int64) error {
	if z.err != nil {
		return z.err
	}
	// Records already returned are dead: keep only the tail.
	n := copy(z.out, z.out[z.pos:])
	z.out, z.pos = z.out[:n], 0
	z.applySkip()
	z.in = chunk
	z.chunkOff = off
	z.totalIn += int64(len(chunk))
	if _, ok := z.next(); !ok {
		z.in = nil
		return z.err
	}
	z.applySkip()
	return nil
}

// applySkip drops pending payload bytes from the output.
func (z *zstdStream) applySkip() {
	if z.skip > 0 {
		d := min(z.skip, int64(len(z.out)-z.pos))
		z.pos += int(d)
		z.skip -= d
	}
}

// pending returns the decompressed bytes not yet returned as records.
func (z *zstdStream) pending() []byte { return z.out[z.pos:] }

// close stops the decoder's coroutine.
func (z *zstdStream) close() {
	if z.stop != nil {
		z.stop()
		z.stop = nil
		z.dec.Close()
	}
}

// decompress feeds a COMPRESSED or COMPRESSED2 record (body after the
// header) to the session's zstd stream. A decompression error is kept
// until the records decoded before the damage have been returned.
func (r *Reader) decompress(h RecordHeader, body []byte) error {
	data := body
	if h.Type == RecordCompressed2 {
		if len(body) < 8 {
			return r.failErr(formatErr(h.Offset, "COMPRESSED2: %d-byte body has no data_size", len(body)))
		}
		n := le.Uint64(body)
		if n > uint64(len(body)-8) {
			return r.failErr(formatErr(h.Offset+8, "COMPRESSED2: data_size %d exceeds the record's %d data bytes", n, len(body)-8))
		}
		data = body[8 : 8+n]
	}
	if r.zerr != nil {
		return nil // the stream is dead; its error comes once its records are out
	}
	if r.z == nil {
		c := &r.s.Features.Compression
		if r.s.Features.Has(FeatCompressed) && c.Type != CompZstd {
			return r.failErr(formatErr(h.Offset, "%v record: compression type %d is not zstd", h.Type, c.Type))
		}
		limit := defaultChunkLimit
		if c.MmapLen > 0 {
			limit = int(min(c.MmapLen, maxChunkLimit))
		}
		// Room for the tail of a record begun in the previous chunk.
		z, err := newZstdStream(limit + 1<<16)
		if err != nil {
			return r.failErr(err)
		}
		r.z = z
		runtime.AddCleanup(r, func(z *zstdStream) { z.close() }, z)
	}
	if err := r.z.feed(data, h.Offset); err != nil {
		r.zerr = formatErr(h.Offset, "%v record: zstd: %v", h.Type, err)
	}
	return nil
}

// failErr records a sticky error and returns it.
func (r *Reader) failErr(err error) error {
	_, err = r.fail(err)
	return err
}

// nextDecompressed returns the next complete record of the decompressed
// data, or nil, nil when the data holds none (the next COMPRESSED record
// may complete it). After a decompression error it returns the records
// decoded before the damage, then the error.
func (r *Reader) nextDecompressed() (Record, error) {
	z := r.z
	b := z.pending()
	if len(b) < 8 {
		return nil, r.zerr
	}
	typ := RecordType(le.Uint32(b))
	misc := le.Uint16(b[4:])
	size := int(le.Uint16(b[6:]))
	if size < 8 {
		return nil, formatErr(z.chunkOff, "record type %v in the data of the COMPRESSED record at %#x: size %d is less than the 8-byte header", typ, z.chunkOff, size)
	}
	if size > len(b) {
		return nil, r.zerr
	}
	if typ == RecordCompressed || typ == RecordCompressed2 {
		return nil, formatErr(z.chunkOff, "%v record inside the data of the COMPRESSED record at %#x", typ, z.chunkOff)
	}
	b = b[:size]
	z.pos += size
	r.last = b
	h := RecordHeader{Type: typ, Misc: misc, Size: uint16(size), Offset: z.chunkOff}
	rec, err := r.decode(h, b[8:])
	if err != nil {
		return nil, err
	}
	if r.pendSkip > 0 {
		// A payload after the record (AUXTRACE) is in the stream too.
		z.skip += r.pendSkip
		r.pendSkip = 0
		z.applySkip()
	}
	if rec == nil {
		return nil, formatErr(z.chunkOff, "record type %v in compressed data could not be decoded", typ)
	}
	return rec, nil
}
