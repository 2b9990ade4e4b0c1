package main

import (
	"fmt"
	"io"
)

func cmdReport(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "ustack report: not implemented yet")
	return 2
}
