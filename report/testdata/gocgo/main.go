// The program of report's cgo stack-switch test (goswitch_test.go): a
// goroutine calls a C function that never returns, which runs on its
// thread's g0 stack (runtime.asmcgocall); once it has started, main waits
// and panics. Run with GOTRACEBACK=crash, the core holds the thread in
// the C function whose goroutine (main.callC, runtime.cgocall) is on the
// stack the switch left.
package main

/*
#include <unistd.h>
static void csleep(void) { for (;;) pause(); }
*/
import "C"

import "time"

//go:noinline
func callC(started chan bool) {
	started <- true
	C.csleep()
}

func main() {
	started := make(chan bool)
	go callC(started)
	<-started
	time.Sleep(200 * time.Millisecond)
	panic("crash for the cgo stack-switch test")
}
