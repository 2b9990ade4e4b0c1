//go:build unix

package mmapfile

import (
	"os"

	"golang.org/x/sys/unix"
)

// Map maps the first size bytes of f read-only and private. unmap releases
// them; the bytes must not be used after.
func Map(f *os.File, size int64) (data []byte, unmap func() error, err error) {
	if size <= 0 || int64(int(size)) != size {
		return nil, nil, errSize
	}
	data, err = unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		return nil, nil, err
	}
	return data, func() error { return unix.Munmap(data) }, nil
}

// Sequential advises that the pages of b are read in order.
func Sequential(b []byte) { unix.Madvise(b, unix.MADV_SEQUENTIAL) }

// Drop says the pages of b are not needed now: they leave the process's
// resident set, and come back from the file if read again (the mapping is
// private and never written).
func Drop(b []byte) { unix.Madvise(b, unix.MADV_DONTNEED) }
