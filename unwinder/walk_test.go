package unwinder_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/fixture"
	"github.com/ustack/ustack/unwinder"
)

// TestWalkAgreesWithGeneralLoop checks walkSimple, the loop that takes the
// common frames when memory is a *Stack, against the general loop, which
// alone runs when the same memory is behind an opaque Memory: for every
// committed capture, the frames and the result must be the same at every
// depth limit (walkSimple leaves the frame at the limit to the general
// loop), with the snapshot cut short at every byte up to the last frame's
// CFA (so that each save slot falls just inside and just outside it), and
// with it reaching below the first frame's SP. The
// frame buffers start out full of garbage, so that a field either loop
// leaves unwritten shows.
func TestWalkAgreesWithGeneralLoop(t *testing.T) {
	eachPrepared(t, func(path string, p *fixture.Prepared) {
		var c unwinder.Cache
		compare := func(opts unwinder.Options, stack *unwinder.Stack, what string) unwinder.Result {
			u := unwinder.New(p.Arch, opts)
			want := garbageFrames(512)
			wantRes := u.Unwind(&c, p.Space, &p.Regs, opaqueMemory{stack}, want)
			got := garbageFrames(512)
			res := u.Unwind(&c, p.Space, &p.Regs, stack, got)
			require.Equal(t, wantRes, res, "%s %s: result", path, what)
			require.Equal(t, want[:wantRes.Frames], got[:res.Frames], "%s %s: frames", path, what)
			return res
		}
		full := compare(unwinder.Options{}, &p.Stack, "full")
		// The snapshot reaching below the SP, as a window that
		// starts at an earlier frame's does: a save slot below
		// the SP (an epilogue's) is then inside it but still
		// means the register was restored.
		below := unwinder.Stack{Addr: p.Stack.Addr - 64, Extra: p.Stack.Extra}
		below.Data = append(bytes.Repeat([]byte{0x5a}, 64), p.Stack.Data...)
		compare(unwinder.Options{}, &below, "below SP")
		for limit := 1; limit <= full.Frames+1; limit++ {
			compare(unwinder.Options{MaxFrames: limit}, &p.Stack, "MaxFrames")
		}
		// The highest CFA the walk reached bounds the bytes worth
		// cutting at.
		frames := make([]unwinder.Frame, 512)
		res := unwinder.New(p.Arch, unwinder.Options{}).Unwind(&c, p.Space, &p.Regs, &p.Stack, frames)
		top := uint64(0)
		for _, fr := range frames[:res.Frames] {
			top = max(top, fr.CFA)
		}
		if top > p.Stack.Addr {
			n := min(int(top-p.Stack.Addr)+16, len(p.Stack.Data))
			for cut := 0; cut <= n; cut++ {
				short := p.Stack
				short.Data = short.Data[:cut]
				compare(unwinder.Options{}, &short, "cut")
			}
		}
	})
}

// garbageFrames returns n frames with every field set to a value no unwind
// writes.
func garbageFrames(n int) []unwinder.Frame {
	frames := make([]unwinder.Frame, n)
	for i := range frames {
		frames[i] = unwinder.Frame{PC: 0xdead, SP: 0xbeef, CFA: 0xfeed, Mapping: -7, Method: 200, Flags: 0xf0}
	}
	return frames
}

// TestCacheSharedByTwoArchitectures unwinds an x86_64 and an arm64 capture
// alternately with one Cache: each must give the frames and result it gives
// with a Cache of its own (the shared Cache's rows are then of two
// architectures, and walkSimple leaves every frame to the general loop).
func TestCacheSharedByTwoArchitectures(t *testing.T) {
	type capture struct {
		u     *unwinder.Unwinder
		p     *fixture.Prepared
		want  []unwinder.Frame
		wantR unwinder.Result
	}
	var caps []capture
	for _, path := range []string{
		fixture.Dir() + "/fixtures/x86_64/syscall_gcc_O2.json",
		fixture.Dir() + "/fixtures/aarch64/a64_syscall_O2_nofp.json",
	} {
		f, err := fixture.Load(path)
		require.NoError(t, err)
		cache := f.NewCache()
		t.Cleanup(func() { cache.Close() })
		p, err := f.Prepare(cache)
		require.NoError(t, err)
		u := unwinder.New(p.Arch, unwinder.Options{})
		want := make([]unwinder.Frame, 64)
		res := u.Unwind(new(unwinder.Cache), p.Space, &p.Regs, &p.Stack, want)
		require.Greater(t, res.Frames, 2, path)
		caps = append(caps, capture{u, p, want[:res.Frames], res})
	}
	var shared unwinder.Cache
	for round := 0; round < 3; round++ {
		for _, cp := range caps {
			got := garbageFrames(64)
			res := cp.u.Unwind(&shared, cp.p.Space, &cp.p.Regs, &cp.p.Stack, got)
			require.Equal(t, cp.wantR, res, "round %d %v", round, cp.p.Arch)
			require.Equal(t, cp.want, got[:res.Frames], "round %d %v", round, cp.p.Arch)
		}
	}
}
