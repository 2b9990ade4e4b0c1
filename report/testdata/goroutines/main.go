// The program of report's goroutine tests (goroutines_test.go): it starts
// goroutines blocked in every way a Go server's are (channel receive and
// send, a sync.Mutex, time.Sleep, reads of TCP connections on 127.0.0.1,
// runtime.Gosched, a read(2) of a pipe, a wait inlined into its caller,
// goroutines that never ran) and panics; run with
// GOTRACEBACK=crash and GOMAXPROCS=1, the runtime prints every goroutine
// and dumps core with all of them where they were printed.
//
// Usage: goroutines N [nonet]: N rounds of goroutines (7 each, 8 with the
// network), nonet leaves out the connections (for 10,000 goroutines
// without 2,000 sockets).
package main

import (
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)

//go:noinline
func recvLoop(ch chan int) int {
	s := 0
	for v := range ch {
		s += v
	}
	return s
}

//go:noinline
func sendOne(ch chan int, v int) { ch <- v }

//go:noinline
func lockWait(mu *sync.Mutex, wg *sync.WaitGroup) {
	wg.Done()
	mu.Lock()
	mu.Unlock()
}

//go:noinline
func sleeper(d time.Duration) { time.Sleep(d) }

//go:noinline
func reader(c net.Conn) {
	var b [16]byte
	c.Read(b[:])
}

//go:noinline
func yielder(stop *int32) {
	for *stop == 0 {
		runtime.Gosched()
	}
}

// blockedRead reads a pipe with a plain read(2), not the netpoller: the
// goroutine stays in the system call, on a thread of its own.
//
//go:noinline
func blockedRead(fd int) {
	var b [1]byte
	syscall.Read(fd, b[:])
}

// inlinedWait is inlined into outerWait: its frame is an inline frame.
func inlinedWait(ch chan int) { <-ch }

//go:noinline
func outerWait(ch chan int) { inlinedWait(ch) }

// neverRan is started just before the panic: with one processor it never
// runs, and waits runnable at its entry.
//
//go:noinline
func neverRan(ch chan int) { <-ch }

type server struct{ mu sync.Mutex }

//go:noinline
func (s *server) serve(wg *sync.WaitGroup) {
	wg.Done()
	s.mu.Lock()
}

func main() {
	n := 20
	if len(os.Args) > 1 {
		n, _ = strconv.Atoi(os.Args[1])
	}
	network := len(os.Args) < 3 || os.Args[2] != "nonet"
	ch := make(chan int)
	full := make(chan int)
	var mu sync.Mutex
	var wg sync.WaitGroup
	mu.Lock()
	srv := &server{}
	srv.mu.Lock()
	var ln net.Listener
	if network {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			panic(err)
		}
	}
	var stop int32
	var fds [2]int
	if err := syscall.Pipe(fds[:]); err != nil {
		panic(err)
	}
	go blockedRead(fds[0])
	for i := 0; i < n; i++ {
		go recvLoop(ch)
		go sendOne(full, i)
		wg.Add(2)
		go lockWait(&mu, &wg)
		go srv.serve(&wg)
		go sleeper(time.Hour)
		go outerWait(ch)
		if network {
			go func() {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					panic(err)
				}
				reader(c)
			}()
			s, err := ln.Accept()
			if err != nil {
				panic(err)
			}
			go reader(s)
		}
		if i%10 == 0 {
			go yielder(&stop)
		}
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond)
	for i := 0; i < 3; i++ {
		go neverRan(ch)
	}
	panic("crash for the goroutine test")
}
