package archive

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// perf's build-id cache (~/.debug, $PERF_BUILDID_DIR) keeps each object in
// a directory named after its path and build-id, reached by build-id
// through a symlink:
//
//	.build-id/ab/cdef...  ->  ../../usr/lib/libc.so.6/abcdef...
//	usr/lib/libc.so.6/abcdef.../elf       the object
//	usr/lib/libc.so.6/abcdef.../debug     its separate debug file
//	[vdso]/ID/vdso, [kernel.kallsyms]/ID/kallsyms
//
// perf archive tars the links and directories of a recording's build-ids,
// for "tar xf perf.data.tar.bz2 -C ~/.debug" on another machine.

// PerfCacheFile is one file of perf's build-id cache layout, named
// relative to the cache directory.
type PerfCacheFile struct {
	Name string // e.g. "usr/lib/libc.so.6/ID/elf"
	Data []byte
}

// perfCacheDir returns the cache directory of an object, relative to the
// cache root: its path without the leading slash (pseudo-paths such as
// "[vdso]" as they are), then the build-id.
func perfCacheDir(objPath, id string) (string, bool) {
	p := path.Clean("/" + objPath)[1:]
	if p == "" || id == "" || len(id) < 3 {
		return "", false
	}
	return p + "/" + id, true
}

// PerfCacheFiles lists what the archive holds in perf's build-id cache
// layout: every object as elf, its debug file as debug, the vDSO, and the
// kernel symbol table under kernelBuildID (the recording's
// "[kernel.kallsyms]" build-id; nil leaves kallsyms out, as perf cannot
// match it). Damaged members are left out (and recorded in Damage).
func (a *Reader) PerfCacheFiles(kernelBuildID []byte) []PerfCacheFile {
	var out []PerfCacheFile
	for i := range a.entries {
		e := &a.entries[i]
		var dir, file string
		var ok bool
		switch e.Kind {
		case KindObject:
			dir, ok = perfCacheDir(e.Path, e.BuildID)
			file = "elf"
		case KindDebug:
			dir, ok = perfCacheDir(e.Path, e.BuildID)
			file = "debug"
		case KindVDSO:
			dir, ok = perfCacheDir("[vdso]", e.BuildID)
			file = "vdso"
		case KindKallsyms:
			dir, ok = perfCacheDir("[kernel.kallsyms]", hex.EncodeToString(kernelBuildID))
			file = "kallsyms"
		}
		if !ok {
			continue
		}
		b, err := a.read(i)
		if err != nil {
			continue
		}
		out = append(out, PerfCacheFile{Name: dir + "/" + file, Data: b})
	}
	return out
}

// buildIDLink returns the .build-id symlink of a cache directory
// "PATH/ID" and its target.
func buildIDLink(dir string) (link, target string) {
	id := path.Base(dir)
	return ".build-id/" + id[:2] + "/" + id[2:], "../../" + dir
}

// ExportPerfCache writes the archive's files into perf's build-id cache at
// root (created when missing), with their .build-id links, so that perf
// report finds the recording's objects there. Existing entries are left
// as they are (perf's cache is content-addressed by build-id). It returns
// how many files it wrote.
func (a *Reader) ExportPerfCache(root string, kernelBuildID []byte) (int, error) {
	n := 0
	for _, f := range a.PerfCacheFiles(kernelBuildID) {
		dst := filepath.Join(root, filepath.FromSlash(f.Name))
		if _, err := os.Lstat(dst); err == nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return n, err
		}
		if err := writeFileAtomic(dst, f.Data, 0o600); err != nil {
			return n, err
		}
		n++
		link, target := buildIDLink(path.Dir(f.Name))
		lp := filepath.Join(root, filepath.FromSlash(link))
		if _, err := os.Lstat(lp); err == nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(lp), 0o755); err != nil {
			return n, err
		}
		if err := os.Symlink(target, lp); err != nil && !errors.Is(err, os.ErrExist) {
			return n, err
		}
	}
	return n, nil
}

// WritePerfTarball writes the archive's files as perf archive does: a tar
// (gzip-compressed; tar detects the compression when extracting) of the
// build-id cache directories and their .build-id links, to be unpacked
// with "tar xf FILE -C ~/.debug".
func (a *Reader) WritePerfTarball(w io.Writer, kernelBuildID []byte) error {
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	now := time.Now().Truncate(time.Second)
	dirs := map[string]bool{}
	for _, f := range a.PerfCacheFiles(kernelBuildID) {
		dir := path.Dir(f.Name)
		if !dirs[dir] {
			dirs[dir] = true
			link, target := buildIDLink(dir)
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: link, Linkname: target, Mode: 0o777, ModTime: now}); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.Name, Size: int64(len(f.Data)), Mode: 0o600, ModTime: now}); err != nil {
			return err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// decompressTarball returns a reader of a tarball's tar stream, whatever
// compression perf archive (bzip2) or a user (gzip, xz, zstd, none) gave it.
func decompressTarball(r io.Reader) (io.Reader, error) {
	br := bufio.NewReader(r)
	magic, _ := br.Peek(6)
	switch {
	case bytes.HasPrefix(magic, []byte("BZh")):
		return bzip2.NewReader(br), nil
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		return gzip.NewReader(br)
	case bytes.HasPrefix(magic, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		return xz.NewReader(br)
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		d, err := zstd.NewReader(br, zstd.WithDecoderMaxMemory(1<<30))
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	}
	return br, nil
}

// ExtractPerfTarball unpacks a perf archive tarball (perf.data.tar.bz2)
// into root, which then serves as a perf build-id cache. Only regular
// files, directories and .build-id links are taken; a name or link that
// would leave root is refused, and at most maxBytes (0: 16 GiB) are
// written. A damaged tarball keeps what was extracted before the damage
// and returns an error naming the member.
func ExtractPerfTarball(tarball, root string, maxBytes int64) (files int, err error) {
	if maxBytes <= 0 {
		maxBytes = 16 << 30
	}
	f, err := os.Open(tarball)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	zr, err := decompressTarball(f)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", tarball, err)
	}
	tr := tar.NewReader(zr)
	var total int64
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return files, fmt.Errorf("%s: after %d files: %w", tarball, files, err)
		}
		name, ok := localName(h.Name)
		if !ok {
			return files, fmt.Errorf("%s: member %q: name leaves the cache directory", tarball, h.Name)
		}
		dst := filepath.Join(root, filepath.FromSlash(name))
		if !realParents(root, name) {
			return files, fmt.Errorf("%s: member %q: a directory on its path is a link", tarball, h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o700); err != nil {
				return files, err
			}
		case tar.TypeReg:
			if h.Size < 0 || total+h.Size > maxBytes {
				return files, fmt.Errorf("%s: member %q: more than %d bytes in all", tarball, h.Name, maxBytes)
			}
			total += h.Size
			if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
				return files, err
			}
			out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return files, err
			}
			_, err = io.Copy(out, io.LimitReader(tr, h.Size))
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return files, fmt.Errorf("%s: member %q: %w", tarball, h.Name, err)
			}
			files++
		case tar.TypeSymlink:
			// Only perf's own links: .build-id/xx/rest -> ../../DIR, which
			// must stay inside root.
			if !strings.HasPrefix(name, ".build-id/") || strings.Count(name, "/") != 2 {
				continue
			}
			target := path.Join(path.Dir(name), h.Linkname)
			if _, ok := localName(target); !ok || path.IsAbs(h.Linkname) {
				return files, fmt.Errorf("%s: link %q -> %q leaves the cache directory", tarball, h.Name, h.Linkname)
			}
			if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
				return files, err
			}
			if err := os.Symlink(h.Linkname, dst); err != nil && !errors.Is(err, os.ErrExist) {
				return files, err
			}
		}
	}
}

// realParents reports whether every directory on name's path below root
// is a real directory (or does not exist yet): files are never written
// through a link, so links cannot lead writes out of root.
func realParents(root, name string) bool {
	dir := root
	parts := strings.Split(name, "/")
	for _, p := range parts[:len(parts)-1] {
		dir = filepath.Join(dir, p)
		st, err := os.Lstat(dir)
		if err != nil {
			return true // the rest is created as real directories
		}
		if !st.IsDir() {
			return false
		}
	}
	return true
}

// localName cleans a member name and reports whether it stays below the
// extraction root.
func localName(name string) (string, bool) {
	c := path.Clean(strings.TrimPrefix(name, "./"))
	if c == "." || c == ".." || strings.HasPrefix(c, "../") || path.IsAbs(c) {
		return "", false
	}
	return c, true
}

// writeFileAtomic writes data to path through a temporary file and a
// rename, so a reader never sees a partial file.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
