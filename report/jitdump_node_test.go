package report

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
)

// fibJS runs for about a second in nested JS functions (fib optimized by
// TurboFan, inner and outer interpreted then optimized).
const fibJS = `
function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
function inner(k) { let s = 0; for (let i = 0; i < k; i++) s += fib(18); return s; }
function outer() { const end = Date.now() + 1000; let t = 0; while (Date.now() < end) t += inner(5); return t; }
console.log(outer());
`

// TestJITDumpNode: node --perf-prof writes a jitdump; perf's own reading of
// it (perf inject --jit, then perf script) is the truth. ustack, on the
// recording without inject, names the JIT frames of every sample as perf
// does, and unwinds through the JS frames into node's C++ (JSEntry,
// node::Start, libc's start; node's main is a jmp to node::Start, so
// neither tool has a frame for it).
func TestJITDumpNode(t *testing.T) {
	requirePerf(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed (Debian package nodejs): no JIT to record")
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fib.js"), []byte(fibJS), 0o600))
	data := filepath.Join(dir, "prof.data")
	cmd := testprog.PerfCommand(t, "record", "-q", "-k", "1", "--call-graph", "dwarf", "-o", data, "--",
		node, "--perf-prof", "--perf-prof-unwinding-info", "--interpreted-frames-native-stack", "fib.js")
	cmd.Dir = dir // node writes jit-PID.dump in its working directory
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("perf record of node cannot record here: %v: %s", err, out)
	}
	dumps, _ := filepath.Glob(filepath.Join(dir, "jit-*.dump"))
	require.Len(t, dumps, 1, "node --perf-prof wrote no jitdump")

	injected := filepath.Join(dir, "injected.data")
	testprog.Output(t, testprog.PerfCommand(t, "inject", "--jit", "-i", data, "-o", injected))
	// --no-inline: perf's inline frames come from running addr2line on
	// node, minutes long; the JIT frames are the same.
	perf := parsePerfJIT(t, testprog.Script(t, injected, "--no-inline", "-F", "tid,time,ip,sym,dso"), injectedDSO)

	var warnings []string
	_, samples := ustackScriptWith(t, data, Options{Warn: func(m string) { warnings = append(warnings, m) }})
	for _, w := range warnings {
		// node 20 writes some DEBUG_INFO records with a freed file
		// name's bytes, which misalign the entries after it: those are
		// left out, with one warning.
		if !strings.Contains(w, "DEBUG_INFO of") {
			assert.NotContains(t, w, "jit-", "a warning about the dump")
		}
	}
	require.Equal(t, len(perf), len(samples), "samples: perf script on the injected recording vs ustack")

	var matched, differ, perfOnly, ustackOnly, jsSamples, intoStart, guessed, notInto, lined, entered, cut, stoppedShort int
	for i, s := range samples {
		p := perf[i]
		require.Equal(t, p.tid, s.Tid, "sample %d's thread", i)
		var jit, chain []string
		var how []string
		for _, f := range s.Frames {
			if f.Kernel || f.Inlined {
				continue
			}
			chain = append(chain, f.Symbol)
			if f.Module == dumps[0] {
				jit = append(jit, f.Symbol)
				how = append(how, string(f.How))
				if f.HasSource {
					// The lines kept are node's own: a JS file, a line
					// within reach.
					lined++
					assert.True(t, strings.HasSuffix(f.File, ".js") || strings.HasPrefix(f.File, "node:"), "JIT frame %s: file %q", f.Symbol, f.File)
					assert.Less(t, f.Line, 100000, "JIT frame %s: line", f.Symbol)
				}
			}
		}
		stepped := func(h string) bool { return h == "frameless" || h == "prologue" }
		if k, m := slices.IndexFunc(how, stepped), len(jit)-len(p.jit); k >= 0 && (m == 1 || m == 2 && (strings.HasPrefix(jit[k], "JS:^") || strings.HasPrefix(jit[k], "JS:~"))) &&
			k+m <= len(how) && !slices.ContainsFunc(how[k:k+m], func(h string) bool { return !stepped(h) }) &&
			slices.Equal(slices.Delete(slices.Clone(jit), k, k+m), p.jit) {
			// The frame below was caught before it set up its frame
			// pointer (at its entry: its return address still at the
			// SP, or after pushes its prologue shows), in JIT code or
			// in node's builtins (CEntry), none with CFI: ustack takes
			// the return address where the call before it went to that
			// function (frameless, prologue). perf follows %rbp, which
			// is still the caller's, and skips the caller: the one
			// frame perf lacks. Caught in a builtin that baseline
			// code (JS:^) calls before its frame is built (its first
			// instruction calls BaselineOutOfLinePrologue to build
			// it), the baseline function has no frame either: perf
			// skips it and its caller, two frames, both found so
			// (once in CI, in 4,000 samples). So too an interpreted
			// function's copy of InterpreterEntryTrampoline (JS:~,
			// --interpreted-frames-native-stack), caught in a
			// builtin it calls before it builds its frame (once in a
			// CI run beside another: ~fib and its caller ~fib,
			// frameless both, where perf went on from the frame
			// above).
			entered++
			jit = slices.Delete(jit, k, k+m)
		}
		short := false
		if k, m := slices.IndexFunc(how, stepped), len(jit)-len(p.jit); s.Stop != "outermost" && s.Stop != "fp_guess" && k == 0 && len(jit) > 1 &&
			stepped(how[0]) && m < 1 && slices.Equal(jit[1:], p.jit[:len(jit)-1]) {
			// The same, where ustack's walk then stopped short of
			// perf's (no_unwind_info: once in a CI run, a builtin
			// called by ^resolve, its caller ~Module._nodeModulePaths
			// found by its prologue and no step past it): the frame
			// perf lacks, then a prefix of perf's frames, the stack
			// not called complete. Counted among the samples not
			// unwound into node::Start below.
			entered++
			jit, short = jit[1:], true
			stoppedShort++
		}
		// perf stops early at some frames: compare the frames both print.
		n := min(len(jit), len(p.jit))
		for k := 0; k < n; k++ {
			if jit[k] == p.jit[k] {
				matched++
			} else {
				differ++
				if differ <= 5 {
					t.Errorf("sample %d (%s): JIT frame %d is %q, perf inject's %q\n ustack %q (how %q)\n perf   %q", i, p.time, k, jit[k], p.jit[k], jit, how, p.jit)
				}
			}
		}
		if !short {
			perfOnly += len(p.jit) - n
		}
		ustackOnly += len(jit) - n
		if len(jit) > 0 && strings.HasPrefix(jit[0], "JS:") {
			if s.Stop == "truncated" {
				// Cut by the 8 KiB snapshot: how many depends on how
				// long fib stays interpreted (its frames are larger
				// than TurboFan's), later on a busy machine, where
				// the compiler's threads wait.
				cut++
				continue
			}
			jsSamples++
			entry := indexOf(chain, "Builtin:JSEntry")
			start := indexOf(chain, "_ZN4node5StartEiPPc")
			through := entry >= 0 && start > entry && indexOf(chain, "__libc_start_call_main") > start
			switch {
			case through && s.Stop == "outermost":
				intoStart++
			case through && s.Stop == "fp_guess":
				// Through code without CFI, its frame pointer followed
				// unproven: node's builtins, or baseline code the
				// jitdump gives no unwinding information for. How many
				// depends on how long fib runs before TurboFan's code
				// replaces it, later on a busy machine (16% of them
				// seen so). Not called complete, rightly; counted apart.
				guessed++
			case notInto < 5:
				notInto++
				t.Logf("sample %d (%s) in JS not unwound into node::Start: stop %s, frames %q, how %q", i, p.time, s.Stop, chain, how)
			}
		}
	}
	t.Logf("JIT frames: %d named as perf inject names them, %d differently; %d only perf printed, %d only ustack; %d with a source line; %d of %d samples in JS whose snapshot held their stack unwound into node::Start (%d more cut by it); %d caught before their frame pointer was set up, where perf skips the caller",
		matched, differ, perfOnly, ustackOnly, lined, intoStart, jsSamples, cut, entered)
	assert.Zero(t, differ, "JIT frames named otherwise than perf inject names them")
	assert.Greater(t, matched, 1000, "JIT frames compared")
	assert.Zero(t, perfOnly, "JIT frames perf names and ustack does not")
	require.Greater(t, jsSamples, 100, "samples in JS code, their stacks whole in the snapshot")
	// A few may be caught in a frame being set up; nearly all must reach
	// node::Start, complete or (through code without CFI) fp_guess,
	// and most of them complete (99% on a quiet machine, 83% on a busy
	// one).
	t.Logf("%d more reached node::Start through a frame-pointer guess (fp_guess); %d stopped short of perf's frames after the frame it lacks", guessed, stoppedShort)
	assert.LessOrEqual(t, stoppedShort*100, jsSamples, "samples stopped short of perf's frames: at most 1%")
	assert.GreaterOrEqual(t, (intoStart+guessed)*100, jsSamples*95, "samples in JS unwound through JSEntry into node::Start")
	assert.GreaterOrEqual(t, intoStart*2, jsSamples, "samples in JS unwound into node::Start, called complete")
}
