package report

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
)

// fibPy runs for about a second in nested Python functions.
const fibPy = `
import time
def fib(n):
    return n if n < 2 else fib(n-1) + fib(n-2)
def inner(k):
    s = 0
    for i in range(k):
        s += fib(12)
    return s
def outer():
    end = time.time() + 1.0
    t = 0
    while time.time() < end:
        t += inner(5)
    return t
print(outer())
`

// findPython returns the python of version v (pyenv's, else on PATH), or
// skips.
func findPython(t *testing.T, v string) string {
	t.Helper()
	for _, p := range []string{"/root/.pyenv/versions/" + v + "/bin/python3"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	short := v[:strings.LastIndexByte(v, '.')]
	if p, err := exec.LookPath("python" + short); err == nil {
		return p
	}
	t.Skipf("python %s is not installed (pyenv %s or python%s on PATH): no perf trampolines to record", short, v, short)
	return ""
}

// recordPython records fibPy run by python version v with -X xopt under
// perf record --call-graph dwarf (-k 1, the clock perf inject needs; 16 KiB
// of stack, enough for fib's depth). It returns the directory, the
// script's and the recording's paths.
func recordPython(t *testing.T, v, xopt string) (dir, script, data string) {
	py := findPython(t, v)
	dir = t.TempDir()
	script = filepath.Join(dir, "fib.py")
	require.NoError(t, os.WriteFile(script, []byte(fibPy), 0o600))
	data = filepath.Join(dir, "prof.data")
	cmd := testprog.PerfCommand(t, "record", "-q", "-k", "1", "-F", "999", "--call-graph", "dwarf,16384", "-o", data, "--", py, "-X", xopt, script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("perf record of python cannot record here: %v: %s", err, out)
	}
	return dir, script, data
}

// pyChain is the Python functions of a stack, innermost first: the names
// of its frames in the perf map (or jitdump) module.
func pyChain(frames []Frame, module func(string) bool) []string {
	var out []string
	for _, f := range frames {
		if !f.Kernel && !f.Inlined && module(f.Module) {
			out = append(out, f.Symbol)
		}
	}
	return out
}

// wellNested reports whether chain (innermost first) is the call chain
// fibPy makes: fib repeated, then inner, outer, <module>.
func wellNested(chain []string, file string) bool {
	k := 0
	for k < len(chain) && chain[k] == "py::fib:"+file {
		k++
	}
	want := []string{"py::inner:" + file, "py::outer:" + file, "py::<module>:" + file}
	return k <= 13 && len(chain) == k+len(want) && strings.Join(chain[k:], "|") == strings.Join(want, "|")
}

// TestPythonPerfTrampolines: python 3.12 and 3.13 -X perf run each Python
// function through a copy of a small trampoline in anonymous memory, named
// in /tmp/perf-PID.map, with no CFI and no frame pointer: perf script stops
// at the first. ustack names the frames perf names as perf does, and, from
// the trampoline's code (libpython's _Py_trampoline_func_start, checked
// byte for byte), goes on through every Python frame in the order the
// script calls them (fib..., inner, outer, <module>) into Py_BytesMain
// and _start.
func TestPythonPerfTrampolines(t *testing.T) {
	requirePerf(t)
	for _, v := range []string{"3.12.1", "3.13.0"} {
		t.Run(v, func(t *testing.T) {
			_, script, data := recordPython(t, v, "perf")
			perf := parsePerfJIT(t, testprog.Script(t, data, "--no-inline", "-F", "tid,time,ip,sym,dso"), perfMapDSO)
			_, samples := ustackScriptWith(t, data, Options{})
			removeJITFiles(t, samples)
			require.Equal(t, len(perf), len(samples), "samples: perf script vs ustack")

			c := comparePython(t, perf, samples, perfMapDSO, script)
			t.Logf("Python frames: %d named as perf names them, %d differently, %d only perf printed; %d more that perf did not reach; %d of %d samples in fib well nested, %d into _start",
				c.matched, c.differ, c.perfOnly, c.ustackOnly, c.nested, c.inFib, c.intoStart)
			require.Greater(t, c.inFib, 100, "samples in fib")
			assert.Greater(t, c.matched, c.inFib/2, "Python frames compared with perf")
			c.check(t)
		})
	}
}

// removeJITFiles removes the perf map and jitdump the recorded processes
// left in /tmp.
func removeJITFiles(t *testing.T, samples []*Sample) {
	seen := map[uint32]bool{}
	for _, s := range samples {
		if !seen[s.Pid] {
			seen[s.Pid] = true
			pid := strconv.FormatUint(uint64(s.Pid), 10)
			t.Cleanup(func() {
				os.Remove("/tmp/perf-" + pid + ".map")
				os.Remove("/tmp/jit-" + pid + ".dump")
			})
		}
	}
}

// jitDumpModule: ustack's module for code named from a jitdump.
func jitDumpModule(m string) bool {
	b := filepath.Base(m)
	return strings.HasPrefix(b, "jit-") && strings.HasSuffix(b, ".dump")
}

// TestPythonPerfJIT: python 3.13 -X perf_jit writes a jitdump of its
// trampolines with their unwinding info; perf's reading of it (perf inject
// --jit, then perf script) is the truth. ustack, on the recording without
// inject, names every Python frame perf names, in the same order, and
// unwinds the samples in fib as the script nests them into _start.
func TestPythonPerfJIT(t *testing.T) {
	requirePerf(t)
	dir, script, data := recordPython(t, "3.13.0", "perf_jit")
	var warnings []string
	_, samples := ustackScriptWith(t, data, Options{Warn: func(m string) { warnings = append(warnings, m) }})
	removeJITFiles(t, samples)
	for _, w := range warnings {
		assert.NotContains(t, w, "jit-", "a warning about the dump")
	}
	injected := filepath.Join(dir, "injected.data")
	testprog.Output(t, testprog.PerfCommand(t, "inject", "--jit", "-i", data, "-o", injected))
	perf := parsePerfJIT(t, testprog.Script(t, injected, "--no-inline", "-F", "tid,time,ip,sym,dso"), injectedDSO)
	require.Equal(t, len(perf), len(samples), "samples: perf script on the injected recording vs ustack")

	c := comparePython(t, perf, samples, jitDumpModule, script)
	t.Logf("Python frames: %d named as perf inject names them, %d differently; %d only perf printed, %d only ustack; %d of %d samples in fib well nested, %d into _start",
		c.matched, c.differ, c.perfOnly, c.ustackOnly, c.nested, c.inFib, c.intoStart)
	require.Greater(t, c.inFib, 100, "samples in fib")
	assert.Greater(t, c.matched, c.inFib*3, "Python frames compared with perf")
	assert.Zero(t, c.ustackOnly, "Python frames ustack names and perf inject does not")
	c.check(t)
}

// pyCounts is what comparePython found.
type pyCounts struct {
	// matched, differ: Python frames perf and ustack both print, named
	// alike or not; perfOnly, ustackOnly: those only one prints.
	matched, differ, perfOnly, ustackOnly int
	// inFib: samples in fib; nested: those whose Python frames are as
	// fibPy calls them; intoStart: those unwound into _start.
	inFib, nested, intoStart int
}

// comparePython compares, sample by sample, the Python frames of ustack's
// samples (those in modules module accepts) with perf's, and checks the
// samples in fib of script against the script's own nesting.
func comparePython(t *testing.T, perf []perfJITSample, samples []*Sample, module func(string) bool, script string) pyCounts {
	var c pyCounts
	for i, s := range samples {
		p := perf[i]
		require.Equal(t, p.tid, s.Tid, "sample %d's thread", i)
		chain := pyChain(s.Frames, module)
		n := min(len(chain), len(p.jit))
		for k := 0; k < n; k++ {
			if chain[k] == p.jit[k] {
				c.matched++
			} else if c.differ++; c.differ <= 5 {
				t.Errorf("sample %d (%s): Python frame %d is %q, perf's %q", i, p.time, k, chain[k], p.jit[k])
			}
		}
		c.perfOnly += len(p.jit) - n
		c.ustackOnly += len(chain) - n
		if len(chain) == 0 || chain[0] != "py::fib:"+script {
			continue
		}
		c.inFib++
		if wellNested(chain, script) {
			c.nested++
		}
		var all []string
		for _, f := range s.Frames {
			all = append(all, f.Symbol)
		}
		if main := indexOf(all, "Py_BytesMain"); main > 0 && indexOf(all, "_start") > main && s.Stop == "outermost" {
			c.intoStart++
		}
	}
	return c
}

// check asserts what holds for every Python producer: the frames perf
// prints are named alike, and nearly every sample in fib (one may land in
// a trampoline or a frame being set up) unwinds through all its Python
// frames, in the script's order, into _start.
func (c pyCounts) check(t *testing.T) {
	assert.Zero(t, c.differ, "Python frames named otherwise than perf names them")
	assert.Zero(t, c.perfOnly, "Python frames perf names and ustack does not")
	assert.GreaterOrEqual(t, c.nested*100, c.inFib*95, "samples in fib whose Python frames are fib..., inner, outer, <module>")
	assert.GreaterOrEqual(t, c.intoStart*100, c.inFib*95, "samples in fib unwound into Py_BytesMain and _start")
}
