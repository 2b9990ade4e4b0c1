// Command corestacks prints the stack of every thread of a core dump (ELF
// core or minidump, plain or compressed), innermost first: corestacks CORE.
package main

import (
	"fmt"
	"os"

	"github.com/ustack/ustack/report"
)

func main() {
	opts := report.CoreOptions{}
	c, err := report.OpenCore(os.Args[1], opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()
	sum, err := report.RunCore(c, opts, func(s *report.Sample) error {
		fmt.Printf("%d:", s.Tid)
		for _, f := range s.Frames {
			fmt.Printf(" %s", f.Symbol)
		}
		fmt.Println()
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sum.WriteSummary(os.Stderr)
	sum.WriteLine(os.Stderr)
}
