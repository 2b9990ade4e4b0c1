package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ustack/ustack/capture"
)

// eventList collects repeated -e flags.
type eventList []string

// String joins the events (flag.Value).
func (e *eventList) String() string { return strings.Join(*e, ",") }

// Set appends one -e value (flag.Value).
func (e *eventList) Set(s string) error { *e = append(*e, s); return nil }

// cmdRecord records user registers and stacks at kernel events into a
// perf.data file and its companion archive.
func cmdRecord(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("record", flag.ContinueOnError)
	var events eventList
	fs.Var(&events, "e", "`event` to record (repeatable; default cpu-clock):\n  cpu-clock, task-clock, page-faults, context-switches, cycles, ...\n  SYSTEM:NAME                 tracepoint (syscalls:sys_enter_close; kprobes:NAME and\n                              probe:NAME are probes already made in tracefs or by perf probe)\n  u:BIN:SYMBOL[+OFF]          uprobe (uprobe:; u:BIN:0xFILEOFF at a file offset)\n  ur:BIN:SYMBOL               uretprobe, at the return (uretprobe:)\n  k:FUNC[+OFF]                kprobe on a kernel function (p:, kprobe:; k:0xADDR)\n  kr:FUNC                     kretprobe (r:, kretprobe:)\n  mem:ADDR[/LEN][:rwx]        hardware breakpoint (x) or watchpoint (r, w, rw; default rw, 4 bytes)\n  mem:BIN:SYMBOL[/LEN][:rwx]  watchpoint on a global of the program or a library it loads\n                              (needs -p or a command; LEN defaults to the symbol's size)")
	alias(fs, "event", "e")
	out := fs.String("o", "perf.data", "output `file` (the archive goes to FILE.ustack)")
	alias(fs, "output", "o")
	var freq freqValue
	fs.Var(&freq, "F", "sample clock events at this frequency in `Hz` (default 4000; max: the kernel's perf_event_max_sample_rate)")
	alias(fs, "freq", "F")
	period := fs.Uint64("c", 0, "sample every `count` events")
	alias(fs, "count", "c")
	stack := fs.Uint("stack-size", 0, "`bytes` of user stack copied per sample (max 65528; default 8192, with --unwind up to 65528 as the rate allows)")
	callGraph := fs.String("call-graph", "", "how user stacks are recorded (the `mode`), as perf's: dwarf[,SIZE] (registers and stack, the default) or fp (the kernel's frame-pointer chain only)")
	g := fs.Bool("g", false, "record call graphs (ustack always does; the same as --call-graph dwarf)")
	cpuList := fs.String("C", "", "record only on these `cpus` (e.g. 0-3,6); without a command or -p, system-wide on them")
	alias(fs, "cpu", "C")
	noInherit := fs.Bool("no-inherit", false, "do not follow threads and child processes created after the start")
	pid := fs.Int("p", 0, "record an existing process (`pid`) and all its threads (with a COMMAND: while the command runs)")
	alias(fs, "pid", "p")
	all := fs.Bool("a", false, "record every CPU, system-wide (with a COMMAND: while the command runs)")
	alias(fs, "all-cpus", "a")
	var pages int
	fs.IntVar(&pages, "m", 0, "ring buffer `pages` per CPU, a power of two (default 256, 1024 with --unwind as root)")
	alias(fs, "mmap-pages", "m")
	var dur time.Duration
	fs.DurationVar(&dur, "d", 0, "stop after this `duration` (e.g. 10s)")
	alias(fs, "duration", "d")
	noUserCallchain := fs.Bool("no-user-callchain", false, "dwarf mode: leave the kernel's frame-pointer chain of the user stack out of each sample, as perf record does (perf script prints that chain before its own DWARF unwind; ustack report's --fp-audit checks against it)")
	unwind := fs.Bool("unwind", false, "unwind at capture time and store only the frames, no registers or stack bytes")
	var otlp otlpFlags
	otlp.register(fs)
	fs.Lookup("otlp-endpoint").Usage = "with --unwind: also send the samples as OpenTelemetry profiles to `url`, one profile per --otlp-interval (an agent: http(s)://HOST:PORT for OTLP/HTTP, grpc://HOST:PORT for OTLP/gRPC; headers, timeout and gzip also from OTEL_EXPORTER_OTLP_*); an endpoint that is down is retried with backoff, at most --otlp-backlog intervals kept, what is dropped counted in the next profile (ustack.dropped_intervals) and at exit"
	otlpInterval := fs.Duration("otlp-interval", 10*time.Second, "with --otlp-endpoint: the `duration` each exported profile covers")
	otlpBacklog := fs.Int("otlp-backlog", defaultBacklog, "with --otlp-endpoint: how many interval `profiles` wait for an endpoint that is down; past that the oldest are dropped, and counted")
	cacheBudget := fs.String("cache-budget", "256M", "with --unwind: the memory the opened objects' tables, symbols, lines and decompressed sections may hold (`size`: bytes, or with K, M or G); past it the objects of processes that exited are closed, least recently used first (those of live processes stay open); 0: no bound, every object stays open until the end")
	noArchive := fs.Bool("no-archive", false, "do not write the OUTPUT.ustack archive of objects, vdso and kallsyms")
	quiet := fs.Bool("q", false, "print nothing but errors")
	alias(fs, "quiet", "q")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: ustack record [flags] [-e EVENT]... [-p PID | -a | -C CPUS] [-- COMMAND ARGS]\n\n"+
			"Records user registers and stack snapshots at kernel events into a perf.data file (perf script\n"+
			"and perf report read it) and the objects, debug files, vdso and kallsyms the report needs into\n"+
			"FILE.ustack, so that ustack report works on another machine. Without -p, -a or -C it records\n"+
			"COMMAND and its children from its first instruction; with them, it records the process or the\n"+
			"system until COMMAND exits (perf record -a -- sleep 5), or until -d or Ctrl-C ends it.\n"+
			"Exit status: 0 ok, 1 error (no permission, no such process or event), 2 usage,\n"+
			"else COMMAND's own exit status when it failed.\n\nflags:\n")
		printFlags(fs)
	}
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "ustack record: "+format+"\nrun 'ustack record -h' for its flags\n", a...)
		return 2
	}
	mode, size, err := parseCallGraph(*callGraph)
	if err != nil {
		return usageErr("%v", err)
	}
	_ = *g // -g asks for what ustack always records
	if size != 0 {
		if *stack != 0 && *stack != size {
			return usageErr("--call-graph dwarf,%d and --stack-size %d disagree", size, *stack)
		}
		*stack = size
	}
	if otlp.endpoint == "" && (otlp.headers != nil || otlp.timeout != 0) {
		return usageErr("--otlp-header and --otlp-timeout are for --otlp-endpoint")
	}
	if otlp.endpoint != "" && !*unwind {
		return usageErr("--otlp-endpoint sends stacks unwound at capture time: add --unwind")
	}
	if *otlpInterval <= 0 {
		return usageErr("--otlp-interval %v: an interval is longer than 0", *otlpInterval)
	}
	if *otlpBacklog < 1 {
		return usageErr("--otlp-backlog %d: at least one profile waits", *otlpBacklog)
	}
	budget, err := parseByteSize(*cacheBudget)
	if err != nil {
		return usageErr("--cache-budget %q: %v", *cacheBudget, err)
	}
	var cpus []int
	if *cpuList != "" {
		if cpus, err = capture.ParseCPUList(*cpuList); err != nil {
			return usageErr("-C: %v", err)
		}
	}
	opts := capture.Options{
		Events: events, Freq: uint64(freq), Period: *period, StackSize: uint32(*stack),
		Command: fs.Args(), PID: *pid, AllCPUs: *all, Duration: dur, Output: *out,
		MmapPages: pages, Unwind: *unwind, CacheBudget: budget, NoArchive: *noArchive, NoUserCallchain: *noUserCallchain,
		CPUs: cpus, NoInherit: *noInherit, CallGraph: mode,
		Stdout: stdout, Stderr: stderr,
		Cmdline: append([]string{"ustack", "record"}, args...),
	}
	if *stack > capture.MaxStackSize {
		return usageErr("--stack-size %d exceeds the kernel's limit of %d", *stack, capture.MaxStackSize)
	}
	if !*quiet {
		opts.Log = stderr
	}
	var agent *otlpAgent
	if otlp.endpoint != "" {
		cfg, err := otlp.config()
		if err != nil {
			return usageErr("%v", err)
		}
		clock := map[string]int64{}
		for _, ev := range events {
			if ev == "cpu-clock" || ev == "task-clock" {
				clock[ev] = clockPeriod(uint64(freq), *period)
			}
		}
		if len(events) == 0 {
			clock["cpu-clock"] = clockPeriod(uint64(freq), *period)
		}
		agent = newOTLPAgent(cfg, *otlpInterval, *otlpBacklog, clock, stderr)
		opts.OnUnwound = agent.add
		// Naming frames reads debug sections, most compressed: keep them
		// decompressed on disk, not in the agent's memory.
		if !envSet("USTACK_NO_CACHE") {
			opts.SectionCache = openSectionCache(func(msg string) { fmt.Fprintf(stderr, "ustack record: warning: %s\n", msg) })
		}
		go agent.run()
	}
	rec, err := capture.NewRecorder(opts)
	if err != nil {
		fmt.Fprintf(stderr, "ustack record: %v\n", err)
		// What the system refuses or lacks is an error; the rest is
		// how the command was written.
		if errors.Is(err, capture.ErrPerfUnavailable) || errors.Is(err, capture.ErrTargetNotFound) || errors.Is(err, os.ErrPermission) {
			return 1
		}
		return 2
	}
	// Ctrl-C, SIGTERM and SIGHUP (the terminal closed) end the recording
	// with a complete file, and remove the kprobes it defined in tracefs;
	// a SIGHUP ignored from the start (nohup ustack record) stays ignored,
	// as perf record leaves it.
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	ctx, stop := signal.NotifyContext(context.Background(), sigs...)
	defer stop()
	start := time.Now()
	st, err := rec.Run(ctx)
	if agent != nil {
		as := agent.finish()
		fmt.Fprintf(stderr, "[ ustack record: sent %d of %d profiles (%d samples) to %s", as.delivered, as.intervals, as.samples, otlp.endpoint)
		if as.dropped > 0 {
			fmt.Fprintf(stderr, "; %d dropped: %v", as.dropped, as.lastErr)
		}
		fmt.Fprintf(stderr, " ]\n")
	}
	if st != nil && !*quiet {
		fmt.Fprintf(stderr, "[ ustack record: wrote %s (%.1f MB, %d samples) in %.2fs ]\n",
			st.Output, float64(st.Bytes)/1e6, st.Samples, time.Since(start).Seconds())
		if st.Archive != "" {
			fmt.Fprintf(stderr, "[ ustack record: archived %d objects, vdso and kallsyms in %s ]\n", st.Objects, st.Archive)
		}
		if lost := max(st.Lost, st.LostSamples); lost > 0 {
			fmt.Fprintf(stderr, "[ ustack record: %d samples lost (%d LOST records counting %d, %d in the events' own counts): raise -m or lower -F/--stack-size ]\n",
				lost, st.LostRecords, st.Lost, st.LostSamples)
		} else {
			fmt.Fprintf(stderr, "[ ustack record: 0 samples lost ]\n")
		}
		if st.Throttled > 0 {
			fmt.Fprintf(stderr, "[ ustack record: the kernel throttled sampling %d times ]\n", st.Throttled)
		}
		if msg := stackFullNote(st); msg != "" {
			fmt.Fprintf(stderr, "[ ustack record: %s ]\n", msg)
		}
		if *unwind && st.UnwindFailed > 0 {
			fmt.Fprintf(stderr, "[ ustack record: %d samples could not be unwound past their first frame ]\n", st.UnwindFailed)
		}
		if *unwind {
			c := st.Cache
			fmt.Fprintf(stderr, "[ ustack record: object cache: %d objects open holding %.1f MB (budget %.1f MB), %d evicted, %d opened again ]\n",
				c.Objects, float64(c.HeldBytes)/1e6, float64(c.Budget)/1e6, c.Evictions, c.Reopens)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "ustack record: %v\n", err)
		return 1
	}
	if st != nil && len(opts.Command) > 0 && st.ExitCode > 0 {
		return st.ExitCode
	}
	return 0
}

// parseCallGraph parses perf's --call-graph argument: dwarf[,SIZE] or fp.
func parseCallGraph(s string) (mode string, size uint, err error) {
	if s == "" {
		return "", 0, nil
	}
	mode, sz, hasSize := strings.Cut(s, ",")
	switch mode {
	case "dwarf":
		if hasSize {
			n, err := strconv.ParseUint(sz, 0, 32)
			if err != nil || n == 0 || n > capture.MaxStackSize {
				return "", 0, fmt.Errorf("--call-graph dwarf,%s: the size must be between 8 and %d bytes", sz, capture.MaxStackSize)
			}
			size = uint(n)
		}
		return mode, size, nil
	case "fp":
		if hasSize {
			return "", 0, fmt.Errorf("--call-graph fp takes no size")
		}
		return mode, 0, nil
	case "lbr":
		return "", 0, fmt.Errorf("--call-graph lbr needs Intel's last branch records, which ustack record does not use: use dwarf (the default) or fp")
	}
	return "", 0, fmt.Errorf("--call-graph %q: want dwarf[,SIZE] or fp", s)
}

// stackFullNote says, for an --unwind recording, what share of the stacks
// the stack snapshot cut short and the flag that records more; "" for
// other recordings (ustack report tells for those).
func stackFullNote(st *capture.Stats) string {
	if st.Samples == 0 || st.StackSize == 0 {
		return ""
	}
	pct := 100 * float64(st.StackFull) / float64(st.Samples)
	msg := fmt.Sprintf("%.1f%% of stacks were cut by the end of the %d-byte stack snapshot", pct, st.StackSize)
	if pct < 1 {
		return msg
	}
	if st.StackSize >= capture.MaxStackSize {
		return msg + " and may be cut short (already the kernel's maximum)"
	}
	next := min(4*uint64(st.StackSize), capture.MaxStackSize)
	return fmt.Sprintf("%s and may be cut short: record with --stack-size %d for deeper stacks", msg, next)
}

// freqValue is -F: a frequency in Hz, or max for the kernel's highest.
type freqValue uint64

// String returns the frequency (flag.Value).
func (f *freqValue) String() string { return strconv.FormatUint(uint64(*f), 10) }

// Set parses a frequency or "max" (flag.Value).
func (f *freqValue) Set(s string) error {
	if s == "max" {
		n, err := capture.MaxSampleRate()
		if err != nil {
			return fmt.Errorf("max: %v", err)
		}
		*f = freqValue(n)
		return nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return errors.New("want a frequency in Hz or max")
	}
	*f = freqValue(n)
	return nil
}

// clockPeriod is a clock event's period in nanoseconds: -c, else the
// frequency's (-F, default capture.DefaultFreq).
func clockPeriod(freq, period uint64) int64 {
	if period > 0 {
		return int64(period)
	}
	if freq == 0 {
		freq = capture.DefaultFreq
	}
	return int64(1e9 / freq)
}

// parseByteSize parses a size in bytes, with an optional K, M or G suffix
// (powers of 1024) and an optional B after it: --cache-budget.
func parseByteSize(s string) (int64, error) {
	t := strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "B")
	mult := int64(1)
	if t != "" {
		switch t[len(t)-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		}
		if mult > 1 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, errors.New("want a size in bytes, such as 268435456, 256M or 1G (0: no bound)")
	}
	return n * mult, nil
}
