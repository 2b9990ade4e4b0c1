// Package mmapfile maps files read-only into memory, for the readers that
// decode records, sections and tables in place (perfdata, elfcache,
// coredump, kallsyms), and gives the kernel the advice they need about the
// pages: one place for it. Where the system cannot map files, Map fails
// with ErrUnsupported and the advice does nothing: the callers read the
// file instead.
package mmapfile

import (
	"errors"
	"io"
	"os"
)

// ErrUnsupported is Map's error where files cannot be mapped.
var ErrUnsupported = errors.New("mmapfile: mapping files is not supported here")

// errSize is Map's error for a size that cannot be mapped.
var errSize = errors.New("mmapfile: size out of range for a mapping")

// MapOrRead maps the first size bytes of f, or reads them into memory
// where they cannot be mapped (or with read, always). unmap is nil for read
// bytes.
func MapOrRead(f *os.File, size int64, read bool) (data []byte, unmap func() error, err error) {
	if !read {
		if data, unmap, err := Map(f, size); err == nil {
			return data, unmap, nil
		}
	}
	if size < 0 || int64(int(size)) != size {
		return nil, nil, errSize
	}
	data = make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, nil, err
	}
	return data, nil, nil
}
