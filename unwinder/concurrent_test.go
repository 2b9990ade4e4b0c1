package unwinder_test

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/ustack/ustack/internal/fixture"
	"github.com/ustack/ustack/unwinder"
)

// TestConcurrentUnwind unwinds several captures from many goroutines at
// once, sharing one object cache, the address spaces and the Unwinder, each
// goroutine with its own Cache (run with -race): every result must equal the
// one from a single goroutine.
func TestConcurrentUnwind(t *testing.T) {
	var preps []*fixture.Prepared
	var want [][]unwinder.Frame
	for _, name := range []string{"x86_64/syscall_gcc_O2", "x86_64/signal_handler", "x86_64/go_program", "x86_64/cxx_exception"} {
		f, err := fixture.Load(filepath.Join(fixture.Dir(), "fixtures", name+".json"))
		if err != nil {
			t.Skip(err)
		}
		cache := f.NewCache()
		defer cache.Close()
		p, err := f.Prepare(cache)
		if err != nil {
			t.Fatal(err)
		}
		preps = append(preps, p)
	}
	u := unwinder.New(preps[0].Arch, unwinder.Options{})
	for _, p := range preps {
		frames := make([]unwinder.Frame, 128)
		res := u.Unwind(new(unwinder.Cache), p.Space, &p.Regs, &p.Stack, frames)
		want = append(want, frames[:res.Frames])
	}
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			var c unwinder.Cache
			frames := make([]unwinder.Frame, 128)
			for i := 0; i < 200; i++ {
				k := (g + i) % len(preps)
				p := preps[k]
				regs := p.Regs
				res := u.Unwind(&c, p.Space, &regs, &p.Stack, frames)
				if res.Frames != len(want[k]) {
					errs <- "frame count differs"
					return
				}
				for j := range want[k] {
					if frames[j] != want[k][j] {
						errs <- "frame differs"
						return
					}
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
