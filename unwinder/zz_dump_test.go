package unwinder_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/ustack/ustack/internal/fixture"
	"github.com/ustack/ustack/unwinder"
)

func TestZZDump(t *testing.T) {
	out, err := os.Create(os.Getenv("DUMP"))
	if err != nil {
		t.Skip()
	}
	defer out.Close()
	var shared unwinder.Cache
	for _, archName := range []string{"x86_64", "aarch64"} {
		paths, _ := fixture.Glob(archName)
		for _, path := range paths {
			f, err := fixture.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			cache := f.NewCache()
			p, err := f.Prepare(cache)
			if err != nil {
				t.Fatal(err)
			}
			name := archName + "/" + strings.TrimSuffix(filepath.Base(path), ".json")
			for _, opts := range []unwinder.Options{{}, {NoFramePointer: true}, {MaxFrames: 3}, {PACMask: 1 << 60}} {
				u := unwinder.New(p.Arch, opts)
				var c unwinder.Cache
				for pass := 0; pass < 3; pass++ {
					cc := &c
					if pass == 2 {
						cc = &shared
					}
					frames := make([]unwinder.Frame, 512)
					res := u.Unwind(cc, p.Space, &p.Regs, &p.Stack, frames)
					fmt.Fprintf(out, "%s %+v pass %d: %d %v %v\n", name, opts, pass, res.Frames, res.Stop, res.Err)
					for _, fr := range frames[:res.Frames] {
						fmt.Fprintf(out, "  %+v\n", fr)
					}
				}
			}
			cache.Close()
		}
	}
}

func cpuNow() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_THREAD, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func TestZZCPU(t *testing.T) {
	if os.Getenv("ZZCPU") == "" {
		t.Skip()
	}
	runtime.LockOSThread()
	for _, n := range []string{"x86_64/syscall_gcc_O2", "x86_64/signal_handler", "x86_64/recursion_truncated", "x86_64/go_program", "aarch64/a64_syscall_O2_nofp", "aarch64/a64_pac", "aarch64/a64_recursion_truncated"} {
		f, _ := fixture.Load(filepath.Join(fixture.Dir(), "fixtures", n+".json"))
		cache := f.NewCache()
		p, _ := f.Prepare(cache)
		u := unwinder.New(p.Arch, unwinder.Options{})
		frames := make([]unwinder.Frame, 256)
		var c unwinder.Cache
		u.Unwind(&c, p.Space, &p.Regs, &p.Stack, frames)
		best := 1e9
		for rep := 0; rep < 15; rep++ {
			total := 0
			t0 := cpuNow()
			for i := 0; i < 200000; i++ {
				total += u.Unwind(&c, p.Space, &p.Regs, &p.Stack, frames).Frames
			}
			if d := float64(cpuNow()-t0) / float64(total); d < best {
				best = d
			}
		}
		fmt.Printf("%-32s %6.2f ns/frame (cpu, best of 15)\n", n, best)
		cache.Close()
	}
}
