package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/report"
)

// fpWorkC calls through libc (qsort with a callback, snprintf, memmove) and
// a recursion, so that stacks pass through code with and without frame
// records whatever the program's own flags.
const fpWorkC = `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int cmp(const void *a, const void *b) { int x = *(const int *)a, y = *(const int *)b; return (x > y) - (x < y); }
__attribute__((noinline)) unsigned leaf(unsigned x) { for (int i = 0; i < 50; i++) x = x * 1103515245u + 12345u; return x; }
__attribute__((noinline)) unsigned mid(unsigned x, int d) { return d ? mid(x + 1, d - 1) + 1 : leaf(x); }
__attribute__((noinline)) void sorter(int *v, int n, unsigned seed) { for (int i = 0; i < n; i++) v[i] = (int)leaf(seed + i); qsort(v, n, sizeof *v, cmp); }
__attribute__((noinline)) size_t texts(char *buf, int n) { size_t t = 0; for (int i = 0; i < n; i++) { snprintf(buf, 256, "line %d of %s", i, "text"); t += strlen(buf); memmove(buf + 1, buf, 200); } return t; }
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 300;
  static int v[4096]; char buf[512]; unsigned s = 0; size_t t = 0;
  for (int r = 0; r < n; r++) { s += mid(r, r % 8); sorter(v, 4096, s); t += texts(buf, 200); }
  printf("%u %zu\n", s, t);
  return 0;
}
`

// fpWorkCC goes through libstdc++ (std::map of std::string, std::sort).
const fpWorkCC = `#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>
__attribute__((noinline)) static unsigned leaf(unsigned x) { for (int i = 0; i < 50; i++) x = x * 1103515245u + 12345u; return x; }
__attribute__((noinline)) static size_t strings(int n) { std::map<std::string, int> m; for (int i = 0; i < n; i++) m[std::to_string(leaf(i) % 1000) + "key"] += i; return m.size(); }
__attribute__((noinline)) static unsigned sorting(int n, unsigned s) { std::vector<unsigned> v(n); for (auto &x : v) x = s = leaf(s); std::sort(v.begin(), v.end(), [](unsigned a, unsigned b) { return a % 977 < b % 977; }); return v[n / 2]; }
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 100;
  size_t t = 0; unsigned s = 1;
  for (int r = 0; r < n; r++) { t += strings(2000); s = sorting(20000, s); }
  std::printf("%zu %u\n", t, s);
}
`

// fpSyscallC makes system calls from a recursion (getppid, through libc's
// wrapper, which keeps no frame record).
const fpSyscallC = `#include <stdlib.h>
#include <unistd.h>
__attribute__((noinline)) int down(int d) { return d ? down(d - 1) + 1 : getppid(); }
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 200, s = 0;
  for (int i = 0; i < n; i++) s += down(i % 20);
  return s == 42;
}
`

var (
	omitFP = []string{"-O2", "-g", "-fomit-frame-pointer"}
	keepFP = []string{"-O2", "-g", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer"}
)

// TestFPAuditMatchesKernelChain holds the frame-pointer audit to the
// kernel's own frame-pointer walk of the same samples: ustack record keeps
// the user part of the kernel's call chain beside the stack snapshot, and
// for every sample whose audit ended where the snapshot still covered it
// (fp_stop end or depth), fp_frames must be the length of that chain, in at
// least 99% of them, for C and C++ programs built with and without frame
// pointers.
func TestFPAuditMatchesKernelChain(t *testing.T) {
	testprog.NeedPerfEvents(t)
	cases := []struct {
		name, file, src, arg string
		flags                []string
		probes               []string // uprobes instead of cpu-clock
		events               []string // other events instead of cpu-clock
	}{
		{"c_omit_frame_pointer", "work.c", fpWorkC, "300", omitFP, nil, nil},
		{"c_frame_pointers", "work.c", fpWorkC, "300", keepFP, nil, nil},
		{"cxx_omit_frame_pointer", "work.cc", fpWorkCC, "30", omitFP, nil, nil},
		{"cxx_frame_pointers", "work.cc", fpWorkCC, "30", keepFP, nil, nil},
		// At a uprobe on a function's push %rbp the kernel stores the
		// return address at SP first.
		{"c_frame_pointers_uprobes", "work.c", fpWorkC, "100", keepFP, []string{"sorter", "texts", "mid"}, nil},
		// System calls: the kernel's frames come first in the chain
		// and count against its max_stack.
		{"c_frame_pointers_syscalls", "sys.c", fpSyscallC, "200", keepFP, nil, []string{"syscalls:sys_enter_getppid"}},
		{"c_omit_frame_pointer_syscalls", "sys.c", fpSyscallC, "200", omitFP, nil, []string{"syscalls:sys_enter_getppid"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := testprog.Build(t, dir, tc.file, tc.src, tc.flags...)
			// Without frame pointers most chains leave the snapshot
			// through a register that held a heap pointer: few walks
			// end inside it (6 of 156 C++ samples on a quiet machine,
			// none of 156 once beside three busy loops, where the
			// samples fall elsewhere), so one is asked for there,
			// three with frame pointers; recordings are made until
			// they hold that many, at most maxRounds.
			least := 3
			if slices.Contains(tc.flags, "-fomit-frame-pointer") {
				least = 1
			}
			const maxRounds = 6
			var n fpCounts
			var summary string
			for round := 0; round < maxRounds && n.compared < least; round++ {
				data := filepath.Join(dir, fmt.Sprintf("rec%d.data", round))
				args := []string{"-q", "-F", "2000", "-o", data}
				for _, p := range tc.probes {
					args = append(args, "-e", "u:"+bin+":"+p)
				}
				for _, e := range tc.events {
					args = append(args, "-e", e)
				}
				rc, stderr := recordBounded(t, append(args, "--", bin, tc.arg)...)
				if rc != 0 && (tc.probes != nil || tc.events != nil) {
					t.Skipf("ustack record cannot record these events here: %s", stderr)
				}
				require.Zero(t, rc, stderr)
				summary = n.add(t, data)
				t.Logf("round %d: %d of %d samples compared (of %d audited) have the kernel's chain length; %d of the others a kernel chain shorter than the audit's; %s",
					round, n.same, n.compared, n.audited, n.shorter, summary)
			}
			require.GreaterOrEqual(t, n.compared, least, "too few samples whose snapshot covers the frame-pointer walk, in %d recordings", maxRounds)
			assert.GreaterOrEqual(t, float64(n.same), 0.99*float64(n.compared), "first difference: %s", n.firstDiff)
			assert.LessOrEqual(t, float64(n.shorter), 0.01*float64(n.audited-n.compared), "samples whose kernel chain is shorter than the audit's, where the snapshot ended first")
			assert.NotEmpty(t, summary, "the summary's audit line")
		})
	}
}

// fpCounts adds up, over recordings, how the frame-pointer audit of each
// sample compares with the kernel's chain (TestFPAuditMatchesKernelChain).
type fpCounts struct {
	same, compared, audited, shorter int
	firstDiff                        string
}

// add reports the recording data and counts its samples; it returns the
// summary's audit line.
func (n *fpCounts) add(t *testing.T, data string) string {
	t.Helper()
	// The kernel's chains, by (time, tid), read from the recording itself.
	kernelChain := map[string]int{}
	r, err := perfdata.Open(data)
	require.NoError(t, err)
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		if s, ok := rec.(*perfdata.Sample); ok && len(s.Regs) > 0 {
			k := 0
			for _, ip := range perfdata.UserCallchain(s.Callchain) {
				if ip < perfdata.ContextMax {
					k++
				}
			}
			kernelChain[fmt.Sprint(s.Time, "/", s.Tid)] = k
		}
	}
	r.Close()

	var out, errb bytes.Buffer
	require.Zero(t, run([]string{"report", "--format", "json", data}, &out, &errb), errb.String())
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var s struct {
			Time     uint64  `json:"time"`
			Tid      int64   `json:"tid"`
			FPFrames *int    `json:"fp_frames"`
			FPStop   *string `json:"fp_stop"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &s))
		if s.FPStop == nil {
			continue
		}
		n.audited++
		k, ok := kernelChain[fmt.Sprint(s.Time, "/", s.Tid)]
		require.True(t, ok, "sample at %d of thread %d is not in the recording", s.Time, s.Tid)
		if *s.FPStop != "end" && *s.FPStop != "depth" {
			// The kernel read on, in memory the snapshot does not
			// hold: it found at least as many.
			if k < *s.FPFrames {
				n.shorter++
			}
			continue
		}
		n.compared++
		if k == *s.FPFrames {
			n.same++
		} else if n.firstDiff == "" {
			n.firstDiff = fmt.Sprintf("sample at %d: kernel %d frames, audit %d (%s)", s.Time, k, *s.FPFrames, *s.FPStop)
		}
	}
	return lineWith(errb.String(), "a frame-pointer walk would have found")
}

// lineWith returns the first line of s that contains sub, or "".
func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// TestRecordNoUserCallchain: --no-user-callchain records as perf record
// --call-graph dwarf does, exclude_callchain_user set and no user part in
// any sample's chain; without it every sample with a user stack carries the
// kernel's user chain, the sampled PC first.
func TestRecordNoUserCallchain(t *testing.T) {
	testprog.NeedPerfEvents(t)
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "work.c", fpWorkC, keepFP...)
	for _, c := range []struct {
		flag string
		want bool
	}{{"", true}, {"--no-user-callchain", false}} {
		data := filepath.Join(dir, "rec"+c.flag+".data")
		args := []string{"-q", "-F", "2000", "-o", data}
		if c.flag != "" {
			args = append(args, c.flag)
		}
		rc, stderr := recordBounded(t, append(args, "--", bin, "100")...)
		require.Zero(t, rc, stderr)
		r, err := perfdata.Open(data)
		require.NoError(t, err)
		withChain, samples := 0, 0
		for _, a := range r.Session().Attrs {
			assert.Equal(t, !c.want, a.Flags&perfdata.AttrExcludeCallchainUser != 0, "%q: exclude_callchain_user", c.flag)
		}
		for {
			rec, err := r.Next()
			if err != nil {
				break
			}
			if s, ok := rec.(*perfdata.Sample); ok && len(s.Regs) > 0 {
				samples++
				if u := perfdata.UserCallchain(s.Callchain); len(u) > 0 && u[0] < perfdata.ContextMax {
					withChain++
					if s.CPUMode() == perfdata.MiscUser {
						assert.Equal(t, s.IP, u[0], "the user chain starts at the sampled PC")
					}
				}
			}
		}
		r.Close()
		require.NotZero(t, samples)
		if c.want {
			assert.Equal(t, samples, withChain, "samples with the kernel's user chain")
		} else {
			assert.Zero(t, withChain, "samples with a user chain under --no-user-callchain")
		}
	}
}

// fpDeepC recurses 61 frames of over 200 bytes each (about 17 KiB: twice the
// default 8 KiB snapshot, within the kernel's 127-frame chain) down to a
// function that burns the CPU: main <- deep x61 <- burn.
const fpDeepC = `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
__attribute__((noinline)) unsigned burn(unsigned x) { for (int i = 0; i < 2000; i++) x = x * 1103515245u + 12345u; return x; }
__attribute__((noinline)) unsigned deep(int d, unsigned x) {
  volatile char pad[200];
  memset((char *)pad, (int)x, sizeof pad);
  if (d == 0) return burn(x + pad[3]);
  return deep(d - 1, x + pad[7]) + 1;
}
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 3000;
  unsigned s = 0;
  for (int r = 0; r < n; r++) s += deep(60, r);
  printf("%u\n", s);
  return 0;
}
`

// deepStack is one sample's user stack as the report gives it.
type deepStack struct {
	syms, hows []string
	stop       string
}

// reportDeep reports data with or without the call chain repair, the
// samples of the program in burn or deep (by tid order and time).
func reportDeep(t *testing.T, data string, noRepair bool) []deepStack {
	return slices.DeleteFunc(reportStacks(t, data, noRepair), func(d deepStack) bool {
		return len(d.syms) == 0 || d.syms[0] != "burn" && d.syms[0] != "deep"
	})
}

// recordDeep builds fpDeepC as file with flags, records it with the
// default snapshot size and reports it without and with the repair.
func recordDeep(t *testing.T, dir, file string, flags []string) (bin string, before, after []deepStack) {
	bin = testprog.Build(t, dir, file, fpDeepC, flags...)
	data := bin + ".data"
	rc, stderr := recordBounded(t, "-q", "-o", data, "--", bin, "3000")
	require.Zero(t, rc, stderr)
	return bin, reportDeep(t, data, true), reportDeep(t, data, false)
}

func reachMain(stacks []deepStack) int {
	n := 0
	for _, s := range stacks {
		if slices.Contains(s.syms, "main") {
			n++
		}
	}
	return n
}

// TestCallchainRepair records a deep recursion with the default 8 KiB stack
// snapshot. Built with frame pointers, the stacks the snapshot cuts go on
// with the kernel's chain: after the repair every stack in burn holds the
// 61 deep frames and main (the program's own structure), its frames beyond
// the snapshot marked callchain, and more reach main than before (and than
// perf's own dwarf unwind of a recording of the same program). Built
// without frame pointers, the kernel's chain of a cut stack never provably
// continues it: the stacks are the same with and without the repair.
func TestCallchainRepair(t *testing.T) {
	testprog.NeedPerfEvents(t)
	dir := t.TempDir()
	t.Run("frame_pointers", func(t *testing.T) {
		bin, before, after := recordDeep(t, dir, "deep.c", keepFP)
		require.Equal(t, len(before), len(after))
		require.GreaterOrEqual(t, len(after), 10, "samples in the recursion")
		repaired, inBurn := 0, 0
		for i, s := range after {
			if s.stop != report.StopCallchain {
				assert.Equal(t, before[i], s, "a stack not repaired is as it was")
				continue
			}
			repaired++
			assert.Equal(t, "truncated", before[i].stop)
			n := len(before[i].syms)
			assert.Equal(t, before[i].syms, s.syms[:n], "the CFI frames stay")
			for k, how := range s.hows[n:] {
				assert.Equal(t, "callchain", how, "spliced frame %d", n+k)
			}
			if s.syms[0] == "burn" {
				inBurn++
				assert.Equal(t, 61, countOf(s.syms, "deep"), "deep frames of %v", s.syms)
				assert.Contains(t, s.syms, "main")
			}
		}
		var perfMain, perfN int
		if _, err := exec.LookPath("perf"); err == nil {
			pdata := testprog.Record(t, filepath.Join(dir, "perf.data"), "--call-graph", "dwarf", "--", bin, "3000")
			for _, s := range testprog.ParseScript(testprog.Script(t, pdata)) {
				if len(s.Syms) > 0 && (s.Syms[0] == "burn" || s.Syms[0] == "deep") {
					perfN++
					if slices.Contains(s.Syms, "main") {
						perfMain++
					}
				}
			}
		}
		t.Logf("samples in the recursion reaching main: %d of %d before the repair, %d of %d after (%d repaired, %d in burn); perf --call-graph dwarf: %d of %d",
			reachMain(before), len(before), reachMain(after), len(after), repaired, inBurn, perfMain, perfN)
		assert.Greater(t, repaired, len(after)/2, "most stacks in the recursion are cut by the snapshot and repaired")
		assert.Greater(t, reachMain(after), reachMain(before))
	})
	t.Run("omit_frame_pointer", func(t *testing.T) {
		_, before, after := recordDeep(t, dir, "deep_nofp.c", omitFP)
		require.GreaterOrEqual(t, len(after), 10, "samples in the recursion")
		assert.Equal(t, before, after, "stacks with and without the repair")
		truncated := 0
		for _, s := range after {
			if s.stop == "truncated" {
				truncated++
			}
		}
		t.Logf("%d of %d stacks in the recursion truncated, none spliced", truncated, len(after))
		assert.Greater(t, truncated, len(after)/2)
	})
}

func countOf(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}
