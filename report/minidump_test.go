package report

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/minidump"
)

// TestMinidumpOfCoreReportsAsCore writes a minidump of every core fixture
// (WriteMinidump, from the core opened with the fixture's objects, as
// ustack minidump does) and reports it: every thread, in the same
// order, has the core report's frames (pc, module, symbol, file, how), its
// stop reason and, on the signalled thread, its signal. The core's report
// is itself checked against gdb (TestCoreReportMatchesGDB).
func TestMinidumpOfCoreReportsAsCore(t *testing.T) {
	for _, tr := range coreFixtures(t) {
		t.Run(tr.Arch+"/"+tr.Name, func(t *testing.T) {
			symfs, _ := symfs(t, tr)
			opts := CoreOptions{Options: Options{SymFS: symfs, Kallsyms: "-", BuildIDDir: t.TempDir()}}
			coreJS, _ := coreReport(t, corePath(tr), "json", opts)

			c, err := OpenCore(corePath(tr), opts)
			require.NoError(t, err)
			dmp := filepath.Join(t.TempDir(), tr.Name+".dmp")
			w := minidump.WriteOptions{}
			if tr.Name == "overflow" {
				// A stack overflow's stack is deeper than the default
				// bound; the minidump holds what the core has of it.
				w.StackSize = 16 << 20
			}
			st, err := WriteMinidump(dmp, c, opts, w)
			c.Close()
			require.NoError(t, err)
			fi, err := os.Stat(dmp)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "a minidump holds the process's stacks: mode 0600")
			coreSize := decompressedSize(t, corePath(tr))
			t.Logf("%s: core %d bytes, minidump %d bytes (%.1f%%): %d threads, %d modules, %d bytes of memory in %d ranges",
				tr.Name, coreSize, fi.Size(), 100*float64(fi.Size())/float64(coreSize), st.Threads, st.Modules, st.MemoryBytes, st.Ranges)

			dmpJS, sum := coreReport(t, dmp, "json", opts)
			assert.Empty(t, sum.Missing, "every object of the minidump is found in the symfs")
			want := testprog.JSONLines[coreSample](t, coreJS)
			got := testprog.JSONLines[coreSample](t, dmpJS)
			require.Len(t, got, len(want))
			for i := range want {
				w, g := want[i], got[i]
				assert.Equal(t, w.Tid, g.Tid, "thread %d", i)
				assert.Equal(t, w.Pid, g.Pid, "tid %d: pid", w.Tid)
				assert.Equal(t, str(w.Signal), str(g.Signal), "tid %d: signal", w.Tid)
				assert.Equal(t, str(w.Stop), str(g.Stop), "tid %d: stop (%s | %s)", w.Tid, str(w.StopErr), str(g.StopErr))
				assert.Equal(t, frameLines(w), frameLines(g), "tid %d: frames", w.Tid)
			}
		})
	}
}

func frameLines(s coreSample) string {
	var b strings.Builder
	for _, f := range s.Frames {
		b.WriteString(f.PC + " " + str(f.Module) + " " + str(f.Symbol) + " " + str(f.File) + " " + f.How + "\n")
	}
	return b.String()
}

// decompressedSize is the size of the zstd-compressed core at path once
// decompressed.
func decompressedSize(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	d, err := zstd.NewReader(f)
	require.NoError(t, err)
	defer d.Close()
	n, err := io.Copy(io.Discard, d)
	require.NoError(t, err)
	return n
}
