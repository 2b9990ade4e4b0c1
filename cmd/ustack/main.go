package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
)

// glossaryURL is where the frame tags and stop reasons are explained
// (docs/GLOSSARY.md in the source tree).
const glossaryURL = "https://github.com/ustack/ustack/blob/main/docs/GLOSSARY.md"

const usage = `usage: ustack <command> [flags] [args]

commands:
  record   record user registers and stacks at kernel events: ustack record -e EVENT -- CMD
  report   unwind a recording or core dump; print it like perf script, JSON, flame graph, pprof
  minidump write a minidump of a core dump: ustack minidump -i CORE -o FILE.dmp
  archive  write a recording's objects in perf's build-id cache layout (for perf report)
  unwind   unwind test fixtures (testdata/fixtures/*.json), each frame tagged with how it was found
  help     show a command's flags: ustack help COMMAND
  version  print ustack's module version, VCS revision and Go version

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
	stdout, stderr = serialized(stdout), serialized(stderr)
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
	case "minidump":
		return cmdMinidump(args[1:], stdout, stderr)
	case "help":
		if len(args) > 2 {
			fmt.Fprintf(stderr, "ustack help: one command at a time, got %q\n", args[1:])
			return 2
		}
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
		if len(args) > 1 {
			fmt.Fprintf(stderr, "ustack version: takes no arguments, got %q\n", args[1:])
			return 2
		}
		fmt.Fprintln(stdout, version())
		return 0
	}
	fmt.Fprintf(stderr, "ustack: unknown command %q\n%s", args[0], usage)
	return 2
}

// commands are the subcommands "ustack help" knows.
var commands = map[string]bool{"record": true, "report": true, "unwind": true, "archive": true, "minidump": true}

// parseFlags parses a subcommand's flags the way every ustack command
// does: -h prints the command's help on stdout (exit 0); a flag error
// prints that one error, naming the flag as it was typed (--bogus, not
// -bogus), and where the help is, not the whole usage text (exit 2). ok
// is false when the caller must return code.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return 0, false
	case err != nil:
		fmt.Fprintf(stderr, "ustack %s: %s\nrun 'ustack %s -h' for its flags\n", fs.Name(), asTyped(err.Error(), args), fs.Name())
		return 2, false
	}
	fs.SetOutput(stderr)
	return 0, true
}

// flagInError finds the flag a flag package error names: "flag provided
// but not defined: -x", "invalid value "v" for flag -x: ...", "flag needs
// an argument: -x", "invalid boolean value "v" for -x: ...".
var flagInError = regexp.MustCompile(`(: | for flag | for )-([^\s:=]+)`)

// asTyped rewrites the flag a flag package error names (always with one
// dash) as the user typed it, with two dashes when args has it so.
func asTyped(msg string, args []string) string {
	m := flagInError.FindStringSubmatchIndex(msg)
	if m == nil {
		return msg
	}
	name := msg[m[4]:m[5]]
	for _, a := range args {
		if a == "--" {
			break
		}
		if n, _, _ := strings.Cut(a, "="); n == "--"+name {
			return msg[:m[4]-1] + "--" + msg[m[4]:]
		}
	}
	return msg
}

// alias defines --long as another name of the flag -short, as perf's
// long options (--event for -e); printFlags shows both on one line.
func alias(fs *flag.FlagSet, long, short string) {
	fs.Var(fs.Lookup(short).Value, long, aliasUsage+short)
}

const aliasUsage = "the same as -"

// printFlags is flag.PrintDefaults with each flag's aliases beside it
// ("-e, --event event"): each flag once, its placeholder (the backquoted
// word of its usage, else its type) and its default when not the zero
// value.
func printFlags(fs *flag.FlagSet) {
	longs := map[string][]string{}
	isAlias := func(f *flag.Flag) bool {
		short, ok := strings.CutPrefix(f.Usage, aliasUsage)
		return ok && fs.Lookup(short) != nil
	}
	fs.VisitAll(func(f *flag.Flag) {
		if isAlias(f) {
			short := strings.TrimPrefix(f.Usage, aliasUsage)
			longs[short] = append(longs[short], f.Name)
		}
	})
	w := fs.Output()
	fs.VisitAll(func(f *flag.Flag) {
		if isAlias(f) {
			return
		}
		var b strings.Builder
		fmt.Fprintf(&b, "  %s", dashed(f.Name))
		for _, l := range longs[f.Name] {
			fmt.Fprintf(&b, ", --%s", l)
		}
		name, usage := flag.UnquoteUsage(f)
		if name != "" {
			b.WriteString(" " + name)
		}
		b.WriteString("\n    \t")
		b.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
		if !isZeroDefault(f) {
			if fmt.Sprintf("%T", f.Value) == "*flag.stringValue" {
				fmt.Fprintf(&b, " (default %q)", f.DefValue)
			} else {
				fmt.Fprintf(&b, " (default %v)", f.DefValue)
			}
		}
		fmt.Fprintln(w, b.String())
	})
}

// dashed returns a flag's name as perf users type it: -e, --event. (Both
// forms parse.)
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// isZeroDefault reports whether f's default is its type's zero value, as
// the flag package decides which defaults to print.
func isZeroDefault(f *flag.Flag) (zero bool) {
	typ := reflect.TypeOf(f.Value)
	var z reflect.Value
	if typ.Kind() == reflect.Pointer {
		z = reflect.New(typ.Elem())
	} else {
		z = reflect.Zero(typ)
	}
	defer func() {
		if recover() != nil {
			zero = f.DefValue == ""
		}
	}()
	return f.DefValue == z.Interface().(flag.Value).String()
}

// version names this build: the module version, the VCS revision and the
// Go version Go recorded in the binary.
func version() string {
	v, rev, dirty, goVersion := "(devel)", "", "", runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
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
	return "ustack " + v + " " + goVersion
}

// serialized returns w, or, when it is not a file, w behind a lock: ustack
// writes its warnings from several goroutines (the recorder's, the OTLP
// agent's), and exec copies a recorded command's output into the same
// writers on goroutines of its own. A file takes concurrent writes; a
// buffer (the tests') does not (go test -race ./cmd/ustack:
// TestAgentBacklogDrops).
func serialized(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok || w == nil {
		return w
	}
	if _, ok := w.(*lockedWriter); ok {
		return w
	}
	return &lockedWriter{w: w}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
