package perfdata

import (
	"io"
	"sync/atomic"
)

// A large file that OpenMapped opens is read in chunks instead of mapped:
// every page of a mapping costs its first touch (1.5-2.4 us on the
// machines the benchmarks ran on, a quarter of the large bench report's
// CPU), where pread copies the same bytes at several GB/s into memory the
// reader reuses. Records are decoded in place from the chunk, and a
// Sorter's queued samples share it (a reference each) instead of copying
// their stack; the chunk goes back to the Reader for reuse when the last
// reference is gone (Sample.Release), or to the garbage collector like any
// memory when its samples are never released.
const (
	// chunkSize is the bytes read at once: four times the largest record
	// (64 KiB), so that the record cut at a chunk's end, read again at
	// the start of the next, costs a few percent at most.
	chunkSize = 1 << 20
	// chunkedFrom is the file size from which OpenMapped reads chunks: a
	// chunk's pages are fresh memory at first, as dear as a mapping's
	// (more, per page, on the benchmarks' machine), so a file read once
	// through a few chunks gains nothing; past a few chunks, they are
	// reused.
	chunkedFrom = 16 << 20
	// freeChunks bounds the chunks kept for reuse.
	freeChunks = 64
)

// chunkedFromSize and chunkBytes are chunkedFrom and chunkSize, variables
// for the tests.
var (
	chunkedFromSize int64 = chunkedFrom
	chunkBytes            = chunkSize
)

// chunk holds the bytes of the file from off, shared by the records decoded
// from it.
type chunk struct {
	b    []byte
	off  int64
	refs atomic.Int32 // the Reader's while it reads from it, plus one per queued sample
	free chan *chunk  // where it goes back for reuse
}

func (c *chunk) release() {
	if c.refs.Add(-1) == 0 {
		select {
		case c.free <- c:
		default: // enough kept: left to the garbage collector
		}
	}
}

// chunkAt returns the bytes [off, off+n) from the current chunk, reading
// a new chunk from off when the current one does not hold them all. It
// returns fewer than n bytes only where the data ends or the read fails
// (then with the error).
func (r *Reader) chunkAt(off int64, n int) ([]byte, error) {
	if c := r.ck; c != nil && off >= c.off && off+int64(n) <= c.off+int64(len(c.b)) {
		return c.b[off-c.off:][:n:n], nil
	}
	if r.ck != nil {
		r.ck.release()
		r.ck = nil
	}
	var c *chunk
	select {
	case c = <-r.free:
	default:
		c = &chunk{free: r.free}
	}
	size := max(chunkBytes, n) // n > chunkBytes only where a test makes chunks small
	if cap(c.b) < size {
		c.b = make([]byte, size)
	}
	want := min(int64(size), max(0, r.limit()-off))
	k, err := r.ra.ReadAt(c.b[:want:want], off)
	if err == io.EOF {
		err = nil
	}
	c.b, c.off = c.b[:k:cap(c.b)], off
	c.refs.Store(1)
	r.ck = c
	if k < n {
		return c.b[:k:k], err
	}
	return c.b[:n:n], nil
}

// nextChunked is next for a file read in chunks: the record is decoded
// where it lies in its chunk, with the errors the buffered path gives.
func (r *Reader) nextChunked() (Record, error) {
	hb, err := r.chunkAt(r.off, 8)
	if err != nil {
		return r.fail(err)
	}
	if len(hb) < 8 {
		return r.fail(truncErr(r.off, "input ends inside a record header (%d of 8 bytes)", len(hb)))
	}
	typ, misc, size, err := r.recordHeader(hb)
	if err != nil {
		return r.damaged(r.off, err)
	}
	b, err := r.chunkAt(r.off, size)
	if err != nil {
		return r.fail(err)
	}
	if len(b) < size {
		return r.damaged(r.off, truncErr(r.off, "record type %v: input ends after %d of its %d bytes", typ, len(b), size))
	}
	r.inChunk = true
	return r.record(typ, misc, b)
}

// keepSample returns a copy of the sample last read for a Sorter to queue:
// its byte slices (stack copy, raw data) stay where they lie, in the
// mapping or the chunk (which the copy then holds a reference to); only
// what the Reader decodes into its own buffers is copied.
func (r *Reader) keepSample(s *Sample, a *sampleArena) *Sample {
	c := s.detachInPlace(a)
	if r.inChunk {
		r.ck.refs.Add(1)
		c.chunk = r.ck
	}
	return c
}

// Release says that the caller is done with a sample a Sorter delivered:
// the memory its byte slices (StackData, Raw, AuxData) share with other
// records may be reused for records read later, and the slices are
// cleared. A sample that is not released stays valid, its memory garbage
// collected once unreferenced; release a sample once, and keep none of its
// byte slices past it. Releasing other samples (the Reader's own, a
// Detach copy) does nothing.
func (s *Sample) Release() {
	if c := s.chunk; c != nil {
		s.chunk = nil
		s.StackData, s.Raw, s.AuxData = nil, nil, nil
		c.release()
	}
}
