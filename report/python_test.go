package report

import (
	"os"
	"os/exec"
	"path/filepath"
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

// TestPythonPerfTrampolines: python 3.12 -X perf runs each Python function
// through a copy of a small trampoline in anonymous memory, named in
// /tmp/perf-PID.map, with no CFI and no frame pointer: perf script stops at
// the first. ustack names the frames perf names as perf does, and, from the
// trampoline's code (libpython's _Py_trampoline_func_start, checked byte
// for byte), goes on through every Python frame in the order the script
// calls them (fib..., inner, outer, <module>) into Py_BytesMain and _start.
func TestPythonPerfTrampolines(t *testing.T) {
	requirePerf(t)
	py := findPython(t, "3.12.1")
	dir := t.TempDir()
	script := filepath.Join(dir, "fib.py")
	require.NoError(t, os.WriteFile(script, []byte(fibPy), 0o600))
	data := filepath.Join(dir, "prof.data")
	cmd := testprog.PerfCommand(t, "record", "-q", "-F", "999", "--call-graph", "dwarf,16384", "-o", data, "--", py, "-X", "perf", script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("perf record of python cannot record here: %v: %s", err, out)
	}
	perf := parsePerfJIT(t, testprog.Script(t, data, "--no-inline", "-F", "tid,time,ip,sym,dso"), perfMapDSO)
	_, samples := ustackScriptWith(t, data, Options{})
	require.Equal(t, len(perf), len(samples), "samples: perf script vs ustack")

	var matched, differ, perfOnly, deeper, inFib, nested, intoStart int
	for i, s := range samples {
		p := perf[i]
		require.Equal(t, p.tid, s.Tid, "sample %d's thread", i)
		chain := pyChain(s.Frames, perfMapDSO)
		n := min(len(chain), len(p.jit))
		for k := 0; k < n; k++ {
			if chain[k] == p.jit[k] {
				matched++
			} else if differ++; differ <= 5 {
				t.Errorf("sample %d (%s): Python frame %d is %q, perf's %q", i, p.time, k, chain[k], p.jit[k])
			}
		}
		perfOnly += len(p.jit) - n
		deeper += len(chain) - n
		if len(chain) > 0 && chain[0] == "py::fib:"+script {
			inFib++
			if wellNested(chain, script) {
				nested++
			}
			var all []string
			for _, f := range s.Frames {
				all = append(all, f.Symbol)
			}
			if indexOf(all, "Py_BytesMain") > 0 && indexOf(all, "_start") > indexOf(all, "Py_BytesMain") && s.Stop == "outermost" {
				intoStart++
			}
		}
	}
	t.Logf("Python frames: %d named as perf names them, %d differently, %d only perf printed; %d more that perf did not reach; %d of %d samples in fib well nested, %d into _start",
		matched, differ, perfOnly, deeper, nested, inFib, intoStart)
	assert.Zero(t, differ, "Python frames named otherwise than perf names them")
	assert.Zero(t, perfOnly, "Python frames perf names and ustack does not")
	require.Greater(t, inFib, 100, "samples in fib")
	assert.Greater(t, matched, inFib/2, "Python frames compared with perf")
	// A sample may land in a trampoline or a frame being set up; nearly
	// every one must unwind through all its Python frames to _start.
	assert.GreaterOrEqual(t, nested*100, inFib*95, "samples in fib whose Python frames are fib..., inner, outer, <module>")
	assert.GreaterOrEqual(t, intoStart*100, inFib*95, "samples in fib unwound into Py_BytesMain and _start")
}
