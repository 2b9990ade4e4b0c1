// The program of report's race detector test (goswitch_test.go): built
// with -race, every memory access of work calls into the race detector's C
// runtime through runtime.racecall's racecall<>, which moves SP to the
// thread's g0 stack, aligned.
package main

import "os"

var x [64]int

//go:noinline
func work(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		x[i%64] += i
		s += x[(i*7)%64]
	}
	return s
}

func main() {
	t := 0
	for i := 0; i < 6000; i++ {
		t += work(10000)
	}
	if t == 42 {
		os.Exit(1)
	}
}
