package main

import (
	"math"
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

// TestTuneGC checks the collector's settings through a report's life: off
// under a memory limit of the starting heap until the first collection, the
// process's own then (until a collection finds more live heap than the
// threshold), and the lowered GOGC after that.
func TestTuneGC(t *testing.T) {
	gogc, limit := gcPercent(), debug.SetMemoryLimit(-1)
	defer func() {
		debug.SetGCPercent(gogc)
		debug.SetMemoryLimit(limit)
	}()
	debug.SetGCPercent(100)
	debug.SetMemoryLimit(math.MaxInt64)

	tuneGC(64<<20, 1<<40, 37) // a live heap no test has
	if p, l := gcPercent(), debug.SetMemoryLimit(-1); p != -1 || l != 64<<20 {
		t.Fatalf("before the first collection: GOGC %d, memory limit %d; want off, %d", p, l, 64<<20)
	}
	// The first collection's finalizer runs by the second's end, or is
	// queued; the loop gives it time.
	for i := 0; i < 1000 && gcPercent() != 100; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	for i := 0; i < 5; i++ {
		runtime.GC()
		runtime.GC()
	}
	if p, l := gcPercent(), debug.SetMemoryLimit(-1); p != 100 || l != math.MaxInt64 {
		t.Fatalf("after collections with a live heap under the threshold: GOGC %d, memory limit %d; want 100, none", p, l)
	}

	keep := make([]byte, 8<<20)
	tuneGC(64<<20, 4<<20, 37)
	for i := 0; i < 1000 && gcPercent() != 37; i++ {
		runtime.GC() // a cycle, then its finalizers run in their own goroutine
		runtime.Gosched()
	}
	runtime.KeepAlive(keep)
	if p, l := gcPercent(), debug.SetMemoryLimit(-1); p != 37 || l != math.MaxInt64 {
		t.Fatalf("after collections found %d MB live: GOGC %d, memory limit %d; want 37, none", len(keep)>>20, p, l)
	}
}
