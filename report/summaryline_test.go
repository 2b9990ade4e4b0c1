package report

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestSummaryLine checks the report's one-line summary against
// hand-written cases: all complete, early stops listed by name, samples
// without a user stack, one thread of a core, and silence without samples.
func TestSummaryLine(t *testing.T) {
	for _, c := range []struct {
		sum  Summary
		unit string
		want string
	}{
		{Summary{Samples: 4, Stops: map[string]int{"outermost": 4}}, "sample",
			"ustack: 4 samples, 4 unwound to the outermost frame\n"},
		{Summary{Samples: 24, Stops: map[string]int{"outermost": 11, "truncated": 12, "no_mapping": 1}}, "sample",
			"ustack: 24 samples, 11 of 24 unwound to the outermost frame, 13 stopped early (no_mapping 1, truncated 12)\n"},
		{Summary{Samples: 5, Stops: map[string]int{"loop": 2}}, "sample",
			"ustack: 5 samples, 0 of 2 unwound to the outermost frame, 2 stopped early (loop 2), 3 without a user stack to unwind\n"},
		{Summary{Samples: 4, Stops: map[string]int{"no_unwind_info": 4}}, "sample",
			"ustack: 4 samples, 0 of 4 unwound to the outermost frame, 4 stopped early (no_unwind_info 4)\n"},
		{Summary{Samples: 1, Stops: map[string]int{"outermost": 1}}, "thread",
			"ustack: 1 thread, 1 unwound to the outermost frame\n"},
		{Summary{Samples: 0, Filtered: 3}, "sample", ""},
	} {
		var b bytes.Buffer
		c.sum.core = c.unit == "thread"
		c.sum.WriteLine(&b)
		assert.Equal(t, c.want, b.String())
	}
}
