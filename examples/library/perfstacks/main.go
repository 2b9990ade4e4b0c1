// Command perfstacks prints the user stack of every sample of a perf.data
// (perf record --call-graph dwarf), innermost first: perfstacks FILE [SYMFS].
package main

import (
	"fmt"
	"os"

	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/report"
)

func main() {
	r, err := perfdata.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer r.Close()
	opts := report.Options{}
	if len(os.Args) > 2 {
		opts.SymFS = os.Args[2]
	}
	sum, err := report.Run(r, opts, func(s *report.Sample) error {
		fmt.Printf("%s %d:", s.Comm, s.Pid)
		for _, f := range s.Frames {
			if !f.Kernel {
				fmt.Printf(" %s", f.Symbol)
			}
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
