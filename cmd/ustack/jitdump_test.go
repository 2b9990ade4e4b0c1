package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
)

// TestRecordJITDump: ustack record archives the jitdump of a JIT it
// records (read when the recording ends), so that a report made after the
// dump is gone still names the JIT code at each sample's time (the test
// program loads jit_hop_a, then jit_hop_b over it; see
// testprog.JITDumpSrc); without the archive, one warning names the dump.
func TestRecordJITDump(t *testing.T) {
	if testing.Short() {
		t.Skip("records with perf_event_open")
	}
	if os.Geteuid() != 0 {
		t.Skip("recording tracepoints needs root")
	}
	dir, jitDir := t.TempDir(), t.TempDir()
	bin := testprog.Build(t, dir, "jitdump.c", testprog.JITDumpSrc, "-O2", "-fno-omit-frame-pointer")
	t.Setenv("JIT_DIR", jitDir)
	data := filepath.Join(dir, "rec.data")
	var stdout, stderr bytes.Buffer
	if rc := run([]string{"record", "-q", "-e", "syscalls:sys_enter_close", "-o", data, "--", bin}, &stdout, &stderr); rc != 0 {
		t.Skipf("ustack record cannot record here (status %d): %s", rc, stderr.String())
	}
	dumps, _ := filepath.Glob(filepath.Join(jitDir, "jit-*.dump"))
	require.Len(t, dumps, 1)
	require.NoError(t, os.Remove(dumps[0]))

	report := func(extra ...string) (string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		args := append([]string{"report", "-i", data}, extra...)
		require.Equal(t, 0, run(args, &out, &errb), "ustack %v: %s", args, errb.String())
		return out.String(), errb.String()
	}
	out, errs := report()
	assert.NotContains(t, errs, "jit-", "warnings about the dump")
	count := func(out, name string) int {
		n := 0
		for _, block := range strings.Split(out, "\n\n") {
			if strings.Contains(block, " "+name+"+0x5 ("+dumps[0]+")") && strings.Contains(block, " main+") {
				n++
			}
		}
		return n
	}
	assert.Equal(t, 10, count(out, "jit_hop_a"), "close samples through jit_hop_a, named from the archived dump")
	assert.Equal(t, 20, count(out, "jit_hop_b"), "close samples through jit_hop_b")
	// --verbose names the dump the JIT code was named from, and where.
	_, errs = report("--verbose")
	assert.Contains(t, errs, "\n  "+dumps[0]+": object archive, unwind jitdump, symbols jitdump, lines jitdump\n")

	out, errs = report("--archive", "-")
	assert.Zero(t, count(out, "jit_hop_a")+count(out, "jit_hop_b"), "JIT names without the dump")
	assert.Equal(t, 1, strings.Count(errs, "warning: "+dumps[0]+": the JIT's jitdump"), "one warning naming the dump:\n%s", errs)
	assert.NotContains(t, errs, "not a valid ELF")
}
