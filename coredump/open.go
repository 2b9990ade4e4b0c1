package coredump

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/ulikunitz/xz"

	"github.com/ustack/ustack/internal/mmapfile"
)

// Compression names a compression format a core may be stored in.
type Compression string

// The formats Open recognises by their magic bytes.
const (
	None Compression = ""
	Zstd Compression = "zstd"
	XZ   Compression = "xz"
	LZ4  Compression = "lz4"
	// Apport is an apport report (Ubuntu's /var/crash/*.crash) holding
	// the core in its CoreDump field (apport.go).
	Apport Compression = "apport"
)

const defaultMaxDecompressed = 64 << 30

// Sniff says whether head, the first bytes of a file, look like an ELF core,
// possibly compressed; compression is None for a plain ELF file. It looks
// only at magic bytes: a compressed file may still hold something else.
func Sniff(head []byte) (compression Compression, ok bool) {
	switch {
	case len(head) >= 18 && string(head[:4]) == "\x7fELF":
		return None, head[16] == etCore && head[17] == 0
	case bytes.HasPrefix(head, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return Zstd, true
	case bytes.HasPrefix(head, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		return XZ, true
	case bytes.HasPrefix(head, []byte{0x04, 0x22, 0x4d, 0x18}):
		return LZ4, true
	case bytes.HasPrefix(head, []byte(apportPrefix)):
		return Apport, true
	}
	return None, false
}

// Open reads the core dump at path, which may be compressed with zstd, xz or
// lz4 (recognised by content, not by name) and may be a pipe (such as
// /dev/stdin). A compressed or piped core is copied into a temporary file (mode 0600, removed at once, so only
// the open descriptor keeps it) of at most opts.MaxDecompressed bytes. The
// core is mapped into memory, not read: Close releases it.
func Open(path string, opts *Options) (*Core, error) {
	if opts == nil {
		opts = &Options{}
	}
	f, st, err := openStat(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	head, comp, c, err := readHead(f, path, opts)
	if c != nil || err != nil {
		return c, err
	}
	if comp == None && st.Mode().IsRegular() {
		return openMapped(f, path, opts)
	}
	return openStream(io.MultiReader(bytes.NewReader(head), f), path, comp, opts)
}

// openStat opens the file at path and says what it is.
func openStat(path string) (*os.File, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, st, nil
}

// OpenReader reads a core dump, compressed with zstd, xz or lz4 or not, from
// a stream such as the pipe from `coredumpctl dump`; name stands for it in
// errors. The stream is copied into a temporary file as Open does for a
// pipe.
func OpenReader(r io.Reader, name string, opts *Options) (*Core, error) {
	if opts == nil {
		opts = &Options{}
	}
	head, comp, c, err := readHead(r, name, opts)
	if c != nil || err != nil {
		return c, err
	}
	return openStream(io.MultiReader(bytes.NewReader(head), r), name, comp, opts)
}

// readHead reads the first bytes of a core and says how it is compressed.
// A short ELF file is parsed at once (c or err set): Parse says what kind
// of ELF file it is.
func readHead(r io.Reader, name string, opts *Options) (head []byte, comp Compression, c *Core, err error) {
	var buf [ehdrSize]byte
	n, err := io.ReadFull(r, buf[:])
	if err != nil && err != io.ErrUnexpectedEOF {
		if err == io.EOF {
			return nil, None, nil, fmt.Errorf("%s: %w (empty file)", name, ErrNotCore)
		}
		return nil, None, nil, fmt.Errorf("%s: %w", name, err)
	}
	comp, ok := Sniff(buf[:n])
	if !ok {
		if n >= 4 && string(buf[:4]) == "\x7fELF" {
			c, err := Parse(buf[:n], name, opts)
			return nil, None, c, err
		}
		return nil, None, nil, fmt.Errorf("%s: %w (neither ELF nor zstd, xz or lz4, nor an apport report)", name, ErrNotCore)
	}
	return buf[:n], comp, nil, nil
}

// openStream copies a core (decompressing it) into a temporary file and
// maps that.
func openStream(r io.Reader, name string, comp Compression, opts *Options) (*Core, error) {
	src, damage, err := decompress(r, name, comp, opts)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	c, err := openMapped(src, name, opts)
	if err != nil {
		if damage != nil {
			err = fmt.Errorf("%w (%v)", err, damage)
		}
		return nil, err
	}
	if damage != nil {
		c.Warnings = append(c.Warnings, damage)
	}
	return c, nil
}

// openMapped maps an uncompressed core file and parses it.
func openMapped(f *os.File, name string, opts *Options) (*Core, error) {
	data, unmap, err := mapFile(f, name)
	if err != nil {
		return nil, err
	}
	c, err := Parse(data, name, opts)
	if err != nil {
		unmap()
		return nil, err
	}
	c.closer = unmap
	return c, nil
}

// decompress streams the core in f, compressed with comp or not (None),
// into an unlinked temporary file. Where the compressed data ends early or
// is damaged after some bytes came out, the file holds those and damage
// says where it stopped: a core cut short is read as far as it goes, as a
// plain one is.
func decompress(f io.Reader, path string, comp Compression, opts *Options) (_ *os.File, damage, _ error) {
	r := f
	switch comp {
	case Zstd:
		d, err := zstd.NewReader(f, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<30))
		if err != nil {
			return nil, nil, fmt.Errorf("%s: zstd: %w", path, err)
		}
		defer d.Close()
		r = d
	case XZ:
		x, err := xz.NewReader(f)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: xz: %w", path, err)
		}
		r = x
	case LZ4:
		r = lz4.NewReader(f)
	case Apport:
		a, err := apportCore(f)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		r = a
	}
	limit := opts.MaxDecompressed
	if limit <= 0 {
		limit = defaultMaxDecompressed
	}
	tmp, err := os.CreateTemp(opts.TempDir, "ustack-core-*")
	if err != nil {
		return nil, nil, fmt.Errorf("%s: can't decompress: %w", path, err)
	}
	os.Remove(tmp.Name()) // the descriptor keeps it; nothing is left behind
	n, err := io.Copy(tmp, io.LimitReader(r, limit+1))
	name := string(comp)
	if comp == None {
		name = "copying"
	}
	if err != nil && n > 0 && comp != None && comp != Apport {
		// What came out before the damage is the core's beginning.
		var we *os.PathError
		if !errors.As(err, &we) {
			return tmp, fmt.Errorf("%s: %s: the compressed data ends or is damaged at decompressed offset %#x (%v): read as far as that", path, name, n, err), nil
		}
	}
	if err == nil && n > limit {
		err = fmt.Errorf("core exceeds %d bytes (Options.MaxDecompressed)", limit)
	}
	if err == nil && n == 0 {
		err = errors.New("decompresses to nothing")
	}
	if err != nil {
		tmp.Close()
		return nil, nil, fmt.Errorf("%s: %s: at decompressed offset %#x: %w", path, name, n, err)
	}
	return tmp, nil, nil
}

// mapFile maps f read-only.
func mapFile(f *os.File, path string) ([]byte, func() error, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	size := st.Size()
	if size < ehdrSize {
		buf := make([]byte, size)
		n, err := f.ReadAt(buf, 0)
		if err != nil && err != io.EOF {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		return buf[:n], func() error { return nil }, nil
	}
	if int64(int(size)) != size {
		return nil, nil, fmt.Errorf("%s: %d bytes is too large to map", path, size)
	}
	data, unmap, err := mmapfile.Map(f, size)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: can't map: %w", path, err)
	}
	return data, unmap, nil
}

// Image is the uncompressed content of a dump file, whatever its format:
// mapped when it is a plain regular file, else decompressed or copied into
// an unlinked 0600 temporary file and mapped. Close releases it.
type Image struct {
	// Data is the dump's bytes; it stays valid until Close.
	Data []byte
	// Compression is how the file was compressed (None for plain).
	Compression Compression
	// Damage, when not nil, says that the compressed data ended early or
	// was damaged: Data holds what came out before.
	Damage error
	close  func() error
}

// Close unmaps the image.
func (im *Image) Close() error {
	if im.close == nil {
		return nil
	}
	err := im.close()
	im.close = nil
	return err
}

// OpenImage reads the file at path (plain, or compressed with zstd, xz or
// lz4, recognised by content; a pipe too) as Open does, without parsing
// it: for a dump of another format (a minidump) that shares the core's way
// in.
func OpenImage(path string, opts *Options) (*Image, error) {
	if opts == nil {
		opts = &Options{}
	}
	f, st, err := openStat(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf [ehdrSize]byte
	n, err := io.ReadFull(f, buf[:])
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	comp, _ := Sniff(buf[:n])
	if comp == None && st.Mode().IsRegular() {
		data, unmap, err := mapFile(f, path)
		if err != nil {
			return nil, err
		}
		return &Image{Data: data, close: unmap}, nil
	}
	return imageFromStream(io.MultiReader(bytes.NewReader(buf[:n]), f), path, comp, opts)
}

// OpenImageReader is OpenImage for a stream; name stands for it in errors.
func OpenImageReader(r io.Reader, name string, opts *Options) (*Image, error) {
	if opts == nil {
		opts = &Options{}
	}
	var buf [ehdrSize]byte
	n, err := io.ReadFull(r, buf[:])
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	comp, _ := Sniff(buf[:n])
	return imageFromStream(io.MultiReader(bytes.NewReader(buf[:n]), r), name, comp, opts)
}

func imageFromStream(r io.Reader, name string, comp Compression, opts *Options) (*Image, error) {
	src, damage, err := decompress(r, name, comp, opts)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	data, unmap, err := mapFile(src, name)
	if err != nil {
		return nil, err
	}
	return &Image{Data: data, Compression: comp, Damage: damage, close: unmap}, nil
}
