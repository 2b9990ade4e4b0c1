package capture

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// ringWaiter waits for the ring buffers through Go's network poller: one
// goroutine per ring parks on a duplicate of the ring's fd until the kernel
// signals it (the wakeup watermark) and at least threshold bytes are
// pending, then reports the ring on wake and waits for the reader to drain
// it (rearm). Blocking in epoll_wait directly would keep the runtime's
// sysmon thread polling every 20µs for the whole recording (the blocked
// syscall holds a P): on a small machine that thread alone competed with
// the traced program for a sizeable share of the recorder's CPU time.
type ringWaiter struct {
	files  []*os.File
	rearm  []chan struct{}
	wake   chan int   // index of a ring that has data
	failed chan error // the poller cannot wait on a perf fd
	stop   chan struct{}
	wg     sync.WaitGroup
}

// pending returns the bytes the kernel wrote that were not read yet.
func (r *ring) pending() uint64 {
	return atomic.LoadUint64(&r.meta.Data_head) - atomic.LoadUint64(&r.meta.Data_tail)
}

func newRingWaiter(rings []*ring, threshold uint64) (*ringWaiter, error) {
	w := &ringWaiter{
		wake:   make(chan int, len(rings)),
		failed: make(chan error, 1),
		stop:   make(chan struct{}),
	}
	for _, rg := range rings {
		fd, err := unix.FcntlInt(uintptr(rg.fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			w.close()
			return nil, err
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
			w.close()
			return nil, err
		}
		w.files = append(w.files, os.NewFile(uintptr(fd), "perf-ring"))
		w.rearm = append(w.rearm, make(chan struct{}, 1))
	}
	for i, rg := range rings {
		rc, err := w.files[i].SyscallConn()
		if err != nil {
			w.close()
			return nil, err
		}
		w.wg.Add(1)
		go w.run(i, rg, rc.Read, threshold)
	}
	return w, nil
}

func (w *ringWaiter) run(i int, rg *ring, read func(func(uintptr) bool) error, threshold uint64) {
	defer w.wg.Done()
	for {
		// read calls the function, and again after each readiness
		// event, until it returns true; an event that arrives while the
		// function runs is not lost.
		err := read(func(uintptr) bool { return rg.pending() >= threshold })
		if err != nil {
			select {
			case <-w.stop:
			default:
				if !errors.Is(err, os.ErrClosed) {
					select {
					case w.failed <- err:
					default:
					}
				}
			}
			return
		}
		select {
		case w.wake <- i:
		case <-w.stop:
			return
		}
		select {
		case <-w.rearm[i]:
		case <-w.stop:
			return
		}
	}
}

// drained tells ring i's goroutine that its ring was read.
func (w *ringWaiter) drained(i int) {
	select {
	case w.rearm[i] <- struct{}{}:
	default:
	}
}

// close stops the goroutines and closes the duplicate fds.
func (w *ringWaiter) close() {
	if w == nil || w.stop == nil {
		return
	}
	close(w.stop)
	for _, f := range w.files {
		f.Close()
	}
	w.wg.Wait()
	w.files, w.stop = nil, nil
}
