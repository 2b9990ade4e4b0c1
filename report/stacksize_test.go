package report

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/perfdata"
)

// TestStackSizeFix checks the summary's advice against hand-computed
// cases: the recorder's own option (ustack record writes a CMDLINE
// starting with ustack), twice the size recorded, the kernel's limit, and
// silence below 1% of stacks cut.
func TestStackSizeFix(t *testing.T) {
	attrs := []*perfdata.Attr{{SampleStackUser: 8192}}
	s := &Summary{Samples: 100, Stops: map[string]int{"truncated": 1, "outermost": 99}, SnapshotCut: 1, Attrs: attrs,
		Cmdline: []string{"/usr/local/bin/ustack", "record", "--", "./prog"}}
	require.Equal(t, "record more with ustack record --stack-size 16384 (this recording copied 8192 bytes)", s.StackSizeFix())
	var b strings.Builder
	s.WriteSummary(&b)
	require.Contains(t, b.String(), "ustack: 1 of 100 stacks were cut short by the size of the stack snapshot; record more with ustack record --stack-size 16384")

	s.Cmdline = []string{"/usr/bin/perf", "record", "--call-graph", "dwarf", "./prog"}
	require.Equal(t, "record more with perf record --call-graph dwarf,16384 (this recording copied 8192 bytes)", s.StackSizeFix())
	s.Attrs = []*perfdata.Attr{{SampleStackUser: 40000}}
	require.Contains(t, s.StackSizeFix(), "--call-graph dwarf,65528")
	s.Attrs = []*perfdata.Attr{{SampleStackUser: 65528}}
	require.Contains(t, s.StackSizeFix(), "already copied 65528 bytes, the kernel's limit")

	s.Samples = 101 // 1 of 101 is under 1%
	require.Empty(t, s.StackSizeFix())

	// A truncated stack whose snapshot the kernel copied short of the
	// size asked for (a page not in memory) is no reason to ask for more.
	s.Samples, s.SnapshotCut = 100, 0
	require.Empty(t, s.StackSizeFix())
}
