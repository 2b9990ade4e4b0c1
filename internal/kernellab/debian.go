package kernellab

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ulikunitz/xz"
)

// Mirror is the Debian mirror packages are fetched from.
var Mirror = "http://deb.debian.org/debian"

// Package is one stanza of a Debian package index.
type Package struct {
	Name, Version, Arch string
	Depends             string
	Filename            string // path below the mirror
	SHA256              string
	Size                int64
}

// fetch GETs url bounded in time.
func fetch(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 1<<30))
}

// packageIndex reads the main component's package index of suite for arch,
// cached for a day.
func packageIndex(ctx context.Context, cache, suite, arch string) (map[string]*Package, error) {
	file := filepath.Join(cache, "index", suite+"_"+arch+".Packages.xz")
	b, err := os.ReadFile(file)
	if st, e := os.Stat(file); err != nil || e != nil || time.Since(st.ModTime()) > 24*time.Hour {
		url := fmt.Sprintf("%s/dists/%s/main/binary-%s/Packages.xz", Mirror, suite, arch)
		b, err = fetch(ctx, url)
		if err != nil {
			return nil, fmt.Errorf("can't read Debian's package index: %w", err)
		}
		if err := writeFileAtomic(file, b); err != nil {
			return nil, err
		}
	}
	r, err := xz.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return parseIndex(r)
}

// parseIndex parses a Packages file: stanzas of "Field: value" lines
// separated by blank lines; continuation lines start with a space.
func parseIndex(r io.Reader) (map[string]*Package, error) {
	idx := map[string]*Package{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	p := &Package{}
	flush := func() {
		if p.Name != "" {
			idx[p.Name] = p
		}
		p = &Package{}
	}
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			flush()
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			continue
		}
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		switch k {
		case "Package":
			p.Name = v
		case "Version":
			p.Version = v
		case "Architecture":
			p.Arch = v
		case "Depends":
			p.Depends = v
		case "Filename":
			p.Filename = v
		case "SHA256":
			p.SHA256 = v
		case "Size":
			p.Size, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	flush()
	return idx, sc.Err()
}

// kernelPackage follows the metapackage linux-image-ARCH to the kernel
// package it depends on.
func kernelPackage(idx map[string]*Package, arch string) (*Package, error) {
	meta := idx["linux-image-"+arch]
	if meta == nil {
		return nil, fmt.Errorf("no package linux-image-%s in the index", arch)
	}
	for _, dep := range strings.Split(meta.Depends, ",") {
		name := strings.Fields(strings.TrimSpace(dep))
		if len(name) == 0 || !strings.HasPrefix(name[0], "linux-image-") {
			continue
		}
		if p := idx[name[0]]; p != nil {
			return p, nil
		}
		return nil, fmt.Errorf("linux-image-%s %s depends on %s, which the index does not hold", arch, meta.Version, name[0])
	}
	return nil, fmt.Errorf("linux-image-%s %s depends on no linux-image package (Depends: %s)", arch, meta.Version, meta.Depends)
}

// download fetches p into the cache (once), checked against its SHA-256.
func download(ctx context.Context, cache string, p *Package) (string, error) {
	file := filepath.Join(cache, "deb", path.Base(p.Filename))
	if b, err := os.ReadFile(file); err == nil && sha256hex(b) == p.SHA256 {
		return file, nil
	}
	b, err := fetch(ctx, Mirror+"/"+p.Filename)
	if err != nil {
		return "", fmt.Errorf("can't download %s %s: %w", p.Name, p.Version, err)
	}
	if got := sha256hex(b); got != p.SHA256 {
		return "", fmt.Errorf("%s: SHA-256 %s, the index says %s", p.Filename, got, p.SHA256)
	}
	return file, writeFileAtomic(file, b)
}

func sha256hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func writeFileAtomic(file string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".part-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), file)
}

// extractDeb unpacks the members of a .deb's data archive for which keep
// returns true into dir (paths kept, made relative).
func extractDeb(deb, dir string, keep func(name string) bool) error {
	f, err := os.Open(deb)
	if err != nil {
		return err
	}
	defer f.Close()
	data, comp, err := arMember(f, "data.tar")
	if err != nil {
		return fmt.Errorf("%s: %w", deb, err)
	}
	var r io.Reader = data
	switch comp {
	case ".xz":
		if xzPath, err := exec.LookPath("xz"); err == nil {
			// xz(1) is several times faster than the Go decoder on a kernel
			// package's 300 MB of data.
			cmd := exec.Command(xzPath, "-dc")
			cmd.Stdin = data
			out, err := cmd.StdoutPipe()
			if err != nil {
				return err
			}
			if err := cmd.Start(); err != nil {
				return err
			}
			defer cmd.Wait()
			defer out.Close()
			r = out
		} else if r, err = xz.NewReader(data); err != nil {
			return fmt.Errorf("%s: data.tar.xz: %w", deb, err)
		}
	case "":
	default:
		return fmt.Errorf("%s: data.tar%s is not supported", deb, comp)
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: data.tar: %w", deb, err)
		}
		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		if h.Typeflag != tar.TypeReg || !keep(name) {
			continue
		}
		dst := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		w, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
		if err != nil {
			return err
		}
		_, err = io.Copy(w, tr)
		if e := w.Close(); err == nil {
			err = e
		}
		if err != nil {
			return err
		}
	}
}

// arMember finds the ar member whose name starts with prefix and returns a
// reader of it and the rest of its name (the compression suffix).
func arMember(f *os.File, prefix string) (io.Reader, string, error) {
	var magic [8]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil || string(magic[:]) != "!<arch>\n" {
		return nil, "", errors.New("not an ar archive (a .deb)")
	}
	off := int64(8)
	for {
		var h [60]byte
		if _, err := f.ReadAt(h[:], off); err != nil {
			return nil, "", fmt.Errorf("no %s member", prefix)
		}
		name := strings.TrimRight(strings.TrimSpace(string(h[0:16])), "/")
		size, err := strconv.ParseInt(strings.TrimSpace(string(h[48:58])), 10, 64)
		if err != nil || size < 0 {
			return nil, "", fmt.Errorf("bad ar member header at offset %d", off)
		}
		off += 60
		if strings.HasPrefix(name, prefix) {
			return io.NewSectionReader(f, off, size), strings.TrimPrefix(name, prefix), nil
		}
		off += size + size&1
	}
}
