package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
)

// Temporary directories a command makes (the unpacked perf archive tarball
// of ustack report, tens of megabytes) are removed on every way out: when
// the command returns, and when a signal ends it. While one exists, SIGINT,
// SIGTERM and SIGHUP remove them all and then end the process by the same
// signal, as if it had not been caught; and SIGPIPE, whose default would
// kill the process at its first write to a closed standard output
// (ustack report | head), instead makes that write fail, so that the
// command returns through its deferred removals and then ends by SIGPIPE
// (dieOfBrokenPipe).

// temps holds the live temporary directories and the signal handler that
// guards them.
var temps struct {
	mu   sync.Mutex
	dirs map[string]*os.File // each directory, held open (see tempDir)
	sigs chan os.Signal
}

// cleanupSignals are the signals that end a command and so remove its
// temporary directories first.
var cleanupSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE}

// tempDir is a temporary directory made by makeTempDir.
type tempDir struct {
	// Path is the directory's name, to read from.
	Path string
	// Root is where to write into it: the directory through the file
	// descriptor held open on it (/proc/self/fd/N) where /proc is
	// mounted, else Path. A signal may remove the directory while a
	// write is under way in another goroutine; through the descriptor,
	// a write after the removal fails instead of making the directory
	// again (as os.MkdirAll on Path would).
	Root string
	f    *os.File
}

// makeTempDir makes a directory like os.MkdirTemp("", pattern) that is
// removed by Remove or by a terminating signal, whichever comes first.
func makeTempDir(pattern string) (*tempDir, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	d := &tempDir{Path: dir, Root: dir, f: f}
	if p := fmt.Sprintf("/proc/self/fd/%d", f.Fd()); isDir(p) {
		d.Root = p
	}
	temps.mu.Lock()
	defer temps.mu.Unlock()
	if temps.dirs == nil {
		temps.dirs = map[string]*os.File{}
		temps.sigs = make(chan os.Signal, len(cleanupSignals))
		for _, sig := range cleanupSignals {
			// A signal ignored from the start (nohup's SIGHUP, a
			// background job's SIGINT) stays ignored.
			if !signal.Ignored(sig) {
				signal.Notify(temps.sigs, sig)
			}
		}
		go handleSignals(temps.sigs)
	}
	temps.dirs[dir] = f
	return d, nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// Remove removes the directory and everything in it. When it was the last
// temporary directory, signals have their default effect again.
func (d *tempDir) Remove() {
	temps.mu.Lock()
	defer temps.mu.Unlock()
	if _, ok := temps.dirs[d.Path]; !ok {
		return
	}
	delete(temps.dirs, d.Path)
	os.RemoveAll(d.Path)
	d.f.Close()
	if len(temps.dirs) == 0 {
		// A signal already taken ends the process all the same, by
		// the handler, which drains the channel.
		signal.Stop(temps.sigs)
		close(temps.sigs)
		temps.dirs, temps.sigs = nil, nil
	}
}

// handleSignals removes every temporary directory on a terminating signal
// and then ends the process by that signal. SIGPIPE is only taken from the
// default: the write that met the closed pipe fails with EPIPE, and the
// command returns (see dieOfBrokenPipe).
func handleSignals(sigs chan os.Signal) {
	for sig := range sigs {
		if sig == syscall.SIGPIPE {
			continue
		}
		temps.mu.Lock() // held until the end: nothing is made or removed after this
		for dir := range temps.dirs {
			os.RemoveAll(dir)
		}
		signal.Reset(sig)
		s := sig.(syscall.Signal)
		// Sent to this very thread, the signal is taken as tgkill
		// returns (sent to the process, another thread could take it
		// after os.Exit had won the race).
		runtime.LockOSThread()
		syscall.Tgkill(os.Getpid(), syscall.Gettid(), s)
		// Should it survive, the status a shell gives such a death.
		os.Exit(128 + int(s))
	}
}

// exitBrokenPipe is the status of a command whose standard output was
// closed by its reader; main ends the process by SIGPIPE instead of exiting.
const exitBrokenPipe = 128 + int(syscall.SIGPIPE)

// isBrokenPipe reports whether err is a write to a standard output that
// is a pipe nobody reads any more.
func isBrokenPipe(err error) bool {
	var pe *fs.PathError
	return errors.Is(err, syscall.EPIPE) && errors.As(err, &pe) && pe.Path == os.Stdout.Name()
}

// dieOfBrokenPipe ends the process as a write to a closed standard output
// ends a Go program by default, by SIGPIPE, so that a shell pipeline sees
// what it sees of any other program whose reader went away; it exits with
// exitBrokenPipe should the process survive.
func dieOfBrokenPipe() {
	signal.Reset(syscall.SIGPIPE)
	// The Go runtime ignores a SIGPIPE sent by kill; a write to the
	// closed standard output raises the one it does not.
	os.Stdout.Write([]byte{'\n'})
	os.Exit(exitBrokenPipe)
}
