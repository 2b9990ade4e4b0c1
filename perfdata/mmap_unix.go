//go:build unix

package perfdata

import (
	"os"

	"golang.org/x/sys/unix"
)

// mmapFile maps size bytes of f read-only and private, advising the
// kernel that they are read in order.
func mmapFile(f *os.File, size int64) ([]byte, func() error, error) {
	if size <= 0 || int64(int(size)) != size {
		return nil, nil, unix.EINVAL
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		return nil, nil, err
	}
	unix.Madvise(data, unix.MADV_SEQUENTIAL)
	return data, func() error { return unix.Munmap(data) }, nil
}

// dropPages tells the kernel that the mapped pages of b are not needed
// now: they leave the process's resident set, and come back from the file
// if read again (the mapping is private and never written).
func dropPages(b []byte) { unix.Madvise(b, unix.MADV_DONTNEED) }
