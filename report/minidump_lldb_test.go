package report

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/minidump"
)

var lldbFrame = regexp.MustCompile(`^\s+\*?\s*frame #\d+: (0x[0-9a-f]+) `)

// TestMinidumpLLDB writes minidumps of x86_64 core fixtures and opens them
// with lldb 15 (lldb --core FILE.dmp, the objects found through
// target.exec-search-paths in the fixture's symfs): lldb loads every
// thread, says the signal on the first, and its bt all gives, thread for
// thread, the pcs of the report's machine frames. lldb and ustack read
// the same registers and memory; lldb unwinds with its own CFI reader.
func TestMinidumpLLDB(t *testing.T) {
	lldb, err := exec.LookPath("lldb-15")
	if err != nil {
		t.Skip("lldb-15 is not installed (Debian package lldb-15): lldb's reading of ustack's minidumps is not checked")
	}
	for _, tr := range coreFixtures(t) {
		if tr.Arch != "x86_64" || (tr.Name != "threads" && tr.Name != "crash_O2" && tr.Name != "pause_tail") {
			continue
		}
		t.Run(tr.Name, func(t *testing.T) {
			symfs, _ := symfs(t, tr)
			opts := CoreOptions{Options: Options{SymFS: symfs, Kallsyms: "-", BuildIDDir: t.TempDir()}}
			c, err := OpenCore(corePath(tr), opts)
			require.NoError(t, err)
			dmp := filepath.Join(t.TempDir(), tr.Name+".dmp")
			_, err = WriteMinidump(dmp, c, opts, minidump.WriteOptions{})
			c.Close()
			require.NoError(t, err)
			js, _ := coreReport(t, dmp, "json", opts)
			report := testprog.JSONLines[coreSample](t, js)

			dirs := map[string]bool{}
			for recorded := range tr.Files {
				dirs[filepath.Join(symfs, filepath.Dir(recorded))] = true
			}
			var search []string
			for d := range dirs {
				search = append(search, d)
			}
			threads, first, out := lldbBacktraces(t, lldb, search, dmp, testprog.Timeout)
			if report[0].Signal != nil {
				assert.Contains(t, first, "signal "+*report[0].Signal, "lldb's first thread is the signalled one")
			}
			require.Len(t, threads, len(report), "lldb's threads: %s", out)
			for i, s := range report {
				var pcs []string
				for _, f := range s.Frames {
					if !f.Inlined && f.How != "tailcall" {
						pcs = append(pcs, f.PC)
					}
				}
				// lldb lists an inlined function's frame at an address
				// of its own (a tail caller's too), where the report has
				// it on its machine frame: the report's machine frames
				// must appear in lldb's list, in order, frame 0 first;
				// lldb's other entries are not compared.
				assert.True(t, subsequence(dedup(pcs), dedup(threads[i])), "tid %d: the report's machine frames %v are not lldb's %v in order", s.Tid, pcs, threads[i])
				assert.Equal(t, dedup(pcs)[0], dedup(threads[i])[0], "tid %d: frame 0", s.Tid)
			}
		})
	}
}

// lldbBacktraces opens the minidump dmp in lldb (the objects found
// through target.exec-search-paths search) and returns the pcs of each
// thread's frames in its bt all, the first thread's line (its stop
// reason) and lldb's output.
func lldbBacktraces(t *testing.T, lldb string, search []string, dmp string, timeout time.Duration) (threads [][]string, first string, out []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, lldb, "--batch", "-o", "settings set target.exec-search-paths "+strings.Join(search, " "),
		"-o", "target create --core "+dmp, "-o", "bt all").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(strings.TrimLeft(line, " *"), "thread #") {
			threads = append(threads, nil)
			if len(threads) == 1 {
				first = line
			}
		}
		if m := lldbFrame.FindStringSubmatch(line); m != nil && len(threads) > 0 {
			threads[len(threads)-1] = append(threads[len(threads)-1], m[1])
		}
	}
	return threads, first, out
}

func subsequence(sub, of []string) bool {
	j := 0
	for _, p := range of {
		if j < len(sub) && sub[j] == p {
			j++
		}
	}
	return j == len(sub)
}

// dedup drops repeats of a pc (lldb gives an inlined function's frame
// the pc of the frame it is inlined in).
func dedup(pcs []string) []string {
	var out []string
	for _, p := range pcs {
		p = "0x" + strings.TrimLeft(strings.TrimPrefix(p, "0x"), "0")
		if len(out) == 0 || out[len(out)-1] != p {
			out = append(out, p)
		}
	}
	return out
}
