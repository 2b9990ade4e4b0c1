package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
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
	fs.SetOutput(stderr)
	var events eventList
	fs.Var(&events, "e", "event to record (repeatable): cpu-clock, task-clock, page-faults, context-switches,\nSYSTEM:TRACEPOINT, u:/path/to/bin:SYMBOL[+OFF], mem:ADDR[/LEN][:rwx]")
	out := fs.String("o", "perf.data", "output file (the archive goes to OUTPUT.ustack)")
	freq := fs.Uint64("F", 0, "sample clock events at this frequency in Hz (default 4000)")
	period := fs.Uint64("c", 0, "sample every PERIOD events")
	stack := fs.Uint("stack-size", capture.DefaultStackSize, "bytes of user stack copied per sample (max 65528)")
	pid := fs.Int("p", 0, "record an existing process and all its threads")
	all := fs.Bool("a", false, "record every CPU (system-wide)")
	pages := fs.Int("m", capture.DefaultMmapPages, "ring buffer pages per CPU (a power of two)")
	dur := fs.Duration("d", 0, "stop after this long (e.g. 10s)")
	unwind := fs.Bool("unwind", false, "unwind at capture time and store only the frames, no registers or stack bytes")
	noArchive := fs.Bool("no-archive", false, "do not write the OUTPUT.ustack archive of objects, vdso and kallsyms")
	quiet := fs.Bool("q", false, "print nothing but errors")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: ustack record [flags] [-e EVENT]... (-- COMMAND ARGS | -p PID | -a)\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	opts := capture.Options{
		Events: events, Freq: *freq, Period: *period, StackSize: uint32(*stack),
		Command: fs.Args(), PID: *pid, AllCPUs: *all, Duration: *dur, Output: *out,
		MmapPages: *pages, Unwind: *unwind, NoArchive: *noArchive,
		Stdout: stdout, Stderr: stderr,
	}
	if *stack > capture.MaxStackSize {
		fmt.Fprintf(stderr, "ustack record: --stack-size %d exceeds the kernel's limit of %d\n", *stack, capture.MaxStackSize)
		return 2
	}
	if !*quiet {
		opts.Log = stderr
	}
	rec, err := capture.NewRecorder(opts)
	if err != nil {
		fmt.Fprintf(stderr, "ustack record: %v\n", err)
		return 2
	}
	// Ctrl-C and SIGTERM end the recording with a complete file.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	st, err := rec.Run(ctx)
	if st != nil && !*quiet {
		fmt.Fprintf(stderr, "[ ustack record: wrote %s (%.1f MB, %d samples) in %.2fs ]\n",
			st.Output, float64(st.Bytes)/1e6, st.Samples, time.Since(start).Seconds())
		if st.Archive != "" {
			fmt.Fprintf(stderr, "[ ustack record: archived %d objects, vdso and kallsyms in %s ]\n", st.Objects, st.Archive)
		}
		if st.Lost > 0 || st.LostSamples > 0 {
			fmt.Fprintf(stderr, "[ ustack record: %d samples lost (%d LOST records), %d LOST_SAMPLES: raise -m or lower -F/--stack-size ]\n",
				st.Lost, st.LostRecords, st.LostSamples)
		} else {
			fmt.Fprintf(stderr, "[ ustack record: 0 samples lost ]\n")
		}
		if st.Throttled > 0 {
			fmt.Fprintf(stderr, "[ ustack record: the kernel throttled sampling %d times ]\n", st.Throttled)
		}
		if *unwind && st.UnwindFailed > 0 {
			fmt.Fprintf(stderr, "[ ustack record: %d samples could not be unwound past their first frame ]\n", st.UnwindFailed)
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
