package elfcache_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/fixture"
	"github.com/ustack/ustack/unwinder"
)

// TestStrippedGoFixture unwinds the go_program fixture (a stop under gdb
// in a syscall, five Go frames deep, whose frame 0 is an assembly function
// without a frame pointer) with the binary swapped for its twin built with
// -ldflags='-s -w': no .debug_frame, no .symtab. The pcsp rows must give
// gdb's PCs, SPs and function names, frame for frame, and the same frames
// as the unstripped binary; frame pointers alone would lose the caller of
// frame 0.
func TestStrippedGoFixture(t *testing.T) {
	paths, err := fixture.Glob("x86_64")
	require.NoError(t, err)
	var path string
	for _, p := range paths {
		if filepath.Base(p) == "go_program.json" {
			path = p
		}
	}
	require.NotEmpty(t, path, "go_program fixture missing")

	unwind := func(binary string) ([]unwinder.Frame, []string, unwinder.Result) {
		f, err := fixture.Load(path)
		require.NoError(t, err)
		for i := range f.Maps {
			if filepath.Base(f.Maps[i].Object) == "goprog" {
				f.Maps[i].Object = "objects/x86_64/" + binary
			}
		}
		cache := f.NewCache()
		t.Cleanup(func() { cache.Close() })
		p, err := f.Prepare(cache)
		require.NoError(t, err)
		u := unwinder.New(p.Arch, unwinder.Options{})
		frames := make([]unwinder.Frame, 64)
		res := u.Unwind(new(unwinder.Cache), p.Space, &p.Regs, &p.Stack, frames)
		frames = frames[:res.Frames]
		names := make([]string, len(frames))
		for i, fr := range frames {
			if fr.Mapping >= 0 && p.Objects[fr.Mapping] != nil {
				names[i], _, _ = p.Objects[fr.Mapping].Symbolize(fr.LookupPC() - p.Space.Mapping(int(fr.Mapping)).Bias)
			}
		}
		return frames, names, res
	}
	f, err := fixture.Load(path)
	require.NoError(t, err)
	gdb := f.GDB[:f.Expect.Frames]

	got, names, res := unwind("goprog_stripped")
	full, fullNames, fullRes := unwind("goprog")
	require.Len(t, got, len(gdb), "frames: %v", got)
	assert.Equal(t, f.Expect.Stop, res.Stop.String(), "stop: %v", res.Err)
	assert.Equal(t, fullRes.Stop, res.Stop)
	for i, w := range gdb {
		assert.Equal(t, w.PC, got[i].PC, "frame %d pc", i)
		if w.HasSP {
			assert.Equal(t, w.SP, got[i].SP, "frame %d sp", i)
		}
		assert.Equal(t, w.Function, names[i], "frame %d function", i)
		if i > 0 {
			assert.Equal(t, unwinder.MethodCFI, got[i].Method, "frame %d recovered by %v, not the pcsp row", i, got[i].Method)
		}
		// The unstripped twin: same frame (its .symtab names assembly
		// functions with an .abi0 suffix that gdb and the pclntab lack).
		assert.Equal(t, full[i].PC, got[i].PC, "frame %d pc vs unstripped", i)
		assert.Equal(t, full[i].SP, got[i].SP, "frame %d sp vs unstripped", i)
		assert.Contains(t, []string{names[i], names[i] + ".abi0"}, fullNames[i], "frame %d name vs unstripped", i)
	}
}
