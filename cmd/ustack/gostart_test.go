package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/perfdata"
)

// TestGoEntryOutermost records a Go program at its first two
// instructions' functions with uprobes: the ELF entry point
// (_rt0_amd64_linux), which jumps to _rt0_amd64, which takes argc and argv
// from the stack and jumps to runtime.rt0_go. Nothing called either: the
// hand-checked truth is the stack snapshot itself, which at both samples
// begins with the process's initial stack as the System V ABI lays it out
// (argc, then argc pointers into the stack above, then a null), so each
// stack is one frame, outermost. Before, the sample at _rt0_amd64 took argc
// for a return address and ended no_mapping.
func TestGoEntryOutermost(t *testing.T) {
	testprog.NeedPerfEvents(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("the entry code checked is amd64's")
	}
	dir := t.TempDir()
	bin := testprog.BuildGo(t, dir, "hello", "package main\n\nfunc main() { println(\"hi\") }\n", "", runtime.GOARCH, "")
	data := filepath.Join(dir, "rt0.data")
	probes := []string{"_rt0_amd64_linux", "_rt0_amd64"}
	args := []string{"-q", "-o", data}
	for _, p := range probes {
		args = append(args, "-e", "u:"+bin+":"+p)
	}
	if _, err := os.Stat("/sys/bus/event_source/devices/uprobe"); err != nil {
		t.Skipf("this kernel has no uprobes: %v", err)
	}
	rc, stderr := recordBounded(t, append(args, "--", bin, "a", "b")...)
	require.Zero(t, rc, "ustack record, or the program: %s", stderr)

	// The truth: each sample's SP is at argc (3: the program and two
	// arguments), then argv's pointers, above the SP, then null.
	r, err := perfdata.Open(data)
	require.NoError(t, err)
	defer r.Close()
	initial := 0
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		s, ok := rec.(*perfdata.Sample)
		if !ok || len(s.Regs) == 0 {
			continue
		}
		st := s.Stack()
		require.GreaterOrEqual(t, len(st), 40, "%s: the stack snapshot", s.EventName)
		le := binary.LittleEndian
		var regs arch.Regs
		arch.AMD64.LoadPerf(&regs, s.RegsMask, s.Regs, false)
		sp, ok := regs.Get(arch.AMD64_RSP)
		require.True(t, ok, "%s: the SP", s.EventName)
		assert.Equal(t, uint64(3), le.Uint64(st), "%s: argc at the SP", s.EventName)
		for i := 1; i <= 3; i++ {
			assert.Greater(t, le.Uint64(st[8*i:]), sp, "%s: argv[%d] points into the stack above", s.EventName, i-1)
		}
		assert.Zero(t, le.Uint64(st[32:]), "%s: argv's null", s.EventName)
		initial++
	}
	require.Equal(t, len(probes), initial, "samples at the entry code")

	got := map[string]deepStack{}
	for _, d := range reportStacks(t, data, false) {
		if len(d.syms) > 0 {
			got[d.syms[0]] = d
		}
	}
	for _, p := range probes {
		d, ok := got[p]
		if assert.True(t, ok, "a sample in %s: %v", p, got) {
			assert.Equal(t, []string{p}, d.syms, "%s: one frame", p)
			assert.Equal(t, "outermost", d.stop, "%s", p)
		}
	}
}
