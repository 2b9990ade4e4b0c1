//go:build unix

package mmapfile

import (
	"os"
	"unsafe"

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

// DropPages is Drop for the whole pages within b, wherever b starts: a
// range inside a mapping (a section of a mapped file) that need not start
// on a page, whose first, partial page is kept.
func DropPages(b []byte) {
	page := uintptr(os.Getpagesize())
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if skip := (page - p%page) % page; skip < uintptr(len(b)) {
		Drop(b[skip:])
	}
}

// Drop says the pages of b are not needed now: they leave the process's
// resident set, and come back from the file if read again (the mapping is
// private and never written).
func Drop(b []byte) { unix.Madvise(b, unix.MADV_DONTNEED) }
