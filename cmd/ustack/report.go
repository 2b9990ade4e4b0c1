package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ustack/ustack/archive"
	"github.com/ustack/ustack/capture"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/kallsyms"
	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/report"
)

// Exit statuses of ustack report.
const (
	exitOK      = 0
	exitError   = 1
	exitUsage   = 2
	exitPartial = 3 // the input was damaged, or records that may hold samples were skipped; every sample read was reported
	// exitNoSamples: the recording holds no sample to report (nothing was
	// printed; a filter that drops every sample exits 0 with a warning).
	exitNoSamples = 4
)

func cmdReport(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	input := fs.String("i", "perf.data", "input `file` (perf.data from perf record --call-graph dwarf or ustack record; - for a pipe); also given as the argument")
	alias(fs, "input", "i")
	output := fs.String("o", "", "write the report to `file` instead of standard output")
	alias(fs, "output", "o")
	format := fs.String("format", "text", "output `format`: text (like perf script), json (JSON Lines: one object per sample or thread), folded, pprof, flamegraph (interactive SVG), speedscope, otlp (OpenTelemetry profiles: an ExportProfilesServiceRequest in protobuf), otlp-json (the same in OTLP/JSON, as the Collector's otlpjsonfile receiver reads it)")
	symfs := fs.String("symfs", "", "look for objects under `dir`, like perf's --symfs")
	kall := fs.String("kallsyms", "", "kernel symbol `file` (default: the recording kernel's, /proc/kallsyms or perf record's copy in the build-id cache; - for none)")
	debugDir := fs.String("debug-dir", "", "colon-separated `directories` searched for separate debug files (default /usr/lib/debug; with --symfs, looked in beneath it, and the directories given also as they are)")
	buildIDDir := fs.String("buildid-dir", "", "perf's build-id cache `dir` (default ~/.debug)")
	noInline := fs.Bool("no-inline", false, "do not show inlined functions")
	noTailCall := fs.Bool("no-tailcall", false, "do not show the functions that tail-called (found from DWARF call sites, as gdb shows them)")
	noDemangle := fs.Bool("no-demangle", false, "do not demangle C++ and Rust names")
	noCache := fs.Bool("no-cache", false, "do not keep decompressed debug sections, what is built from them (sorted symbol tables, DWARF unit indexes, parsed units) and the running kernel's symbols in ~/.cache/ustack ($XDG_CACHE_HOME; also USTACK_NO_CACHE=1)")
	srcline := fs.Bool("srcline", false, "text format: print each frame's source file and line, like perf script -F +srcline")
	jobs := fs.Int("j", 0, "unwinding `workers` (default: one per CPU)")
	maxStack := fs.Int("max-stack", 1024, "unwind at most `N` user frames of each stack, like perf script's --max-stack: a stack overflow's core needs more to reach main")
	pacMask := fs.String("pac-mask", "", "arm64 pointer authentication `mask` (hex), or va:BITS (default va:48)")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of ustack itself to `file`")
	memProfile := fs.String("memprofile", "", "write a Go heap profile of ustack itself to `file` at the end (what is still held, and every allocation)")
	title := fs.String("title", "", "flamegraph, speedscope: the picture's `title`")
	inverted := fs.Bool("inverted", false, "flamegraph: an icicle graph (callers on top)")
	width := fs.Int("width", 0, "flamegraph: width in `pixels` (default 1200)")
	minWidth := fs.Float64("minwidth", 0, "flamegraph: leave out boxes narrower than `pixels` (default 0.1)")
	groupBy := fs.String("group-by", "", "flamegraph: how the boxes under \"all\" are grouped (`by`): comm (default), process (comm-PID), thread (comm-PID/TID) or none")
	perfArchive := fs.String("perf-archive", "", "a `tarball` from perf archive (default: INPUT.tar.bz2 or INPUT.tar.gz when it exists; - for none): its objects are used like perf's build-id cache, unpacked into a directory under $TMPDIR that is removed when the report ends, by a signal (SIGINT, SIGTERM, SIGHUP) or a closed output pipe too")
	archiveFile := fs.String("archive", "", "objects archive `file` written by ustack record (default: INPUT.ustack when it exists; - for none)")
	noDebuginfod := fs.Bool("no-debuginfod", false, "fetch nothing from the debuginfod servers of DEBUGINFOD_URLS and use nothing of their client cache (unset or empty DEBUGINFOD_URLS: nothing is fetched, the cache is used)")
	fpAudit := fs.Bool("fp-audit", false, "after the summary, the frame-pointer audit by object: the frames in it, how often a frame-pointer walk's chain broke in it, the frames lost above those breaks; flamegraph: boxes a frame-pointer walk would lose in most of their samples are faded")
	verbose := fs.Bool("verbose", false, "say in the summary where each object's unwind, symbol and line information came from (JSON: a last summary record)")
	fields := fs.String("F", "", "text format: perf script's -F `fields` (comm,pid,tid,cpu,time,period,event,trace,ip,sym,symoff,dso,srcline, or +field,-field to change the defaults)")
	exe := fs.String("exe", "", "core dumps: the main executable `file`, instead of the path the core records")
	coreInfo := fs.Bool("core-info", false, "core dumps and minidumps: list the threads, the signal, the mappings (and a minidump's modules) and which objects were found, instead of the stacks")
	goroutines := fs.Bool("goroutines", false, "Go core dumps: report every goroutine (event \"goroutine\": its id, status, wait reason, creator and thread) instead of the threads, unwound from the registers the scheduler saved or its thread's")
	var otlp otlpFlags
	otlp.register(fs)
	var filt filterFlags
	fs.StringVar(&filt.pid, "pid", "", "only samples of these comma-separated process `ids`, like perf script --pid")
	fs.StringVar(&filt.tid, "tid", "", "only samples of these comma-separated thread `ids`")
	fs.StringVar(&filt.comms, "comms", "", "only samples of threads with these comma-separated `names`")
	fs.StringVar(&filt.cpu, "cpu", "", "only samples taken on these `cpus` (0-2,5)")
	fs.StringVar(&filt.time, "time", "", "only samples in this time `range`: start,stop in seconds (start, or ,stop for open ranges; several separated by spaces)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: ustack report [flags] [FILE]\n\nUnwinds and symbolizes every sample of a recording (FILE or -i, default perf.data) and prints its stack;\n"+
			"of an ELF core dump or a minidump (x86_64 or aarch64, also compressed with zstd, xz or lz4, or in an apport .crash report), every thread's stack.\n"+
			"Exit status: 0 ok, 1 error, 2 usage, 3 partial: a damaged recording or core, or records skipped that may hold samples (what could be read is reported), 4 no samples in the recording.\n"+
			"The JSON's \"how\" and \"stop\" values: %s\n\nflags:\n", glossaryURL)
		printFlags(fs)
	}
	inputSet, code, ok := parseInputArgs(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if inputSet != "" {
		*input = inputSet
	}
	if msg := otlp.check(fs, format); msg != "" {
		fmt.Fprintf(stderr, "ustack report: %s\n", msg)
		return exitUsage
	}
	switch {
	case *maxStack < 1:
		fmt.Fprintf(stderr, "ustack report: --max-stack %d: a stack has at least one frame\n", *maxStack)
		return exitUsage
	case *srcline && *format != "text":
		fmt.Fprintf(stderr, "ustack report: --srcline is for the text format: --format %s %s\n", *format, linesIn(*format))
		return exitUsage
	}
	opts := report.Options{SymFS: *symfs, Kallsyms: *kall, BuildIDDir: *buildIDDir,
		NoInline: *noInline, NoTailCall: *noTailCall, NoDemangle: *noDemangle, Jobs: *jobs, MaxFrames: *maxStack,
		Warn: func(msg string) { fmt.Fprintf(stderr, "ustack: warning: %s\n", msg) }}
	if *debugDir != "" {
		opts.DebugDirs = strings.Split(*debugDir, ":")
	}
	if !*noCache && !envSet("USTACK_NO_CACHE") {
		opts.SectionCache = openSectionCache(opts.Warn)
		if dir, err := kallsyms.DefaultCacheDir(); err == nil {
			opts.KallsymsCache = dir
		}
	}
	filter, err := filt.parse()
	if err != nil {
		fmt.Fprintf(stderr, "ustack report: %v\n", err)
		return exitUsage
	}
	opts.Filter = filter
	opts.TraceValues = *format == "json" // JSON's "fields"
	spec, err := parseFieldSpec(*fields)
	if err != nil {
		fmt.Fprintf(stderr, "ustack report: %v\n", err)
		return exitUsage
	}
	if *fields != "" && *format != "text" {
		fmt.Fprintf(stderr, "ustack report: -F selects the text format's columns; --format %s prints every field\n", *format)
		return exitUsage
	}
	if *pacMask != "" {
		m, err := parsePACMask(*pacMask)
		if err != nil {
			fmt.Fprintf(stderr, "ustack report: %v\n", err)
			return exitUsage
		}
		opts.PACMask = m
	}

	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		gcTuneOnce.Do(func() { tuneGC(startHeap, 6<<20, 50) })
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
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			fmt.Fprintf(stderr, "ustack report: %v\n", err)
			return exitError
		}
		defer func() {
			runtime.GC() // the profile's in-use figures are as of the last collection
			if err := pprof.WriteHeapProfile(f); err != nil {
				fmt.Fprintf(stderr, "ustack report: %s: %v\n", *memProfile, err)
			}
			f.Close()
		}()
	}
	// Objects and debug files missing here come by build-id from
	// debuginfod (a recording's, a core's or a minidump's), the progress
	// of downloads on the terminal.
	var fetch *fetchLine
	if !*noDebuginfod {
		fetch = newFetchLine(stderr, showProgress(stdout, stderr, *output != ""))
		opts.Warn = fetch.around(opts.Warn)
		opts.Debuginfod = newDebuginfod(opts.Warn, fetch)
		defer opts.Debuginfod.Close()
	}
	opts.HostVDSO = capture.ReadVDSO

	// A core dump is recognised by its first bytes, also on standard input
	// (coredumpctl dump PID | ustack report -i -).
	opts.ObjectSources = *verbose
	events := []string{report.CoreEvent}
	if *goroutines {
		events = []string{report.GoroutineEvent}
	}
	cf := coreFlags{opts: opts, fetch: fetch, verbose: *verbose, fpAudit: *fpAudit, exe: *exe, info: *coreInfo, goroutines: *goroutines, output: *output, format: *format, otlp: otlp,
		fields: *fields, time: filt.time, cpu: filt.cpu,
		wo: report.WriterOptions{Events: events, Raw: *noDemangle, Srcline: *srcline,
			Title: *title, Inverted: *inverted, Width: *width, MinWidth: *minWidth, GroupBy: *groupBy, FPAudit: *fpAudit}}
	stdin := standardInput()
	streamed := *input == "-"
	if !streamed {
		f, ok, err := streamInput(*input)
		if err != nil {
			fmt.Fprintf(stderr, "ustack report: %v\n", err)
			return exitError
		}
		if ok {
			defer f.Close()
			stdin, streamed = f, true
		}
	}
	if streamed {
		br := bufio.NewReaderSize(stdin, 1<<16)
		if head, _ := br.Peek(64); coreHead(head) {
			return reportCore(*input, br, cf, stdout, stderr)
		}
		stdin = br
	} else if isCore(*input) {
		return reportCore(*input, nil, cf, stdout, stderr)
	}
	if *exe != "" || *coreInfo || *goroutines {
		fmt.Fprintf(stderr, "ustack report: %s is not a core dump: --exe, --core-info and --goroutines are for core dumps\n", *input)
		return exitUsage
	}
	var r *perfdata.Reader
	if streamed {
		name := *input
		if name == "-" {
			name = "standard input"
		}
		r, err = perfdata.NewReader(stdin)
		if err != nil {
			err = fmt.Errorf("%s: %w", name, err)
		} else {
			r.SetName(name)
		}
	} else {
		r, err = perfdata.OpenMapped(*input)
		// node --perf-prof writes its jitdump in its working directory,
		// usually the recording's.
		opts.JITDumpDirs = []string{filepath.Dir(*input)}
	}
	if err != nil {
		hint := ""
		if !streamed {
			hint = notPerfData(*input)
		}
		fmt.Fprintf(stderr, "ustack report: %v%s\n", err, hint)
		return exitError
	}
	defer r.Close()
	if filter != nil && len(filter.CPUs) > 0 {
		for _, a := range r.Session().Attrs {
			if a.SampleType&perfdata.SampleCPU == 0 {
				fmt.Fprintf(stderr, "ustack report: %s: the samples of %s do not carry the CPU (record with -a or --sample-cpu); --cpu cannot filter them\n", *input, a.Name)
				return exitUsage
			}
		}
	}

	// A recording made by ustack record carries its objects, the vdso and
	// kallsyms in <input>.ustack: use them, so the report works on a
	// machine that has none of the binaries.
	archivePath := *archiveFile
	if archivePath == "" && !streamed {
		if _, err := os.Stat(*input + ".ustack"); err == nil {
			archivePath = *input + ".ustack"
		}
	}
	if archivePath != "" && archivePath != "-" {
		// A damaged archive costs only the members it damaged: each damage
		// is a warning, and the report goes on with what survived.
		a, err := archive.Open(archivePath, archive.Options{Warn: opts.Warn})
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
	if tarball == "" && !streamed {
		for _, ext := range []string{".tar.bz2", ".tar.gz"} {
			if _, err := os.Stat(*input + ext); err == nil {
				tarball = *input + ext
				break
			}
		}
		// Say so where it matters: in --verbose, and when --archive -
		// asked for a report without the recording's objects.
		if tarball != "" && (*verbose || archivePath == "-") {
			fmt.Fprintf(stderr, "ustack report: using the perf archive %s beside the recording (--perf-archive - for none)\n", tarball)
		}
	}
	if tarball != "" && tarball != "-" {
		// Removed on every way out, signals included (cleanup.go).
		dir, err := makeTempDir("ustack-perf-archive-")
		if err != nil {
			fmt.Fprintf(stderr, "ustack report: %v\n", err)
			return exitError
		}
		defer dir.Remove()
		n, err := archive.ExtractPerfTarball(tarball, dir.Root, 0)
		switch {
		case errors.Is(err, os.ErrNotExist):
			fmt.Fprintf(stderr, "ustack report: --perf-archive %s: no such file\n", tarball)
			return exitError
		case err != nil:
			opts.Warn(fmt.Sprintf("%v; using the %d files before the damage", err, n))
		}
		opts.MoreBuildIDDirs = append(opts.MoreBuildIDDirs, dir.Path)
	}

	out := stdout
	toFile := false
	var outFile *outputFile
	if *output != "" {
		toFile = true
		outFile, err = createOutput(*output, 0o644)
		if err != nil {
			fmt.Fprintf(stderr, "ustack report: %v\n", err)
			return exitError
		}
		defer outFile.Close()
		out = outFile
	}
	out, sent := otlp.output(out, toFile)

	var names []string
	for _, a := range r.Session().Attrs {
		names = append(names, a.Name)
	}
	wo := report.WriterOptions{Events: names, Raw: *noDemangle, Srcline: *srcline, Attrs: r.Session().Attrs, Fields: spec,
		Title: *title, Inverted: *inverted, Width: *width, MinWidth: *minWidth, GroupBy: *groupBy, FPAudit: *fpAudit}
	if !streamed {
		// perf and ustack write the file as the recording ends: its
		// time is the wall clock at (about) the last sample.
		if st, err := os.Stat(*input); err == nil {
			wo.LastSample = st.ModTime()
			opts.RecordingEnd = st.ModTime()
		}
	}
	if r.Session().Pipe {
		wo.Attrs, wo.Session = nil, r.Session() // its events come with its records
	}
	var aw *asyncWriter
	if !streamed {
		// A stream's samples are printed as they come; a file's
		// report is written behind the formatting.
		aw = newAsyncWriter(out)
		defer aw.Close()
		out = aw
	}
	sink, err := report.NewWriter(*format, out, wo)
	if err != nil {
		fmt.Fprintf(stderr, "ustack report: %s: %v\n", *input, err)
		return exitUsage
	}
	// A progress line on stderr for long runs, when it cannot land in
	// the report.
	var prog *progress
	if !streamed && showProgress(stdout, stderr, toFile) {
		if st, err := os.Stat(*input); err == nil && st.Size() > 64<<20 {
			prog = newProgress(stderr, st.Size(), time.Now)
			opts.Progress = prog.update
		}
	}
	sum, err := report.Run(r, opts, sink.Write)
	prog.finish()
	fetch.finish()
	var flushed io.Closer
	if aw != nil {
		flushed = aw
	}
	if code := finishReport(sink, flushed, sum, err, *verbose, *fpAudit, stderr, "sample"); code != exitOK {
		return code
	}
	if sent != nil && sum.Samples > 0 {
		if code := otlp.send(sent.Bytes(), stderr); code != exitOK {
			return code
		}
	}
	if sum.DecodeError != nil || sum.Damaged > 0 {
		return exitPartial
	}
	status := checkInput(*input, sum, stderr)
	if status == exitNoSamples {
		outFile.discard() // no empty picture or profile
	}
	return status
}

// linesIn says what a format shows of each frame's source line, for the
// error refusing --srcline with it.
func linesIn(format string) string {
	switch format {
	case "json", "pprof", "speedscope":
		return "carries every frame's file and line already"
	}
	return "has no room for source lines"
}

// openSectionCache returns the section cache in the user's cache directory,
// or nil with a warning when it cannot be made: the report goes on
// decompressing.
func openSectionCache(warn func(string)) *elfcache.SectionCache {
	dir, err := elfcache.DefaultSectionCacheDir()
	if err == nil {
		var c *elfcache.SectionCache
		if c, err = elfcache.NewSectionCache(dir, 0); err == nil {
			return c
		}
	}
	warn(fmt.Sprintf("%v; decompressing debug sections without a cache (--no-cache silences this)", err))
	return nil
}

// envSet reports whether the environment variable is set to something
// other than "", "0" or "false".
func envSet(name string) bool {
	v := os.Getenv(name)
	return v != "" && v != "0" && v != "false"
}

// finishReport ends a report's output: with verbose, the writer's own
// summary (JSON's last record) first; then the writer is closed, and out,
// the writer's own output when not nil, once the writer has flushed into it
// (asyncWriter), and the summary printed on stderr, ending with the frame-pointer audit's line
// (with fpAudit, its table before it). It returns exitOK, or exitError having
// printed why the run or the writer failed, or, silently, exitBrokenPipe
// when the output's reader went away (ustack report | head).
func finishReport(sink report.Writer, out io.Closer, sum *report.Summary, err error, verbose, fpAudit bool, stderr io.Writer, unit string) int {
	if sw, ok := sink.(report.SummaryWriter); ok && verbose && err == nil {
		err = sw.WriteSummary(sum)
	}
	if ferr := sink.Close(); err == nil {
		err = ferr
	}
	if out != nil {
		if ferr := out.Close(); err == nil {
			err = ferr
		}
	}
	if isBrokenPipe(err) {
		return exitBrokenPipe
	}
	if err != nil {
		fmt.Fprintf(stderr, "ustack report: %v\n", err)
		return exitError
	}
	sum.WriteSummary(stderr)
	sum.WriteLine(stderr)
	sum.WriteRepairLine(stderr)
	if fpAudit {
		sum.WriteFPAuditTable(stderr)
	}
	sum.WriteFPAuditLine(stderr)
	return exitOK
}

// checkInput says what a report could not show: a recording without
// samples (exit status exitNoSamples), records skipped that may hold
// samples (exitPartial: a report known to miss samples is not a whole
// one), filters that dropped every sample, samples recorded for a DWARF
// unwind without the registers or stack to do it, a recording without
// user stacks at all.
func checkInput(input string, sum *report.Summary, stderr io.Writer) int {
	if input == "-" {
		input = "standard input"
	}
	status := exitOK
	if len(sum.Skipped) > 0 {
		status = exitPartial
		var kinds []string
		for k, n := range sum.Skipped {
			kinds = append(kinds, fmt.Sprintf("%d %s", n, k))
		}
		sort.Strings(kinds)
		var why []string
		if sum.Skipped["COMPRESSED"] > 0 || sum.Skipped["COMPRESSED2"] > 0 {
			why = append(why, "COMPRESSED records are written by perf record -z")
		}
		for k := range sum.Skipped {
			if strings.HasPrefix(k, "type(") {
				why = append(why, "a record type this reader does not know is a newer perf's, or damage")
				break
			}
		}
		fmt.Fprintf(stderr, "ustack report: warning: %s: skipped records this reader cannot read, whose samples, if they hold any, are missing: %s",
			input, strings.Join(kinds, ", "))
		if len(why) > 0 {
			fmt.Fprintf(stderr, " (%s)", strings.Join(why, "; "))
		}
		fmt.Fprintln(stderr)
	}
	if sum.Samples == 0 && sum.Filtered == 0 {
		fmt.Fprintf(stderr, "ustack report: %s: the recording holds no samples\n", input)
		return exitNoSamples
	}
	if sum.Samples == 0 {
		fmt.Fprintf(stderr, "ustack report: warning: %s: no sample matched the filters (%d samples dropped)\n", input, sum.Filtered)
	}
	if sum.NoUserData > 0 {
		fmt.Fprintf(stderr, "ustack report: warning: %s: %d of %d samples were recorded for a DWARF unwind but carry no user registers or no stack copy (the kernel could copy none); their user frames past the sampled instruction are missing\n",
			input, sum.NoUserData, sum.Samples)
	}
	dwarf := false
	for _, a := range sum.Attrs {
		if a.SampleType&perfdata.SampleRegsUser != 0 && a.SampleType&perfdata.SampleStackUser != 0 && a.SampleStackUser > 0 {
			dwarf = true
		}
	}
	// ustack record --unwind unwinds while recording and keeps the
	// frames, not the stacks.
	byUstack := len(sum.Cmdline) > 0 && filepath.Base(sum.Cmdline[0]) == "ustack"
	if !dwarf && !byUstack && len(sum.Attrs) > 0 {
		fmt.Fprintf(stderr, "ustack report: warning: %s was recorded without user registers and stack: the stacks are what the kernel recorded (its call chain or the sampled ip), not a DWARF unwind; record with perf record --call-graph dwarf or ustack record for that\n", input)
	}
	return status
}

// parseInputArgs parses a command's flags and the input file given as an
// argument, which may come before, after or between flags (ustack report
// FILE -F ...), and must agree with -i when both are given. It
// returns the argument ("" when none); ok is false when the caller must
// return code (help shown, or a usage error).
func parseInputArgs(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (input string, code int, ok bool) {
	pos, code, ok := parseInterleaved(fs, args, stdout, stderr)
	if !ok {
		return "", code, false
	}
	if len(pos) > 1 {
		fmt.Fprintf(stderr, "ustack %s: one input file, got %d: %s\nrun 'ustack %s -h' for its flags\n", fs.Name(), len(pos), strings.Join(pos, " "), fs.Name())
		return "", exitUsage, false
	}
	if len(pos) == 0 {
		return "", 0, true
	}
	iSet := ""
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "i" {
			iSet = f.Value.String()
		}
	})
	if iSet != "" && iSet != pos[0] {
		fmt.Fprintf(stderr, "ustack %s: two inputs: -i %s and %s\nrun 'ustack %s -h' for its flags\n", fs.Name(), iSet, pos[0], fs.Name())
		return "", exitUsage, false
	}
	return pos[0], 0, true
}

// parseInterleaved parses a command's flags and returns its arguments,
// which may come before, after or between flags (ustack unwind FILE
// -json); after "--" every argument is one. ok is false when the caller
// must return code.
func parseInterleaved(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (pos []string, code int, ok bool) {
	for {
		if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
			return nil, code, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, 0, true
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), 0, true
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func parseFieldSpec(s string) (report.FieldSpec, error) {
	if s == "" {
		return report.FieldSpec{}, nil
	}
	return report.ParseFields(s)
}

// filterFlags are the sample filter flags as given.
type filterFlags struct{ pid, tid, comms, cpu, time string }

// parse returns the filter the flags describe, nil for none.
func (f *filterFlags) parse() (*report.SampleFilter, error) {
	if *f == (filterFlags{}) {
		return nil, nil
	}
	var sf report.SampleFilter
	var err error
	if f.pid != "" {
		if sf.Pids, err = report.ParseIDList(f.pid); err != nil {
			return nil, fmt.Errorf("--pid: %v", err)
		}
	}
	if f.tid != "" {
		if sf.Tids, err = report.ParseIDList(f.tid); err != nil {
			return nil, fmt.Errorf("--tid: %v", err)
		}
	}
	if f.cpu != "" {
		if sf.CPUs, err = report.ParseCPUList(f.cpu); err != nil {
			return nil, fmt.Errorf("--cpu: %v", err)
		}
	}
	if f.time != "" {
		if sf.Times, err = report.ParseTimeRanges(f.time); err != nil {
			return nil, fmt.Errorf("--time: %v", err)
		}
	}
	if f.comms != "" {
		sf.Comms = map[string]bool{}
		for _, c := range strings.Split(f.comms, ",") {
			sf.Comms[c] = true
		}
	}
	return &sf, nil
}

// notPerfData says what an input that is not a perf.data file is, when its
// first bytes tell: an ELF program, a compressed file. (Core dumps, also
// compressed, never get here: reportCore reads them.)
func notPerfData(path string) string {
	if path == "-" {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var b [8]byte
	n, _ := io.ReadFull(f, b[:])
	head := string(b[:n])
	switch {
	case strings.HasPrefix(head, "\x7fELF"):
		return " (this is an ELF program or library, not a core dump; ustack report reads core dumps and recordings made by perf record or ustack record)"
	case strings.HasPrefix(head, "\x1f\x8b"), strings.HasPrefix(head, "\x28\xb5\x2f\xfd"), strings.HasPrefix(head, "\xfd7zXZ"):
		return " (this is a compressed file: decompress it first)"
	case head == "2ELIFREP":
		return " (a big-endian perf.data file: not supported)"
	}
	return ""
}

// outputFile is a report's -o file, which a report that has nothing to
// say takes back.
type outputFile struct {
	*os.File
	path    string
	created bool // a regular file this run created (not a device)
	keptOld bool // the file that was there is now path.old
}

// createOutput creates a report's -o file, keeping the old one as
// createKeepingOld does.
func createOutput(path string, mode os.FileMode) (*outputFile, error) {
	o := &outputFile{path: path}
	if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() {
		o.keptOld = true
	}
	f, err := createKeepingOld(path, mode)
	if err != nil {
		return nil, err
	}
	o.File = f
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
		o.created = true
	}
	return o, nil
}

// discard removes the file this run created and puts back the one it
// replaced. A nil o (no -o) has nothing to discard.
func (o *outputFile) discard() {
	if o == nil || !o.created {
		return
	}
	o.File.Close()
	os.Remove(o.path)
	if o.keptOld {
		os.Rename(o.path+".old", o.path)
	}
}

// createKeepingOld creates path for writing with mode; an existing file
// there is kept as path.old rather than overwritten, as perf does. A
// device or a pipe (-o /dev/null) holds nothing to keep: it is opened.
func createKeepingOld(path string, mode os.FileMode) (*os.File, error) {
	if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() {
		if err := os.Rename(path, path+".old"); err != nil {
			return nil, fmt.Errorf("keeping the existing %s: %w", path, err)
		}
	} else if err == nil && st.Mode()&(os.ModeDevice|os.ModeCharDevice|os.ModeNamedPipe) != 0 {
		return os.OpenFile(path, os.O_WRONLY, 0)
	}
	return os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, mode)
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

// gcTuneOnce arms tuneGC once a process (tests run many reports in one).
var gcTuneOnce sync.Once

// startHeap is the memory the runtime may hold before a report's first
// collection: more than a report of a few thousand samples or a core with
// glibc's debug information needs (their heaps are 2-15 MB), so that those
// finish without one. That one collection, at the default 4 MB, cost a small
// report 8-10 ms of its 50-60 ms of CPU (docs/BENCHMARKS.md): the mark
// workers' threads and stacks, and the sweep's first writes to the
// runtime's span sets, each a copy of the zero page and a TLB shootdown on
// this VM.
const startHeap = 32 << 20

// tuneGC shapes the collector for a report: no collection until the runtime
// holds start bytes (GOGC off under a memory limit of start, as the Go
// compiler's base.AdjustStartingHeap does), then the default GOGC, lowered
// to pct once a collection finds more than live bytes of live heap
// (MemStats.HeapAlloc read just after it: what it kept and the little
// allocated since; runtime/metrics' exact figure would cost every run of
// ustack that package's initialization, half a millisecond). A large
// report's heap is mostly what it keeps (symbol, line and CFI tables) while
// its garbage is short-lived: collecting when the heap has grown by half, not
// by all of it, keeps the peak RSS of a 4 GB recording at 60 MB instead of
// 68, at no cost in wall time.
func tuneGC(start int64, live uint64, pct int) {
	type sentinel struct{ _ [32]byte } // not a tiny allocation, whose finalizer may never run
	limit := debug.SetMemoryLimit(start)
	gogc := debug.SetGCPercent(-1)
	first := true
	var arm func()
	arm = func() {
		// Its finalizer runs after each collection that finds it
		// unreachable: once a cycle, as each run arms a new one.
		runtime.SetFinalizer(new(sentinel), func(*sentinel) {
			if first {
				first = false
				debug.SetGCPercent(gogc)
				debug.SetMemoryLimit(limit)
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > live {
				debug.SetGCPercent(pct)
				return
			}
			arm()
		})
	}
	arm()
}
