package report

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/fixture"
)

// TestJSONRestoredRegisters reports the arm64 lazy-binding fixture stopped
// at _dl_runtime_resolve's br x16, after its ldp x17, x30, [sp], #16: the
// CFI still saves x30 at CFA+8, below the SP, so the caller's return
// address is the restored x30 and the caller's frame (frame 1, gdb's
// caller) must say so in JSON (restored_registers), and no other frame.
func TestJSONRestoredRegisters(t *testing.T) {
	f, err := fixture.Load(filepath.Join(fixture.Dir(), "fixtures", "aarch64", "a64_plt_lazy_39.json"))
	if err != nil {
		t.Skip(err)
	}
	require.Equal(t, "caller", f.GDB[1].Function)
	data := arm64PerfData(t, t.TempDir(), f, arm64PerfRegs(f), f.Stack.Data, f.Maps)
	got, stop := runReport(t, data, Options{})
	checkARM64Frames(t, f, got, stop, 0)

	var b bytes.Buffer
	w := NewJSONWriter(&b, false)
	require.NoError(t, w.Write(&Sample{Frames: got, Stop: stop}))
	require.NoError(t, w.Flush())
	validateLines(t, reportSchema(t), b.Bytes())
	var doc struct {
		Frames []struct {
			PC       string `json:"pc"`
			Restored bool   `json:"restored_registers"`
		} `json:"frames"`
	}
	require.NoError(t, json.Unmarshal(b.Bytes(), &doc))
	require.Len(t, doc.Frames, len(f.GDB))
	for i, fr := range doc.Frames {
		require.Equal(t, i == 1, fr.Restored, "frame %d (%s) restored_registers", i, fr.PC)
	}
}
