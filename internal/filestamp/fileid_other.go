//go:build !unix

package filestamp

import "os"

// FileID returns the device and inode numbers of a file: unknown here.
func FileID(fi os.FileInfo) (dev, ino uint64) { return 0, 0 }

// Changed returns a file's status change time: unknown here.
func Changed(fi os.FileInfo) (ns int64, ok bool) { return 0, false }
