package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/go-delve/delve/pkg/proc"
	"github.com/go-delve/delve/pkg/proc/core"
	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/goruntime"
	"github.com/ustack/ustack/internal/testprog"
)

// goOldToolchain is the second Go the goroutine tests build with, the
// oldest that goruntime reads (.ci/run fetches it into the module cache).
const goOldToolchain = "go1.21.13"

// goCrash is a Go program crashed with GOTRACEBACK=crash: its core, its
// executable and the runtime's traceback of every goroutine.
type goCrash struct {
	core, exe string
	trace     map[uint64]*tracedGoroutine
	order     []uint64
}

// tracedGoroutine is one goroutine of the runtime's crash traceback.
type tracedGoroutine struct {
	status      string // between the brackets, without ", N minutes"
	frames      []tracedFrame
	createdBy   string
	creator     uint64
	createdFile string
	createdLine int
}

type tracedFrame struct {
	fn, file string
	line     int
}

func (f tracedFrame) String() string {
	return fmt.Sprintf("%s %s:%d", f.fn, filepath.Base(f.file), f.line)
}

// goBuild says how crashGoProgram builds the program: with the Go
// toolchain of that version ("" for the local one), with -ldflags='-s -w'
// (stripped), as a position-independent executable (pie), with cgo.
type goBuild struct {
	toolchain          string
	stripped, pie, cgo bool
	race               bool // -race (with cgo)
	// goarch is the architecture to build for: runtime.GOARCH when "".
	goarch string
}

// crashGoProgram builds testdata/goroutines as b says, runs it with
// GOMAXPROCS=1 and GOTRACEBACK=crash so that it prints every goroutine and
// dumps core, and returns the core with the printed traceback. It skips
// where the kernel's core_pattern does not write a file in the working
// directory (a pipe to systemd-coredump or apport), or the toolchain is
// missing.
func crashGoProgram(t testing.TB, b goBuild, args ...string) *goCrash {
	t.Helper()
	p := fileCorePattern(t)
	exe, run := buildGoTestProgram(t, b, "goroutines")
	var stderr bytes.Buffer
	cmd := exec.Command("sh", append([]string{"-c", `ulimit -c unlimited && exec "$0" "$@"`, exe}, args...)...)
	cmd.Dir, cmd.Stderr = run, &stderr
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1", "GOTRACEBACK=crash")
	err := cmd.Run()
	c := &goCrash{exe: exe, core: coreOf(t, err, run, p, stderr.String())}
	c.trace, c.order = parseGoTraceback(t, stderr.String())
	return c
}

// fileCorePattern returns the kernel's core_pattern; it skips where that
// does not write cores as files in the working directory (a pipe to
// systemd-coredump or apport, a directory).
func fileCorePattern(t testing.TB) string {
	t.Helper()
	pattern, err := os.ReadFile("/proc/sys/kernel/core_pattern")
	if err != nil {
		t.Skipf("cannot read core_pattern: %v", err)
	}
	p := strings.TrimSpace(string(pattern))
	if strings.HasPrefix(p, "|") || strings.Contains(p, "/") {
		t.Skipf("core_pattern is %q: the test needs the kernel to write cores as files in the working directory (core_pattern 'core' or 'core.%%p')", p)
	}
	return p
}

// buildGoTestProgram builds testdata/NAME/main.go as b says and returns the
// executable and an empty directory to run it in.
func buildGoTestProgram(t testing.TB, b goBuild, name string) (exe, run string) {
	t.Helper()
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("testdata", name, "main.go"))
	require.NoError(t, err)
	ldflags := ""
	if b.stripped {
		ldflags = "-s -w"
	}
	var extra []string
	if b.pie {
		extra = append(extra, "-buildmode=pie")
	}
	if b.race {
		extra = append(extra, "-race")
	}
	if b.cgo {
		exe = testprog.BuildCgo(t, dir, name, string(src), b.toolchain, ldflags, extra...)
	} else {
		goarch := b.goarch
		if goarch == "" {
			goarch = runtime.GOARCH
		}
		exe = testprog.BuildGo(t, dir, name, string(src), b.toolchain, goarch, ldflags, extra...)
	}
	run = filepath.Join(dir, "run")
	require.NoError(t, os.Mkdir(run, 0o755))
	return exe, run
}

// coreOf returns the core a Go program run in directory run dumped when it
// ended with err (SIGABRT, core dumped); it fails when the program did not
// crash and skips when no core was written (core_pattern p, ulimit -c).
func coreOf(t testing.TB, err error, run, p, stderr string) string {
	t.Helper()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("the program did not crash: %v\n%s", err, tail(stderr, 2000))
	}
	ws, _ := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGABRT || !ws.CoreDump() {
		t.Skipf("the program ended with %v, no core dump (core_pattern %q, ulimit -c): %s", ee, p, tail(stderr, 400))
	}
	entries, err := os.ReadDir(run)
	require.NoError(t, err)
	if len(entries) != 1 {
		t.Skipf("core_pattern %q: %d files in the working directory after the crash, not one core", p, len(entries))
	}
	return filepath.Join(run, entries[0].Name())
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// parseGoTraceback reads the runtime's traceback of every goroutine:
//
//	goroutine 7 gp=0xc000007a40 m=nil [chan receive]:   (Go 1.21: goroutine 7 [chan receive]:)
//	runtime.gopark(0x0?, ...)
//		/usr/local/go/src/runtime/proc.go:462 +0xce fp=... sp=... pc=...
//	created by main.main in goroutine 1
//		/src/main.go:68 +0x156
//
// The runtime names runtime.gopanic "panic"; it is given its own name.
// Goroutine 0 (an M's g0, printed by threads the crash sent SIGQUIT) is
// left out: it is no goroutine of allgs.
func parseGoTraceback(t testing.TB, text string) (map[uint64]*tracedGoroutine, []uint64) {
	t.Helper()
	out := map[uint64]*tracedGoroutine{}
	var order []uint64
	var cur *tracedGoroutine
	var pending string // a function line waiting for its file:line
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "goroutine "):
			f := strings.Fields(line)
			id, err := strconv.ParseUint(f[1], 10, 64)
			require.NoError(t, err, line)
			open, end := strings.Index(line, "["), strings.LastIndex(line, "]")
			require.True(t, open > 0 && end > open, line)
			status, _, _ := strings.Cut(line[open+1:end], ",")
			cur = &tracedGoroutine{status: status}
			if id != 0 {
				require.NotContains(t, out, id, "goroutine %d printed twice", id)
				out[id] = cur
				order = append(order, id)
			}
			pending = ""
		case cur == nil:
		case line == "":
			cur = nil
		case strings.HasPrefix(line, "created by "):
			rest := strings.TrimPrefix(line, "created by ")
			fn, in, ok := strings.Cut(rest, " in goroutine ")
			cur.createdBy = fn
			if ok {
				cur.creator, _ = strconv.ParseUint(in, 10, 64)
			}
			pending = "created by"
		case strings.HasPrefix(line, "\t"):
			loc := strings.Fields(line)[0]
			i := strings.LastIndex(loc, ":")
			require.True(t, i > 0, line)
			n, err := strconv.Atoi(loc[i+1:])
			require.NoError(t, err, line)
			if pending == "created by" {
				cur.createdFile, cur.createdLine = loc[:i], n
			} else if pending != "" {
				cur.frames = append(cur.frames, tracedFrame{fn: pending, file: loc[:i], line: n})
			}
			pending = ""
		default:
			fn := line
			if i := strings.LastIndex(fn, "("); i > 0 {
				fn = fn[:i]
			}
			if fn == "panic" {
				fn = "runtime.gopanic"
			}
			pending = fn
		}
	}
	require.NotEmpty(t, out, "no goroutine in the traceback:\n%s", tail(text, 2000))
	return out, order
}

// goroutineSample is what the test keeps of a goroutine sample.
type goroutineSample struct {
	g       Goroutine
	frames  []tracedFrame
	inlined []bool // frames[i] is inlined into frames[i+1]
	stop    string
}

// ustackGoroutines reports the core's goroutines.
func ustackGoroutines(t testing.TB, corePath string) map[uint64]*goroutineSample {
	t.Helper()
	var warnings []string
	opts := CoreOptions{Options: Options{Warn: func(s string) { warnings = append(warnings, s) }}, Goroutines: true}
	c, err := OpenCore(corePath, opts)
	require.NoError(t, err)
	defer c.Close()
	out := map[uint64]*goroutineSample{}
	sum, err := RunCore(c, opts, func(s *Sample) error {
		require.Equal(t, GoroutineEvent, s.Event)
		require.NotNil(t, s.Goroutine)
		gs := &goroutineSample{g: *s.Goroutine, stop: s.Stop + " " + s.StopErr}
		for _, f := range s.Frames {
			gs.frames = append(gs.frames, tracedFrame{fn: f.Symbol, file: f.File, line: f.Line})
			gs.inlined = append(gs.inlined, f.Inlined)
		}
		require.NotContains(t, out, s.Goroutine.ID, "goroutine %d reported twice", s.Goroutine.ID)
		out[s.Goroutine.ID] = gs
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, warnings)
	require.Equal(t, len(out), sum.Samples)
	return out
}

// TestGoroutinesMatchTraceback: Go programs with hundreds of goroutines
// blocked in channels, mutexes, sleeps, network reads and
// runtime.Gosched, crashed with GOTRACEBACK=crash, built with the local Go
// and with Go 1.21, with and without -ldflags='-s -w' (and a stripped
// position-independent one): every goroutine
// ustack finds in the core is one the runtime printed, with the same
// status, creator and stack, frame for frame by function and line
// (inlined frames included). The goroutine that panicked runs on the
// crashing thread: its stack from the thread's registers holds the
// runtime's crash path (raise, dieFromSignal, the signal handler) above
// what the traceback printed, which must be its outermost frames; so does
// the goroutine in read(2), on the thread blocked in the system call (the
// runtime prints its first frame where it entered the call, at the call
// to entersyscall: that frame is compared by function).
func TestGoroutinesMatchTraceback(t *testing.T) {
	for _, tc := range []struct {
		name string
		goBuild
	}{
		{"local", goBuild{}},
		{"local_stripped", goBuild{stripped: true}},
		{"local_pie_stripped", goBuild{stripped: true, pie: true}},
		{"go1.21", goBuild{toolchain: goOldToolchain}},
		{"go1.21_stripped", goBuild{toolchain: goOldToolchain, stripped: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := crashGoProgram(t, tc.goBuild, "40")
			got := ustackGoroutines(t, c.core)
			require.GreaterOrEqual(t, len(c.trace), 300, "the runtime printed %d goroutines", len(c.trace))
			var gotIDs []uint64
			for id := range got {
				gotIDs = append(gotIDs, id)
			}
			slices.Sort(gotIDs)
			wantIDs := slices.Clone(c.order)
			slices.Sort(wantIDs)
			require.Equal(t, wantIDs, gotIDs, "the goroutines")
			statuses := map[string]int{}
			for _, id := range c.order {
				want, g := c.trace[id], got[id]
				statuses[want.status]++
				require.Equal(t, want.status, g.g.bracket(), "goroutine %d's status", id)
				require.Equal(t, want.createdBy, g.g.CreatedBy, "goroutine %d's creator", id)
				require.Equal(t, want.creator, g.g.CreatorID, "goroutine %d's creating goroutine", id)
				require.Equal(t, want.createdLine, g.g.CreatedLine, "goroutine %d's go statement", id)
				require.Equal(t, want.createdFile, g.g.CreatedFile, "goroutine %d's go statement", id)
				if g.g.Status == "running" || g.g.Status == "syscall" {
					// Unwound from its thread's registers: the
					// thread's signal handler (the crash's SIGQUIT)
					// and the system call's own frames come first.
					require.NotZero(t, g.g.Thread, "goroutine %d is %s on no thread", id, g.g.Status)
					w := want.frames
					if g.g.Status == "syscall" {
						// The runtime prints where the goroutine
						// entered the system call (syscallpc: the
						// call to entersyscall); its thread is further
						// on, in the same function's call of the
						// system call: that frame by function.
						require.GreaterOrEqual(t, len(g.frames), len(w))
						require.Equal(t, w[0].fn, g.frames[len(g.frames)-len(w)].fn, "goroutine %d (syscall)", id)
						w = w[1:]
					}
					requireSuffix(t, w, g.frames, "goroutine %d (%s)", id, g.g.Status)
					continue
				}
				require.Zero(t, g.g.Thread, "goroutine %d is %s on a thread", id, g.g.Status)
				require.Equal(t, want.frames, g.frames, "goroutine %d [%s]: stop %s", id, want.status, g.stop)
			}
			for _, s := range []string{"running", "syscall", "chan receive", "chan send", "sync.Mutex.Lock", "sleep", "IO wait", "runnable"} {
				require.NotZero(t, statuses[s], "no goroutine [%s] in %v", s, statuses)
			}
			t.Logf("%d goroutines, as the runtime printed them: %v", len(c.order), statuses)
		})
	}
}

// requireSuffix checks that got ends with want.
func requireSuffix(t *testing.T, want, got []tracedFrame, format string, args ...any) {
	t.Helper()
	what := fmt.Sprintf(format, args...)
	require.GreaterOrEqual(t, len(got), len(want), "%s: %v, want it to end with %v", what, got, want)
	require.Equal(t, want, got[len(got)-len(want):], "%s: all %v", what, got)
}

// TestGoroutinesMatchDelve: the same goroutines as Delve sees them
// (proc.GoroutinesInfo and proc.GoroutineStacktrace on the core, inlined
// calls as frames of their own): the same ids and stacks frame for frame
// by function and line (the first physical frame by function: Delve looks
// the saved PC up, the runtime the call before it); for the crashing
// goroutine, the frames from runtime.crash down. Delve reads goroutines only with DWARF: the
// stripped builds are checked against the runtime's traceback above.
func TestGoroutinesMatchDelve(t *testing.T) {
	for _, tc := range []struct{ name, toolchain string }{{"local", ""}, {"go1.21", goOldToolchain}} {
		t.Run(tc.name, func(t *testing.T) {
			c := crashGoProgram(t, goBuild{toolchain: tc.toolchain}, "40")
			got := ustackGoroutines(t, c.core)
			tg, err := core.OpenCore(c.core, c.exe, nil)
			require.NoError(t, err)
			defer tg.Detach(true)
			tgt := tg.Selected
			gs, _, err := proc.GoroutinesInfo(tgt, 0, 0)
			require.NoError(t, err)
			n, sameFirst := 0, 0
			for _, g := range gs {
				if g.ID == 0 {
					continue
				}
				n++
				mine := got[uint64(g.ID)]
				require.NotNil(t, mine, "Delve's goroutine %d", g.ID)
				frames, err := proc.GoroutineStacktrace(tgt, g, 1000, 0)
				require.NoError(t, err, "Delve's stack of goroutine %d", g.ID)
				var want []tracedFrame
				var inlined []bool
				for _, f := range frames {
					name := ""
					if f.Call.Fn != nil {
						name = f.Call.Fn.Name
					}
					want = append(want, tracedFrame{fn: name, file: f.Call.File, line: f.Call.Line})
					inlined = append(inlined, f.Inlined)
				}
				if mine.g.Status == "running" {
					// Delve does not unwind through the crashing
					// thread's signal frame (it resumes at the
					// interrupted runtime.raise as if called, one
					// line early, without the handler's frames):
					// only the frames below the raise are compared.
					cut := slices.IndexFunc(want, func(f tracedFrame) bool { return f.fn == "runtime.crash" })
					require.Positive(t, cut, "Delve's stack of the crashing goroutine %d: %v", g.ID, want)
					requireSuffix(t, want[cut:], mine.frames, "goroutine %d (running)", g.ID)
					continue
				}
				// Delve looks the first frame up at the saved PC
				// itself, the runtime (and ustack) at the call
				// before it, where the goroutine waits (gopark's
				// mcall): the line, and the functions inlined there,
				// can differ. The first physical frame is compared by
				// function, the rest frame for frame.
				dk, mk := slices.Index(inlined, false), slices.Index(mine.inlined, false)
				require.True(t, dk >= 0 && mk >= 0, "goroutine %d: no physical frame", g.ID)
				require.Equal(t, want[dk].fn, mine.frames[mk].fn, "goroutine %d's first physical frame", g.ID)
				require.Equal(t, want[dk+1:], mine.frames[mk+1:], "goroutine %d", g.ID)
				if slices.Equal(want[:dk+1], mine.frames[:mk+1]) {
					sameFirst++
				}
			}
			require.Equal(t, len(got), n, "Delve lists %d goroutines, ustack %d", n, len(got))
			t.Logf("%d goroutines agree with Delve (the first physical frame identical too in %d)", n, sameFirst)
		})
	}
}

// TestGoroutinesEveryFormat: every output format carries the goroutines:
// text prints each with its header as the runtime begins it (id, status,
// creator, thread), JSON validates against docs/report.schema.json with a
// goroutine object per sample, pprof labels each sample with its goroutine,
// speedscope opens a profile per goroutine, folded and the flame graph
// hold their stacks.
func TestGoroutinesEveryFormat(t *testing.T) {
	c := crashGoProgram(t, goBuild{}, "3")
	got := ustackGoroutines(t, c.core)
	out := map[string]string{}
	for _, format := range Formats() {
		opts := CoreOptions{Goroutines: true}
		cc, err := OpenCore(c.core, opts)
		require.NoError(t, err)
		var b bytes.Buffer
		w, err := NewWriter(format, &b, WriterOptions{Events: []string{GoroutineEvent}})
		require.NoError(t, err)
		_, err = RunCore(cc, opts, w.Write)
		require.NoError(t, err)
		require.NoError(t, w.Close())
		cc.Close()
		out[format] = b.String()
	}
	// A waiting goroutine and the running one, as the runtime heads them.
	var waiting uint64
	for _, id := range c.order {
		if c.trace[id].status == "chan receive" {
			waiting = id
			break
		}
	}
	require.NotZero(t, waiting)
	w := c.trace[waiting]
	require.Contains(t, out["text"], fmt.Sprintf(" goroutine: %d [chan receive] created by %s in goroutine %d at %s:%d\n",
		waiting, w.createdBy, w.creator, w.createdFile, w.createdLine))
	require.Regexp(t, `goroutines +\d+/\d+ +goroutine: 1 \[running\] on thread \d+ SIGABRT\n`, out["text"])

	samples := validateLines(t, reportSchema(t), []byte(out["json"]))
	require.Len(t, samples, len(got))
	for _, s := range samples {
		require.Equal(t, GoroutineEvent, s["event"])
		g := s["goroutine"].(map[string]any)
		n, err := g["id"].(json.Number).Int64()
		require.NoError(t, err)
		id := uint64(n)
		require.Contains(t, got, id)
		if id == waiting {
			require.Equal(t, "waiting", g["status"])
			require.Equal(t, "chan receive", g["wait_reason"])
			require.Equal(t, w.createdBy, g["created_by"])
			require.Equal(t, json.Number(strconv.Itoa(w.createdLine)), g["created_line"])
			require.Nil(t, g["thread"])
			require.Equal(t, json.Number("-1"), s["tid"])
		}
	}

	prof, err := profile.Parse(strings.NewReader(out["pprof"]))
	require.NoError(t, err)
	require.Len(t, prof.Sample, len(got))
	ids := map[int64]bool{}
	for _, s := range prof.Sample {
		require.Len(t, s.NumLabel["goroutine"], 1)
		ids[s.NumLabel["goroutine"][0]] = true
	}
	require.Len(t, ids, len(got))

	var ss struct {
		Profiles []struct{ Name string } `json:"profiles"`
	}
	require.NoError(t, json.Unmarshal([]byte(out["speedscope"]), &ss))
	require.Len(t, ss.Profiles, len(got))
	require.True(t, slices.ContainsFunc(ss.Profiles, func(p struct{ Name string }) bool {
		return strings.HasSuffix(p.Name, fmt.Sprintf(" goroutine %d [chan receive]", waiting))
	}))
	require.Contains(t, out["folded"], "main.recvLoop;runtime.chanrecv2;runtime.chanrecv;runtime.gopark")
	require.Contains(t, out["flamegraph"], "main.recvLoop")
}

// BenchmarkGoroutines10k: a Go core with 10,000 goroutines (channels,
// mutexes, sleeps, Gosched; no sockets), every goroutine's stack by
// ustack (open the core, find the runtime's structures, unwind and
// symbolize each) against Delve (open the core, list the goroutines, a
// stack trace each).
func BenchmarkGoroutines10k(b *testing.B) {
	c := crashGoProgram(b, goBuild{}, "1650", "nonet")
	if len(c.order) < 10000 {
		b.Fatalf("%d goroutines", len(c.order))
	}
	b.Run("ustack", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			opts := CoreOptions{Goroutines: true}
			cc, err := OpenCore(c.core, opts)
			if err != nil {
				b.Fatal(err)
			}
			frames := 0
			sum, err := RunCore(cc, opts, func(s *Sample) error { frames += len(s.Frames); return nil })
			if err != nil {
				b.Fatal(err)
			}
			cc.Close()
			n = sum.Samples
		}
		b.ReportMetric(float64(n), "goroutines/op")
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "goroutines/s")
	})
	b.Run("delve", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			tg, err := core.OpenCore(c.core, c.exe, nil)
			if err != nil {
				b.Fatal(err)
			}
			gs, _, err := proc.GoroutinesInfo(tg.Selected, 0, 0)
			if err != nil {
				b.Fatal(err)
			}
			n = 0
			for _, g := range gs {
				if _, err := proc.GoroutineStacktrace(tg.Selected, g, 1000, 0); err != nil {
					b.Fatal(err)
				}
				n++
			}
			tg.Detach(true)
		}
		b.ReportMetric(float64(n), "goroutines/op")
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "goroutines/s")
	})
}

// TestGoCoreThreadsComplete: every thread of a Go program's crash core is
// unwound to its first frame, outermost: the main thread to
// runtime.goexit or runtime.rt0_go's, the threads the runtime started to
// runtime.clone, whose child side calls only the thread's function. (The
// word above a new thread's stack, where runtime.clone's CFI finds a
// return address, is left to chance: a Go heap address there stopped the
// sysmon thread with no_mapping.) An idle thread ends at runtime.mcall,
// whose callee runs from the top of the g0 stack: the word above was left
// to chance as well (a stack address there stopped the main thread, parked
// in stopm, with no_mapping in one core of about ninety;
// elfcache's TestGoStackSwitches). gdb, given the same core, ends each
// thread at the same frame or walks on into that word. A thread parked
// after its goroutine was preempted in runtime.morestack ends there,
// stack_switch, where Delve finds no goroutine on it either.
func TestGoCoreThreadsComplete(t *testing.T) {
	c := crashGoProgram(t, goBuild{}, "3")
	tg, err := core.OpenCore(c.core, c.exe, nil)
	require.NoError(t, err)
	defer tg.Detach(true)
	withG := map[int]bool{}
	for _, th := range tg.Selected.ThreadList() {
		g, _ := proc.GetG(th)
		withG[th.ThreadID()] = g != nil
	}
	opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}, Exe: c.exe}
	cc, err := OpenCore(c.core, opts)
	require.NoError(t, err)
	defer cc.Close()
	threads := 0
	_, err = RunCore(cc, opts, func(s *Sample) error {
		threads++
		var last string
		for _, f := range s.Frames {
			if !f.Kernel && !f.Inlined {
				last = f.Symbol
			}
		}
		if s.Stop == "stack_switch" && last == "runtime.morestack" && !withG[int(s.Tid)] {
			// A goroutine preempted at its stack check and descheduled
			// (newstack, gopreempt_m) while its thread went on to park:
			// no goroutine is on the thread (Delve finds none either),
			// and its frames are the goroutine's own (--goroutines).
			return nil
		}
		assert.Equal(t, "outermost", s.Stop, "thread %d ends at %s: %s", s.Tid, last, s.StopErr)
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, threads, 1, "the runtime's threads are in the core")
}

// TestSwitchedRegs: a goroutine in a system call whose thread's walk
// stopped in runtime.systemstack (entersyscall's or exitsyscall's) goes on
// from g.sched, which systemstack saved; stopped in runtime.asmcgocall (a
// cgo call), from the system call's g.syscallsp; a goroutine outside a
// system call from g.sched either way.
func TestSwitchedRegs(t *testing.T) {
	g := goruntime.Goroutine{Status: goruntime.StatusSyscall,
		SP: 0x1000, PC: 0x4973a5, BP: 0x1010, // g.syscallsp, pc, bp
		SchedSP: 0x0f00, SchedPC: 0x47f8e8, SchedBP: 0x0f00}
	for _, c := range []struct {
		fn     string
		sp, pc uint64
	}{
		{"runtime.systemstack.abi0", 0x0f00, 0x47f8e8},
		{"runtime.systemstack", 0x0f00, 0x47f8e8},
		{"runtime.asmcgocall.abi0", 0x1000, 0x4973a5},
		{"", 0x1000, 0x4973a5},
	} {
		var regs arch.Regs
		switchedRegs(arch.AMD64, &g, c.fn, &regs)
		sp, _ := regs.Get(arch.AMD64_RSP)
		pc, _ := regs.Get(arch.AMD64_RIP)
		if sp != c.sp || pc != c.pc {
			t.Errorf("stopped in %q: sp %#x pc %#x; want %#x %#x", c.fn, sp, pc, c.sp, c.pc)
		}
	}
}

// TestGoesOnFrom: goSwitched goes on from a goroutine's saved registers
// after each function a walk that goes on there ends in: the stack
// switches (systemstack, morestack, asmcgocall, gogo) and runtime.mcall,
// where onG0's walks end (a thread about to resume the goroutine); not
// after a vDSO call's switch (runtime.nanotime1, time.now), whose
// goroutine is running and its g.sched stale.
func TestGoesOnFrom(t *testing.T) {
	for _, fn := range []string{"runtime.systemstack", "runtime.morestack", "runtime.asmcgocall", "gogo", "runtime.mcall"} {
		assert.True(t, goesOnFrom(fn), fn)
		g := goruntime.Goroutine{StackLo: 0xc000100000, StackHi: 0xc000108000, SchedSP: 0xc000107f00, SchedPC: 0x4e87da}
		if onG0Stack(&g, 0x7f1d6ea1acd0, fn) {
			assert.True(t, goesOnFrom(fn), "onG0 ends at %s", fn)
		}
	}
	for _, fn := range []string{"runtime.nanotime1", "time.now", "runtime.walltime", "main.main", ""} {
		assert.False(t, goesOnFrom(fn), fn)
	}
}

// TestOnG0Stack: a running goroutine's walk that ended at runtime.mcall
// from an SP outside its stack went only through its thread's g0 stack
// (the scheduler about to resume it), and goes on from g.sched where that
// lies in its stack; a walk from its own stack, or ending elsewhere, or a
// g.sched outside its stack, does not.
func TestOnG0Stack(t *testing.T) {
	g := goruntime.Goroutine{StackLo: 0xc000100000, StackHi: 0xc000108000, SchedSP: 0xc000107f00, SchedPC: 0x4e87da}
	g0 := uint64(0x7f1d6ea1acd0)
	for _, c := range []struct {
		name   string
		sp     uint64
		lastFn string
		sched  uint64
		want   bool
	}{
		{"g0 frames ending at mcall", g0, "runtime.mcall", g.SchedSP, true},
		{"the ABI0 symbol", g0, "runtime.mcall.abi0", g.SchedSP, true},
		{"walked from its own stack", 0xc000107e00, "runtime.mcall", g.SchedSP, false},
		{"ended elsewhere", g0, "runtime.goexit", g.SchedSP, false},
		{"g.sched outside its stack", g0, "runtime.mcall", g0, false},
	} {
		h := g
		h.SchedSP = c.sched
		if got := onG0Stack(&h, c.sp, c.lastFn); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
