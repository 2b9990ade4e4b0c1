package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/ustack/ustack/archive"
	"github.com/ustack/ustack/perfdata"
)

// cmdArchive hands a ustack recording's objects to perf: it writes them in
// perf's build-id cache layout, as a tarball like perf archive's or into a
// cache directory, so that perf report on another machine finds them.
func cmdArchive(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("archive", flag.ContinueOnError)
	input := fs.String("i", "perf.data", "the recording `file` (its archive is FILE.ustack); also given as the argument")
	alias(fs, "input", "i")
	output := fs.String("o", "", "write a tarball in perf archive's layout to `file` (default INPUT.tar.gz); unpack it with 'tar xf FILE -C ~/.debug'")
	alias(fs, "output", "o")
	cacheDir := fs.String("buildid-dir", "", "write into this perf build-id cache `dir` instead of a tarball (perf's default is ~/.debug)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: ustack archive [flags] [FILE]\n\nWrites the objects, debug files, vdso and kallsyms that ustack record archived with\na recording into perf's build-id cache layout, so that perf report finds them.\n"+
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
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "ustack archive: "+format+"\n", a...)
		return 1
	}
	kernelID, err := kernelBuildID(in)
	if err != nil {
		return fail("%v", err)
	}
	a, err := archive.Open(in+".ustack", archive.Options{})
	if err != nil {
		return fail("%v (ustack archive needs the archive ustack record writes beside the recording)", err)
	}
	defer a.Close()
	for _, d := range a.Damage() {
		fmt.Fprintf(stderr, "ustack archive: warning: %v\n", d)
	}
	if *cacheDir != "" {
		n, err := a.ExportPerfCache(*cacheDir, kernelID)
		if err != nil {
			return fail("%s: %v", *cacheDir, err)
		}
		fmt.Fprintf(stderr, "[ ustack archive: %d files written into %s ]\n", n, *cacheDir)
		return 0
	}
	out := *output
	if out == "" {
		out = in + ".tar.gz"
	}
	f, err := createKeepingOld(out, 0o600)
	if err != nil {
		return fail("%v", err)
	}
	if err := a.WritePerfTarball(f, kernelID); err != nil {
		f.Close()
		return fail("%s: %v", out, err)
	}
	if err := f.Close(); err != nil {
		return fail("%s: %v", out, err)
	}
	fmt.Fprintf(stderr, "[ ustack archive: wrote %s ]\nNow run 'tar xf %s -C ~/.debug' wherever you run perf report.\n", out, out)
	return 0
}

// kernelBuildID returns the recording's [kernel.kallsyms] build-id (nil
// when it has none).
func kernelBuildID(path string) ([]byte, error) {
	r, err := perfdata.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	for _, b := range r.Session().Features.BuildIDs {
		if b.Misc&perfdata.MiscCPUModeMask == perfdata.MiscKernel && b.Filename == "[kernel.kallsyms]" {
			return b.BuildID, nil
		}
	}
	return nil, nil
}
