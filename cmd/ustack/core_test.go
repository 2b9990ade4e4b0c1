package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ulikunitz/xz"

	"github.com/ustack/ustack/internal/coretruth"
	"github.com/ustack/ustack/internal/testprog"
)

var coreTestdata = filepath.Join("..", "..", "testdata")

// coreFixture returns the truth of testdata/cores/<name> ("x86_64/threads"),
// a --symfs holding its objects, and the uncompressed core.
func coreFixture(t *testing.T, name string) (tr *coretruth.Truth, symfs string, raw []byte) {
	t.Helper()
	all, err := coretruth.Load(coreTestdata)
	require.NoError(t, err)
	for _, c := range all {
		if c.Arch+"/"+c.Name == name {
			tr = c
		}
	}
	require.NotNil(t, tr, "fixture %s", name)
	symfs = t.TempDir()
	_, err = tr.Symfs(symfs, coreTestdata)
	require.NoError(t, err)
	f, err := os.Open(filepath.Join(coreTestdata, tr.Core))
	require.NoError(t, err)
	defer f.Close()
	d, err := zstd.NewReader(f)
	require.NoError(t, err)
	defer d.Close()
	raw, err = io.ReadAll(d)
	require.NoError(t, err)
	return tr, symfs, raw
}

// runCore runs ustack report with args, failing the test when it takes
// longer than testprog.Timeout (a hang: a report of a test core takes
// seconds, several times that on a busy machine).
func runCore(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	// No build-id cache: the objects are the symfs's or none.
	noCache := t.TempDir()
	go func() {
		done <- run(append([]string{"report", "--kallsyms", "-", "--buildid-dir", noCache}, args...), &out, &errb)
	}()
	select {
	case code = <-done:
	case <-time.After(testprog.Timeout):
		t.Fatalf("ustack report %s did not finish in %v", strings.Join(args, " "), testprog.Timeout)
	}
	return code, out.String(), errb.String()
}

type coreLine struct {
	Tid    int
	Event  string
	Signal *string
	Stop   *string
	Frames []struct{ PC string }
}

// TestReportCoreCompressed reports a core stored plain, with zstd (as
// committed, as systemd-coredump does), xz and lz4, by -i and as the
// argument, and from standard input: every format gives the same output for all four, and the text
// and JSON name the threads gdb lists, the signalled one first with its
// signal.
func TestReportCoreCompressed(t *testing.T) {
	for _, name := range []string{"x86_64/threads", "aarch64/threads"} {
		t.Run(name, func(t *testing.T) {
			tr, symfs, raw := coreFixture(t, name)
			dir := t.TempDir()
			plain := filepath.Join(dir, "core")
			require.NoError(t, os.WriteFile(plain, raw, 0o600))
			var xzb, lz4b bytes.Buffer
			xw, err := xz.NewWriter(&xzb)
			require.NoError(t, err)
			_, err = xw.Write(raw)
			require.NoError(t, err)
			require.NoError(t, xw.Close())
			lw := lz4.NewWriter(&lz4b)
			_, err = lw.Write(raw)
			require.NoError(t, err)
			require.NoError(t, lw.Close())
			inputs := []string{plain, filepath.Join(coreTestdata, tr.Core), plain + ".xz", plain + ".lz4"}
			require.NoError(t, os.WriteFile(inputs[2], xzb.Bytes(), 0o600))
			require.NoError(t, os.WriteFile(inputs[3], lz4b.Bytes(), 0o600))

			// From a pipe (coredumpctl dump | ustack report -i -), zstd
			// and plain.
			for _, in := range []string{inputs[1], plain} {
				data, err := os.ReadFile(in)
				require.NoError(t, err)
				stdinReader = bytes.NewReader(data)
				code, fromPipe, errs := runCore(t, "--symfs", symfs, "--format", "json", "-i", "-")
				stdinReader = nil
				require.Equal(t, exitOK, code, errs)
				_, fromFile, _ := runCore(t, "--symfs", symfs, "--format", "json", in)
				assert.Equal(t, fromFile, fromPipe, "%s from standard input", in)
			}

			for _, format := range []string{"text", "json", "folded", "pprof", "flamegraph", "speedscope"} {
				var first string
				for i, in := range inputs {
					args := []string{"--symfs", symfs, "--format", format, in}
					if i%2 == 1 {
						args = []string{"--symfs", symfs, "--format", format, "-i", in}
					}
					code, out, errs := runCore(t, args...)
					require.Equal(t, exitOK, code, "%s %s: %s", format, in, errs)
					require.NotEmpty(t, out, "%s %s", format, in)
					if i == 0 {
						first = out
						continue
					}
					assert.Equal(t, first, out, "%s: %s differs from the plain core", format, in)
				}
				switch format {
				case "json":
					lines := testprog.JSONLines[coreLine](t, []byte(first))
					require.Len(t, lines, len(tr.GDB.Threads))
					assert.Equal(t, tr.GDB.SelectedLWP, lines[0].Tid)
					require.NotNil(t, lines[0].Signal)
					assert.Equal(t, "SIGSEGV", *lines[0].Signal)
					for _, l := range lines[1:] {
						assert.Nil(t, l.Signal, "tid %d", l.Tid)
					}
				case "text":
					head := strings.SplitN(first, "\n", 2)[0]
					assert.Equal(t, fmt.Sprintf("threads %d/%d core: SIGSEGV", tr.EuReadelf.PRPSInfo.PID, tr.GDB.SelectedLWP), strings.Join(strings.Fields(head), " "))
					for _, g := range tr.GDB.Threads {
						assert.Contains(t, first, fmt.Sprintf("/%d ", g.LWP))
					}
				}
			}
		})
	}
}

// TestReportCoreInfo checks --core-info against gdb's reading of the core:
// the signal with its fault address, every thread, every mapping, and the
// objects found with the build-ids eu-unstrip read from the core.
func TestReportCoreInfo(t *testing.T) {
	tr, symfs, _ := coreFixture(t, "x86_64/threads")
	code, out, errs := runCore(t, "--symfs", symfs, "--core-info", filepath.Join(coreTestdata, tr.Core))
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, out, fmt.Sprintf("signal: SIGSEGV (SEGV_MAPERR) fault address %s\n", tr.GDB.Siginfo.Addr))
	for _, g := range tr.GDB.Threads {
		assert.Contains(t, out, fmt.Sprintf("  tid %d pc %s sp %s", g.LWP, g.Regs["rip"], g.Regs["rsp"]))
	}
	for _, m := range tr.GDB.Mappings {
		assert.Regexp(t, fmt.Sprintf(`(?m)^  0*%s-0*%s 0*%s %s$`, strings.TrimPrefix(m.Start, "0x"), strings.TrimPrefix(m.End, "0x"),
			strings.TrimPrefix(m.Offset, "0x"), m.Path), out)
	}
	for _, u := range tr.EuUnstrip {
		assert.Regexp(t, fmt.Sprintf(`build-id %s: found `, u.BuildID), out, u.Name)
	}
	assert.NotContains(t, out, "to use them", "every object was found")

	// The program gone from the root: it is missing, and the list ends
	// with how to give it.
	require.NoError(t, os.Rename(filepath.Join(symfs, tr.Exe), filepath.Join(t.TempDir(), "gone")))
	code, out, errs = runCore(t, "--symfs", symfs, "--core-info", filepath.Join(coreTestdata, tr.Core))
	require.Equal(t, exitOK, code, errs)
	assert.Regexp(t, `(?m)^  `+regexp.QuoteMeta(tr.Exe)+` at 0x[0-9a-f]+, build-id [0-9a-f]+: missing: not found under .*\n(  .*\n)*`+
		regexp.QuoteMeta("to use them: --exe FILE gives the main executable (a file of the build the core ran)\n"), out)
}

// TestReportCoreExe reports a core whose program is not where the core
// says (an empty place in the symfs) with --exe: the same frames as with the
// program in place; a different program given as --exe is refused with a
// warning naming both build-ids (the core's, from eu-unstrip, and the
// file's), and the report goes on without it.
func TestReportCoreExe(t *testing.T) {
	tr, symfs, _ := coreFixture(t, "x86_64/threads")
	core := filepath.Join(coreTestdata, tr.Core)
	code, want, errs := runCore(t, "--symfs", symfs, "--format", "json", core)
	require.Equal(t, exitOK, code, errs)
	exe := filepath.Join(t.TempDir(), "threads")
	require.NoError(t, os.Rename(filepath.Join(symfs, tr.Exe), exe))

	code, out, errs := runCore(t, "--symfs", symfs, "--format", "json", core)
	require.Equal(t, exitOK, code, errs)
	assert.NotEqual(t, want, out, "without the program its frames are not symbolized")
	assert.Contains(t, errs, tr.Exe+": not found")
	// How to fix it, once, right after the list of missing objects.
	fix := "ustack: to use them: --exe FILE gives the main executable (a file of the build the core ran)\n"
	assert.Regexp(t, "(?m)^  "+regexp.QuoteMeta(tr.Exe)+": not found under .*\n"+regexp.QuoteMeta(fix), errs)
	assert.Equal(t, 1, strings.Count(errs, "to use them"), errs)
	// With a root lacking everything, the other objects get --symfs, and,
	// no debuginfod server being named, DEBUGINFOD_URLS (the core's
	// memory gives their build-ids).
	t.Setenv("DEBUGINFOD_URLS", "")
	t.Setenv("DEBUGINFOD_CACHE_PATH", t.TempDir())
	empty := t.TempDir()
	code, _, errs = runCore(t, "--symfs", empty, "--format", "json", core)
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, errs, "ustack: to use them: --exe FILE gives the main executable (a file of the build the core ran); "+
		"--symfs "+empty+" finds them when copied there at their recorded paths; DEBUGINFOD_URLS=URL fetches them by build-id from a debuginfod server\n")

	code, out, errs = runCore(t, "--symfs", symfs, "--format", "json", "--exe", exe, core)
	require.Equal(t, exitOK, code, errs)
	assert.Equal(t, want, out, "--exe gives the program's frames back")
	assert.NotContains(t, errs, "warning")

	var coreID string
	for _, u := range tr.EuUnstrip {
		if u.Name == filepath.Base(tr.Exe) {
			coreID = u.BuildID
		}
	}
	require.NotEmpty(t, coreID)
	other := filepath.Join(coreTestdata, "cores", "x86_64", "bin", "crash_O2")
	code, _, errs = runCore(t, "--symfs", symfs, "--format", "json", "--exe", other, core)
	require.Equal(t, exitOK, code, errs)
	assert.Regexp(t, `warning: --exe .*crash_O2: build-id mismatch: the core's `+tr.Exe+` has `+coreID+`, .*crash_O2 has [0-9a-f]{40}; not used`, errs)
	assert.NotContains(t, errs, "--exe FILE", "--exe was given: its warning says why it was not used")
}

// TestReportCoreDamaged feeds ustack report cores cut short, with zeroed
// ranges and with flipped bits: it never crashes or hangs; a core whose
// notes survive gives every thread (exit 3, naming the file and what is
// missing); one it cannot read at all is a clear error naming the file.
func TestReportCoreDamaged(t *testing.T) {
	tr, symfs, raw := coreFixture(t, "x86_64/threads")
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, data, 0o600))
		return p
	}
	threads := len(tr.GDB.Threads)

	// Cut in the memory, past the notes: every thread, exit 3.
	p := write("cut", raw[:len(raw)*3/4])
	code, out, errs := runCore(t, "--symfs", symfs, "--format", "json", p)
	assert.Equal(t, exitPartial, code, errs)
	assert.Len(t, testprog.JSONLines[coreLine](t, []byte(out)), threads)
	assert.Contains(t, errs, p)
	assert.Contains(t, errs, "truncated")

	// Cut inside the ELF header: not a core, a clear error.
	p = write("header", raw[:40])
	code, out, errs = runCore(t, p)
	assert.Equal(t, exitError, code, errs)
	assert.Empty(t, out)
	assert.Contains(t, errs, p)

	// The program headers zeroed: the reader finds no notes, no thread.
	z := bytes.Clone(raw)
	for i := 64; i < 64+56*4 && i < len(z); i++ {
		z[i] = 0
	}
	p = write("zeroed-phdrs", z)
	code, _, errs = runCore(t, "--format", "json", p)
	assert.Contains(t, []int{exitNoSamples, exitPartial, exitError}, code, errs)
	assert.Contains(t, errs, p)

	// The stack of the signalled thread zeroed: every thread still
	// reported; the zeroed one stops early.
	z = bytes.Clone(raw)
	for i := len(z) / 2; i < len(z)/2+1<<16 && i < len(z); i++ {
		z[i] = 0
	}
	p = write("zeroed-memory", z)
	code, out, errs = runCore(t, "--symfs", symfs, "--format", "json", p)
	assert.Equal(t, exitOK, code, errs)
	assert.Len(t, testprog.JSONLines[coreLine](t, []byte(out)), threads)

	// Flipped bits anywhere, in the notes most: no crash, no hang; what is
	// printed is valid JSON.
	rng := rand.New(rand.NewSource(15))
	for i := 0; i < 40; i++ {
		f := bytes.Clone(raw)
		for k := 0; k < 1+rng.Intn(8); k++ {
			at := rng.Intn(len(f))
			if k%2 == 0 {
				at = rng.Intn(min(len(f), 16<<10)) // headers and notes
			}
			f[at] ^= 1 << rng.Intn(8)
		}
		p := write(fmt.Sprintf("flip%d", i), f)
		code, out, errs := runCore(t, "--symfs", symfs, "--format", "json", p)
		assert.Contains(t, []int{exitOK, exitPartial, exitError, exitNoSamples}, code, errs)
		if code != exitOK {
			assert.Contains(t, errs, "ustack report: ", "flip %d: a non-zero exit says why", i)
		}
		testprog.JSONLines[coreLine](t, []byte(out))
	}
}

// TestReportCoreOptions: --tid selects threads of a core; a symfs object of
// another build is refused with a warning naming the core's build-id
// (eu-unstrip's) and the file's; -F and --time are usage errors for a core;
// a compressed file that holds no core says so.
func TestReportCoreOptions(t *testing.T) {
	tr, symfs, _ := coreFixture(t, "x86_64/threads")
	core := filepath.Join(coreTestdata, tr.Core)
	tid := tr.GDB.Threads[len(tr.GDB.Threads)-1].LWP
	code, out, errs := runCore(t, "--symfs", symfs, "--format", "json", "--tid", fmt.Sprint(tid), core)
	require.Equal(t, exitOK, code, errs)
	lines := testprog.JSONLines[coreLine](t, []byte(out))
	require.Len(t, lines, 1)
	assert.Equal(t, tid, lines[0].Tid)

	// libc.so.6 replaced by ld.so: another build-id.
	var libc, libcID, ldID string
	for rec := range tr.Files {
		if filepath.Base(rec) == "libc.so.6" {
			libc = rec
		}
	}
	for _, u := range tr.EuUnstrip {
		switch u.Name {
		case "libc.so.6":
			libcID = u.BuildID
		case "ld-linux-x86-64.so.2":
			ldID = u.BuildID
		}
	}
	require.NotEmpty(t, libc)
	require.NotEmpty(t, libcID)
	require.NotEmpty(t, ldID)
	require.NoError(t, os.Remove(filepath.Join(symfs, libc)))
	ld, err := os.ReadFile(filepath.Join(coreTestdata, "objects", "x86_64", "ld-linux-x86-64.so.2"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(symfs, libc), ld, 0o644))
	code, _, errs = runCore(t, "--symfs", symfs, core)
	require.Equal(t, exitOK, code, errs)
	assert.Regexp(t, `warning: `+libc+`: build-id mismatch: the core has `+libcID+`, .*`+libc+` has `+ldID, errs)

	code, _, errs = runCore(t, "-F", "comm,tid", core)
	assert.Equal(t, exitUsage, code, errs)
	code, _, errs = runCore(t, "--time", "1,2", core)
	assert.Equal(t, exitUsage, code, errs)

	var zb bytes.Buffer
	zw, err := zstd.NewWriter(&zb)
	require.NoError(t, err)
	_, err = zw.Write([]byte("PERFILE2 is no core"))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	p := filepath.Join(t.TempDir(), "rec.data.zst")
	require.NoError(t, os.WriteFile(p, zb.Bytes(), 0o600))
	code, _, errs = runCore(t, p)
	assert.Equal(t, exitError, code)
	assert.Contains(t, errs, p+": not an ELF core dump")
	assert.Contains(t, errs, "zstd-compressed")
}

// TestReportCoreVerbose: --verbose says for a core, as for a recording,
// where each object's information came from: on stderr, and in JSON as the
// last record; the objects are the ones eu-unstrip lists for the core,
// with its build-ids.
func TestReportCoreVerbose(t *testing.T) {
	tr, symfs, _ := coreFixture(t, "x86_64/threads")
	core := filepath.Join(coreTestdata, tr.Core)
	code, out, errs := runCore(t, "--symfs", symfs, "--verbose", "--format", "json", core)
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, errs, "where the information of")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var last struct {
		Summary *struct {
			Objects []struct {
				Path    string `json:"path"`
				BuildID string `json:"build_id"`
			} `json:"objects"`
		} `json:"summary"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &last))
	require.NotNil(t, last.Summary, "the JSON does not end with a summary record")
	got := map[string]string{}
	for _, o := range last.Summary.Objects {
		got[filepath.Base(o.Path)] = o.BuildID
	}
	n := 0
	for _, u := range tr.EuUnstrip {
		if id, ok := got[u.Name]; ok {
			assert.Equal(t, u.BuildID, id, u.Name)
			n++
		}
	}
	assert.GreaterOrEqual(t, n, 3, "summary objects %v; eu-unstrip %v", got, tr.EuUnstrip)
}

// TestReportCoreOutermostProven checks that a thread is called complete
// (stop outermost) only when it is: in the threads core, whole or cut
// short, with its objects, every thread that says outermost has as many
// frames as gdb's backtrace of it; without them (an empty --symfs), where
// each stack is the one frame in the missing program, none does, and the
// summary counts no complete stack.
func TestReportCoreOutermostProven(t *testing.T) {
	tr, symfs, raw := coreFixture(t, "x86_64/threads")
	gdbFrames := map[int]int{}
	for _, g := range tr.GDB.Threads {
		gdbFrames[g.LWP] = len(g.Frames)
	}
	threads := len(tr.GDB.Threads)
	dir := t.TempDir()
	whole := filepath.Join(dir, "whole")
	require.NoError(t, os.WriteFile(whole, raw, 0o600))
	cut := filepath.Join(dir, "cut")
	require.NoError(t, os.WriteFile(cut, raw[:len(raw)*3/4], 0o600))
	for _, core := range []string{whole, cut} {
		t.Run(filepath.Base(core), func(t *testing.T) {
			_, out, errs := runCore(t, "--symfs", symfs, "--format", "json", core)
			complete := 0
			for _, l := range testprog.JSONLines[coreLine](t, []byte(out)) {
				require.NotNil(t, l.Stop, "thread %d", l.Tid)
				if *l.Stop == "outermost" {
					complete++
					assert.Len(t, l.Frames, gdbFrames[l.Tid], "thread %d says outermost: gdb's frames", l.Tid)
				}
			}
			assert.Positive(t, complete, "with its objects, some threads are complete:\n%s", errs)

			_, out, errs = runCore(t, "--symfs", t.TempDir(), "--format", "json", core)
			lines := testprog.JSONLines[coreLine](t, []byte(out))
			require.Len(t, lines, threads)
			for _, l := range lines {
				require.NotNil(t, l.Stop, "thread %d", l.Tid)
				assert.NotEqual(t, "outermost", *l.Stop, "thread %d without its program: %d frames, gdb %d", l.Tid, len(l.Frames), gdbFrames[l.Tid])
			}
			assert.Contains(t, errs, fmt.Sprintf("ustack: %d threads, 0 of %d unwound to the outermost frame, %d stopped early (", threads, threads, threads))
		})
	}
}

// TestReportCoreThreadFields: a core's threads were not sampled: JSON's
// cpu, time and period are null, not 0, 0 and 1; text heads the thread
// that received the signal "core: SIGNAL" and the others "core" (no
// dangling "core: "); speedscope opens on the signalled thread. Which
// thread that is, and its signal, are gdb's (the fixture's truth).
func TestReportCoreThreadFields(t *testing.T) {
	tr, symfs, _ := coreFixture(t, "x86_64/threads")
	core := filepath.Join(coreTestdata, tr.Core)
	signalled := tr.GDB.SelectedLWP
	require.NotNil(t, tr.GDB.Siginfo)
	require.Equal(t, 11, tr.GDB.Siginfo.Signo)

	code, out, errs := runCore(t, "--symfs", symfs, "--format", "json", core)
	require.Equal(t, exitOK, code, errs)
	recs := testprog.JSONLines[map[string]any](t, []byte(out))
	require.NotEmpty(t, recs)
	for _, r := range recs {
		for _, k := range []string{"cpu", "time", "period"} {
			v, ok := r[k]
			assert.True(t, ok, "no %q key", k)
			assert.Nil(t, v, "thread %v: %s", r["tid"], k)
		}
	}

	code, out, errs = runCore(t, "--symfs", symfs, core)
	require.Equal(t, exitOK, code, errs)
	header := regexp.MustCompile(`(?m)^\S+ +\d+/(\d+) +core(.*)$`)
	heads := header.FindAllStringSubmatch(out, -1)
	require.Len(t, heads, len(recs))
	for _, h := range heads {
		if h[1] == strconv.Itoa(signalled) {
			assert.Equal(t, ": SIGSEGV", h[2], "the signalled thread's header: %q", h[0])
		} else {
			assert.Equal(t, "", h[2], "a thread without a signal: %q", h[0])
		}
	}

	code, out, errs = runCore(t, "--symfs", symfs, "--format", "speedscope", core)
	require.Equal(t, exitOK, code, errs)
	var ss struct {
		Active   int `json:"activeProfileIndex"`
		Profiles []struct {
			Name string `json:"name"`
		} `json:"profiles"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &ss))
	require.Less(t, ss.Active, len(ss.Profiles))
	assert.Contains(t, ss.Profiles[ss.Active].Name, fmt.Sprintf("/%d ", signalled), "speedscope opens on %q", ss.Profiles[ss.Active].Name)
}

// TestReportGoroutines: --goroutines on the committed Go core (goprog
// stopped in main.c and sent SIGABRT) reports goroutine 1 running on the
// signalled thread, in main.c called by main.b, main.a, main.main (the
// program's chain, under the runtime's crash path), and the runtime's
// goroutines waiting; on a C program's core it fails naming the reason,
// and on a recording it is refused as a core-only flag.
func TestReportGoroutines(t *testing.T) {
	tr, symfs, _ := coreFixture(t, "x86_64/go_abort")
	code, out, errs := runCore(t, "--symfs", symfs, "--goroutines", filepath.Join(coreTestdata, tr.Core))
	require.Equal(t, exitOK, code, errs)
	main := tr.GDB.Threads[0]
	require.Regexp(t, fmt.Sprintf(`(?m)^goprog +\d+/%d +goroutine: 1 \[running\] on thread %d .*SIGABRT\n(\s+\S+ .*\n)*\s+\S+ main\.c\+0x[0-9a-f]+ \(.*goprog\)\n\s+\S+ main\.b\+.*\n\s+\S+ main\.a\+.*\n\s+\S+ main\.main\+`, main.LWP, main.LWP), out)
	require.Regexp(t, `(?m)^goprog +\d+/-1 +goroutine: \d+ \[(force gc \(idle\)|GC sweep wait|GC scavenge wait|finalizer wait)\] created by runtime\.`, out)
	// The summary line counts goroutines, not the core's threads.
	require.Regexp(t, `(?m)^ustack: \d+ goroutines, `, errs)

	ctr, csymfs, _ := coreFixture(t, "x86_64/threads")
	code, _, errs = runCore(t, "--symfs", csymfs, "--goroutines", filepath.Join(coreTestdata, ctr.Core))
	require.Equal(t, exitError, code)
	require.Contains(t, errs, "--goroutines: ")
	require.Contains(t, errs, "is not a Go program")

	code, _, errs = runCore(t, "--goroutines", "-i", filepath.Join("..", "..", "perfdata", "testdata", "dwarf.data"))
	require.Equal(t, exitUsage, code)
	require.Contains(t, errs, "--goroutines are for core dumps")
}
