//go:build !unix

package elfcache

import (
	"errors"
	"os"
)

func mmapFile(f *os.File, size int64) ([]byte, func() error, error) {
	return nil, nil, errors.New("mmap not supported")
}

func fileID(fi os.FileInfo) (dev, ino uint64) { return 0, 0 }
