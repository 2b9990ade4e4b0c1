package perfdata

import (
	"math/rand"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRecHeapOrder checks the Sorter's heap against a stable sort: records
// come out by time, ties in the order they were queued, however pushes
// and pops interleave.
func TestRecHeapOrder(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 50; round++ {
		var h recHeap
		var want, got []queued
		var pending []queued
		seq := uint64(0)
		for i := 0; i < 500; i++ {
			if rng.Intn(3) > 0 || len(h) == 0 {
				x := queued{t: uint64(rng.Intn(40)), seq: seq}
				seq++
				h.push(x)
				pending = append(pending, x)
				continue
			}
			// Pop: the smallest (t, seq) of what is pending.
			sort.SliceStable(pending, func(i, j int) bool { return pending[i].t < pending[j].t })
			want = append(want, pending[0])
			pending = pending[1:]
			got = append(got, h.pop())
		}
		sort.SliceStable(pending, func(i, j int) bool { return pending[i].t < pending[j].t })
		want = append(want, pending...)
		for len(h) > 0 {
			got = append(got, h.pop())
		}
		require.Equal(t, want, got, "round %d", round)
	}
}
