//go:build !unix

package perfdata

import (
	"errors"
	"os"
)

func mmapFile(f *os.File, size int64) ([]byte, func() error, error) {
	return nil, nil, errors.New("mmap not supported")
}

func dropPages(b []byte) {}
