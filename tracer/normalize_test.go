package tracer_test

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/tracer"
)

// TestNormalizedElsewhere normalizes the return addresses of a live
// process's stack, then symbolizes them in a second process that knows the
// objects only by build-id: their paths are made unreachable and a
// directory in perf's build-id cache layout holds copies. The names, inline
// frames included, equal gdb's backtrace of the live process.
func TestNormalizedElsewhere(t *testing.T) {
	if os.Getenv("USTACK_TRACER_CHILD") != "" {
		symbolizeChild(os.Stdin, os.Stdout, os.Getenv("USTACK_TRACER_CHILD"))
		return
	}
	pid, tr, p, regs, stack := liveCapture(t)
	st := tr.NewWalker().Unwind(p, regs, stack)
	require.Equal(t, "outermost", st.Stop.String())

	// The first process: each physical frame's address, normalized, and
	// its object copied by build-id.
	ids := filepath.Join(t.TempDir(), "ids")
	var lines strings.Builder
	for _, f := range st.Frames {
		if f.Inlined {
			continue
		}
		n := p.Normalize(nil, f.Addr)[0]
		require.NotEmpty(t, n.BuildID, "%s has no build-id", n.Path)
		id := hex.EncodeToString(n.BuildID)
		dst := filepath.Join(ids, ".build-id", id[:2], id[2:])
		require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
		b, err := os.ReadFile(n.Path)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(dst, b, 0o644))
		fmt.Fprintf(&lines, "/gone%s %s %x\n", n.Path, id, n.FileOffset)
	}

	child := exec.Command(os.Args[0], "-test.run=^TestNormalizedElsewhere$")
	child.Env = append(os.Environ(), "USTACK_TRACER_CHILD="+ids)
	child.Stdin = strings.NewReader(lines.String())
	out, err := child.Output()
	require.NoError(t, err, "%s", out)
	t.Logf("second process:\n%s", out)
	var got []string
	for _, l := range strings.Split(string(out), "\n") {
		if name, ok := strings.CutPrefix(l, "frame "); ok {
			got = append(got, name)
		}
	}
	assert.Equal(t, testprog.GDBFunctions(t, "-p", strconv.Itoa(pid)), got)
}

// symbolizeChild is the second process: it reads "path build-id offset"
// lines and prints the function of each frame there, finding the objects
// in the build-id directory dir.
func symbolizeChild(in io.Reader, out io.Writer, dir string) {
	tr := tracer.New(tracer.Options{BuildIDDirs: []string{dir}})
	defer tr.Close()
	w := tr.NewWalker()
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var path, id string
		var off uint64
		fmt.Sscanf(sc.Text(), "%s %s %x", &path, &id, &off)
		bid, _ := hex.DecodeString(id)
		for _, f := range w.SymbolizeNormalized(tracer.Normalized{Path: path, BuildID: bid, FileOffset: off}) {
			fmt.Fprintf(out, "frame %s\n", f.Symbol)
		}
	}
	for path, why := range tr.Missing() {
		fmt.Fprintf(out, "missing %s: %s\n", path, why)
	}
}
