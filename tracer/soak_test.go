package tracer_test

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/tracer"
)

// soakLibs is how many libraries the soak builds, soakFuncs the functions
// each holds (symbols and lines to hold), soakDepth how many a process
// loads and calls through.
const (
	soakLibs  = 36
	soakFuncs = 300
	soakDepth = 6
)

// soakMain dlopens the libraries named on its command line, calls through
// each one's hop function in order, and waits in pause() in leaf.
const soakMain = `#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>
typedef void hop_fn(void **, int);
volatile int sink;
__attribute__((noinline)) void leaf(void **chain, int k) { printf("ready\n"); fflush(stdout); for (;;) pause(); }
int main(int argc, char **argv) {
	void *chain[64];
	int n = 0;
	for (int i = 1; i + 1 < argc && n < 62; i += 2) {
		void *h = dlopen(argv[i], RTLD_NOW);
		if (!h) { fprintf(stderr, "%s\n", dlerror()); return 2; }
		chain[n++] = dlsym(h, argv[i + 1]);
	}
	chain[n] = (void *)leaf;
	((hop_fn *)chain[0])(chain, 1);
	return sink;
}
`

// soakLib is library i: soakFuncs functions kept by a table, and its hop.
func soakLib(i int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "volatile int sink%d;\n", i)
	for f := 0; f < soakFuncs; f++ {
		fmt.Fprintf(&b, "__attribute__((noinline)) int l%02d_f%03d(int x) { sink%d += x * %d; return sink%d + %d; }\n", i, f, i, f, i, f)
	}
	fmt.Fprintf(&b, "int (*l%02d_table[])(int) = {\n", i)
	for f := 0; f < soakFuncs; f++ {
		fmt.Fprintf(&b, "\tl%02d_f%03d,\n", i, f)
	}
	fmt.Fprintf(&b, "};\ntypedef void hop_fn(void **, int);\n")
	fmt.Fprintf(&b, "__attribute__((noinline)) void l%02d_hop(void **chain, int k) { ((hop_fn *)chain[k])(chain, k + 1); sink%d += l%02d_table[k](k); }\n", i, i, i)
	return b.String()
}

// TestSoakBudget is the long-lived resolver's soak, run by
// scripts/soak-budget.sh (USTACK_SOAK=DURATION, e.g. 10m): one Tracer with
// a budget serves 200 short-lived processes spread over DURATION, each
// loading soakDepth of soakLibs libraries; each stack is captured with
// ptrace, unwound and checked against the chain the process was built
// to have (leaf, its hops innermost first, main), and the process is
// forgotten when it exits. After each, the objects held fit the budget;
// evictions and re-opens are counted; the figures are logged.
func TestSoakBudget(t *testing.T) {
	dur, err := time.ParseDuration(os.Getenv("USTACK_SOAK"))
	if err != nil {
		t.Skip("the soak runs with USTACK_SOAK=DURATION (scripts/soak-budget.sh)")
	}
	if runtime.GOARCH != "amd64" {
		t.Skip("the capture is x86_64's ptrace registers")
	}
	procs := 200
	if n, err := strconv.Atoi(os.Getenv("USTACK_SOAK_PROCS")); err == nil && n > 0 {
		procs = n
	}
	dir := t.TempDir()
	libs := make([]string, soakLibs)
	for i := range libs {
		libs[i] = testprog.Build(t, dir, fmt.Sprintf("soak%02d.c", i), soakLib(i), "-O2", "-g", "-shared", "-fPIC",
			"-o", filepath.Join(dir, fmt.Sprintf("libsoak%02d.so", i)))
	}
	bin := testprog.Build(t, dir, "soakmain.c", soakMain, "-O2", "-g", "-ldl")

	const budget = 12 << 20
	tr := tracer.New(tracer.Options{CacheBudget: budget})
	defer tr.Close()
	w := tr.NewWalker()
	rng := rand.New(rand.NewSource(1))
	start := time.Now()
	var peakHeld, peakInUseHeld int64
	rss0, heap0 := vmRSS(t), liveHeap()
	for n := 0; n < procs; n++ {
		// The processes are spread over the duration.
		if wait := time.Until(start.Add(dur * time.Duration(n) / time.Duration(procs))); wait > 0 {
			time.Sleep(wait)
		}
		pick := rng.Perm(soakLibs)[:soakDepth]
		var args, want []string
		for _, i := range pick {
			args = append(args, libs[i], fmt.Sprintf("l%02d_hop", i))
		}
		want = append(want, "leaf")
		for k := len(pick) - 1; k >= 0; k-- {
			want = append(want, fmt.Sprintf("l%02d_hop", pick[k]))
		}
		want = append(want, "main")
		cmd := testprog.StartPaused(t, "ready", 34, bin, args...)
		pid := cmd.Process.Pid
		regs, stack := captureThread(t, pid, 32<<10)
		p, err := tr.Process(pid)
		require.NoError(t, err)
		st := w.Unwind(p, regs, stack)
		var got []string
		for _, f := range st.Frames {
			got = append(got, f.Symbol)
		}
		if !testprog.HasChain(got, want) || st.Stop.String() != "outermost" {
			t.Fatalf("process %d (%d): stack %q (stop %v, %v), want the chain %q", n, pid, got, st.Stop, st.Err, want)
		}
		inUse := tr.CacheStats()
		peakInUseHeld = max(peakInUseHeld, inUse.HeldBytes)
		cmd.Process.Kill()
		cmd.Wait()
		tr.Forget(pid)
		cs := tr.CacheStats()
		peakHeld = max(peakHeld, cs.HeldBytes)
		if cs.HeldBytes > budget {
			t.Fatalf("process %d forgotten: %d bytes held, over the budget %d: %+v", n, cs.HeldBytes, budget, cs)
		}
		if n%20 == 0 || n == procs-1 {
			t.Logf("%v: %d processes; in use %d objects %d bytes; after Forget %+v; live heap %d kB, VmRSS %d kB",
				time.Since(start).Round(time.Second), n+1, inUse.InUse, inUse.HeldBytes, cs, liveHeap()>>10, vmRSS(t))
		}
	}
	cs := tr.CacheStats()
	t.Logf("soak: %d processes in %v, budget %d: peak held with a process in use %d, after Forget %d; evictions %d, re-opens %d, misses %d; live heap %d kB at the start, %d kB at the end; VmRSS %d kB at the start, %d kB at the end",
		procs, time.Since(start).Round(time.Second), budget, peakInUseHeld, peakHeld, cs.Evictions, cs.Reopens, cs.Misses, heap0>>10, liveHeap()>>10, rss0, vmRSS(t))
	if cs.Evictions == 0 || cs.Reopens == 0 {
		t.Errorf("no evictions or re-opens: %+v", cs)
	}
}

// vmRSS returns this process's resident set size in kB.
func vmRSS(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

// liveHeap returns the bytes of the Go heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
