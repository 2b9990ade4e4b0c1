// main.main -> main.a -> main.b -> main.c -> syscall.Syscall(SYS_GETPID).
package main

import "syscall"

var sink uintptr

//go:noinline
func c(x uintptr) uintptr {
	r, _, _ := syscall.Syscall(syscall.SYS_GETPID, 0, 0, 0)
	sink = r
	return r + x
}

//go:noinline
func b(x uintptr) uintptr { r := c(x + 1); sink = r; return r * 3 }

//go:noinline
func a(x uintptr) uintptr { r := b(x + 2); sink = r; return r - 5 }

func main() {
	sink = a(7)
}
