// The program of report's cgo mmap test (goswitch_test.go): a cgo
// program, whose runtime maps memory through C (runtime.callCgoMmap, which
// aligns SP before it calls x_cgo_mmap), grows its heap a megabyte at a
// time.
package main

// #include <stdlib.h>
import "C"

import "os"

var keep [][]byte

func main() {
	C.free(C.malloc(16))
	for i := 0; i < 400; i++ {
		keep = append(keep, make([]byte, 1<<20))
		if len(keep) > 40 {
			keep = keep[:0]
		}
	}
	os.Stdout.WriteString("done\n")
}
