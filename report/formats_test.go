package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/resolve"
)

// runAll reports a recording into every writer at once.
func runAll(t *testing.T, data string, opts Options) (text, js, folded []byte, prof *profile.Profile, warnings []string) {
	t.Helper()
	r, names := openRecording(t, data)
	var tb, jb, fb, pb bytes.Buffer
	tw := NewTextWriter(&tb, EventWidth(names), false)
	jw := NewJSONWriter(&jb, false)
	fo := NewFolder(false)
	pp := NewPprofBuilder(false)
	opts.Warn = func(m string) { warnings = append(warnings, m) }
	if _, err := Run(r, opts, func(s *Sample) error {
		fo.Add(s)
		pp.Add(s)
		if err := tw.Write(s); err != nil {
			return err
		}
		return jw.Write(s)
	}); err != nil {
		t.Fatal(err)
	}
	tw.Flush()
	jw.Flush()
	fo.WriteTo(&fb)
	if err := pp.Write(&pb); err != nil {
		t.Fatal(err)
	}
	prof, err := profile.Parse(&pb)
	if err != nil {
		t.Fatalf("pprof output does not parse: %v", err)
	}
	return tb.Bytes(), jb.Bytes(), fb.Bytes(), prof, warnings
}

// TestOutputFormats checks the JSON, folded and pprof outputs of one
// recording against its text output (itself checked against perf script
// by the parity tests): same samples, same stacks.
func TestOutputFormats(t *testing.T) {
	requirePerf(t)
	dir := t.TempDir()
	bin := build(t, dir, "chain", chainSrc, "-O2", "-g", "-fomit-frame-pointer")
	data := record(t, dir, bin)
	text, js, folded, prof, _ := runAll(t, data, Options{})
	textSamples := splitSamples(string(text))

	// JSON: one object per sample, in order, each frame carrying how it
	// was recovered; the close samples have the chain gdb prints.
	type jframe struct {
		PC, Module, Symbol, How string
		Inlined, Kernel         bool
	}
	type jsample struct {
		Index  int
		Event  string
		Frames []jframe
		Stop   string
	}
	var jsamples []jsample
	sc := bufio.NewScanner(bytes.NewReader(js))
	sc.Buffer(nil, 1<<24)
	// Every How there is (a sample the timer took in ld.so's
	// _dl_call_fini at exit, a frame without CFI there, was recovered by
	// its prologue: CI64's race pass).
	hows := map[string]bool{}
	for _, h := range []resolve.How{resolve.HowContext, resolve.HowCFI, resolve.HowFramePointer, resolve.HowLinkRegister,
		resolve.HowSignal, resolve.HowSignalMarker, resolve.HowBadCall, resolve.HowFrameless, resolve.HowPrologue,
		resolve.HowScan, resolve.HowCallchain, resolve.HowKernel, resolve.HowTailCall} {
		hows[string(h)] = true
	}
	for sc.Scan() {
		var s jsample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("JSON line %d: %v", len(jsamples), err)
		}
		if s.Index != len(jsamples) {
			t.Fatalf("JSON sample %d has index %d", len(jsamples), s.Index)
		}
		for _, f := range s.Frames {
			if !hows[f.How] || !strings.HasPrefix(f.PC, "0x") {
				t.Fatalf("sample %d: frame %+v", s.Index, f)
			}
		}
		jsamples = append(jsamples, s)
	}
	if len(jsamples) != len(textSamples) {
		t.Fatalf("JSON has %d samples, text %d", len(jsamples), len(textSamples))
	}
	closes := 0
	for _, s := range jsamples {
		var names []string
		for _, f := range s.Frames {
			if !f.Kernel && !f.Inlined {
				names = append(names, f.Symbol)
			}
		}
		if i := indexOf(names, "leaf"); i >= 0 && s.Event == "syscalls:sys_enter_close" {
			closes++
			if !hasPrefixChain(names[i:], "leaf", "mid", "top", "main") || s.Stop != "outermost" {
				t.Errorf("JSON close sample %d: %v, stop %s", s.Index, names, s.Stop)
			}
		}
	}
	if closes < 100 { // perf may lose some of the 200 under load
		t.Errorf("%d close samples in JSON; want about 200", closes)
	}

	// Folded: counts add up to the samples; the close stack is there,
	// outermost first, once for all the close samples.
	total := 0
	found := false
	for _, line := range strings.Split(strings.TrimSpace(string(folded)), "\n") {
		i := strings.LastIndexByte(line, ' ')
		n, err := strconv.Atoi(line[i+1:])
		if err != nil {
			t.Fatalf("folded line %q", line)
		}
		total += n
		if (strings.HasSuffix(line[:i], ";main;top;mid;leaf;__close") || strings.HasSuffix(line[:i], ";main;top;mid;leaf;__GI___close")) && n >= closes {
			found = true
		}
	}
	if total != len(textSamples) || !found {
		t.Errorf("folded: %d samples (want %d), close stack with %d found: %v\n%s", total, len(textSamples), closes, found, folded)
	}

	// pprof: one sample per recorded sample, every location mapped, the
	// close stack with leaf, mid, top, main in order.
	if len(prof.Sample) != len(textSamples) {
		t.Errorf("pprof has %d samples; want %d", len(prof.Sample), len(textSamples))
	}
	ok := 0
	for _, s := range prof.Sample {
		var names []string
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				names = append(names, l.Function.Name)
			}
		}
		if i := indexOf(names, "leaf"); i >= 0 && hasPrefixChain(names[i:], "leaf", "mid", "top", "main") {
			ok++
		}
	}
	if ok < closes {
		t.Errorf("pprof: %d samples with leaf, mid, top, main; want at least %d", ok, closes)
	}
}

// TestBuildIDMismatch: the program is rebuilt, different, at the same path
// after recording. The report must say so, naming both build-ids, and must
// not symbolize or unwind through the wrong file: the program's frames stay
// unnamed instead of being named from code that was not running.
func TestBuildIDMismatch(t *testing.T) {
	requirePerf(t)
	dir := t.TempDir()
	bin := build(t, dir, "chain", chainSrc, "-O2", "-g", "-fomit-frame-pointer")
	data := record(t, dir, bin)
	// perf's build-id cache holds a copy of the recorded binary; use an
	// empty one so the only candidate is the changed file.
	other := strings.Replace(chainSrc, "200000", "300001", 1) + "\nint pad(int x) { return x * 3; }\n"
	build(t, dir, "chain", other, "-O1", "-g")
	text, _, _, _, warnings := runAll(t, data, Options{BuildIDDir: t.TempDir()})
	warned := false
	for _, w := range warnings {
		if strings.Contains(w, "build-id mismatch") && strings.Contains(w, bin) {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no build-id mismatch warning; warnings: %v", warnings)
	}
	if bytes.Contains(text, []byte(" leaf+")) || bytes.Contains(text, []byte(" mid+")) {
		t.Errorf("frames were named from the rebuilt binary")
	}
	if !bytes.Contains(text, []byte("[unknown] ("+bin+")")) {
		t.Errorf("the program's frames are not reported as unknown frames of %s", bin)
	}
}

// TestReplacedWithoutBuildID: perf record lists in HEADER_BUILD_ID only the
// objects with sampled IPs, so a program seen only in the call chains of
// close tracepoint samples (the IPs are in libc) has no build-id in the
// recording. Rebuilt, different, at the same path, perf script names its
// frames from the new build; ustack, the recording made on this machine,
// sees that the path is another inode than the process mapped (MMAP2's
// device and inode) and refuses it with one warning naming the file and
// both inodes, leaving its frames unnamed.
func TestReplacedWithoutBuildID(t *testing.T) {
	dir := t.TempDir()
	bin, data := recordWithoutBuildID(t, dir)
	if !strings.Contains(testprog.Script(t, data), " mid+") {
		t.Skip("perf script shows no frame of mid before the rebuild")
	}
	build(t, dir, "chain", strings.ReplaceAll(chainSrc, "mid", "rebuilt_mid"), "-O1", "-g")
	script := testprog.Script(t, data)
	t.Logf("perf script names %d frames from the rebuilt program", strings.Count(script, " rebuilt_mid+"))

	text, _, _, _, warnings := runAll(t, data, Options{BuildIDDir: t.TempDir()})
	mine := warningsAbout(warnings, bin+":")
	require.Len(t, mine, 1, "one warning naming %s: %q", bin, warnings)
	require.Contains(t, mine[0], "not the mapped file")
	require.Contains(t, mine[0], "inode")
	require.NotContains(t, string(text), "rebuilt_mid", "frames named from the rebuilt program")
	require.NotContains(t, string(text), " mid+", "frames named from a program that is gone")
	require.Contains(t, string(text), "[unknown] ("+bin+")")

	// The warning's way out, for a user who knows the file is the same
	// build: --symfs / takes the files as they are now (here the rebuilt
	// one, whose names the user then asked for).
	require.Contains(t, mine[0], "--symfs /")
	text, _, _, _, warnings = runAll(t, data, Options{BuildIDDir: t.TempDir(), SymFS: "/"})
	require.Empty(t, warningsAbout(warnings, bin+":"), "with --symfs /")
	require.Contains(t, string(text), " rebuilt_mid+", "with --symfs /")
}

// recordWithoutBuildID builds chainSrc in dir and records its close
// tracepoints with perf, whose IPs are in libc: perf lists no build-id for
// the program (the test skips where it does).
func recordWithoutBuildID(t *testing.T, dir string) (bin, data string) {
	t.Helper()
	requirePerf(t)
	bin = build(t, dir, "chain", chainSrc, "-O2", "-g", "-fomit-frame-pointer")
	data = testprog.Record(t, filepath.Join(dir, "close.data"), "-e", "syscalls:sys_enter_close", "--call-graph", "dwarf", "--", bin)
	if ids := testprog.Output(t, testprog.PerfCommand(t, "buildid-list", "-i", data)); strings.Contains(ids, bin) {
		t.Skipf("perf listed a build-id for %s (no need to guess):\n%s", bin, ids)
	}
	return bin, data
}

// TestOverwrittenInPlaceWithoutBuildID: TestReplacedWithoutBuildID's
// program, but the new build is copied over the old file (cp onto an
// existing file keeps its inode and generation), so the inodes cannot
// tell. Before, its frames were named from the new build, and stacks
// through it were called complete (a bad-input sweep's case: 46 stacks of
// lib_work <- padfn, outermost). The file's modification time, after the
// recording ended (Options.RecordingEnd, the recording file's own time),
// tells: one warning naming the file and both times, its frames unnamed.
func TestOverwrittenInPlaceWithoutBuildID(t *testing.T) {
	bin, data := recordWithoutBuildID(t, t.TempDir())
	st, err := os.Stat(data)
	require.NoError(t, err)
	end := st.ModTime()
	other := build(t, t.TempDir(), "chain", strings.ReplaceAll(chainSrc, "mid", "rebuilt_mid"), "-O1", "-g")
	b, err := os.ReadFile(other)
	require.NoError(t, err)
	f, err := os.OpenFile(bin, os.O_WRONLY|os.O_TRUNC, 0)
	require.NoError(t, err)
	_, err = f.Write(b)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.True(t, strings.Contains(testprog.Script(t, data), " rebuilt_mid+"), "perf script does not name frames from the copied-over program")

	text, _, _, _, warnings := runAll(t, data, Options{BuildIDDir: t.TempDir(), RecordingEnd: end})
	mine := warningsAbout(warnings, bin+":")
	require.Len(t, mine, 1, "one warning naming %s: %q", bin, warnings)
	require.Contains(t, mine[0], "not the mapped file")
	require.Contains(t, mine[0], "after the recording ended")
	require.NotContains(t, string(text), "rebuilt_mid", "frames named from the program copied over the mapped one")
	require.Contains(t, string(text), "[unknown] ("+bin+")")
}

// TestGroupReadWarned: perf record -e '{cpu-clock,page-faults}:S' samples
// the leader only; each sample carries the group's counts, from which perf
// script also makes page-faults samples. ustack reports the leader's
// samples and said nothing of the others; it now says so, naming both.
func TestGroupReadWarned(t *testing.T) {
	requirePerf(t)
	dir := t.TempDir()
	bin := build(t, dir, "chain", chainSrc, "-O2", "-g")
	data := testprog.Record(t, filepath.Join(dir, "group.data"), "-e", "{cpu-clock,page-faults}:S", "--call-graph", "dwarf", "--", bin)
	script := testprog.Script(t, data, "-F", "event")
	if !strings.Contains(script, "page-faults") {
		t.Skipf("perf script shows no page-faults samples made from the group's counts:\n%.400s", script)
	}
	_, _, _, _, warnings := runAll(t, data, Options{BuildIDDir: t.TempDir()})
	mine := warningsAbout(warnings, "cpu-clock:")
	require.Len(t, mine, 1, "warnings: %q", warnings)
	require.Contains(t, mine[0], "samples of page-faults")
}
