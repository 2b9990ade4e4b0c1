package report

import (
	"github.com/ustack/ustack/minidump"
	"github.com/ustack/ustack/unwinder"
)

// WriteMinidump writes a minidump of the core c to path
// (minidump.WriteFile): besides each thread's stack from its stack
// pointer, it keeps the stack of every frame an unwind of the core's
// threads reaches outside it (the stack a signal handler on another stack
// interrupted, a Go program's goroutine stack under its g0 and gsignal
// stacks, a stack pointer in the guard page of an overflowed stack), so
// that the minidump's report is the core's.
func WriteMinidump(path string, c *Core, opts CoreOptions, w minidump.WriteOptions) (minidump.WriteStats, error) {
	opts.unwound = func(frames []unwinder.Frame) {
		for i := range frames {
			if i == 0 {
				continue // the thread's own stack pointer: Write keeps it
			}
			w.Stacks = append(w.Stacks, frames[i].SP)
		}
	}
	if _, err := RunCore(c, opts, func(*Sample) error { return nil }); err != nil {
		return minidump.WriteStats{}, err
	}
	return minidump.WriteFile(path, c.Core, w)
}
