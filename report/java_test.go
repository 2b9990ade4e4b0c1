package report

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
)

// hotJava runs for about a second in nested hot methods, compiled by the
// JIT (main stays interpreted or is compiled on stack replacement).
const hotJava = `public class Hot {
    static int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
    static long inner(int k) { long s = 0; for (int i = 0; i < k; i++) s += fib(20); return s; }
    public static void main(String[] a) {
        long end = System.currentTimeMillis() + 1000, t = 0;
        while (System.currentTimeMillis() < end) t += inner(5);
        System.out.println(t);
    }
}
`

// recordJava compiles hotJava with the JDK at home (skipping where it is
// missing) and records it under perf record --call-graph dwarf, the JVM
// writing its perf map at exit, with the JVM flags given.
func recordJava(t *testing.T, home string, flags ...string) string {
	if _, err := os.Stat(filepath.Join(home, "bin", "javac")); err != nil {
		t.Skipf("no JDK at %s (JDK 17: Debian package openjdk-17-jdk-headless): no JIT to record", home)
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Hot.java"), []byte(hotJava), 0o600))
	javac := exec.Command(filepath.Join(home, "bin", "javac"), "Hot.java")
	javac.Dir = dir
	testprog.Output(t, javac)
	data := filepath.Join(dir, "prof.data")
	args := append([]string{"record", "-q", "-F", "999", "--call-graph", "dwarf,16384", "-o", data, "--",
		filepath.Join(home, "bin", "java"), "-XX:+UnlockDiagnosticVMOptions", "-XX:+DumpPerfMapAtExit"}, flags...)
	cmd := testprog.PerfCommand(t, append(args, "-cp", dir, "Hot")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("perf record of java cannot record here: %v: %s", err, out)
	}
	return data
}

// TestJavaNoFramePointer: without -XX:+PreserveFramePointer the JVM's
// compiled code has neither CFI nor frame pointers: stacks stop in it
// (perf's too), and the summary says so, naming the perf map and the flag.
func TestJavaNoFramePointer(t *testing.T) {
	requirePerf(t)
	data := recordJava(t, "/usr/lib/jvm/java-17-openjdk-amd64")
	var inFib []*Sample
	sum := verboseSummary(t, data, Options{})
	_, samples := ustackScriptWith(t, data, Options{})
	removeJITFiles(t, samples)
	for _, s := range samples {
		if len(s.Frames) > 0 && s.Frames[0].Symbol == "int Hot.fib(int)" {
			inFib = append(inFib, s)
		}
	}
	require.Greater(t, len(inFib), 100, "samples in fib")
	map0 := fmt.Sprintf("/tmp/perf-%d.map", inFib[0].Pid)
	assert.Regexp(t, `ustack: \d+ of \d+ stacks stopped in JIT code \(`+regexp.QuoteMeta(map0)+`\) with no unwind information and no frame pointer to follow; run the JIT with frame pointers \(java -XX:\+PreserveFramePointer\)`, sum)
}

// javaNested reports whether the Hot methods of a stack (innermost first)
// are as hotJava calls them: fib repeated, then inner and main, each of
// those two perhaps inlined into its caller.
func javaNested(chain []string) bool {
	k := 0
	for k < len(chain) && chain[k] == "int Hot.fib(int)" {
		k++
	}
	rest := chain[k:]
	if len(rest) > 0 && rest[0] == "long Hot.inner(int)" {
		rest = rest[1:]
	}
	if len(rest) > 0 && rest[0] == "void Hot.main(java.lang.String[])" {
		rest = rest[1:]
	}
	return k > 0 && len(rest) == 0
}

// TestJavaPerfMap: a JVM run with -XX:+DumpPerfMapAtExit writes
// /tmp/perf-PID.map at exit; its compiled code has no CFI, and with
// -XX:+PreserveFramePointer keeps frame pointers, which perf record
// --call-graph dwarf does not follow (perf script stops at the first JIT
// frame). ustack names the JIT frames perf names as perf does and walks
// the frame pointers through the Java frames, in the order the program
// calls them, into libjvm, JavaMain and start_thread.
func TestJavaPerfMap(t *testing.T) {
	requirePerf(t)
	jdks := map[string]string{"17": "/usr/lib/jvm/java-17-openjdk-amd64", "25": "/usr/lib/jvm/temurin-25-jdk-amd64"}
	for _, v := range []string{"17", "25"} {
		t.Run("jdk"+v, func(t *testing.T) {
			home := jdks[v]
			data := recordJava(t, home, "-XX:+PreserveFramePointer")
			perf := parsePerfJIT(t, testprog.Script(t, data, "--no-inline", "-F", "tid,time,ip,sym,dso"), perfMapDSO)
			_, samples := ustackScriptWith(t, data, Options{})
			removeJITFiles(t, samples)
			require.Equal(t, len(perf), len(samples), "samples: perf script vs ustack")

			var matched, differ, perfOnly, deeper, inFib, nested, intoThread, cut int
			for i, s := range samples {
				p := perf[i]
				require.Equal(t, p.tid, s.Tid, "sample %d's thread", i)
				var jit, hot, all []string
				for _, f := range s.Frames {
					if f.Kernel || f.Inlined {
						continue
					}
					all = append(all, f.Symbol)
					if perfMapDSO(f.Module) {
						jit = append(jit, f.Symbol)
						if strings.Contains(f.Symbol, " Hot.") {
							hot = append(hot, f.Symbol)
						}
					}
				}
				n := min(len(jit), len(p.jit))
				for k := 0; k < n; k++ {
					if jit[k] == p.jit[k] {
						matched++
					} else if differ++; differ <= 5 {
						t.Errorf("sample %d (%s): JIT frame %d is %q, perf's %q", i, p.time, k, jit[k], p.jit[k])
					}
				}
				if len(p.jit) > n {
					if perfOnly == 0 {
						// What the two saw, to tell why (once seen under load).
						var fs []string
						for _, f := range s.Frames {
							fs = append(fs, fmt.Sprintf("%s (%s, %s)", f.Symbol, f.Module, f.How))
						}
						t.Logf("sample %d (%s): perf's JIT frames %q; ustack's stack (stop %s %s):\n  %s", i, p.time, p.jit, s.Stop, s.StopErr, strings.Join(fs, "\n  "))
					}
					perfOnly += len(p.jit) - n
				}
				deeper += len(jit) - n
				if len(jit) == 0 || jit[0] != "int Hot.fib(int)" {
					continue
				}
				inFib++
				if javaNested(hot) {
					nested++
				}
				if s.Stop == "truncated" {
					// Cut by the 16 KiB snapshot (the recording's limit,
					// reported as such): more of them on a busy machine,
					// where fib stays interpreted longer, its frames larger.
					cut++
					continue
				}
				// Frame.Symbol is the symbol, mangled.
				call := slices.IndexFunc(all, func(s string) bool { return strings.HasPrefix(s, "_ZN9JavaCalls11call_helper") })
				if call > 0 && indexOf(all, "JavaMain") > call &&
					indexOf(all, "start_thread") > indexOf(all, "JavaMain") && completeButJIT(t, s, perfMapDSO) {
					intoThread++
				}
			}
			t.Logf("JIT frames: %d named as perf names them, %d differently, %d only perf printed; %d more that perf did not reach; %d of %d samples in fib nested as called, %d of the %d whose snapshot held their stack into JavaMain and start_thread",
				matched, differ, perfOnly, deeper, nested, inFib, intoThread, inFib-cut)
			assert.Zero(t, differ, "JIT frames named otherwise than perf names them")
			assert.Zero(t, perfOnly, "JIT frames perf names and ustack does not")
			require.Greater(t, inFib, 100, "samples in fib")
			assert.GreaterOrEqual(t, matched, inFib, "JIT frames compared with perf")
			assert.GreaterOrEqual(t, nested*100, inFib*95, "samples in fib whose Java frames are fib..., inner, main")
			require.Greater(t, inFib-cut, 50, "samples in fib whose snapshot held their stack")
			assert.GreaterOrEqual(t, intoThread*100, (inFib-cut)*95, "samples in fib (snapshot not cut) unwound through JavaCalls::call_helper into JavaMain and start_thread")
		})
	}
}

// completeButJIT reports whether s reached its outermost frame, where the
// only step that may be a guess is out of JIT code a perf map names: such
// code is known by its name alone (no bytes, so no prologue to check), and
// a stack through it is fp_guess, naming a JIT frame, never a frame of an
// object with symbols and code.
func completeButJIT(t *testing.T, s *Sample, jit func(string) bool) bool {
	t.Helper()
	switch s.Stop {
	case "outermost":
		return true
	case "fp_guess":
		for _, f := range s.Frames {
			if !f.Kernel && !f.Inlined && strings.Contains(s.StopErr, fmt.Sprintf("frame at pc %#x ", f.PC)) {
				if !jit(f.Module) {
					t.Errorf("a frame-pointer guess out of %s (%s): %s", f.Symbol, f.Module, s.StopErr)
				}
				return jit(f.Module)
			}
		}
		t.Errorf("fp_guess names no frame of the stack: %s", s.StopErr)
	}
	return false
}
