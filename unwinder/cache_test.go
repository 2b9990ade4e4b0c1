package unwinder_test

import (
	"fmt"
	"testing"

	"github.com/ustack/ustack/internal/fixture"
	"github.com/ustack/ustack/unwinder"
)

// TestWarmCacheMatchesCold unwinds every committed capture with a fresh
// Cache, again with the same (now warm) Cache, with one Cache shared by all
// captures of both architectures, and with one whose rows come from its
// second level (its hot level emptied before each pass but the first): the
// frames and results must not depend on what the cache holds.
func TestWarmCacheMatchesCold(t *testing.T) {
	var shared, spilled unwinder.Cache
	unwinder.SpillNow(&spilled)
	eachPrepared(t, func(path string, p *fixture.Prepared) {
		for _, opts := range []unwinder.Options{{}, {NoFramePointer: true}, {MaxFrames: 3}} {
			u := unwinder.New(p.Arch, opts)
			var c unwinder.Cache
			want := make([]unwinder.Frame, 512)
			wantRes := u.Unwind(&c, p.Space, &p.Regs, &p.Stack, want)
			for pass, cc := range []*unwinder.Cache{&c, &shared, &shared, &spilled, &spilled, &spilled} {
				if pass > 3 {
					unwinder.EvictHot(cc)
				}
				got := make([]unwinder.Frame, 512)
				res := u.Unwind(cc, p.Space, &p.Regs, &p.Stack, got)
				// Errs compared by message: a Result's error is a new
				// value each unwind (FramePointerGuessError).
				if res.Frames != wantRes.Frames || res.Stop != wantRes.Stop || res.Beyond != wantRes.Beyond || fmt.Sprint(res.Err) != fmt.Sprint(wantRes.Err) {
					t.Errorf("%s %+v pass %d: %+v; cold cache %+v", path, opts, pass, res, wantRes)
					continue
				}
				for i := range got[:res.Frames] {
					if got[i] != want[i] {
						t.Errorf("%s %+v pass %d: frame %d %+v; cold cache %+v", path, opts, pass, i, got[i], want[i])
						break
					}
				}
			}
		}
	})
}
