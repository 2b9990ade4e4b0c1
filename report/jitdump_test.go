package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/resolve"
)

// TestJITDump: a program JITs a function without a frame pointer and writes
// its own jitdump. ustack, with no perf inject, names the function from the
// dump, gives the line the dump gives for the call, and unwinds through it
// by the dump's CFI (main recovered by cfi: the frame-pointer rule would
// skip main, whose frame pointer the JIT code never saved); the same
// address names the function loaded there at each sample's time, and a
// moved function keeps its name, lines and CFI at its new address. Without
// the dump there is one warning naming it, and no ELF complaint.
func TestJITDump(t *testing.T) {
	requirePerf(t)
	dir := t.TempDir()
	bin := build(t, dir, "jitdump", testprog.JITDumpSrc, "-O2", "-fno-omit-frame-pointer")
	t.Setenv("JIT_DIR", dir)
	// -k 1: the samples' clock is the JIT's CLOCK_MONOTONIC.
	data := recordWith(t, dir, "jd", []string{"-k", "1", "--call-graph", "dwarf"}, bin)
	dumps, _ := filepath.Glob(filepath.Join(dir, "jit-*.dump"))
	require.Len(t, dumps, 1)
	var warnings []string
	_, samples := ustackScriptWith(t, data, Options{PerfMapDir: dir, Warn: func(m string) { warnings = append(warnings, m) }})
	assert.Empty(t, warnings)

	var got []string // the JIT frame's name at each close through cb
	var addrs []uint64
	for _, s := range samples {
		c := userChain(s)
		i := indexOf(c, "cb")
		if s.Event != "syscalls:sys_enter_close" || i < 0 {
			continue
		}
		if !assert.True(t, hasPrefixChain(c[i:], "cb", "jit_hop_a|jit_hop_b", "main"), "sample %d: chain %v (stop %s: %s)", s.Index, c, s.Stop, s.StopErr) {
			continue
		}
		for _, f := range s.Frames {
			switch {
			case strings.HasPrefix(f.Symbol, "jit_hop"):
				got = append(got, f.Symbol)
				addrs = append(addrs, f.Addr)
				assert.Equal(t, dumps[0], f.Module, "the JIT frame's module")
				assert.Equal(t, "jit.src", f.File)
				assert.Equal(t, 101, f.Line, "the call's line (the return address is at +6, its call at +4)")
				assert.Equal(t, uint64(5), f.SymOff)
				assert.Equal(t, kindJIT, kindOf(&f), "the flame graph's kind of the JIT frame")
			case f.Symbol == "main":
				assert.Equal(t, resolve.HowCFI, f.How, "main is recovered by the JIT code's CFI")
			}
		}
	}
	require.Len(t, got, 30, "close samples through the JIT code")
	// --verbose names the dump, found where the JIT wrote it.
	assert.Contains(t, verboseSummary(t, data, Options{PerfMapDir: dir}),
		"\n  "+dumps[0]+": object file, unwind jitdump, symbols jitdump, lines jitdump\n")
	for k := range got {
		want, wantAddr := "jit_hop_a", addrs[0]
		switch {
		case k >= 20:
			want, wantAddr = "jit_hop_b", addrs[0]+0x100
		case k >= 10:
			want = "jit_hop_b"
		}
		assert.Equal(t, want, got[k], "close %d", k)
		assert.Equal(t, wantAddr, addrs[k], "close %d: the JIT frame's address", k)
	}

	// Without the dump: one warning that names it and says what is
	// missing; not an ELF error.
	require.NoError(t, os.Rename(dumps[0], filepath.Join(dir, "moved.dump.old")))
	warnings = nil
	_, samples = ustackScriptWith(t, data, Options{PerfMapDir: dir, Warn: func(m string) { warnings = append(warnings, m) }})
	require.Len(t, warnings, 1, "%q", warnings)
	assert.Contains(t, warnings[0], dumps[0])
	assert.Contains(t, warnings[0], "jitdump")
	assert.Contains(t, warnings[0], "not found")
	assert.NotContains(t, warnings[0], "ELF")
	for _, s := range samples {
		for _, f := range s.Frames {
			assert.False(t, strings.HasPrefix(f.Symbol, "jit_hop"), "a JIT name without the dump")
		}
	}

	// The dump beside the recording (copied from another machine) is
	// found by its name.
	other := t.TempDir()
	require.NoError(t, os.Rename(filepath.Join(dir, "moved.dump.old"), filepath.Join(other, filepath.Base(dumps[0]))))
	warnings = nil
	_, samples = ustackScriptWith(t, data, Options{PerfMapDir: dir, JITDumpDirs: []string{other}, Warn: func(m string) { warnings = append(warnings, m) }})
	assert.Empty(t, warnings)
	n := 0
	for _, s := range samples {
		if s.Event == "syscalls:sys_enter_close" && indexOf(userChain(s), "jit_hop_b") >= 0 {
			n++
		}
	}
	assert.Equal(t, 20, n, "close samples through jit_hop_b with the dump beside the recording")
	moved := filepath.Join(other, filepath.Base(dumps[0]))
	assert.Contains(t, verboseSummary(t, data, Options{PerfMapDir: dir, JITDumpDirs: []string{other}}),
		"\n  "+dumps[0]+": object beside the recording, unwind jitdump, symbols jitdump, lines jitdump; read from "+moved+"\n")

	// Recorded in perf's own clock (no -k 1): the dump's times can only be
	// matched approximately (by when the dump was mapped), and the report
	// says so. Calls microseconds apart from a reload or move may be
	// misattributed; most are named.
	data = recordWith(t, dir, "jd-perfclock", []string{"--call-graph", "dwarf"}, bin)
	warnings = nil
	_, samples = ustackScriptWith(t, data, Options{Warn: func(m string) { warnings = append(warnings, m) }})
	require.Len(t, warnings, 1, "%q", warnings)
	assert.Contains(t, warnings[0], "CLOCK_MONOTONIC")
	assert.Contains(t, warnings[0], "-k 1")
	n = 0
	for _, s := range samples {
		if c := userChain(s); s.Event == "syscalls:sys_enter_close" && len(c) > 1 && hasPrefixChain(c[1:], "cb", "jit_hop_a|jit_hop_b", "main") {
			n++
		}
	}
	assert.GreaterOrEqual(t, n, 15, "of 30 close samples, through a named JIT frame into main")
}
