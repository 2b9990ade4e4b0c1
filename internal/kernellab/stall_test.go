package kernellab

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// TestWatchStall: a share written to keeps the boot going; once nothing
// in it changes for the stall time, watchStall says so (bounded wait).
func TestWatchStall(t *testing.T) {
	dir := t.TempDir()
	const d = 10 * time.Second
	var stalled atomic.Bool
	fired := make(chan struct{})
	stop := make(chan struct{})
	defer close(stop)
	go watchStall(dir, d, stop, func() { stalled.Store(true); close(fired) })
	// A guest at work: a file grows every 200 ms for one and a half
	// times the stall time (a busy machine may delay a write by seconds,
	// not by ten).
	f := filepath.Join(dir, "run.log")
	for i := 0; i < 75; i++ {
		b, _ := os.ReadFile(f)
		if err := os.WriteFile(f, append(b, '.'), 0o644); err != nil {
			t.Fatal(err)
		}
		if stalled.Load() {
			t.Fatalf("stalled after %d writes 200 ms apart", i)
		}
		time.Sleep(200 * time.Millisecond)
	}
	select {
	case <-fired:
	case <-time.After(time.Minute):
		t.Fatal("no stall a minute after the share stopped changing")
	}
}
