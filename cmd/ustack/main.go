// Command ustack recovers complete user-space call stacks from captures taken
// at kernel events, by replaying DWARF CFI offline.
//
// Usage:
//
//	ustack record [flags] -- COMMAND ARGS   record stacks at kernel events
//	ustack report [flags] [FILE]             unwind and print a recording (default perf.data)
//	ustack unwind [-json] FIXTURE.json...   unwind bundled gdb-checked captures
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `usage: ustack <command> [flags] [args]

commands:
  record [-e EVENT] -- CMD  record user registers and stacks at kernel events
  report [FILE]            unwind and symbolize a recording (default perf.data),
                           print it like perf script (-F, --pid, --tid, --comms, --cpu, --time)
  unwind FIXTURE.json...   unwind captures in ustack's fixture format and print
                           each stack with how every frame was recovered

run 'ustack <command> -h' for a command's flags
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "unwind":
		return cmdUnwind(args[1:], stdout, stderr)
	case "record":
		return cmdRecord(args[1:], stdout, stderr)
	case "report":
		return cmdReport(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "ustack: unknown command %q\n%s", args[0], usage)
	return 2
}
