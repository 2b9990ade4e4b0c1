// The program of report's gogo test (goswitch_test.go): two goroutines
// hand a value to each other over unbuffered channels, so that the
// scheduler resumes one of them, through runtime.gogo, at every step. The
// test stops it in gdb at gogo's last instruction and dumps its core.
package main

import "os"

//go:noinline
func pong(in <-chan int, out chan<- int) {
	for v := range in {
		out <- v + 1
	}
}

//go:noinline
func ping(out chan<- int, in <-chan int) int {
	n := 0
	for i := 0; i < 1e8; i++ {
		out <- n
		n = <-in
	}
	return n
}

func main() {
	a, b := make(chan int), make(chan int)
	go pong(a, b)
	if ping(a, b) < 0 {
		os.Exit(1)
	}
}
