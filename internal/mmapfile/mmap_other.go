//go:build !unix

package mmapfile

import "os"

// Map fails here: see ErrUnsupported.
func Map(f *os.File, size int64) (data []byte, unmap func() error, err error) {
	return nil, nil, ErrUnsupported
}

// Sequential does nothing here.
func Sequential(b []byte) {}

// DropPages does nothing here.
func DropPages(b []byte) {}

// Drop does nothing here.
func Drop(b []byte) {}
