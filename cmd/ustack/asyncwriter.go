package main

import (
	"io"
	"sync"
)

// asyncWriter hands what it is given to a goroutine of its own, which
// writes it to w in blocks of asyncBlock bytes: a report's emitter goes on
// formatting while a write waits on the page cache or on a pipe's reader,
// and the workers, whose queue to the emitter is short (report's ordered
// batches), do not wait for it in turn. A write error is returned by every
// Write after it is seen and by Close; what is given after it is dropped.
// Write and Close are for one goroutine.
type asyncWriter struct {
	w      io.Writer
	cur    []byte
	full   chan []byte // blocks to write, in order
	free   chan []byte // written blocks, for reuse
	done   chan struct{}
	closed bool
	mu     sync.Mutex
	err    error
}

const (
	asyncBlock  = 256 << 10
	asyncBlocks = 3 // in flight: being written, queued, being filled
)

func newAsyncWriter(w io.Writer) *asyncWriter {
	a := &asyncWriter{w: w, full: make(chan []byte, asyncBlocks), free: make(chan []byte, asyncBlocks), done: make(chan struct{})}
	for range asyncBlocks {
		a.free <- make([]byte, 0, asyncBlock)
	}
	a.cur = <-a.free
	go a.run()
	return a
}

func (a *asyncWriter) run() {
	defer close(a.done)
	for b := range a.full {
		if a.error() == nil {
			if _, err := a.w.Write(b); err != nil {
				a.mu.Lock()
				a.err = err
				a.mu.Unlock()
			}
		}
		a.free <- b[:0]
	}
}

func (a *asyncWriter) error() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Write copies p into the current block, handing on each block it fills.
func (a *asyncWriter) Write(p []byte) (int, error) {
	if err := a.error(); err != nil {
		return 0, err
	}
	n := len(p)
	for len(p) > 0 {
		k := copy(a.cur[len(a.cur):cap(a.cur)], p)
		a.cur = a.cur[:len(a.cur)+k]
		p = p[k:]
		if len(a.cur) == cap(a.cur) {
			a.full <- a.cur
			a.cur = <-a.free
		}
	}
	return n, nil
}

// Close hands on the last block, waits for every block to be written and
// returns the first write error. Closing again returns the same error.
func (a *asyncWriter) Close() error {
	if a.closed {
		return a.error()
	}
	a.closed = true
	if len(a.cur) > 0 {
		a.full <- a.cur
	}
	a.cur = nil
	close(a.full)
	<-a.done
	return a.error()
}
