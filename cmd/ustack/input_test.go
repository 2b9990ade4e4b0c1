package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/perfdata"
	"golang.org/x/sys/unix"
)

var dwarfData = filepath.Join("..", "..", "perfdata", "testdata", "dwarf.data")

func runReport(args ...string) (rc int, stdout, stderr string) {
	var out, errb bytes.Buffer
	rc = run(append([]string{"report", "-kallsyms", "-", "-archive", "-"}, args...), &out, &errb)
	return rc, out.String(), errb.String()
}

// TestReportInputArgument checks that the input may be given as the
// argument, as perf report users type it, before or after flags; that -i
// and a different argument, or two arguments, are usage errors.
func TestReportInputArgument(t *testing.T) {
	rc, withI, errs := runReport("-i", dwarfData)
	require.Equal(t, exitOK, rc, errs)
	require.NotEmpty(t, withI)
	rc, pos, errs := runReport(dwarfData)
	require.Equal(t, exitOK, rc, errs)
	require.Equal(t, withI, pos)
	rc, after, _ := run3([]string{"report", dwarfData, "-kallsyms", "-", "-archive", "-"})
	require.Equal(t, exitOK, rc)
	require.Equal(t, withI, after, "flags after the argument are not parsed")
	rc, _, _ = runReport("-i", dwarfData, dwarfData)
	require.Equal(t, exitOK, rc, "-i FILE FILE names one input")

	rc, out, errs := runReport("-i", dwarfData, "other.data")
	require.Equal(t, exitUsage, rc)
	require.Contains(t, errs, "two inputs")
	require.Empty(t, out)
	rc, _, errs = runReport(dwarfData, "other.data")
	require.Equal(t, exitUsage, rc)
	require.Contains(t, errs, "one input file")
}

func run3(args []string) (int, string, string) {
	var out, errb bytes.Buffer
	rc := run(args, &out, &errb)
	return rc, out.String(), errb.String()
}

// writeRecording writes a perf.data file with one cpu-clock event recorded
// for a DWARF unwind and the given samples.
func writeRecording(t *testing.T, path string, samples []*perfdata.Sample) {
	t.Helper()
	attr := &perfdata.Attr{Type: perfdata.TypeSoftware, Config: 0,
		SampleType: perfdata.SampleIdentifier | perfdata.SampleIP | perfdata.SampleTID | perfdata.SampleTime |
			perfdata.SamplePeriod | perfdata.SampleCallchain | perfdata.SampleRegsUser | perfdata.SampleStackUser,
		SamplePeriod: 4000, Flags: perfdata.AttrSampleIDAll | perfdata.AttrFreq,
		SampleRegsUser: 0xff0fff, SampleStackUser: 8192, Name: "cpu-clock"}
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	w, err := perfdata.NewWriter(f, []*perfdata.Attr{attr}, &perfdata.Features{Arch: "x86_64"})
	require.NoError(t, err)
	hdr := perfdata.RecordHeader{SampleIDFields: perfdata.SampleIDFields{Pid: 42, Tid: 42, Time: 1}}
	require.NoError(t, w.WriteComm(&perfdata.Comm{RecordHeader: hdr, Pid: 42, Tid: 42, Comm: "prog", Exec: true}))
	for _, s := range samples {
		require.NoError(t, w.WriteSample(s))
	}
	require.NoError(t, w.Close())
}

// TestReportNoSamples checks that a recording without samples is not a
// silent success: one line naming the file, exit status 4.
func TestReportNoSamples(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.data")
	writeRecording(t, path, nil)
	rc, out, errs := runReport(path)
	require.Equal(t, exitNoSamples, rc, errs)
	require.Empty(t, out)
	require.Contains(t, errs, path+": the recording holds no samples")

	// Filters that drop every sample: a warning, exit 0 (perf script
	// prints nothing then).
	rc, out, errs = runReport("--pid", "1", dwarfData)
	require.Equal(t, exitOK, rc, errs)
	require.Empty(t, out)
	require.Contains(t, errs, "no sample matched the filters")
}

// TestReportSamplesWithoutUserData checks the warning for samples of an
// event recorded for a DWARF unwind that carry no user registers or no
// stack copy although taken in user mode.
func TestReportSamplesWithoutUserData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "noregs.data")
	var samples []*perfdata.Sample
	for i := 0; i < 3; i++ {
		s := &perfdata.Sample{RecordHeader: perfdata.RecordHeader{SampleIDFields: perfdata.SampleIDFields{Pid: 42, Tid: 42, Time: uint64(10 + i)}},
			IP: 0x401000, Period: 1, Callchain: []uint64{perfdata.ContextUser, 0x401000}, RegsABI: perfdata.RegsABINone}
		s.Misc = perfdata.MiscUser
		samples = append(samples, s)
	}
	writeRecording(t, path, samples)
	rc, _, errs := runReport(path)
	require.Equal(t, exitOK, rc, errs)
	require.Contains(t, errs, path+": 3 of 3 samples were recorded for a DWARF unwind but carry no user registers or no stack copy")

	// dwarf.data's samples all carry theirs: no such warning.
	_, _, errs = runReport(dwarfData)
	require.NotContains(t, errs, "carry no user registers")
	require.NotContains(t, errs, "no stack copy")
}

// TestReportUnknownFormat checks that inputs that are not perf.data files
// get one line naming the file and what it is.
func TestReportUnknownFormat(t *testing.T) {
	dir := t.TempDir()
	txt := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(txt, []byte("hello, perf\n"), 0o644))
	exe, err := os.Executable()
	require.NoError(t, err)
	for _, c := range []struct{ path, says string }{
		{txt, "no perf.data header"},
		{exe, "this is an ELF program or library, not a core dump"},
		{filepath.Join(dir, "missing.data"), "no such file"},
	} {
		rc, out, errs := runReport(c.path)
		require.Equal(t, exitError, rc)
		require.Empty(t, out)
		require.Equal(t, 1, strings.Count(errs, "\n"), "not one line: %q", errs)
		require.Contains(t, errs, c.path)
		require.Contains(t, errs, c.says)
	}
}

// TestSummaryNamesStackSizeFix records with a stack snapshot too small for
// the program's stacks and checks that the summary says how to record more,
// with perf's option for a perf recording.
func TestSummaryNamesStackSizeFix(t *testing.T) {
	dir := perfRecordings(t)
	small := testprog.Record(t, filepath.Join(dir, "small.data"), "-e", "cpu-clock", "--call-graph", "dwarf,256",
		"--", filepath.Join(dir, "prog"))
	rc, _, errs := runReport(small)
	require.Equal(t, exitOK, rc, errs)
	require.Contains(t, errs, "cut short by the size of the stack snapshot; record more with perf record --call-graph dwarf,512 (this recording copied 256 bytes)")

	// The same samples as though the kernel had copied half of each
	// snapshot and met a page it could not read (as it does for a new
	// thread whose stack is not in memory yet): stacks still stop
	// truncated, but a larger size would not carry them further, so the
	// summary does not ask for one.
	short := filepath.Join(dir, "short.data")
	rewriteSamples(t, small, short, func(s *perfdata.Sample) {
		if s.StackDynSize == uint64(len(s.StackData)) {
			s.StackDynSize /= 2
		}
	})
	rc, _, errs = runReport(short)
	require.Equal(t, exitOK, rc, errs)
	require.Contains(t, errs, "truncated")
	require.NotContains(t, errs, "cut short")
}

// rewriteSamples copies the perf.data file in to out, passing each sample
// through edit and every other record as it is.
func rewriteSamples(t *testing.T, in, out string, edit func(*perfdata.Sample)) {
	t.Helper()
	rd, err := perfdata.Open(in)
	require.NoError(t, err)
	defer rd.Close()
	f, err := os.Create(out)
	require.NoError(t, err)
	defer f.Close()
	s := rd.Session()
	w, err := perfdata.NewWriter(f, s.Attrs, &s.Features)
	require.NoError(t, err)
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if smp, ok := rec.(*perfdata.Sample); ok {
			edit(smp)
			require.NoError(t, w.WriteSample(smp))
			continue
		}
		require.NoError(t, w.WriteRaw(rd.RawRecord()))
	}
	require.NoError(t, w.Close())
}

// openPTY opens a pseudo-terminal pair.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	require.NoError(t, unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return m, s
}

// TestShowProgress checks when the progress line may be drawn: only with
// stderr on a terminal that the report does not go to.
func TestShowProgress(t *testing.T) {
	_, tty := openPTY(t)
	tty2, err := os.OpenFile(tty.Name(), os.O_RDWR|unix.O_NOCTTY, 0)
	require.NoError(t, err)
	defer tty2.Close()
	_, other := openPTY(t)
	file, err := os.Create(filepath.Join(t.TempDir(), "report.txt"))
	require.NoError(t, err)
	defer file.Close()
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	defer pr.Close()
	defer pw.Close()

	require.False(t, showProgress(tty, tty, false), "stdout and stderr on one terminal")
	require.False(t, showProgress(tty2, tty, false), "the same terminal opened twice")
	require.True(t, showProgress(tty, tty, true), "-o FILE: the report is not on the terminal")
	require.True(t, showProgress(file, tty, false), "stdout redirected to a file")
	require.True(t, showProgress(pw, tty, false), "stdout into a pipe")
	require.True(t, showProgress(other, tty, false), "stdout on another terminal")
	require.False(t, showProgress(pw, file, false), "stderr is not a terminal")
	require.False(t, showProgress(tty, pw, true), "stderr is a pipe")
}

// TestProgressRate checks the progress line's rate against hand-computed
// values: the bytes read since the first update over the time since then,
// however far the offset jumps between updates.
func TestProgressRate(t *testing.T) {
	now := time.Unix(1000, 0)
	var buf bytes.Buffer
	p := newProgress(&buf, 400e6, func() time.Time { return now })
	p.update(4e6) // the data section starts 4 MB in
	now = now.Add(10 * time.Millisecond)
	p.update(300e6) // a jump within the throttle interval: not drawn
	require.Empty(t, buf.String())
	now = now.Add(1990 * time.Millisecond)
	p.update(104e6) // 100 MB in 2 s
	require.Equal(t, "\r\033[Kunwinding: 26% 104.0 MB of 400.0 MB, 50.0 MB/s", buf.String())
	buf.Reset()
	p.finish()
	require.Equal(t, "\r\033[K", buf.String(), "finish clears the line")
	var nilp *progress
	nilp.finish()
}

// TestReportSaysWhenNoStacksWereRecorded checks the warning for perf
// recordings made without --call-graph dwarf (no user registers or stack
// to unwind), and its absence for those made with it.
func TestReportSaysWhenNoStacksWereRecorded(t *testing.T) {
	dir := perfRecordings(t)
	rc, _, errs := runReport(filepath.Join(dir, "cpu-ng.data"))
	require.Equal(t, exitOK, rc, errs)
	require.Contains(t, errs, filepath.Join(dir, "cpu-ng.data")+" was recorded without user registers and stack")
	_, _, errs = runReport(filepath.Join(dir, "cpu.data"))
	require.NotContains(t, errs, "without user registers")
}

// TestReportOutputKeepsOldFile checks that -o never overwrites a file
// without keeping it as FILE.old.
func TestReportOutputKeepsOldFile(t *testing.T) {
	out := filepath.Join(t.TempDir(), "report.txt")
	require.NoError(t, os.WriteFile(out, []byte("the user's notes\n"), 0o644))
	rc, _, errs := runReport("-o", out, dwarfData)
	require.Equal(t, exitOK, rc, errs)
	old, err := os.ReadFile(out + ".old")
	require.NoError(t, err)
	require.Equal(t, "the user's notes\n", string(old))
	rep, err := os.ReadFile(out)
	require.NoError(t, err)
	_, direct, _ := runReport(dwarfData)
	require.Equal(t, direct, string(rep))
}

// TestReportOutputDevice checks that -o writes to a device or a pipe
// (-o /dev/null, as when timing a report) instead of refusing it as an
// existing file, and keeps no .old of it.
func TestReportOutputDevice(t *testing.T) {
	rc, _, errs := runReport("-o", os.DevNull, dwarfData)
	require.Equal(t, exitOK, rc, errs)
	_, err := os.Stat(os.DevNull + ".old")
	require.ErrorIs(t, err, os.ErrNotExist)

	fifo := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	got := make(chan []byte)
	go func() {
		b, _ := os.ReadFile(fifo)
		got <- b
	}()
	rc, _, errs = runReport("-o", fifo, dwarfData)
	require.Equal(t, exitOK, rc, errs)
	_, direct, _ := runReport(dwarfData)
	require.Equal(t, direct, string(<-got))
}

// TestReportFieldsNeedText checks that -F with another format is a usage
// error rather than silently ignored.
func TestReportFieldsNeedText(t *testing.T) {
	rc, out, errs := runReport("-F", "comm", "--format", "json", dwarfData)
	require.Equal(t, exitUsage, rc)
	require.Empty(t, out)
	require.Contains(t, errs, "-F selects the text format's columns")
}

// TestReportCompressedNotSilent records with perf record -z (file and pipe
// mode): every sample perf script prints, ustack report prints, and no
// record is skipped.
func TestReportCompressedNotSilent(t *testing.T) {
	dir := perfRecordings(t)
	z := testprog.Record(t, filepath.Join(dir, "z.data"), "-z", "-e", "cpu-clock", "--call-graph", "dwarf",
		"--", filepath.Join(dir, "prog"))
	want := headers(testprog.Script(t, z), true)
	require.NotEmpty(t, want)
	rc, out, errs := runReport(z)
	require.NotContains(t, errs, "skipped records")
	require.Equal(t, exitOK, rc, errs)
	require.Equal(t, want, headers(out, true))
}

// reportBounded is runReport, failed when it has not returned after a
// minute: an input that never ends must not hold it forever.
func reportBounded(t *testing.T, args ...string) (rc int, stdout, stderr string) {
	t.Helper()
	type result struct {
		rc       int
		out, err string
	}
	done := make(chan result, 1)
	go func() {
		rc, out, errs := runReport(args...)
		done <- result{rc, out, errs}
	}()
	select {
	case r := <-done:
		return r.rc, r.out, r.err
	case <-time.After(time.Minute):
		t.Fatalf("ustack report %v still runs after a minute", args)
	}
	return 0, "", ""
}

// feedFIFO makes a named pipe in a new directory and writes data into it
// once a reader opens it (nothing, when data is nil: the writer opens it
// and closes it).
func feedFIFO(t *testing.T, data []byte) string {
	t.Helper()
	fifo := filepath.Join(t.TempDir(), "in.fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		f.Write(data)
		f.Close()
	}()
	return fifo
}

// TestReportNamedPipe: an input that is no regular file (a named pipe, a
// shell's <(...)) is read once, as standard input is. Before, ustack read
// its first bytes to tell a core from a recording, then opened it again:
// a named pipe whose writer had gone left it waiting forever, and a
// recording or core given through <(...) lost its first bytes ("not an ELF
// core dump"). A pipe-mode recording and a core given through a named pipe
// report as the files do; an empty one is an error that names it; a
// file-mode recording, which cannot be read from a stream, says so.
func TestReportNamedPipe(t *testing.T) {
	pipeData := filepath.Join("..", "..", "perfdata", "testdata", "pipe.data")
	b, err := os.ReadFile(pipeData)
	require.NoError(t, err)
	rc, want, errs := reportBounded(t, "-i", pipeData)
	require.Equal(t, exitOK, rc, errs)
	rc, got, errs := reportBounded(t, "-i", feedFIFO(t, b))
	require.Equal(t, exitOK, rc, errs)
	require.Equal(t, want, got)

	fifo := feedFIFO(t, nil)
	rc, out, errs := reportBounded(t, "-i", fifo)
	require.Equal(t, exitError, rc)
	require.Empty(t, out)
	require.Contains(t, errs, fifo+": ")

	b, err = os.ReadFile(dwarfData)
	require.NoError(t, err)
	rc, _, errs = reportBounded(t, "-i", feedFIFO(t, b))
	require.Equal(t, exitError, rc)
	require.Contains(t, errs, "file-mode data (perf record -o FILE) in a stream that cannot seek")

	core := filepath.Join("..", "..", "testdata", "cores", "x86_64", "crash_O2.core.zst")
	b, err = os.ReadFile(core)
	require.NoError(t, err)
	rc, want, errs = reportBounded(t, "-i", core, "--format", "json")
	require.Equal(t, exitOK, rc, errs)
	rc, got, errs = reportBounded(t, "-i", feedFIFO(t, b), "--format", "json")
	require.Equal(t, exitOK, rc, errs)
	require.Equal(t, want, got)
}

// TestReportSamplesOfUnmappedProcess: a recording of some CPUs only
// (perf record -C) misses the fork, exec and mmaps of a process that
// made them on other CPUs, and has its samples. They stopped no_mapping
// with no word of why; the summary now says how many samples of which
// processes the recording holds no maps of.
func TestReportSamplesOfUnmappedProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nomaps.data")
	var samples []*perfdata.Sample
	for i := 0; i < 3; i++ {
		s := &perfdata.Sample{RecordHeader: perfdata.RecordHeader{SampleIDFields: perfdata.SampleIDFields{Pid: 4242, Tid: 4243, Time: uint64(10 + i)}},
			IP: 0x401000, Period: 1, RegsABI: perfdata.RegsABI64, RegsMask: 0xff0fff,
			Regs: make([]uint64, 20), StackData: make([]byte, 64), StackDynSize: 64}
		s.Regs[16] = 0x401000 // rip (perf's order: ax bx cx dx si di bp sp ip ...)
		s.Misc = perfdata.MiscUser
		samples = append(samples, s)
	}
	writeRecording(t, path, samples)
	rc, _, errs := runReport(path)
	require.Equal(t, exitOK, rc, errs)
	require.Contains(t, errs, "3 samples of 1 process the recording holds no maps of (pid comm: samples 4242 :4242: 3)")

	_, _, errs = runReport(dwarfData)
	require.NotContains(t, errs, "holds no maps of")
}

// TestReportStdinDamageNamed: the damage met reading standard input is
// told as a file's is, naming it ("perfdata: offset 0x368: ..." before).
func TestReportStdinDamageNamed(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "perfdata", "testdata", "pipe.data"))
	require.NoError(t, err)
	defer func(r io.Reader) { stdinReader = r }(stdinReader)
	stdinReader = bytes.NewReader(b[:2000])
	rc, _, errs := runReport("-i", "-")
	require.Equal(t, exitPartial, rc, errs)
	require.Contains(t, errs, "perfdata: standard input: offset ")
}

// pcOutsideSrc moves itself to CPU 0 and spins there.
const pcOutsideSrc = `#define _GNU_SOURCE
#include <sched.h>
#include <time.h>
static volatile unsigned long sink;
__attribute__((noinline)) static void spin(void) { for (int i = 0; i < 1000; i++) sink += i; }
int main(void) {
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(0, &set);
	if (sched_setaffinity(0, sizeof set, &set) != 0) return 1;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do { spin(); clock_gettime(CLOCK_MONOTONIC, &t); } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 300000000L);
	return 0;
}
`

// TestReportPCOutsideMaps: perf record -C 0, run on CPU 1 (taskset -c 1),
// of a program it execs there, which then moves itself to CPU 0: the
// recording misses
// its exec and mmaps, and holds only the maps perf synthesized of its
// forked child (perf's own, comm perf-exec). Every sample's PC lies
// outside them. Before, the text format printed no frame for them where
// perf script prints the PC ([unknown] ([unknown])), JSON had that frame,
// and the stacks stopped no_mapping with no word of why. The summary now
// says how many samples of which process had their PC in none of its maps,
// and why (JSON: unmapped_pc); the text's frames are perf script's.
func TestReportPCOutsideMaps(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs two CPUs: the program is exec'd on one and samples on the other")
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Skip("taskset is not installed (Debian package util-linux)")
	}
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "outside.c", pcOutsideSrc, "-O2")
	// perf runs on CPU 1, so its forked child execs the program there.
	data := filepath.Join(dir, "c.data")
	ctx, cancel := context.WithTimeout(context.Background(), testprog.Timeout)
	defer cancel()
	rec := exec.CommandContext(ctx, "taskset", "-c", "1", testprog.Perf(t), "record", "-q", "-o", data,
		"-C", "0", "-F", "499", "--call-graph", "dwarf,4096", "--", bin)
	if msg, err := rec.CombinedOutput(); err != nil {
		t.Skipf("perf record -C 0 cannot record here: %v: %s", err, msg)
	}

	fields := "comm,tid,ip,sym,dso"
	rc, out, errs := runReport("-i", data, "-F", fields)
	require.Equal(t, exitOK, rc, errs)
	// The program's samples, as both tools print them, their user
	// frames (runReport reads no kernel symbols): its comm is the one
	// perf synthesized (perf-exec).
	progSamples := func(text string) []string {
		var got []string
		for _, block := range strings.Split(text, "\n\n") {
			if !strings.HasPrefix(strings.TrimSpace(block), "perf-exec ") {
				continue
			}
			var user []string
			for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
				if !strings.HasSuffix(l, "([kernel.kallsyms])") {
					user = append(user, l)
				}
			}
			got = append(got, strings.Join(user, "\n"))
		}
		return got
	}
	ours := progSamples(out)
	// Only perf-exec's samples: -C 0 records every process on CPU 0, and
	// beside other work perf script ran addr2line on another test's
	// library, deleted meanwhile, and died of the broken pipe.
	perfs := progSamples(testprog.Script(t, data, "--comms", "perf-exec", "-F", fields))
	require.NotEmpty(t, perfs, "perf script shows no sample of the program")
	require.Equal(t, perfs, ours, "the program's samples, against perf script's")
	// The program is the perf-exec with the most samples (another perf
	// record's child may run on CPU 0 too, for a moment, on a busy
	// machine).
	byTid := map[string]int{}
	for _, s := range ours {
		if !strings.Contains(s, "\n") {
			continue // no user frame in either (a sample in the kernel with no user stack)
		}
		require.Contains(t, s, "[unknown] ([unknown])", "the PC, outside every map")
		byTid[strings.Fields(s)[1]]++
	}
	prog, n := "", 0
	for tid, k := range byTid {
		if k > n {
			prog, n = tid, k
		}
	}
	// (Other processes on CPU 0, on a busy machine, may be named too.)
	var line, noMaps string
	for _, l := range strings.Split(errs, "\n") {
		switch {
		case strings.Contains(l, "had their PC in none of the maps the recording holds of their process (pid comm: samples "):
			line = l
		case strings.Contains(l, "the recording holds no maps of"):
			noMaps = l
		}
	}
	require.NotEmpty(t, line, "no line names the samples whose PC lay outside the maps: %s", errs)
	assert.Contains(t, line, fmt.Sprintf(" %s perf-exec: %d", prog, n))
	assert.Contains(t, line, "the records of the mmaps or the exec that mapped it are missing")
	assert.NotContains(t, noMaps, "perf-exec")

	rc, js, errs := runReport("-i", data, "--format", "json", "--verbose")
	require.Equal(t, exitOK, rc, errs)
	var sum struct {
		Summary struct {
			UnmappedPC int            `json:"unmapped_pc"`
			NoMaps     int            `json:"no_maps"`
			Stops      map[string]int `json:"stops"`
		} `json:"summary"`
	}
	lines := strings.Split(strings.TrimSpace(js), "\n")
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &sum))
	assert.GreaterOrEqual(t, sum.Summary.UnmappedPC, n)
	assert.GreaterOrEqual(t, sum.Summary.Stops["no_mapping"], sum.Summary.UnmappedPC+sum.Summary.NoMaps)

	// An ordinary recording: no such samples.
	rc, _, errs = runReport("-i", dwarfData)
	require.Equal(t, exitOK, rc, errs)
	require.NotContains(t, errs, "had their PC in none of the maps")
}

// TestReportSkippedRecordType: a record of a type this reader does not know
// (42: no kernel or perf defines it; a newer perf's, or damage) among the
// samples is skipped, and may have held samples: the report has every
// sample it could read, says what it skipped in the file and why, and
// exits 3 (partial), as a damaged recording does. Before, it exited 0, and
// said the skipped records' samples "are missing" as if they held some.
// (perf script 6.1 prints none of the samples: "failed to process type:
// 42", "Found 1 unknown events!".)
func TestReportSkippedRecordType(t *testing.T) {
	path := filepath.Join(t.TempDir(), "type42.data")
	attr := &perfdata.Attr{Type: perfdata.TypeSoftware, SampleType: perfdata.SampleIP | perfdata.SampleTID | perfdata.SampleTime | perfdata.SamplePeriod,
		SamplePeriod: 1000, Flags: perfdata.AttrSampleIDAll, Name: "cpu-clock"}
	f, err := os.Create(path)
	require.NoError(t, err)
	w, err := perfdata.NewWriter(f, []*perfdata.Attr{attr}, &perfdata.Features{Arch: "x86_64"})
	require.NoError(t, err)
	hdr := perfdata.RecordHeader{SampleIDFields: perfdata.SampleIDFields{Pid: 42, Tid: 42, Time: 1}}
	require.NoError(t, w.WriteComm(&perfdata.Comm{RecordHeader: hdr, Pid: 42, Tid: 42, Comm: "prog", Exec: true}))
	for i := range 4 {
		if i == 2 {
			require.NoError(t, w.WriteRecord(42, 0, make([]byte, 16)))
		}
		s := &perfdata.Sample{RecordHeader: perfdata.RecordHeader{SampleIDFields: perfdata.SampleIDFields{Pid: 42, Tid: 42, Time: uint64(10 + i)}},
			IP: 0x401000 + uint64(i), Period: 1000}
		s.Misc = perfdata.MiscUser
		require.NoError(t, w.WriteSample(s))
	}
	require.NoError(t, w.Close())
	require.NoError(t, f.Close())

	rc, out, errs := runReport(path, "-F", "ip")
	assert.Equal(t, exitPartial, rc, errs)
	assert.Equal(t, []string{"401000", "401001", "401002", "401003"}, strings.Fields(out))
	assert.Contains(t, errs, path+": skipped records this reader cannot read, whose samples, if they hold any, are missing: 1 type(42) (a record type this reader does not know is a newer perf's, or damage)")
}
