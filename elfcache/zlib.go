package elfcache

import (
	"bytes"
	"compress/zlib"
	"io"
)

func newZlibReader(b []byte) (io.Reader, error) {
	return zlib.NewReader(bytes.NewReader(b))
}
