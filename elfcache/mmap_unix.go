//go:build unix

package elfcache

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// mmapFile maps size bytes of f read-only and private.
func mmapFile(f *os.File, size int64) ([]byte, func() error, error) {
	if int64(int(size)) != size {
		return nil, nil, unix.EFBIG
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		return nil, nil, err
	}
	return data, func() error { return unix.Munmap(data) }, nil
}

// fileID returns the device and inode numbers of a file.
func fileID(fi os.FileInfo) (dev, ino uint64) {
	if st, ok := fi.Sys().(*unix.Stat_t); ok {
		return uint64(st.Dev), uint64(st.Ino)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev), uint64(st.Ino)
	}
	return 0, 0
}
