package kernellab

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// File is one file of the guest's initramfs.
type File struct {
	Path string // in the guest, absolute
	Host string // the host file to copy, or
	Data []byte // the contents
	Mode os.FileMode
}

// writeInitramfs writes files as an uncompressed newc cpio archive (the
// format the kernel unpacks into its root file system), with the
// directories they need.
func writeInitramfs(out string, files []File) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	cw := &cpioWriter{w: w, ino: 1}
	dirs := map[string]bool{"/": true}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	for _, file := range files {
		var mk func(d string) error
		mk = func(d string) error {
			if dirs[d] {
				return nil
			}
			if err := mk(path.Dir(d)); err != nil {
				return err
			}
			dirs[d] = true
			return cw.entry(d, 0o40755, nil, 0)
		}
		if err := mk(path.Dir(file.Path)); err != nil {
			f.Close()
			return err
		}
		mode := file.Mode
		if mode == 0 {
			mode = 0o644
		}
		var src io.Reader
		size := int64(len(file.Data))
		if file.Host != "" {
			h, err := os.Open(file.Host)
			if err != nil {
				f.Close()
				return err
			}
			st, err := h.Stat()
			if err != nil {
				h.Close()
				f.Close()
				return err
			}
			src, size = h, st.Size()
			defer h.Close()
		} else {
			src = strings.NewReader(string(file.Data))
		}
		if err := cw.entry(file.Path, 0o100000|uint32(mode.Perm()), src, size); err != nil {
			f.Close()
			return fmt.Errorf("initramfs %s: %w", file.Path, err)
		}
	}
	if err := cw.entry("TRAILER!!!", 0, nil, 0); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

type cpioWriter struct {
	w   *bufio.Writer
	ino uint32
}

// entry writes one newc header ("070701", thirteen 8-digit hex fields),
// the name, and the data, each padded to 4 bytes.
func (c *cpioWriter) entry(name string, mode uint32, data io.Reader, size int64) error {
	name = strings.TrimPrefix(name, "/")
	c.ino++
	nlink := 1
	if mode&0o40000 != 0 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name)+1, 0)
	c.w.WriteString(hdr)
	c.w.WriteString(name)
	c.w.WriteByte(0)
	c.pad(len(hdr) + len(name) + 1)
	if data != nil {
		n, err := io.Copy(c.w, data)
		if err != nil {
			return err
		}
		if n != size {
			return fmt.Errorf("%d bytes, want %d", n, size)
		}
	}
	c.pad(int(size))
	return nil
}

func (c *cpioWriter) pad(n int) {
	for ; n%4 != 0; n++ {
		c.w.WriteByte(0)
	}
}
