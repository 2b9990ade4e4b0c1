package report

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testfiles"
	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/resolve"
)

// sigtrampTruth is testdata/cores/aarch64/sigtramp/sig_handler.json
// (testdata/gen/cores/sigtramp.py): gdb's frames up to the signal handler's
// leaf, where gdb-multiarch hangs, then the chain the program recorded
// itself, named by gdb's `info symbol`.
type sigtrampTruth struct {
	Core   string `json:"core"`
	Exe    string `json:"exe"`
	Object string `json:"object"`
	GDB    struct {
		Frames []struct{ PC, Function string } `json:"frames"`
		Chain  []struct{ PC, Function string } `json:"chain"`
	} `json:"gdb"`
}

// TestCoreQemuSigtramp unwinds an arm64 qemu-user core whose signal
// handler aborted: qemu's sigreturn trampoline is in an anonymous page of
// the core (no symbol, no CFI) and is recognised by its code read from the
// core's memory, so the walk goes through the signal frame to inner, the
// interrupted function, as the program recorded; taken for an ordinary
// frame, the trampoline's frame pointer led to outer and lost inner.
func TestCoreQemuSigtramp(t *testing.T) {
	dir := filepath.Join(testdataDir, "cores", "aarch64", "sigtramp")
	b, err := os.ReadFile(filepath.Join(dir, "sig_handler.json"))
	require.NoError(t, err)
	var tr sigtrampTruth
	require.NoError(t, json.Unmarshal(b, &tr))
	testfiles.MustUnpack(t, testdataDir)
	symfs := t.TempDir()
	exe := filepath.Join(symfs, tr.Exe)
	require.NoError(t, os.MkdirAll(filepath.Dir(exe), 0o755))
	obj, err := filepath.Abs(filepath.Join(testdataDir, tr.Object))
	require.NoError(t, err)
	data, err := os.ReadFile(obj) // a copy: --symfs follows no symlink
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(exe, data, 0o755))

	js, _ := coreReport(t, filepath.Join(testdataDir, tr.Core), "json",
		CoreOptions{Options: Options{SymFS: symfs, Kallsyms: "-", BuildIDDir: t.TempDir()}})
	got := testprog.JSONLines[coreSample](t, js)
	require.Len(t, got, 1)
	var want, pcs, names []string
	for _, f := range tr.GDB.Frames {
		want = append(want, f.PC)
	}
	for _, f := range tr.GDB.Chain {
		want = append(want, f.PC)
	}
	trampoline, interrupted := len(tr.GDB.Frames)+1, len(tr.GDB.Frames)+2
	for i, f := range got[0].Frames {
		pcs = append(pcs, f.PC)
		names = append(names, str(f.Symbol))
		if i == interrupted {
			assert.Equal(t, string(resolve.HowSignal), f.How, "the interrupted frame's registers come from the signal frame")
		}
	}
	assert.Equal(t, want, pcs, "pcs against gdb's frames and the program's own chain; symbols %v", names)
	assert.Equal(t, "outermost", str(got[0].Stop), str(got[0].StopErr))
	for i, f := range append(tr.GDB.Frames, tr.GDB.Chain...) {
		if i < len(names) && f.Function != "" && i != trampoline {
			assert.Equal(t, f.Function, names[i], "frame %d (%s)", i, f.PC)
		}
	}
}
