package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/ustack/ustack/coredump"
	"github.com/ustack/ustack/minidump"
	"github.com/ustack/ustack/report"
)

// isCore reports whether the file at path is an ELF core dump, or
// compressed with zstd, xz or lz4 (as systemd-coredump stores cores):
// ustack report reads no compressed recordings, so a compressed input is
// given to the core reader, which says what it holds if no core.
func isCore(path string) bool {
	_, ok := sniffCore(path)
	return ok || isMinidump(path)
}

// coreHead is isCore for the first bytes of a stream.
func coreHead(head []byte) bool {
	_, ok := coredump.Sniff(head)
	return ok || minidump.Sniff(head)
}

// isMinidump reports whether the file at path starts with a minidump's
// signature.
func isMinidump(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var head [4]byte
	n, _ := io.ReadFull(f, head[:])
	return minidump.Sniff(head[:n])
}

// streamInput opens an input that is no regular file (a named pipe, a
// shell's <(...), a character device) to be read once, as standard input
// is: sniffing it and opening it again would lose what the first read took
// or, on a pipe whose writer has gone, wait forever. It returns false for a
// regular file, a directory, or a path that cannot be examined (its own
// reader says why).
func streamInput(path string) (*os.File, bool, error) {
	st, err := os.Stat(path)
	if err != nil || st.Mode().IsRegular() || st.IsDir() {
		return nil, false, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, false, err
	}
	return f, true, nil
}

// stdinReader, when set (by tests), is what -i - reads instead of os.Stdin.
var stdinReader io.Reader

func standardInput() io.Reader {
	if stdinReader != nil {
		return stdinReader
	}
	return os.Stdin
}

func sniffCore(path string) (coredump.Compression, bool) {
	f, err := os.Open(path)
	if err != nil {
		return coredump.None, false
	}
	defer f.Close()
	var head [64]byte
	n, _ := io.ReadFull(f, head[:])
	return coredump.Sniff(head[:n])
}

// coreFlags are the flags of ustack report that apply to a core dump.
type coreFlags struct {
	opts              report.Options
	fetch             *fetchLine // debuginfod's progress line, or nil
	exe               string
	info, verbose     bool
	goroutines        bool
	fpAudit           bool
	output, format    string
	fields, time, cpu string
	wo                report.WriterOptions
	otlp              otlpFlags
}

// reportCore reports every thread of the core dump at path (or, for "-",
// read from in), or describes it (--core-info). A core that could be read
// only in part is reported as far as it goes and exits with exitPartial.
func reportCore(path string, in io.Reader, f coreFlags, stdout, stderr io.Writer) int {
	if in != nil && path == "-" {
		path = "standard input"
	}
	switch {
	case f.fields != "":
		fmt.Fprintf(stderr, "ustack report: %s is a core dump: -F selects the columns of a recording's events; a core's threads print comm, pid/tid, the signal and the stack\n", path)
		return exitUsage
	case f.time != "" || f.cpu != "":
		fmt.Fprintf(stderr, "ustack report: %s is a core dump: its threads have no sample time or CPU; --time and --cpu cannot select them (use --tid, --pid or --comms)\n", path)
		return exitUsage
	}
	copts := report.CoreOptions{Options: f.opts, Exe: f.exe, Goroutines: f.goroutines}
	var c *report.Core
	var err error
	if in != nil {
		c, err = report.OpenCoreReader(in, path, copts)
	} else {
		c, err = report.OpenCore(path, copts)
	}
	if err != nil {
		hint := ""
		if comp, _ := sniffCore(path); in == nil && comp != coredump.None && errors.Is(err, coredump.ErrNotCore) {
			hint = fmt.Sprintf(" (the file is %s-compressed; ustack report reads compressed core dumps only: decompress a recording first)", comp)
		}
		fmt.Fprintf(stderr, "ustack report: %v%s\n", err, hint)
		return exitError
	}
	defer c.Close()
	out := stdout
	var file *outputFile
	if f.output != "" {
		file, err = createOutput(f.output, 0o644)
		if err != nil {
			fmt.Fprintf(stderr, "ustack report: %v\n", err)
			return exitError
		}
		defer file.Close()
		out = file
	}
	if f.info && f.otlp.endpoint != "" {
		fmt.Fprintf(stderr, "ustack report: --core-info describes the core; --otlp-endpoint sends stacks\n")
		return exitUsage
	}
	out, sent := f.otlp.output(out, file != nil)
	if in == nil {
		// A core has no clock: its threads are stamped with its time.
		if st, err := os.Stat(path); err == nil {
			f.wo.LastSample = st.ModTime()
		}
	}
	if f.info {
		if err := report.WriteCoreInfo(out, c, copts); err != nil {
			fmt.Fprintf(stderr, "ustack report: %v\n", err)
			return exitError
		}
		return exitOK
	}
	if len(c.Threads) == 0 {
		for _, w := range c.Warnings {
			fmt.Fprintf(stderr, "ustack: warning: %v\n", w)
		}
		fmt.Fprintf(stderr, "ustack report: %s: the core holds no thread (no NT_PRSTATUS note could be read)\n", path)
		file.discard()
		return exitNoSamples
	}
	sink, err := report.NewWriter(f.format, out, f.wo)
	if err != nil {
		fmt.Fprintf(stderr, "ustack report: %s: %v\n", path, err)
		return exitUsage
	}
	sum, err := report.RunCore(c, copts, sink.Write)
	f.fetch.finish()
	unit := "thread"
	if f.goroutines {
		unit = "goroutine"
	}
	if code := finishReport(sink, nil, sum, err, f.verbose, f.fpAudit, stderr, unit); code != exitOK {
		return code
	}
	if sent != nil && sum.Samples > 0 {
		if code := f.otlp.send(sent.Bytes(), stderr); code != exitOK {
			return code
		}
	}
	if len(c.Warnings) > 0 {
		problems := fmt.Sprintf("%d problems", len(c.Warnings))
		if len(c.Warnings) == 1 {
			problems = "1 problem"
		}
		fmt.Fprintf(stderr, "ustack report: %s is damaged: %s (above); every thread that could be read is reported\n", path, problems)
		return exitPartial
	}
	if sum.Samples == 0 {
		fmt.Fprintf(stderr, "ustack report: warning: %s: no %s matched the filters (%d %ss dropped)\n", path, unit, sum.Filtered, unit)
	}
	return exitOK
}
