package report

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

// gdbCloseChainsPy stops at close three times (once for each of main's
// calls: work_a, work_b, hop) and prints gdb's frames down to main, one
// line each: stop, kind, function.
const gdbCloseChainsPy = `
gdb.execute("break close")
gdb.execute("run")
for i in range(3):
    f = gdb.newest_frame()
    while f is not None:
        kind = {gdb.TAILCALL_FRAME: "tailcall", gdb.INLINE_FRAME: "inline"}.get(f.type(), "normal")
        print("FRAME %d %s %s" % (i, kind, f.name()))
        if f.name() == "main":
            break
        f = f.older()
    gdb.execute("continue")
`

// gdbCloseChains runs bin under gdb and returns its three chains at close,
// each frame "kind name".
func gdbCloseChains(t *testing.T, dir, bin string) [3][]string {
	t.Helper()
	if _, err := exec.LookPath("gdb"); err != nil {
		t.Skip("gdb is not installed (Debian package gdb)")
	}
	py := filepath.Join(dir, "chains.py")
	require.NoError(t, os.WriteFile(py, []byte(gdbCloseChainsPy), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), testprog.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "gdb", "-nx", "-batch", "-x", py, "--args", bin)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "gdb: %s", out)
	var chains [3][]string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != "FRAME" || len(f[1]) != 1 || f[1][0] < '0' || f[1][0] > '2' {
			continue
		}
		i := f[1][0] - '0'
		chains[i] = append(chains[i], f[2]+" "+f[3])
	}
	for i, c := range chains {
		require.NotEmpty(t, c, "gdb printed no frames for stop %d:\n%s", i, out)
		require.Equal(t, "normal main", c[len(c)-1], "gdb's stop %d does not reach main:\n%s", i, out)
	}
	return chains
}

// textChain returns the frames of one sample of ustack's text output, as
// gdbCloseChains gives them ("kind name"), down to main; ok is false when
// no frame is in module.
func textChain(block []string, module string) (chain []string, ok bool) {
	for _, l := range block[1:] {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		name, _, _ := strings.Cut(f[1], "+0x")
		kind := "normal"
		switch f[2] {
		case "(inlined)":
			kind = "inline"
		case "(tailcall)":
			kind = "tailcall"
		case "(" + module + ")":
			ok = true
		}
		chain = append(chain, kind+" "+name)
		if name == "main" {
			break
		}
	}
	return chain, ok
}

// TestReportSplitDWARF records close() in a program built with gcc and
// clang as DWARF 4 (GNU) split DWARF, its debug information in .dwo files
// or in a .dwp package, and checks that ustack report's text for each
// close sample is one of gdb's three chains at close (three levels of
// inlined functions in each of two units, and hop's tail call), frame for
// frame, and that each chain is seen. With a .dwo gone, the report says so
// once, naming the program and the file; so it does for gcc's DWARF 5
// split units.
func TestReportSplitDWARF(t *testing.T) {
	requirePerf(t)
	testprog.NeedTracefs(t, "syscalls/sys_enter_close")
	for _, c := range []struct {
		cc, pack string
		version  int
	}{
		{"gcc", "", 4}, {"gcc", "dwp", 4}, {"clang", "", 4}, {"clang", "llvm-dwp", 4},
		// DWARF 5's split units are reported alike.
		{"gcc", "", 5},
	} {
		name := c.cc + "_dwo"
		if c.pack != "" {
			name = c.cc + "_" + c.pack
		}
		if c.version == 5 {
			name += "_dwarf5"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			bin := testprog.BuildSplit(t, dir, c.cc, c.version, c.pack)
			chains := gdbCloseChains(t, dir, bin)
			t.Logf("gdb: %q", chains)
			data := testprog.Record(t, filepath.Join(dir, "close.data"),
				"-e", "syscalls:sys_enter_close", "--call-graph", "dwarf", "--", bin)
			var mu sync.Mutex
			var warnings []string
			warn := func(msg string) {
				mu.Lock()
				defer mu.Unlock()
				warnings = append(warnings, msg)
			}
			blocks, _ := ustackScriptWith(t, data, Options{Warn: warn})
			seen := [3]int{}
			for _, b := range blocks {
				got, ok := textChain(b, bin)
				if !ok {
					continue // ld.so's closes
				}
				match := -1
				for i, want := range chains {
					// Frame 0 is glibc's close, named by its debug
					// file where libc6-dbg is installed.
					if len(got) == len(want) && len(got) > 0 && equal(got[1:], want[1:]) &&
						hasPrefixChain([]string{strings.TrimPrefix(got[0], "normal ")}, libcClose) {
						match = i
					}
				}
				if match < 0 {
					t.Errorf("ustack's chain %q is none of gdb's %q", got, chains)
					break
				}
				seen[match]++
			}
			t.Logf("close samples per gdb chain: %v", seen)
			for i, n := range seen {
				assert.GreaterOrEqual(t, n, 5, "samples with gdb's chain %q", chains[i])
			}
			for _, w := range warnings {
				assert.NotContains(t, w, "split DWARF", "warning")
			}
			// --verbose names the files the inline chains came from: the
			// two units' .dwo files the skeletons name, or the package.
			used := filepath.Join(dir, "a.dwo") + ", " + filepath.Join(dir, "b.dwo")
			if c.pack != "" {
				used = filepath.Join(dir, "prog.dwp")
			}
			assert.Regexp(t, `(?m)^  `+regexp.QuoteMeta(bin)+`: object file, unwind file, symbols file, lines file; split DWARF `+
				regexp.QuoteMeta(used)+`; build-id `+testprog.BuildID(t, bin)+`$`, verboseSummary(t, data, Options{}))
			if c.pack != "" {
				return
			}
			// Without b.dwo: one warning, naming the program and b.dwo.
			require.NoError(t, os.Rename(filepath.Join(dir, "b.dwo"), filepath.Join(dir, "b.dwo.gone")))
			warnings = nil
			ustackScriptWith(t, data, Options{Warn: warn})
			var split []string
			for _, w := range warnings {
				if strings.Contains(w, "split DWARF") {
					split = append(split, w)
				}
			}
			require.Len(t, split, 1, "warnings: %q", warnings)
			assert.Contains(t, split[0], bin)
			assert.Contains(t, split[0], "b.dwo")
			assert.Contains(t, split[0], "not found")
		})
	}
}

// verboseSummary returns the text summary of a report of data with opts
// and Options.ObjectSources (ustack report --verbose).
func verboseSummary(t *testing.T, data string, opts Options) string {
	t.Helper()
	r, _ := openRecording(t, data)
	opts.ObjectSources = true
	sum, err := Run(r, opts, func(*Sample) error { return nil })
	require.NoError(t, err)
	var b strings.Builder
	sum.WriteSummary(&b)
	return b.String()
}
