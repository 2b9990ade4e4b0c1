package elfcache

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/ustack/ustack/internal/mmapfile"
)

// source is the bytes of one file: either all of it in memory (mmap'd or
// read) or an io.ReaderAt from which sections are read on demand.
type source struct {
	data  []byte      // whole file, when in memory
	ra    io.ReaderAt // otherwise
	size  int64
	unmap func() error
}

// readerAt returns an io.ReaderAt over the file.
func (s *source) readerAt() io.ReaderAt {
	if s.data != nil {
		return bytesReaderAt(s.data)
	}
	return s.ra
}

type bytesReaderAt []byte

func (b bytesReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	if off >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// bytes returns n bytes at file offset off. In-memory files return a slice of
// the file (which must not be modified); others read into a new buffer.
func (s *source) bytes(off, n uint64) ([]byte, error) {
	if off > uint64(s.size) || n > uint64(s.size)-off {
		return nil, fmt.Errorf("range [%#x, +%#x) is beyond the end of the file (size %#x)", off, n, s.size)
	}
	if s.data != nil {
		return s.data[off : off+n : off+n], nil
	}
	buf := make([]byte, n)
	if _, err := s.ra.ReadAt(buf, int64(off)); err != nil && !(err == io.EOF && n > 0) {
		return nil, err
	}
	return buf, nil
}

// readAt copies file bytes at off into p and returns how many it copied.
func (s *source) readAt(p []byte, off uint64) int {
	if off >= uint64(s.size) {
		return 0
	}
	if rest := uint64(s.size) - off; uint64(len(p)) > rest {
		p = p[:rest]
	}
	if s.data != nil {
		return copy(p, s.data[off:])
	}
	n, _ := s.ra.ReadAt(p, int64(off))
	return n
}

// drop lets the kernel take back the pages of [off, off+n) of a mapped
// file, read through once to build what is kept instead (a section
// decompressed into the SectionCache, a symbol table): they would
// otherwise stay in the resident set until the object is closed. Read
// again, they come back from the page cache. A file read into memory
// keeps its bytes.
func (s *source) drop(off, n uint64) {
	if s.unmap == nil || off >= uint64(len(s.data)) {
		return
	}
	mmapfile.DropPages(s.data[off : off+min(n, uint64(len(s.data))-off)])
}

func (s *source) close() error {
	if s.unmap != nil {
		f := s.unmap
		s.unmap = nil
		return f()
	}
	return nil
}

// openSource maps the named file read-only, or reads it when mapping is not
// possible or not wanted.
func openSource(path string, noMmap bool) (*source, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, errors.New("not a regular file")
	}
	size := fi.Size()
	if size == 0 {
		return nil, nil, errors.New("empty file")
	}
	data, unmap, err := mmapfile.MapOrRead(f, size, noMmap)
	if err != nil {
		return nil, nil, err
	}
	return &source{data: data, size: size, unmap: unmap}, fi, nil
}
