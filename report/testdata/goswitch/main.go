// The program of report's stack-switch test (goswitch_test.go): one
// goroutine spins without a call, so that it cannot be preempted with
// GODEBUG=asyncpreemptoff=1; another calls runtime.ReadMemStats, whose
// stop of the world waits for the spinner on its thread's g0 stack, inside
// runtime.systemstack, for good. It prints "stopping" first; the test then
// sends SIGABRT. Run with GOTRACEBACK=crash and GOMAXPROCS=3, the core
// holds a thread in runtime.systemstack whose goroutine (in readStats) is on
// the stack the switch left.
package main

import (
	"os"
	"runtime"
	"time"
)

var sink int

//go:noinline
func spin() {
	s := 0
	for i := 0; ; i++ {
		s += i ^ (s >> 3)
		if s == -1 {
			break
		}
	}
	sink = s
}

//go:noinline
func readStats() {
	var st runtime.MemStats
	runtime.ReadMemStats(&st)
}

func main() {
	running := make(chan bool)
	go func() {
		running <- true
		spin()
	}()
	<-running
	time.Sleep(20 * time.Millisecond)
	os.Stdout.WriteString("stopping\n")
	readStats()
	println("the spinner was preempted: no stop of the world waited for it")
	os.Exit(3)
}
