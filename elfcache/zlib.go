package elfcache

import (
	"bytes"
	"io"

	"github.com/klauspost/compress/zlib"
)

// newZlibReader inflates zlib-compressed debug sections (SHF_COMPRESSED
// with ELFCOMPRESS_ZLIB, and .zdebug_*) with klauspost/compress, which
// inflates faster than compress/zlib: glibc's debug sections dominate the
// start-up of a report.
func newZlibReader(b []byte) (io.Reader, error) {
	return zlib.NewReader(bytes.NewReader(b))
}
