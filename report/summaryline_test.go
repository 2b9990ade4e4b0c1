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
		// Stacks that reached the end through a frame-pointer guess
		// are neither complete nor stopped early.
		{Summary{Samples: 1, Stops: map[string]int{"fp_guess": 1}}, "thread",
			"ustack: 1 thread, 0 of 1 unwound to the outermost frame, 1 reached it only through a guess (fp_guess 1)\n"},
		{Summary{Samples: 10, Stops: map[string]int{"outermost": 6, "fp_guess": 2, "truncated": 1, "loop": 1}}, "sample",
			"ustack: 10 samples, 6 of 10 unwound to the outermost frame, 2 reached it only through a guess (fp_guess 2), 2 stopped early (loop 1, truncated 1)\n"},
		{Summary{Samples: 0, Filtered: 3}, "sample", ""},
	} {
		var b bytes.Buffer
		c.sum.core = c.unit == "thread"
		c.sum.WriteLine(&b)
		assert.Equal(t, c.want, b.String())
	}
}

// TestSummaryFPGuess: the summary explains fp_guess stacks once, and does
// not count them among the stacks that ended early.
func TestSummaryFPGuess(t *testing.T) {
	var b bytes.Buffer
	s := Summary{Samples: 10, Stops: map[string]int{"outermost": 1, "fp_guess": 9}}
	s.WriteSummary(&b)
	assert.Equal(t, "ustack: 9 of 10 stacks reached their outermost frame only through a guess (fp_guess): "+
		"a function without CFI was left by a frame pointer it is not shown to set up, by a return address whose call "+
		"is not shown to be to it, or by scanning the stack for a return address where its code is missing; its caller "+
		"may be missing, so these stacks are not called complete\n", b.String())
}

// TestSummaryStackSwitch: the summary says what stack_switch stacks miss,
// a recording's (the goroutine's stack, not captured) and a core's (no
// goroutine on the thread) apart.
func TestSummaryStackSwitch(t *testing.T) {
	var b bytes.Buffer
	s := Summary{Samples: 346, Stops: map[string]int{"outermost": 240, "stack_switch": 106}}
	s.WriteSummary(&b)
	assert.Equal(t, "ustack: 106 of 346 stacks ended early: stack_switch 106\n"+
		"ustack: 106 of 346 stacks ended where Go's runtime had switched their thread's stack (stack_switch): in "+
		"runtime.systemstack, morestack, asmcgocall and the vDSO calls (time.now, nanotime1) to its g0 stack, their goroutine's frames are on the stack it left, which the recording does not hold; "+
		"in gogo, back to a goroutine's stack, the goroutine's innermost frame is at the PC the runtime saved in its memory, which the recording does not hold either\n", b.String())
	b.Reset()
	s = Summary{Samples: 6, Stops: map[string]int{"outermost": 5, "stack_switch": 1}, core: true}
	s.WriteSummary(&b)
	assert.Equal(t, "ustack: 1 of 6 stacks ended early: stack_switch 1\n"+
		"ustack: 1 of 6 stacks ended where Go's runtime had switched their thread to its g0 stack (stack_switch) and the thread runs no goroutine "+
		"to go on with (one preempted in runtime.morestack and descheduled); --goroutines shows every goroutine's own stack\n", b.String())
}
