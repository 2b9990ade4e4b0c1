package coredump

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/zlib"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
)

// Ubuntu's apport writes a crash as a report (/var/crash/*.crash): lines
// "Key: value" in RFC 822 style, a value continued on lines that start
// with a space. A binary value (CoreDump, the core itself) is "Key:
// base64" followed by continuation lines each holding the base64 of one
// block: the first a gzip header, then deflate data, the last ending with
// the gzip trailer (CRC-32 and size). Reports of older apport hold a zlib
// stream instead (no gzip header). The core is read from such a report as
// from a compressed file.

// apportPrefix starts every apport report: ProblemType comes first.
const apportPrefix = "ProblemType: "

// maxApportLine bounds one line of a report (a base64 block of at most
// 1 MiB of compressed data, as apport writes them, is about 1.4 MB).
const maxApportLine = 64 << 20

// apportCore returns the core dump an apport report read from r holds,
// decompressed.
func apportCore(r io.Reader) (io.Reader, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	for {
		line, err := readLine(br)
		if k, v, ok := bytes.Cut(line, []byte(":")); ok && string(k) == "CoreDump" {
			if string(bytes.TrimSpace(v)) != "base64" {
				return nil, errors.New("apport report: its CoreDump is not base64-encoded")
			}
			break
		}
		if err != nil {
			if err == io.EOF {
				return nil, errors.New("apport report holds no CoreDump (apport keeps the core in the report only when it was asked to, or writes it to /var/lib/apport/coredump/)")
			}
			return nil, fmt.Errorf("apport report: %w", err)
		}
	}
	blocks := &apportBlocks{br: br}
	first, err := blocks.next()
	if err != nil {
		return nil, fmt.Errorf("apport report: CoreDump: %w", err)
	}
	if bytes.HasPrefix(first, []byte{0x1f, 0x8b, 8}) {
		// The gzip header (its name field "CoreDump"), then raw
		// deflate; the trailer after the deflate data is not read, as
		// apport's own reader does not.
		rest, err := skipGzipHeader(first)
		if err != nil {
			return nil, fmt.Errorf("apport report: CoreDump: %w", err)
		}
		return flate.NewReader(io.MultiReader(bytes.NewReader(rest), blocks)), nil
	}
	z, err := zlib.NewReader(io.MultiReader(bytes.NewReader(first), blocks))
	if err != nil {
		return nil, fmt.Errorf("apport report: CoreDump is neither gzip nor zlib: %w", err)
	}
	return z, nil
}

// readLine returns the next line without its newline, refusing lines
// longer than maxApportLine.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > maxApportLine {
			return nil, fmt.Errorf("a line longer than %d bytes", maxApportLine)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return bytes.TrimSuffix(line, []byte("\n")), err
	}
}

// apportBlocks reads the decoded blocks of a base64 value: one per
// continuation line, until the next key or the end of the report.
type apportBlocks struct {
	br   *bufio.Reader
	buf  []byte
	done bool
}

func (b *apportBlocks) next() ([]byte, error) {
	if b.done {
		return nil, io.EOF
	}
	line, err := readLine(b.br)
	if err != nil && err != io.EOF {
		return nil, err
	}
	if len(line) == 0 || line[0] != ' ' {
		b.done = true // the next key, or the end
		return nil, io.EOF
	}
	if err == io.EOF {
		b.done = true
	}
	out, derr := base64.StdEncoding.AppendDecode(nil, bytes.TrimSpace(line))
	if derr != nil {
		return nil, fmt.Errorf("base64: %w", derr)
	}
	return out, nil
}

func (b *apportBlocks) Read(p []byte) (int, error) {
	for len(b.buf) == 0 {
		blk, err := b.next()
		if err != nil {
			return 0, err
		}
		b.buf = blk
	}
	n := copy(p, b.buf)
	b.buf = b.buf[n:]
	return n, nil
}

// skipGzipHeader returns what follows the gzip header at the start of b.
func skipGzipHeader(b []byte) ([]byte, error) {
	if len(b) < 10 {
		return nil, errors.New("gzip header cut short")
	}
	flags, off := b[3], 10
	if flags&4 != 0 { // FEXTRA
		if len(b) < off+2 {
			return nil, errors.New("gzip header cut short")
		}
		off += 2 + (int(b[off]) | int(b[off+1])<<8)
	}
	for _, f := range []byte{8, 16} { // FNAME, FCOMMENT: zero-terminated
		if flags&f != 0 {
			i := bytes.IndexByte(b[min(off, len(b)):], 0)
			if i < 0 {
				return nil, errors.New("gzip header cut short")
			}
			off += i + 1
		}
	}
	if flags&2 != 0 { // FHCRC
		off += 2
	}
	if off > len(b) {
		return nil, errors.New("gzip header cut short")
	}
	return b[off:], nil
}
