package main

import (
	"fmt"
	"io"
)

// cmdRecord is implemented by the capture work; until then it says so.
func cmdRecord(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "ustack record: not implemented yet")
	return 2
}
