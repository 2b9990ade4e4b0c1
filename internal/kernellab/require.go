package kernellab

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// CacheDir is where kernel packages and indexes are kept between runs:
// $USTACK_KERNELLAB_CACHE, else $XDG_CACHE_HOME/ustack-test/kernellab
// (~/.cache/...).
func CacheDir() string {
	if d := os.Getenv("USTACK_KERNELLAB_CACHE"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "ustack-test", "kernellab")
}

// Required says whether tests must fail rather than skip when the lab
// cannot run (USTACK_KERNELLAB=require, as .ci/run sets it).
func Required() bool { return os.Getenv("USTACK_KERNELLAB") == "require" }

var (
	kernelsMu sync.Mutex
	kernels   = map[string]*kernelOnce{}
)

type kernelOnce struct {
	once sync.Once
	k    *Kernel
	err  error
}

// Require returns the kernel of suite and arch, fetched once per test
// binary run. It skips the test, saying what is missing, when qemu or the
// kernel package is not to be had, unless Required.
func Require(t testing.TB, suite, arch string) *Kernel {
	t.Helper()
	if os.Getenv("USTACK_KERNELLAB") == "off" {
		t.Skip("kernel lab: USTACK_KERNELLAB=off")
	}
	if testing.Short() && !Required() {
		t.Skip("kernel lab: skipped in -short mode (it boots kernels under qemu)")
	}
	if q, ok := QemuFor(arch); !ok {
		skipOrFail(t, "kernel lab: %s is not installed (Debian: apt-get install qemu-system-x86 qemu-system-arm)", q)
	}
	kernelsMu.Lock()
	ko := kernels[suite+"/"+arch]
	if ko == nil {
		ko = &kernelOnce{}
		kernels[suite+"/"+arch] = ko
	}
	kernelsMu.Unlock()
	ko.once.Do(func() { ko.k, ko.err = FindKernel(context.Background(), CacheDir(), suite, arch) })
	if ko.err != nil {
		skipOrFail(t, "kernel lab: Debian's %s kernel for %s: %v", suite, arch, ko.err)
	}
	return ko.k
}

func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if Required() {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}
