package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
)

// glossaryURL is where the frame tags and stop reasons are explained
// (docs/GLOSSARY.md in the source tree).
const glossaryURL = "https://github.com/ustack/ustack/blob/main/docs/GLOSSARY.md"

const usage = `usage: ustack <command> [flags] [args]

commands:
  record   record user registers and stacks at kernel events: ustack record -e EVENT -- CMD
  report   unwind a recording or core dump; print it like perf script, JSON, flame graph, pprof
  archive  write a recording's objects in perf's build-id cache layout (for perf report)
  unwind   unwind test fixtures (testdata/fixtures/*.json), each frame tagged with how it was found
  help     show a command's flags: ustack help COMMAND
  version  print ustack's version

Run 'ustack help COMMAND' (or 'ustack COMMAND -h') for a command's flags.
Frame tags ([context], [cfi], [fp], [signal], ...), the JSON's "how" and "stop"
values: docs/GLOSSARY.md, ` + glossaryURL + `
`

func main() {
	code := run(os.Args[1:], os.Stdout, os.Stderr)
	if code == exitBrokenPipe {
		dieOfBrokenPipe()
	}
	os.Exit(code)
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
	case "archive":
		return cmdArchive(args[1:], stdout, stderr)
	case "report":
		return cmdReport(args[1:], stdout, stderr)
	case "help":
		if len(args) > 1 {
			if _, ok := commands[args[1]]; ok {
				return run([]string{args[1], "-h"}, stdout, stderr)
			}
			fmt.Fprintf(stderr, "ustack help: unknown command %q\n%s", args[1], usage)
			return 2
		}
		fmt.Fprint(stdout, usage)
		return 0
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, version())
		return 0
	}
	fmt.Fprintf(stderr, "ustack: unknown command %q\n%s", args[0], usage)
	return 2
}

// commands are the subcommands "ustack help" knows.
var commands = map[string]bool{"record": true, "report": true, "unwind": true, "archive": true}

// parseFlags parses a subcommand's flags the way every ustack command
// does: -h prints the command's help on stdout (exit 0); a flag error
// prints that one error and where the help is, not the whole usage text
// (exit 2). ok is false when the caller must return code.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return 0, false
	case err != nil:
		fmt.Fprintf(stderr, "ustack %s: %v\nrun 'ustack %s -h' for its flags\n", fs.Name(), err, fs.Name())
		return 2, false
	}
	fs.SetOutput(stderr)
	return 0, true
}

// version names this build: the module version and the VCS revision Go
// recorded in the binary.
func version() string {
	v, rev, dirty := "(devel)", "", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "+dirty"
				}
			}
		}
	}
	if rev != "" {
		v += " " + rev + dirty
	}
	return "ustack " + v
}
