package elfcache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrOutsideSymFS is returned for a path that would lead outside
// Options.SymFS.
var ErrOutsideSymFS = errors.New("path leads outside the symfs directory")

// maxSymlinks bounds the symbolic links followed resolving one path, as
// the kernel's ELOOP does.
const maxSymlinks = 40

// symfsPath returns where the file at path on the profiled machine is found
// on this one. Paths come from recordings and object files, so they are
// untrusted: with SymFS set, path is resolved as if SymFS were the root
// directory. ".." stops at SymFS and symbolic links, absolute ones included,
// are followed inside it (an absolute target starts again at SymFS, as in a
// chroot), so neither a path nor a link under SymFS leads outside it; the
// resolved path is then checked again with filepath.EvalSymlinks.
//
// A path of this machine that already lies in SymFS, where nothing is at
// SymFS/path, is taken as the path under SymFS it names: qemu-user runs a
// program with -L ROOT and opens a file its guest names absolutely by
// ROOT/PATH, else by PATH on the host, so a core's list of libraries mixes
// the guest's paths (/lib/aarch64-linux-gnu/libc.so.6) with the host's
// (ROOT/usr/lib/python3.11/lib-dynload/_ctypes...so, where the program
// found its own files from its host path); with --symfs ROOT both are
// found, neither outside ROOT.
func (o *Options) symfsPath(path string) (string, error) {
	if o.SymFS == "" {
		return path, nil
	}
	p, err := resolveUnder(o.SymFS, path)
	if err == nil {
		if _, serr := os.Lstat(p); serr == nil {
			return p, nil
		}
	}
	if root, aerr := filepath.Abs(o.SymFS); aerr == nil {
		if rest, ok := strings.CutPrefix(filepath.Clean(path), filepath.Clean(root)+"/"); ok {
			if q, qerr := resolveUnder(o.SymFS, rest); qerr == nil {
				if _, serr := os.Lstat(q); serr == nil {
					return q, nil
				}
			}
		}
	}
	return p, err
}

// SymFSPath returns where the file at path on the profiled machine is
// found under symfs (perf's --symfs: a copy of that machine's root; ""
// for this machine), resolved as Options.SymFS resolves object paths: as
// if symfs were the root, symbolic links followed inside it, never outside.
func SymFSPath(symfs, path string) (string, error) {
	o := Options{SymFS: symfs}
	return o.symfsPath(path)
}

// inDebugDirs returns where rel, a path below a debug directory, is looked
// for: in each debug directory beneath SymFS (a copied root keeps its
// debug files where the machine did), and, for the directories the caller
// named (Options.DebugDirs) while SymFS is set, in the directory itself as
// well, as gdb looks in its debug-file-directory with and without the
// sysroot: a debug directory unpacked beside a copied root (ustack report
// --symfs ROOT --debug-dir DIR) is where it was put. A debug file found
// either way must still match the object (build-id or CRC).
func (o *Options) inDebugDirs(rel string) []string {
	var out []string
	for _, d := range o.debugDirs() {
		if p, err := o.symfsPath(filepath.Join(d, rel)); err == nil {
			out = append(out, p)
		}
		if o.SymFS != "" && o.DebugDirs != nil && filepath.IsAbs(d) {
			out = append(out, filepath.Join(d, rel))
		}
	}
	return out
}

// resolveUnder resolves path beneath root as described at symfsPath.
func resolveUnder(root, path string) (string, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	cur := root // always root or beneath it, and free of symbolic links
	rest := strings.Split(path, "/")
	links := 0
	missing := false // cur does not exist: the rest is joined lexically
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if cur != root {
				cur = filepath.Dir(cur)
			}
			continue
		}
		next := filepath.Join(cur, c)
		if missing {
			cur = next
			continue
		}
		fi, err := os.Lstat(next)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			missing = err != nil
			cur = next
			continue
		}
		if links++; links > maxSymlinks {
			return "", fmt.Errorf("%s: too many levels of symbolic links under the symfs %s (an absolute link target there is taken inside it, as in a chroot: a link such as usr -> /usr points at itself)", path, root)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			cur = root
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	if !within(root, cur) {
		return "", fmt.Errorf("%s: %w", path, ErrOutsideSymFS)
	}
	// Defence in depth: whatever the walk above missed (a link changed
	// under it), what the kernel will open must still be beneath root.
	if real, err := filepath.EvalSymlinks(cur); err == nil && !within(root, real) {
		return "", fmt.Errorf("%s: %w", path, ErrOutsideSymFS)
	}
	return cur, nil
}

// within reports whether the clean absolute path p is root or beneath it.
func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}
