//go:build !unix

package elfcache

import "os"

func fileID(fi os.FileInfo) (dev, ino uint64) { return 0, 0 }

func fileChanged(fi os.FileInfo) (ns int64, ok bool) { return 0, false }
