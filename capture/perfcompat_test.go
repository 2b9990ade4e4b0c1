package capture

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/report"
)

// TestRecordUnprivileged records the test program as the unprivileged user
// nobody at perf_event_paranoid 2, where the kernel allows user-space
// sampling of one's own processes only: ustack must fall back to
// exclude_kernel as perf record does, and the stacks perf script unwinds
// from the file must hold the program's call chain.
func TestRecordUnprivileged(t *testing.T) {
	testprog.NeedPerfEvents(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the recorder as the user nobody")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) not installed")
	}
	if p := paranoid(); p != 2 {
		t.Skipf("perf_event_paranoid is %d: the user-only fallback is what paranoid 2 allows", p)
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	uid, _ := strconv.Atoi(nobody.Uid)

	dir, recorder := nobodyDir(t)
	prog := filepath.Join(dir, "prog")
	copyExec(t, buildProg(t), prog)

	out := filepath.Join(dir, "perf.data")
	var log bytes.Buffer
	opts := helperOptions(t, Options{Events: []string{"cpu-clock"}, Freq: 2000, Command: []string{prog, "20"}, Output: out, Log: nil})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", recorder)
	cmd.Env = append(os.Environ(), "USTACK_CAPTURE_HELPER="+string(opts), "USTACK_CAPTURE_HELPER_LOG=1")
	cmd.Dir = dir
	cmd.Stderr = &log
	require.NoError(t, cmd.Run(), "recording as nobody: %s", log.String())
	assert.Contains(t, log.String(), "recording user space only", "the fallback must be said once")
	assert.Equal(t, 1, strings.Count(log.String(), "recording user space only"))

	st, err := os.Stat(out)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	assert.Equal(t, uint32(uid), st.Sys().(*syscall.Stat_t).Uid, "the recording belongs to the user who made it")

	fc := readPerfData(t, out)
	require.NoError(t, fc.err)
	for _, a := range fc.session.Attrs {
		assert.NotZero(t, a.Flags&perfdata.AttrExcludeKernel, "%s: exclude_kernel", a.Name)
	}
	pid := progPid(t, fc)
	withStack := 0
	for _, s := range fc.samples {
		if s.Pid == pid && s.StackDynSize > 0 {
			withStack++
		}
	}
	assert.Greater(t, withStack, 10, "samples of prog with a user stack")

	// perf's own DWARF unwind of the file is the truth for the chain.
	var chains int
	for _, s := range testprog.ParseScript(testprog.Script(t, out, "-f")) {
		if strings.HasPrefix(s.Header, "prog ") && testprog.HasChain(s.Syms, []string{"leaf", "mid", "top", "main"}) {
			chains++
		}
	}
	assert.Greater(t, chains, 5, "perf script finds leaf <- mid <- top <- main in the user-only recording")
}

// nobodyDir returns a directory the user nobody can enter and write,
// holding a copy of the test binary (the recorder, see TestMain).
func nobodyDir(t *testing.T) (dir, recorder string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "ustack-nobody-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o777))
	self, err := os.Executable()
	require.NoError(t, err)
	recorder = filepath.Join(dir, "recorder")
	copyExec(t, self, recorder)
	return dir, recorder
}

func copyExec(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o755))
}

// TestRecordKeepsOld records twice to one name: the first recording and
// its archive survive as FILE.old and FILE.old.ustack, byte for byte.
func TestRecordKeepsOld(t *testing.T) {
	testprog.NeedPerfEvents(t)
	prog := buildProg(t)
	out := filepath.Join(t.TempDir(), "rec.data")
	record := func() {
		_, err := Record(context.Background(), Options{Events: []string{"syscalls:sys_enter_close"}, Command: []string{prog, "3"}, Output: out})
		require.NoError(t, err)
	}
	sum := func(path string) [32]byte {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return sha256.Sum256(b)
	}
	record()
	first, firstArchive := sum(out), sum(out+".ustack")
	record()
	assert.Equal(t, first, sum(out+".old"), "FILE.old is the first recording")
	assert.Equal(t, firstArchive, sum(out+".old.ustack"), "FILE.old.ustack is the first recording's archive")
	assert.NotEqual(t, first, sum(out), "FILE is the second recording")
	checkMode(t, out+".old")
	// The old recording still reads.
	fc := readPerfData(t, out+".old")
	require.NoError(t, fc.err)
	assert.NotEmpty(t, fc.samples)
}

// TestPerfScriptKernelFrames records a syscall-heavy workload with
// cpu-clock and checks that perf script names the kernel frames of the
// ustack recording as ustack report does (perf needs the kernel text
// mapping record to find them).
func TestPerfScriptKernelFrames(t *testing.T) {
	testprog.NeedPerfEvents(t)
	testprog.Perf(t)
	if _, _, ok := kernelText("/proc/kallsyms"); !ok {
		t.Skip("kernel addresses are hidden in /proc/kallsyms")
	}
	out := filepath.Join(t.TempDir(), "k.data")
	st, err := Record(context.Background(), Options{Events: []string{"cpu-clock"}, Freq: 2000,
		Command: []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=1", "count=400000"}, Output: out, Stdout: io.Discard, Stderr: io.Discard})
	require.NoError(t, err)
	require.NotZero(t, st.Samples)

	// perf script: one line per sample with the time, then the kernel
	// frames as "sym+off" (user frames are left out).
	script := testprog.Script(t, out, "-F", "time,ip,sym,symoff,dso")
	perfK := map[string][]string{}
	var cur string
	for _, l := range strings.Split(script, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 1 && strings.HasSuffix(f[0], ":"):
			cur = strings.TrimSuffix(f[0], ":")
			perfK[cur] = []string{}
		case len(f) >= 3 && f[len(f)-1] == "([kernel.kallsyms])":
			perfK[cur] = append(perfK[cur], f[1])
		}
	}

	r, err := perfdata.Open(out)
	require.NoError(t, err)
	defer r.Close()
	same, total := 0, 0
	var firstDiff string
	_, err = report.Run(r, report.Options{}, func(s *report.Sample) error {
		var ours []string
		for _, f := range s.Frames {
			if f.Kernel {
				ours = append(ours, f.Symbol+"+0x"+strconv.FormatUint(f.SymOff, 16))
			}
		}
		if len(ours) == 0 {
			return nil
		}
		total++
		key := strconv.FormatUint(s.Time/1e9, 10) + "." + leftPad(strconv.FormatUint(s.Time%1e9/1e3, 10), 6)
		if strings.Join(perfK[key], " ") == strings.Join(ours, " ") {
			same++
		} else if firstDiff == "" {
			firstDiff = key + ": perf " + strings.Join(perfK[key], " ") + " | ustack " + strings.Join(ours, " ")
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, total, 20, "samples with kernel frames")
	t.Logf("%d of %d samples with kernel frames have the same frames in perf script", same, total)
	assert.GreaterOrEqual(t, float64(same), 0.99*float64(total), "first difference: %s", firstDiff)
}

func leftPad(s string, n int) string {
	for len(s) < n {
		s = "0" + s
	}
	return s
}

// TestTracefsNotReadable: tracefs is mounted but, as on Debian, only root
// may enter it. An unprivileged user asking for a tracepoint must hear
// that, not that tracefs is not mounted.
func TestTracefsNotReadable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the recorder as the user nobody")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) not installed")
	}
	d, err := TracefsDir()
	if err != nil {
		t.Skipf("no tracefs: %v", err)
	}
	if st, err := os.Stat(d); err != nil || st.Mode().Perm()&0o005 == 0o005 {
		t.Skipf("%s is readable by everyone here", d)
	}
	dir, recorder := nobodyDir(t)
	opts := helperOptions(t, Options{Events: []string{"syscalls:sys_enter_close"}, Command: []string{"true"}, Output: filepath.Join(dir, "t.data")})
	cmd := exec.Command(setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", recorder)
	cmd.Env = append(os.Environ(), "USTACK_CAPTURE_HELPER="+string(opts))
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "recording a tracepoint as nobody must fail")
	assert.Contains(t, string(out), "no permissions to read "+d+"/events")
	assert.NotContains(t, string(out), "not mounted")
}

// TestExecTimeSamples records a tracepoint that fires inside execve, while
// the kernel loads the new program (mmap:vm_unmapped_area, from
// load_elf_binary's mappings), as the .bss zeroing of a program hits a
// watchpoint on one of its globals (mem:ADDR with a started command). The
// user registers of such a sample are the process's before the exec, whose
// code is no longer mapped: the report must stop it early with report's
// exec stop and name no user frame, never call it complete.
func TestExecTimeSamples(t *testing.T) {
	testprog.NeedPerfEvents(t)
	testprog.NeedTracefs(t, "mmap/vm_unmapped_area")
	if _, _, ok := kernelText("/proc/kallsyms"); !ok {
		t.Skip("kernel addresses are hidden in /proc/kallsyms")
	}
	prog := buildProg(t)
	out := filepath.Join(t.TempDir(), "exec.data")
	_, err := Record(context.Background(), Options{Events: []string{"mmap:vm_unmapped_area"},
		Command: []string{prog, "1"}, Output: out, NoArchive: true, Stdout: io.Discard, Stderr: io.Discard})
	require.NoError(t, err)
	r, err := perfdata.Open(out)
	require.NoError(t, err)
	defer r.Close()
	inExec, after := 0, 0
	_, err = report.Run(r, report.Options{}, func(s *report.Sample) error {
		exec := false
		for _, f := range s.Frames {
			exec = exec || (f.Kernel && f.Symbol == "load_elf_binary")
		}
		switch {
		case exec:
			inExec++
			if s.Stop != report.StopExec {
				t.Errorf("a sample taken inside execve stopped with %q (%s), want %s", s.Stop, s.StopErr, report.StopExec)
			}
			for _, f := range s.Frames {
				if !f.Kernel {
					t.Errorf("a sample taken inside execve has the user frame %s (%#x): the registers are the replaced program's", f.Symbol, f.PC)
				}
			}
		case s.Stop == "outermost":
			after++ // ld.so's own mmaps: complete stacks
		}
		return nil
	})
	require.NoError(t, err)
	if inExec == 0 {
		t.Fatal("no sample inside load_elf_binary")
	}
	t.Logf("%d samples inside execve, %d complete stacks after it", inExec, after)
}
