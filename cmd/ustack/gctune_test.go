package main

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// gcPercent reads the collector's GOGC setting.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// TestLowerGCPercentAbove checks that the collector's setting stays until a
// collection finds more live heap than the threshold, and changes then.
func TestLowerGCPercentAbove(t *testing.T) {
	defer debug.SetGCPercent(gcPercent())
	debug.SetGCPercent(100)
	lowerGCPercentAbove(1<<40, 37) // a live heap no test has
	for i := 0; i < 5; i++ {
		runtime.GC()
		runtime.GC() // the finalizer of the first cycle has run by the second's end, or is queued
	}
	if p := gcPercent(); p != 100 {
		t.Fatalf("GOGC %d with a live heap under the threshold, want 100", p)
	}
	keep := make([]byte, 8<<20)
	lowerGCPercentAbove(4<<20, 37)
	for i := 0; i < 1000 && gcPercent() != 37; i++ {
		runtime.GC() // a cycle, then its finalizers run in their own goroutine
		runtime.Gosched()
	}
	runtime.KeepAlive(keep)
	if p := gcPercent(); p != 37 {
		t.Fatalf("GOGC %d after collections found %d MB live, want 37", p, len(keep)>>20)
	}
}
