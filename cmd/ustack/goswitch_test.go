package main

import (
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/report"
)

// goChurnSrc allocates until the garbage collector works much of the time,
// on the goroutines' own threads (assists) and on its workers' stacks,
// both inside runtime.systemstack on the g0 stack; a fixed amount of work,
// so that a busy machine records as many samples as a quiet one.
const goChurnSrc = `package main

import "sync"

var sink [8][][]byte

//go:noinline
func churn(k, rounds int) {
	for r := 0; r < rounds; r++ {
		b := make([][]byte, 0, 512)
		for i := 0; i < 512; i++ {
			b = append(b, make([]byte, 2048))
		}
		sink[k] = b
	}
}

func main() {
	var wg sync.WaitGroup
	for k := 0; k < 4; k++ {
		wg.Add(1)
		go func(k int) { defer wg.Done(); churn(k, 150) }(k)
	}
	wg.Wait()
}
`

// reportStacks reports data with or without the call chain repair: every
// sample's user stack.
func reportStacks(t *testing.T, data string, noRepair bool) []deepStack {
	r, err := perfdata.Open(data)
	require.NoError(t, err)
	defer r.Close()
	var out []deepStack
	_, err = report.Run(r, report.Options{Kallsyms: "-", NoCallchainRepair: noRepair}, func(s *report.Sample) error {
		var d deepStack
		for _, f := range s.Frames {
			if !f.Kernel && !f.Inlined {
				d.syms, d.hows = append(d.syms, f.Symbol), append(d.hows, string(f.How))
			}
		}
		d.stop = s.Stop
		out = append(out, d)
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestGoSwitchCallchain records a Go program busy in its garbage collector
// with ustack record (which keeps the user part of the kernel's call chain)
// and reports it without and with the call chain repair. Stacks on a g0
// stack end stack_switch at runtime.systemstack, or at a vDSO call
// (runtime.nanotime1, which moved SP to the g0 stack): the goroutine's
// frames are not in the snapshot. Where the kernel's chain, walked by Go's
// frame pointers from the g0 stack into the goroutine's, holds every CFI
// frame, the repair goes on with it: the CFI frames stay, the rest are how
// callchain, begin with a caller of the switching function and end at
// runtime.goexit, the goroutine's base (a chain read from the wrong place
// would not reach it); no other stack changes.
func TestGoSwitchCallchain(t *testing.T) {
	testprog.NeedPerfEvents(t)
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skip("Go stack switches are found on amd64 and arm64")
	}
	dir := t.TempDir()
	bin := testprog.BuildGo(t, dir, "churn", goChurnSrc, "", runtime.GOARCH, "")
	data := filepath.Join(dir, "churn.data")
	rc, stderr := recordBounded(t, "-q", "-o", data, "-e", "cpu-clock", "-c", "250000", "--", bin)
	require.Zero(t, rc, stderr)
	before, after := reportStacks(t, data, true), reportStacks(t, data, false)
	require.Equal(t, len(before), len(after))
	switched, repaired := 0, 0
	for i, s := range after {
		b := before[i]
		if b.stop == "stack_switch" {
			switched++
		}
		if s.stop != report.StopCallchain || b.stop != "stack_switch" {
			if b.stop != "truncated" {
				assert.Equal(t, b, s, "a stack not repaired at a switch is as it was")
			}
			continue
		}
		repaired++
		n := len(b.syms)
		require.Greater(t, len(s.syms), n, "sample %d", i)
		assert.Equal(t, b.syms, s.syms[:n], "the CFI frames stay")
		// runtime.systemstack, or a vDSO call (runtime.nanotime1 and the
		// like, whose caller's frame is on the goroutine's stack), each
		// with a frame record of its own before it switched.
		assert.Contains(t, []string{"runtime.systemstack", "runtime.nanotime1", "runtime.walltime", "runtime.walltime1", "time.now", "runtime.vgetrandom1"},
			strings.TrimSuffix(b.syms[n-1], ".abi0"), "sample %d", i)
		for k, how := range s.hows[n:] {
			assert.Equal(t, "callchain", how, "spliced frame %d of %v", n+k, s.syms)
		}
		assert.Equal(t, "runtime.goexit", s.syms[len(s.syms)-1], "sample %d: %v", i, s.syms)
		assert.False(t, slices.Contains(s.syms[n:], "runtime.systemstack"), "sample %d: %v", i, s.syms)
	}
	t.Logf("%d samples, %d ended at a stack switch, %d of them went on with the kernel's chain", len(after), switched, repaired)
	require.Positive(t, switched, "no stack ended at a Go stack switch")
	require.Positive(t, repaired, "no stack went on with the kernel's chain past a Go stack switch")
}
