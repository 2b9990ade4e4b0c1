package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/ustack/ustack/minidump"
	"github.com/ustack/ustack/report"
)

// cmdMinidump writes a minidump of a core dump (minidump.WriteFile).
func cmdMinidump(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("minidump", flag.ContinueOnError)
	input := fs.String("i", "", "the core dump `file` (ELF core, also zstd, xz or lz4 compressed or in an apport .crash report; - reads standard input, as from coredumpctl dump); also given as the argument")
	alias(fs, "input", "i")
	output := fs.String("o", "", "write the minidump to `file` (created 0600; an existing one is kept as FILE.old)")
	alias(fs, "output", "o")
	stackSize := fs.Uint64("stack-size", minidump.DefaultStackSize, "keep at most `bytes` of each thread's stack, from its stack pointer up")
	environ := fs.Bool("environ", false, "keep the process's environment (left out by default: it holds secrets)")
	symfs := fs.String("symfs", "", "look for the mapped files under `dir` (for program text the core did not dump)")
	exe := fs.String("exe", "", "the main executable `file`, instead of the path the core records")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: ustack minidump -i CORE -o FILE.dmp [flags]\n\n"+
			"Writes a minidump (as Breakpad and Crashpad write them) of a core dump: each thread's registers\n"+
			"and stack, the memory around each thread's program counter, the vdso, the modules with their\n"+
			"build-ids and paths, the signal, and the Linux streams (maps, auxv, cmdline, status).\n"+
			"ustack report -i FILE.dmp reads it back; so do lldb and minidump-stackwalk.\n"+
			"Exit status: 0 ok, 1 error, 2 usage.\n\nflags:\n")
		printFlags(fs)
	}
	in, code, ok := parseInputArgs(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if in == "" {
		in = *input
	}
	switch {
	case in == "":
		fmt.Fprintf(stderr, "ustack minidump: no core dump: give it with -i CORE (or - for standard input)\n")
		return exitUsage
	case *output == "":
		fmt.Fprintf(stderr, "ustack minidump: no output: give the minidump's name with -o FILE.dmp\n")
		return exitUsage
	case *stackSize == 0:
		fmt.Fprintf(stderr, "ustack minidump: --stack-size 0 keeps no stack: give a size in bytes\n")
		return exitUsage
	}
	copts := report.CoreOptions{Options: report.Options{SymFS: *symfs}, Exe: *exe}
	var c *report.Core
	var err error
	if in == "-" {
		c, err = report.OpenCoreReader(standardInput(), "standard input", copts)
	} else if f, ok, serr := streamInput(in); serr != nil {
		err = serr
	} else if ok {
		defer f.Close()
		c, err = report.OpenCoreReader(f, in, copts)
	} else {
		c, err = report.OpenCore(in, copts)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ustack minidump: %v\n", err)
		return exitError
	}
	defer c.Close()
	for _, w := range c.Warnings {
		fmt.Fprintf(stderr, "ustack: warning: %v\n", w)
	}
	st, err := report.WriteMinidump(*output, c, copts, minidump.WriteOptions{StackSize: *stackSize, Environ: *environ})
	if err != nil {
		fmt.Fprintf(stderr, "ustack minidump: %v\n", err)
		return exitError
	}
	short := ""
	if st.StackShort > 0 {
		short = fmt.Sprintf(", %d of them shorter than --stack-size where the core's memory ends", st.StackShort)
	}
	fmt.Fprintf(stderr, "[ ustack minidump: %s: %d threads%s, %d modules, %d bytes of memory in %d ranges, %d bytes ]\n",
		*output, st.Threads, short, st.Modules, st.MemoryBytes, st.Ranges, st.Size)
	return exitOK
}
