package coredump_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/coredump"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/internal/coretruth"
	"github.com/ustack/ustack/unwinder"
)

// TestUnwindSmoke feeds each core's threads to today's unwinder, with the
// thread's stack segment (from SP to its end) as the snapshot, and compares
// the frames with gdb's: evidence for the integration into ustack report,
// which will give the unwinder the whole of Memory instead. gdb's inline and
// tail-call frames have no machine frame and are left out of the comparison;
// eu-stack shows neither.
func TestUnwindSmoke(t *testing.T) {
	for _, tr := range fixtures(t) {
		t.Run(tr.Arch+"/"+tr.Name, func(t *testing.T) {
			c := tr.open(t)
			var dirs []string
			for _, d := range tr.DebugDirs {
				dirs = append(dirs, filepath.Join(testdataDir(), d))
			}
			cache := elfcache.NewCache(elfcache.Options{DebugDirs: dirs})
			defer cache.Close()
			space := addressSpace(t, c, tr, cache)
			u := unwinder.New(c.Arch, unwinder.Options{})
			var uc unwinder.Cache
			frames := make([]unwinder.Frame, 1024)
			for _, g := range tr.GDB.Threads {
				th := findThread(c, g.LWP)
				stack := threadStack(t, c, th)
				res := u.Unwind(&uc, space, &th.Regs, &stack, frames)
				var want []uint64
				for _, f := range g.Frames {
					if f.Kind != "inline" && f.Kind != "tailcall" && f.PC != "" {
						want = append(want, hex(t, f.PC))
					}
				}
				// Correction: gdb walks past the outermost Go frames
				// (runtime.goexit, runtime.clone) into words that are no
				// code (0, a Go heap address); those frames are dropped.
				full := want
				for len(want) > 0 && !coretruth.InCode(c, want[len(want)-1]) {
					want = want[:len(want)-1]
				}
				var got []uint64
				for _, f := range frames[:res.Frames] {
					got = append(got, f.PC)
				}
				if len(got) == len(want)+1 && len(full) > len(want) && !coretruth.InCode(c, got[len(want)]) {
					// The unwinder follows gdb one word past the
					// outermost Go frame and says so.
					assert.Equal(t, "no_mapping", res.Stop.String(), "LWP %d", g.LWP)
					want = full[:len(want)+1]
				}
				assert.Equal(t, want, got, "LWP %d against gdb: stop %v %v", g.LWP, res.Stop, res.Err)
				for _, e := range tr.EuStack.Threads {
					if e.TID != g.LWP {
						continue
					}
					var eu []uint64
					for _, f := range e.Frames {
						eu = append(eu, hex(t, f.PC))
					}
					if tr.EuStack.Exit != 0 && len(eu) < len(got) {
						// eu-stack gave up (exit 1): on Go's signal
						// return trampoline, which has no CFI ("no
						// matching address range"); gdb and the
						// unwinder go on through the signal frame.
						got = got[:len(eu)]
					}
					assert.Equal(t, eu, got, "LWP %d against eu-stack", g.LWP)
				}
			}
		})
	}
}

// addressSpace builds the unwinder's mappings from NT_FILE and the vdso.
func addressSpace(t *testing.T, c *coredump.Core, tr *truth, cache *elfcache.Cache) *unwinder.AddressSpace {
	segs := c.Memory().Segments()
	exec := func(addr uint64) bool {
		for _, s := range segs {
			if addr >= s.Addr && addr < s.Addr+s.Size {
				return s.Exec
			}
		}
		return false
	}
	var maps []unwinder.Mapping
	for _, m := range c.Mappings {
		um := unwinder.Mapping{Start: m.Start, End: m.End, Name: m.Path, Exec: exec(m.Start)}
		if rel, ok := tr.Files[m.Path]; ok {
			o, err := cache.Open(filepath.Join(testdataDir(), rel))
			require.NoError(t, err)
			if bias, ok := o.Bias(m.Start, m.FileOffset); ok {
				um.Object, um.Bias = o, bias
			}
		}
		maps = append(maps, um)
	}
	if img, err := c.VDSOImage(); err == nil {
		p := filepath.Join(t.TempDir(), "vdso.so")
		require.NoError(t, os.WriteFile(p, img, 0o600))
		o, err := cache.Open(p)
		require.NoError(t, err)
		start, _ := c.VDSO()
		if bias, ok := o.Bias(start, 0); ok {
			maps = append(maps, unwinder.Mapping{Start: start, End: start + uint64(len(img)), Name: "[vdso]", Exec: true, Object: o, Bias: bias})
		}
	}
	return unwinder.NewAddressSpace(maps)
}

// threadStack copies the dumped memory from the thread's SP to the end of
// its segment, and every other dumped writable segment as an extra region
// (a Go signal handler runs on its own stack, the interrupted code on
// another), the part of the SP's own segment below the SP included: a Go
// M's gsignal stack and its g0 stack are both in the Go heap, the g0 stack
// below, so the code a signal interrupted is below the handler's SP. An SP below every byte of its stack (a stack overflow: the
// faulting instruction addressed the guard gap) starts the copy at the
// segment just above.
func threadStack(t *testing.T, c *coredump.Core, th *coredump.Thread) unwinder.Stack {
	sp, _ := th.Regs.Get(c.Arch.SP())
	segs := c.Memory().Segments()
	for i, s := range segs {
		below := i == 0 || sp >= segs[i-1].Addr+segs[i-1].Size ||
			(sp >= segs[i-1].Addr && segs[i-1].Present == 0 && !segs[i-1].Read) // in the guard page
		if sp < s.Addr && below && s.Write && s.Present == s.Size {
			sp = s.Addr
		}
		if sp >= s.Addr && sp < s.Addr+s.Present {
			data := make([]byte, s.Addr+s.Present-sp)
			_, err := c.Memory().ReadDumped(data, sp)
			require.NoError(t, err)
			st := unwinder.Stack{Addr: sp, Data: data}
			if sp > s.Addr && s.Write {
				below := make([]byte, sp-s.Addr)
				_, err := c.Memory().ReadDumped(below, s.Addr)
				require.NoError(t, err)
				st.Extra = append(st.Extra, unwinder.Region{Addr: s.Addr, Data: below})
			}
			for j, o := range segs {
				if j != i && o.Write && o.Present > 0 {
					buf := make([]byte, o.Present)
					_, err := c.Memory().ReadDumped(buf, o.Addr)
					require.NoError(t, err)
					st.Extra = append(st.Extra, unwinder.Region{Addr: o.Addr, Data: buf})
				}
			}
			return st
		}
	}
	t.Fatalf("SP %#x of thread %d is in no dumped segment", sp, th.TID)
	return unwinder.Stack{}
}

// Memory serves the unwinder as it is: it is an unwinder.Memory.
var _ unwinder.Memory = (*coredump.Memory)(nil)
