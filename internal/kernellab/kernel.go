package kernellab

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/ulikunitz/xz"
)

// Kernel is one of Debian's kernel packages, unpacked as far as the lab
// needs it.
type Kernel struct {
	Arch    string // Debian's architecture: amd64 or arm64
	Suite   string // bookworm, bookworm-backports
	Package string // linux-image-6.1.0-NN-amd64
	Version string // the package's version
	Release string // the kernel's release (uname -r)
	Image   string // the kernel image on the host
	// Modules are the host paths of the modules /init loads, in load order:
	// virtio PCI and MMIO transport, virtio 9p and what they depend on.
	Modules []string
	// Busybox is the architecture's static busybox.
	Busybox string
}

// String names the kernel as its package does.
func (k *Kernel) String() string { return k.Package + " " + k.Version + " (" + k.Suite + ")" }

// wantedModules are loaded at boot when the kernel has them as modules.
var wantedModules = []string{"virtio_pci", "virtio_mmio", "9pnet_virtio", "9p"}

// FindKernel fetches (once, into cache) the kernel package that Debian's
// linux-image-ARCH metapackage of suite depends on and the same suite's
// busybox-static, and unpacks the image and the modules the lab loads.
func FindKernel(ctx context.Context, cache, suite, arch string) (*Kernel, error) {
	idx, err := packageIndex(ctx, cache, suite, arch)
	if err != nil {
		return nil, err
	}
	kp, err := kernelPackage(idx, arch)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", suite, arch, err)
	}
	bb := idx["busybox-static"]
	if bb == nil {
		// Backports carry no busybox: take the stable suite's.
		stable, _, _ := strings.Cut(suite, "-")
		sidx, err := packageIndex(ctx, cache, stable, arch)
		if err != nil {
			return nil, err
		}
		if bb = sidx["busybox-static"]; bb == nil {
			return nil, fmt.Errorf("%s %s: no busybox-static", stable, arch)
		}
	}
	k := &Kernel{Arch: arch, Suite: suite, Package: kp.Name, Version: kp.Version}
	dir := filepath.Join(cache, "unpacked", kp.Name+"_"+kp.Version)
	done := filepath.Join(dir, ".done")
	if _, err := os.Stat(done); err != nil {
		deb, err := download(ctx, cache, kp)
		if err != nil {
			return nil, err
		}
		// Unpacked beside dir and renamed into place when whole: two test
		// runs at once (a user's go test beside CI's) must never see, or
		// remove, each other's half-made directory.
		final := dir
		if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp(filepath.Dir(final), ".unpack-*")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		if err := os.Chmod(dir, 0o755); err != nil {
			return nil, err
		}
		keep := func(name string) bool {
			return strings.HasPrefix(name, "boot/vmlinu") ||
				(strings.HasPrefix(name, "lib/modules/") && (strings.HasSuffix(name, ".ko") || strings.HasSuffix(name, ".ko.xz") || strings.HasSuffix(name, "/modules.builtin")))
		}
		if err := extractDeb(deb, dir, keep); err != nil {
			return nil, err
		}
		bdeb, err := download(ctx, cache, bb)
		if err != nil {
			return nil, err
		}
		if err := extractDeb(bdeb, dir, func(name string) bool { return name == "bin/busybox" }); err != nil {
			return nil, err
		}
		// Only the image, busybox and the modules the lab loads are kept.
		if err := pruneModules(dir); err != nil {
			return nil, err
		}
		// Newer kernels' modules are xz-compressed; busybox's insmod takes
		// them plain.
		if err := unxzModules(dir); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, ".done"), nil, 0o644); err != nil {
			return nil, err
		}
		if err := os.Rename(dir, final); err != nil {
			if _, serr := os.Stat(done); serr != nil {
				// Not another run's whole directory: a stale one.
				os.RemoveAll(final)
				if err := os.Rename(dir, final); err != nil {
					return nil, err
				}
			}
		}
	}
	images, _ := filepath.Glob(filepath.Join(dir, "boot", "vmlinu*"))
	if len(images) != 1 {
		return nil, fmt.Errorf("%s: %d kernel images in %s/boot", kp.Name, len(images), dir)
	}
	k.Image = images[0]
	k.Release = strings.TrimPrefix(strings.TrimPrefix(filepath.Base(k.Image), "vmlinuz-"), "vmlinux-")
	k.Busybox = filepath.Join(dir, "bin", "busybox")
	order, err := loadOrder(filepath.Join(dir, "lib", "modules", k.Release))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kp.Name, err)
	}
	k.Modules = order
	return k, nil
}

// unxzModules replaces every NAME.ko.xz below dir by NAME.ko.
func unxzModules(dir string) error {
	return filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || !strings.HasSuffix(p, ".ko.xz") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		r, err := xz.NewReader(bytes.NewReader(b))
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		plain, err := io.ReadAll(io.LimitReader(r, 64<<20))
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if err := os.WriteFile(strings.TrimSuffix(p, ".xz"), plain, 0o644); err != nil {
			return err
		}
		return os.Remove(p)
	})
}

// pruneModules removes every module that is not wanted or needed by one
// that is, so that the cache holds megabytes, not hundreds.
func pruneModules(dir string) error {
	rels, _ := filepath.Glob(filepath.Join(dir, "lib", "modules", "*"))
	for _, rel := range rels {
		order, err := loadOrder(rel)
		if err != nil {
			return err
		}
		keep := map[string]bool{}
		for _, m := range order {
			keep[m] = true
		}
		err = filepath.Walk(rel, func(p string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() && isModule(p) && !keep[p] {
				return os.Remove(p)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// loadOrder finds the wanted modules under a release's module directory
// and returns them after what each depends on (read from the modules'
// .modinfo, since the package ships no modules.dep: depmod makes it at
// install time). A wanted module the kernel has built in is skipped.
func loadOrder(relDir string) ([]string, error) {
	files := map[string]string{} // module name (with _) -> path
	err := filepath.Walk(relDir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && isModule(p) {
			files[modName(filepath.Base(p))] = p
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var order []string
	seen := map[string]bool{}
	var visit func(name string, depth int) error
	visit = func(name string, depth int) error {
		name = modName(name)
		if seen[name] || depth > 32 {
			return nil
		}
		seen[name] = true
		p, ok := files[name]
		if !ok {
			return nil // built in
		}
		deps, err := modDepends(p)
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := visit(d, depth+1); err != nil {
				return err
			}
		}
		order = append(order, p)
		return nil
	}
	for _, m := range wantedModules {
		if err := visit(m, 0); err != nil {
			return nil, err
		}
	}
	if _, ok := files["9p"]; !ok {
		// 9p built in is fine; 9p missing altogether is not.
		if b, err := os.ReadFile(filepath.Join(relDir, "modules.builtin")); err == nil && !bytes.Contains(b, []byte("/9p.ko")) {
			return nil, fmt.Errorf("%s: the kernel has no 9p file system (module or built in)", relDir)
		}
	}
	return order, nil
}

func isModule(p string) bool { return strings.HasSuffix(p, ".ko") || strings.HasSuffix(p, ".ko.xz") }

func modName(s string) string {
	return strings.ReplaceAll(strings.TrimSuffix(strings.TrimSuffix(s, ".xz"), ".ko"), "-", "_")
}

// modDepends reads "depends=" from a module's .modinfo section.
func modDepends(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(path, ".xz") {
		r, err := xz.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if b, err = io.ReadAll(io.LimitReader(r, 64<<20)); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s := f.Section(".modinfo")
	if s == nil {
		return nil, nil
	}
	info, err := s.Data()
	if err != nil {
		return nil, fmt.Errorf("%s: .modinfo: %w", path, err)
	}
	for _, kv := range bytes.Split(info, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			if len(v) == 0 {
				return nil, nil
			}
			return strings.Split(string(v), ","), nil
		}
	}
	return nil, nil
}
