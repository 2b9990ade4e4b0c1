package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/ustack/ustack/archive"
	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/report"
	"golang.org/x/term"
)

// Exit statuses of ustack report.
const (
	exitOK      = 0
	exitError   = 1
	exitUsage   = 2
	exitPartial = 3 // the recording was damaged; every intact sample was reported
)

func cmdReport(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	input := fs.String("i", "perf.data", "input `file` (perf.data from perf record --call-graph dwarf or ustack record; - for a pipe)")
	output := fs.String("o", "", "write the report to `file` instead of standard output")
	format := fs.String("format", "text", "output format: text (like perf script), json, folded, pprof, flamegraph (interactive SVG), speedscope")
	symfs := fs.String("symfs", "", "look for objects under `dir`, like perf's --symfs")
	kall := fs.String("kallsyms", "", "kernel symbol `file` (default /proc/kallsyms; - for none)")
	debugDir := fs.String("debug-dir", "", "colon-separated directories searched for separate debug files (default /usr/lib/debug)")
	buildIDDir := fs.String("buildid-dir", "", "perf's build-id cache `dir` (default ~/.debug)")
	noInline := fs.Bool("no-inline", false, "do not show inlined functions")
	noDemangle := fs.Bool("no-demangle", false, "do not demangle C++ and Rust names")
	srcline := fs.Bool("srcline", false, "text format: print each frame's source file and line, like perf script -F +srcline")
	jobs := fs.Int("j", 0, "unwinding workers (default: one per CPU)")
	pacMask := fs.String("pac-mask", "", "arm64 pointer authentication `mask` (hex), or va:BITS (default va:48)")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of ustack itself to `file`")
	title := fs.String("title", "", "flamegraph, speedscope: the picture's `title`")
	inverted := fs.Bool("inverted", false, "flamegraph: an icicle graph (callers on top)")
	width := fs.Int("width", 0, "flamegraph: width in `pixels` (default 1200)")
	minWidth := fs.Float64("minwidth", 0, "flamegraph: leave out boxes narrower than `pixels` (default 0.1)")
	groupBy := fs.String("group-by", "", "flamegraph: the boxes under \"all\": comm (default), process (comm-PID), thread (comm-PID/TID) or none")
	perfArchive := fs.String("perf-archive", "", "a tarball from perf archive (default: INPUT.tar.bz2 or INPUT.tar.gz when it exists; - for none): its objects are used like perf's build-id cache")
	archiveFile := fs.String("archive", "", "objects archive `file` written by ustack record (default: INPUT.ustack when it exists; - for none)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: ustack report [flags]\n\nUnwinds and symbolizes every sample of a recording and prints its stack.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	opts := report.Options{SymFS: *symfs, Kallsyms: *kall, BuildIDDir: *buildIDDir,
		NoInline: *noInline, NoDemangle: *noDemangle, Jobs: *jobs,
		Warn: func(msg string) { fmt.Fprintf(stderr, "ustack: warning: %s\n", msg) }}
	if *debugDir != "" {
		opts.DebugDirs = strings.Split(*debugDir, ":")
	}
	if *pacMask != "" {
		m, err := parsePACMask(*pacMask)
		if err != nil {
			fmt.Fprintf(stderr, "ustack report: %v\n", err)
			return exitUsage
		}
		opts.PACMask = m
	}

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "ustack report: %v\n", err)
			return exitError
		}
		defer f.Close()
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	var r *perfdata.Reader
	var err error
	if *input == "-" {
		r, err = perfdata.NewReader(os.Stdin)
	} else {
		r, err = perfdata.Open(*input)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ustack report: %v\n", err)
		return exitError
	}
	defer r.Close()

	// A recording made by ustack record carries its objects, the vdso and
	// kallsyms in <input>.ustack: use them, so the report works on a
	// machine that has none of the binaries.
	archivePath := *archiveFile
	if archivePath == "" && *input != "-" {
		if _, err := os.Stat(*input + ".ustack"); err == nil {
			archivePath = *input + ".ustack"
		}
	}
	if archivePath != "" && archivePath != "-" {
		// A damaged archive costs only the members it damaged: each damage
		// is a warning, and the report goes on with what survived.
		a, err := archive.Open(archivePath, archive.Options{Warn: func(err error) { opts.Warn(err.Error()) }})
		switch {
		case errors.Is(err, os.ErrNotExist):
			fmt.Fprintf(stderr, "ustack report: --archive %s: no such file\n", archivePath)
			return exitError
		case err != nil:
			opts.Warn(fmt.Sprintf("%v; reporting without it", err))
		default:
			defer a.Close()
			opts.Objects = a
			opts.DebugData = a.DebugFile
			if k := a.Kallsyms(); k != nil && *kall == "" {
				opts.KallsymsData = k
			}
		}
	}

	// A perf recording's objects may come in perf archive's tarball: unpack
	// it into a private directory that serves as a further build-id cache.
	tarball := *perfArchive
	if tarball == "" && *input != "-" {
		for _, ext := range []string{".tar.bz2", ".tar.gz"} {
			if _, err := os.Stat(*input + ext); err == nil {
				tarball = *input + ext
				break
			}
		}
	}
	if tarball != "" && tarball != "-" {
		dir, err := os.MkdirTemp("", "ustack-perf-archive-")
		if err != nil {
			fmt.Fprintf(stderr, "ustack report: %v\n", err)
			return exitError
		}
		defer os.RemoveAll(dir)
		n, err := archive.ExtractPerfTarball(tarball, dir, 0)
		switch {
		case errors.Is(err, os.ErrNotExist):
			fmt.Fprintf(stderr, "ustack report: --perf-archive %s: no such file\n", tarball)
			return exitError
		case err != nil:
			opts.Warn(fmt.Sprintf("%v; using the %d files before the damage", err, n))
		}
		opts.MoreBuildIDDirs = append(opts.MoreBuildIDDirs, dir)
	}

	out := stdout
	if *output != "" {
		f, err := os.OpenFile(*output, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			fmt.Fprintf(stderr, "ustack report: %v\n", err)
			return exitError
		}
		defer f.Close()
		out = f
	}

	var names []string
	for _, a := range r.Session().Attrs {
		names = append(names, a.Name)
	}
	sink, err := report.NewWriter(*format, out, report.WriterOptions{Events: names, Raw: *noDemangle, Srcline: *srcline,
		Title: *title, Inverted: *inverted, Width: *width, MinWidth: *minWidth, GroupBy: *groupBy})
	if err != nil {
		fmt.Fprintf(stderr, "ustack report: %v\n", err)
		return exitUsage
	}
	// A progress bar on stderr for long runs, when stderr is a terminal.
	var bar *progressbar.ProgressBar
	if f, ok := stderr.(*os.File); ok && *input != "-" && term.IsTerminal(int(f.Fd())) {
		if st, err := os.Stat(*input); err == nil && st.Size() > 64<<20 {
			bar = progressbar.NewOptions64(st.Size(), progressbar.OptionSetWriter(f),
				progressbar.OptionSetDescription("unwinding"), progressbar.OptionShowBytes(true),
				progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionClearOnFinish())
			opts.Progress = func(off int64) { bar.Set64(off) }
		}
	}
	sum, err := report.Run(r, opts, sink.Write)
	if bar != nil {
		bar.Finish()
	}
	if ferr := sink.Close(); err == nil {
		err = ferr
	}
	if err != nil {
		fmt.Fprintf(stderr, "ustack report: %v\n", err)
		return exitError
	}
	sum.WriteSummary(stderr)
	if sum.DecodeError != nil {
		return exitPartial
	}
	return exitOK
}

func parsePACMask(s string) (uint64, error) {
	if v, ok := strings.CutPrefix(s, "va:"); ok {
		bits, err := strconv.Atoi(v)
		if err != nil || bits < 32 || bits > 56 {
			return 0, errors.New("--pac-mask va:BITS wants BITS between 32 and 56")
		}
		return ^uint64(0) << uint(bits), nil
	}
	m, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil {
		return 0, fmt.Errorf("--pac-mask: %v", err)
	}
	return m, nil
}
