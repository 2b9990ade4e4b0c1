package unwinder_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/fixture"
	"github.com/ustack/ustack/unwinder"
)

// TestTruncatedBeyond: a walk that stops truncated names the word beyond
// the snapshot it needed, here the last frame's return address slot, found
// from recurse's prologue by hand: x86_64 "sub $0x48,%rsp" leaves it at
// SP+0x48; arm64 "stp x29, x30, [sp, #-128]!" at SP+8.
func TestTruncatedBeyond(t *testing.T) {
	for _, c := range []struct {
		name   string
		raSlot uint64
	}{{"x86_64/recursion_truncated", 0x48}, {"aarch64/a64_recursion_truncated", 8}} {
		t.Run(c.name, func(t *testing.T) {
			f, err := fixture.Load(filepath.Join(fixture.Dir(), "fixtures", c.name+".json"))
			require.NoError(t, err)
			cache := f.NewCache()
			defer cache.Close()
			p, err := f.Prepare(cache)
			require.NoError(t, err)
			u := unwinder.New(p.Arch, unwinder.Options{})
			frames := make([]unwinder.Frame, 256)
			var uc unwinder.Cache
			res := u.Unwind(&uc, p.Space, &p.Regs, &p.Stack, frames)
			require.Equal(t, unwinder.StopTruncated, res.Stop)
			last := frames[res.Frames-1]
			assert.Equal(t, last.SP+c.raSlot, res.Beyond, "beyond %#x, last frame's SP %#x", res.Beyond, last.SP)
			assert.GreaterOrEqual(t, res.Beyond+8, p.Stack.Addr+uint64(len(p.Stack.Data)), "the word lies beyond the snapshot")
		})
	}
}
