package report

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/unwinder"
)

// TestSpliceChain: the kernel's chain continues a truncated CFI walk only
// where the frame-pointer replay reproduced the chain up to a record beyond
// the snapshot whose return address word is the one the CFI walk needed.
func TestSpliceChain(t *testing.T) {
	user := []uint64{perfdata.ContextUser, 0x1000, 0x2000, 0x3000, 0x4000}
	fp := []unwinder.FPFrame{{PC: 0x1000}, {PC: 0x2000, Record: 0x7ff0}}
	walk := unwinder.FPResult{Frames: 2, Stop: unwinder.FPStopTruncated, Next: 0x9000}
	for _, c := range []struct {
		name   string
		user   []uint64
		fp     []unwinder.FPFrame
		res    unwinder.FPResult
		beyond uint64
		want   int
	}{
		// The chain's third frame was read at 0x9008, the word the CFI
		// walk needed: it is the last CFI frame's caller.
		{"continues", user, fp, walk, 0x9008, 3},
		// The CFI walk needed another word: the chain skipped frames or
		// belongs elsewhere.
		{"other_slot", user, fp, walk, 0x9018, -1},
		{"saved_frame_pointer_slot", user, fp, walk, 0x9000, -1},
		{"no_address", user, fp, walk, 0, -1},
		// The replay does not reproduce the chain: not this stack's.
		{"prefix_differs", []uint64{perfdata.ContextUser, 0x1000, 0x2222, 0x3000}, fp, walk, 0x9008, -1},
		// The kernel's chain ended where the replay did.
		{"chain_ends", []uint64{perfdata.ContextUser, 0x1000, 0x2000}, fp, walk, 0x9008, -1},
		{"no_chain", nil, fp, walk, 0x9008, -1},
		// The replay ended for a reason the kernel shares, or left the
		// captured memory below it: the chain's next frame is no record
		// beyond the snapshot.
		{"replay_ended", user, fp, unwinder.FPResult{Frames: 2, Stop: unwinder.FPStopEnd}, 0x9008, -1},
		{"replay_outside", user, fp, unwinder.FPResult{Frames: 2, Stop: unwinder.FPStopOutside, Next: 0x9000}, 0x9008, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, spliceChain(c.user, c.fp, c.res, c.beyond))
		})
	}
}

// TestSwitchChain: the kernel's chain continues a walk that stopped at a Go
// stack switch only where it holds every CFI frame, in order, none skipped,
// and goes on past them.
func TestSwitchChain(t *testing.T) {
	frames := []unwinder.Frame{{PC: 0x1000}, {PC: 0x2000}, {PC: 0x3000}}
	for _, c := range []struct {
		name string
		user []uint64
		want int
	}{
		{"continues", []uint64{perfdata.ContextUser, 0x1000, 0x2000, 0x3000, 0x4000, 0x5000}, 4},
		// A leaf without a frame record: the chain skipped 0x2000.
		{"skipped_frame", []uint64{perfdata.ContextUser, 0x1000, 0x3000, 0x4000}, -1},
		{"other_stack", []uint64{perfdata.ContextUser, 0x1000, 0x2000, 0x3333, 0x4000}, -1},
		// morestack clears the frame pointer: the chain ends at the switch.
		{"ends_there", []uint64{perfdata.ContextUser, 0x1000, 0x2000, 0x3000}, -1},
		{"no_chain", nil, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, switchChain(c.user, frames))
		})
	}
}
