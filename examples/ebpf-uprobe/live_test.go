package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
)

// The live tests load the BPF program, attach it to a fixture program and
// check the stacks against the chain the fixture was written with
// (leaf <- mid <- top <- main, then glibc's start code and _start) and
// against ustack record + ustack report on the same program.

// wantChain is the fixture's call chain at leaf, innermost first, after
// which glibc's start code calls main (the names are those of glibc 2.36's
// symbol table and debug info: __libc_start_call_main,
// __libc_start_main_impl).
var wantChain = []string{"leaf", "mid", "top", "main", "__libc_start_call_main", "__libc_start_main_impl", "_start"}

// fixtureCalls is how many times the fixture calls leaf.
const fixtureCalls = 20

// needLive skips t unless it can load BPF programs: root, and a kernel
// with BTF.
func needLive(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("live eBPF test: needs root to load BPF programs (run go test as root)")
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		t.Skipf("live eBPF test: this kernel has no BTF (%v)", err)
	}
}

// liveTools builds the fixture (gcc -O2 -g), the tracer and ustack, once
// per test binary run.
type liveTools struct {
	dir, fixture, tracer, ustack string
}

var tools *liveTools

// TestMain removes the builds buildLive made once the tests are done.
func TestMain(m *testing.M) {
	code := m.Run()
	if tools != nil {
		os.RemoveAll(tools.dir)
	}
	os.Exit(code)
}

func buildLive(t *testing.T) *liveTools {
	t.Helper()
	if tools != nil {
		return tools
	}
	dir, err := os.MkdirTemp("", "ebpf-uprobe-test-")
	require.NoError(t, err)
	// Others may run what is in it (TestNotRoot).
	require.NoError(t, os.Chmod(dir, 0o755))
	// The directory outlives the test: the test binary's other tests
	// reuse the builds; TestMain removes it.
	src, err := os.ReadFile("testdata/chain.c")
	require.NoError(t, err)
	lt := &liveTools{dir: dir, fixture: testprog.Build(t, dir, "chain.c", string(src), "-O2", "-g")}
	lt.tracer = goBuild(t, ".", filepath.Join(dir, "tracer"), ".")
	lt.ustack = goBuild(t, "../..", filepath.Join(dir, "ustack"), "./cmd/ustack")
	tools = lt
	return lt
}

// goBuild builds pkg in module directory dir into out.
func goBuild(t *testing.T, dir, out, pkg string) string {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = dir
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build %s in %s: %s", pkg, dir, b)
	return out
}

// runTracer runs the tracer with args and returns its standard output and
// standard error.
func runTracer(t *testing.T, lt *liveTools, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, lt.tracer, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, err, "%s %s: %s", lt.tracer, strings.Join(args, " "), stderr.String())
	return stdout.String(), stderr.String()
}

// ustackReport records the fixture with ustack record -e event and returns
// ustack report's text and JSON.
func ustackReport(t *testing.T, lt *liveTools, event string) (string, string) {
	t.Helper()
	data := filepath.Join(t.TempDir(), "perf.data")
	testprog.Tool(t, "", lt.ustack, "record", "-e", event, "-o", data, "--", lt.fixture, "20")
	text := testprog.Tool(t, "", lt.ustack, "report", "-i", data)
	js := testprog.Tool(t, "", lt.ustack, "report", "-i", data, "--format", "json")
	return text, js
}

// jsonSample is what the tests read of a JSON sample, ustack report's or
// the tracer's.
type jsonSample struct {
	Pid    uint32 `json:"pid"`
	Event  string `json:"event"`
	Stop   string `json:"stop"`
	Frames []struct {
		Symbol string `json:"symbol"`
		Module string `json:"module"`
		Offset string `json:"offset"`
		Kernel bool   `json:"kernel"`
		How    string `json:"how"`
	} `json:"frames"`
}

// userFrames returns a sample's user frames as "symbol module+offset".
func userFrames(s jsonSample) []string {
	var out []string
	for _, f := range s.Frames {
		if !f.Kernel {
			out = append(out, f.Symbol+" "+filepath.Base(f.Module)+"+"+f.Offset)
		}
	}
	return out
}

func symbols(s jsonSample) []string {
	var out []string
	for _, f := range s.Frames {
		if !f.Kernel {
			out = append(out, f.Symbol)
		}
	}
	return out
}

// textStacks returns the user frame lines of each sample of perf-script
// style text (those naming an object by its path).
func textStacks(text string) [][]string {
	var out [][]string
	for _, block := range strings.Split(strings.TrimSpace(text), "\n\n") {
		var frames []string
		for _, l := range strings.Split(block, "\n")[1:] {
			if strings.Contains(l, " (/") {
				frames = append(frames, strings.TrimSpace(l))
			}
		}
		out = append(out, frames)
	}
	return out
}

// checkAgainstUstack runs the tracer and ustack on the fixture with event
// and checks that every event's stack is want (symbols, innermost first)
// and the same frames ustack report prints.
func checkAgainstUstack(t *testing.T, event string, want []string) {
	needLive(t)
	lt := buildLive(t)
	spec := strings.ReplaceAll(event, "BINARY", lt.fixture)

	uText, uJSON := ustackReport(t, lt, spec)
	uSamples := testprogJSON(t, []byte(uJSON))
	require.Len(t, uSamples, fixtureCalls, "ustack record's samples")

	text, stderr := runTracer(t, lt, "-e", spec, "--", lt.fixture, "20")
	js, _ := runTracer(t, lt, "-e", spec, "--format", "json", "--", lt.fixture, "20")
	samples := testprogJSON(t, []byte(js))
	require.Len(t, samples, fixtureCalls+1, "the tracer's events and its summary record:\n%s", js)
	samples = samples[:fixtureCalls] // the last line is {"summary": ...}
	assert.Contains(t, stderr, "20 events, 0 lost")

	for i, s := range samples {
		assert.Equal(t, want, symbols(s), "event %d", i)
		assert.Equal(t, "outermost", s.Stop, "event %d", i)
		assert.Equal(t, userFrames(uSamples[i]), userFrames(s), "event %d against ustack report's sample %d", i, i)
		assert.Equal(t, uSamples[i].Event, s.Event, "event name")
	}
	// The text is ustack report's: the same frame lines.
	stacks, uStacks := textStacks(text), textStacks(uText)
	require.Len(t, stacks, fixtureCalls, "text output:\n%s", text)
	require.Len(t, uStacks, fixtureCalls, "ustack report's text:\n%s", uText)
	for i := range stacks {
		assert.Equal(t, uStacks[i], stacks[i], "text of event %d", i)
		assert.Len(t, stacks[i], len(want), "text of event %d", i)
	}
	// And the same header fields (comm pid/tid [cpu] time: period event:),
	// but for a tracepoint's fields, which the tracer does not copy.
	headers, uHeaders := textHeaders(text), textHeaders(uText)
	for i := range headers {
		assert.Equal(t, uHeaders[i], headers[i], "header of event %d", i)
	}
}

// textHeaders returns the header line of each sample of perf-script style
// text as its fields, numbers as N, up to the event name.
func textHeaders(text string) [][]string {
	var out [][]string
	for _, block := range strings.Split(strings.TrimSpace(text), "\n\n") {
		var h []string
		for _, f := range strings.Fields(strings.Split(block, "\n")[0]) {
			if strings.Trim(f, "0123456789.[]:") == "" {
				f = "N"
			}
			h = append(h, f)
			if strings.HasSuffix(f, ":") && f != "N" {
				break // the event; a tracepoint's fields follow
			}
		}
		out = append(out, h)
	}
	return out
}

// TestLiveUprobe: a uprobe on leaf gives leaf <- mid <- top <- main at
// every call, as ustack record -e u:BINARY:leaf does.
func TestLiveUprobe(t *testing.T) {
	checkAgainstUstack(t, "u:BINARY:leaf", wantChain)
}

// TestLiveTracepoint: syscalls:sys_enter_write, with the user registers
// from bpf_task_pt_regs, gives glibc's write under the same chain.
func TestLiveTracepoint(t *testing.T) {
	testprog.NeedTracefs(t, "syscalls/sys_enter_write")
	checkAgainstUstack(t, "syscalls:sys_enter_write", append([]string{"__GI___libc_write"}, wantChain...))
}

// testprogJSON decodes JSON lines into jsonSamples.
func testprogJSON(t testing.TB, b []byte) []jsonSample { return testprog.JSONLines[jsonSample](t, b) }

// TestLivePid: -p traces a running process until it exits.
func TestLivePid(t *testing.T) {
	needLive(t)
	lt := buildLive(t)
	// 300 calls, 2 ms apart: the tracer attaches while they run.
	fix := exec.Command(lt.fixture, "300")
	require.NoError(t, fix.Start())
	done := make(chan error, 1)
	go func() { done <- fix.Wait() }()
	js, stderr := runTracer(t, lt, "-e", "u:"+lt.fixture+":leaf", "--format", "json", "-p", strconv.Itoa(fix.Process.Pid))
	require.NoError(t, <-done)
	samples := testprogJSON(t, []byte(js))
	require.Greater(t, len(samples), 1, "events and the summary record:\n%s\n%s", js, stderr)
	samples = samples[:len(samples)-1]
	for i, s := range samples {
		assert.Equal(t, uint32(fix.Process.Pid), s.Pid, "event %d", i)
		assert.Equal(t, wantChain, symbols(s), "event %d", i)
	}
	t.Logf("%d events of 300 calls", len(samples))
}

// TestNotRoot: without root the tracer says so instead of failing
// obscurely.
func TestNotRoot(t *testing.T) {
	needLive(t)
	lt := buildLive(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) is not installed")
	}
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
		lt.tracer, "-e", "u:"+lt.fixture+":leaf", "--", lt.fixture, "1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	assert.Equal(t, 1, ee.ExitCode(), "%s", out)
	assert.Contains(t, string(out), "needs root", "%s", out)
}

// TestLiveSignal: SIGTERM ends the tracer cleanly: the command gets the
// signal, the events read so far are printed with the summary.
func TestLiveSignal(t *testing.T) {
	needLive(t)
	lt := buildLive(t)
	cmd := exec.Command(lt.tracer, "-e", "u:"+lt.fixture+":leaf", "--", lt.fixture, "100000")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	waitForWrite(t, cmd.Process.Pid)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", stderr.String())
	assert.Equal(t, 128+int(syscall.SIGTERM), ee.ExitCode(), "the command's status, killed by SIGTERM: %s", stderr.String())
	stacks := textStacks(stdout.String())
	require.NotEmpty(t, stacks)
	for i, s := range stacks {
		assert.Len(t, s, len(wantChain), "event %d: %v", i, s)
	}
	assert.Regexp(t, `ebpf-uprobe: \d+ events, 0 lost \(ring buffer full\), 0 malformed; stops: outermost \d+\n$`, stderr.String())
}

// waitForWrite waits until the command the tracer (pid) started has
// written once, that is called leaf under the tracer's probe (the command
// is held at its exec until the probe is attached): there is an event to
// print. It waits as long as a busy machine may take (two minutes), not a
// fixed second.
func waitForWrite(t *testing.T, tracer int) {
	t.Helper()
	children := fmt.Sprintf("/proc/%d/task/%d/children", tracer, tracer)
	for deadline := time.Now().Add(testprog.Timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(children)
		if err != nil {
			t.Fatalf("the tracer's children: %v", err)
		}
		for _, pid := range strings.Fields(string(b)) {
			io, err := os.ReadFile("/proc/" + pid + "/io")
			if err != nil {
				continue
			}
			for _, l := range strings.Split(string(io), "\n") {
				if n, ok := strings.CutPrefix(l, "syscw: "); ok && n != "0" {
					return
				}
			}
		}
	}
	t.Fatalf("the traced command made no write in %v", testprog.Timeout)
}

// TestLiveStackSize: a copy too small for the whole stack ends every stack
// "truncated", and the summary says which --stack-size to try.
func TestLiveStackSize(t *testing.T) {
	needLive(t)
	lt := buildLive(t)
	js, stderr := runTracer(t, lt, "-e", "u:"+lt.fixture+":leaf", "--stack-size", "24", "--format", "json", "--", lt.fixture, "3")
	samples := testprogJSON(t, []byte(js))
	require.Len(t, samples, 4, "3 events and the summary record")
	for i, s := range samples[:3] {
		assert.Equal(t, "truncated", s.Stop, "event %d", i)
		// 24 bytes from SP at leaf's entry hold the return addresses
		// into mid and top at most.
		syms := symbols(s)
		assert.LessOrEqual(t, len(syms), 3, "event %d: %v", i, syms)
		assert.Equal(t, wantChain[:len(syms)], syms, "event %d", i)
	}
	assert.Contains(t, stderr, "3 of 3 stacks were cut short by the size of the stack snapshot; run with --stack-size 48")
}
