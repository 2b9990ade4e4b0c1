package main

import (
	"fmt"
	"io"
	"sync"

	"github.com/ustack/ustack/debuginfod"
)

// newDebuginfod returns ustack report's debuginfod client: the servers of
// DEBUGINFOD_URLS (none when it is unset or empty: nothing is fetched, but
// the files elfutils' client cache already holds are used), warnings
// through warn, and downloads shown on line (nil for none).
func newDebuginfod(warn func(string), line *fetchLine) *debuginfod.Client {
	opts := debuginfod.Options{Warn: warn}
	if line != nil {
		opts.Progress = line.update
	}
	return debuginfod.New(opts)
}

// fetchLine draws "debuginfod: 2 of 5 files fetched" on one terminal line
// while downloads run, and clears it when they are done. Warnings printed
// through around never land inside the line.
type fetchLine struct {
	mu    sync.Mutex
	w     io.Writer
	drawn bool
}

// newFetchLine returns the line on w, or nil (which draws nothing) when
// show is false: stderr is no terminal, or the report goes to it.
func newFetchLine(w io.Writer, show bool) *fetchLine {
	if !show {
		return nil
	}
	return &fetchLine{w: w}
}

// update is the client's Progress function.
func (l *fetchLine) update(started, finished int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if finished >= started {
		l.clearLocked()
		return
	}
	fmt.Fprintf(l.w, "\r\033[Kdebuginfod: %d of %d files fetched", finished, started)
	l.drawn = true
}

// around returns warn made to clear the line before it prints.
func (l *fetchLine) around(warn func(string)) func(string) {
	if l == nil {
		return warn
	}
	return func(msg string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.clearLocked()
		warn(msg)
	}
}

// finish clears the line. It does nothing on a nil line.
func (l *fetchLine) finish() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.clearLocked()
}

func (l *fetchLine) clearLocked() {
	if l.drawn {
		fmt.Fprint(l.w, "\r\033[K")
		l.drawn = false
	}
}
