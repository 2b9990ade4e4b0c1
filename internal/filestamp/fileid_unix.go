//go:build unix

package filestamp

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// FileID returns the device and inode numbers of a file.
func FileID(fi os.FileInfo) (dev, ino uint64) {
	if st, ok := fi.Sys().(*unix.Stat_t); ok {
		return uint64(st.Dev), uint64(st.Ino)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev), uint64(st.Ino)
	}
	return 0, 0
}

// Changed returns a file's status change time (ctime) in nanoseconds,
// which no write, rename or chmod leaves as it was and no user can set.
func Changed(fi os.FileInfo) (ns int64, ok bool) {
	if st, ok := fi.Sys().(*unix.Stat_t); ok {
		return st.Ctim.Nano(), true
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ctim.Nano(), true
	}
	return 0, false
}
