package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var helloData = filepath.Join("..", "..", "testdata", "recordings", "hello", "perf.data")

// gdbFrame is one frame of gdb's backtrace: the function and, for the
// frames gdb prints one for, the pc (a return address for callers).
type gdbFrame struct {
	Function string
	PC       string
}

// gdbBacktraces parses testdata/recordings/hello/gdb-bt.txt: gdb's
// backtrace at each write, innermost first, blank lines between them.
func gdbBacktraces(t *testing.T, path string) [][]string {
	var out [][]string
	for _, bt := range gdbFrames(t, path) {
		var fns []string
		for _, f := range bt {
			fns = append(fns, f.Function)
		}
		out = append(out, fns)
	}
	return out
}

func gdbFrames(t *testing.T, path string) [][]gdbFrame {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	frame := regexp.MustCompile(`^#\d+\s+(?:0x0*([0-9a-f]+) in )?(\S+) \(`)
	var out [][]gdbFrame
	for _, block := range strings.Split(strings.TrimSpace(string(b)), "\n\n") {
		var bt []gdbFrame
		for _, l := range strings.Split(block, "\n") {
			m := frame.FindStringSubmatch(l)
			require.NotNil(t, m, "%s: unparsed line %q", path, l)
			pc := ""
			if m[1] != "" {
				pc = "0x" + m[1]
			}
			bt = append(bt, gdbFrame{Function: m[2], PC: pc})
		}
		out = append(out, bt)
	}
	return out
}

// isolate gives the test an empty home and cache and no debuginfod
// servers, as on a fresh machine.
func isolate(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CACHE_HOME", filepath.Join(home, ".cache"))
	t.Setenv("DEBUGINFOD_URLS", "")
}

// TestHelloRecordingMatchesGdb reports the bundled recording of the
// README's first command with nothing but its archive (empty home, no
// debug directory, no kallsyms, the program's recorded path absent or
// another file) and checks every sample's functions, inline frames
// included, against gdb's backtrace at the same write, and that the
// report warns of nothing and ends with its one-line summary.
func TestHelloRecordingMatchesGdb(t *testing.T) {
	isolate(t)
	gdbBT := gdbFrames(t, filepath.Join(filepath.Dir(helloData), "gdb-bt.txt"))
	want := gdbBacktraces(t, filepath.Join(filepath.Dir(helloData), "gdb-bt.txt"))
	require.Len(t, want, 4)
	var out, errb bytes.Buffer
	rc := run([]string{"report", "--format", "json", "--debug-dir", t.TempDir(), helloData}, &out, &errb)
	require.Equal(t, exitOK, rc, errb.String())
	var got [][]string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var s struct {
			Frames []struct {
				PC      string `json:"pc"`
				Symbol  string `json:"symbol"`
				Module  string `json:"module"`
				Inlined bool   `json:"inlined"`
				How     string `json:"how"`
			} `json:"frames"`
			Stop string `json:"stop"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &s))
		assert.Equal(t, "outermost", s.Stop)
		var fns []string
		for i, f := range s.Frames {
			fns = append(fns, f.Symbol)
			// gdb's pc, where it prints one: the return addresses.
			if n := len(got); n < len(gdbBT) && i < len(gdbBT[n]) && gdbBT[n][i].PC != "" {
				assert.Equal(t, gdbBT[n][i].PC, f.PC, "sample %d frame %d (%s): gdb's pc", n, i, f.Symbol)
			}
			assert.Equal(t, "/tmp/ustack-hello/hello", f.Module)
			assert.Equal(t, i == 0, f.Inlined, "frame %d: only say() is inlined", i)
		}
		got = append(got, fns)
	}
	assert.Equal(t, want, got)
	assert.Equal(t, "ustack: 4 samples, 4 unwound to the outermost frame\n"+helloFPAudit, errb.String())

	// The text format, as the README shows it: perf script's layout.
	out.Reset()
	errb.Reset()
	require.Equal(t, exitOK, run([]string{"report", helloData}, &out, &errb), errb.String())
	assert.Contains(t, out.String(), "syscalls:sys_enter_write:")
	assert.Regexp(t, `(?m)^\s+([0-9a-f]+) say\+0x[0-9a-f]+ \(inlined\)\n\s+([0-9a-f]+) greet\+0x[0-9a-f]+ \(/tmp/ustack-hello/hello\)\n\s+[0-9a-f]+ main\+0x[0-9a-f]+ \(/tmp/ustack-hello/hello\)$`, out.String())
	assert.Equal(t, "ustack: 4 samples, 4 unwound to the outermost frame\n"+helloFPAudit, errb.String())
}

// helloFPAudit is the frame-pointer audit's line for the hello recording:
// its program, gcc -O2 on x86_64, keeps no frame pointers, so a
// frame-pointer walk finds each sampled PC and nothing more, of the 19
// physical frames gdb's backtraces hold (gdb-bt.txt: 23 frames, four of them
// say() inlined).
const helloFPAudit = "ustack: a frame-pointer walk would have found 4 of the 19 user frames CFI found (21.1%) and stopped 4 of 4 stacks short of their outermost frame\n"

// TestHelloWithoutArchiveIsIncomplete reports the bundled recording without
// its archive, so that the program's file is missing: each stack is the one
// frame of the sampled PC where gdb's backtraces have five or six, and
// nothing proves more, so no stack may be called complete (the frame
// pointer, zero in this program built without it, proves nothing) and the
// summary counts 0 of 4.
func TestHelloWithoutArchiveIsIncomplete(t *testing.T) {
	isolate(t)
	gdbBT := gdbFrames(t, filepath.Join(filepath.Dir(helloData), "gdb-bt.txt"))
	data := filepath.Join(t.TempDir(), "perf.data")
	b, err := os.ReadFile(helloData)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(data, b, 0o644))
	var out, errb bytes.Buffer
	rc := run([]string{"report", "--format", "json", "--symfs", t.TempDir(), "--buildid-dir", t.TempDir(), "--debug-dir", t.TempDir(), data}, &out, &errb)
	require.Equal(t, exitOK, rc, errb.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, len(gdbBT))
	for i, line := range lines {
		var s struct {
			Frames []struct{ PC string }
			Stop   string `json:"stop"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &s))
		assert.Len(t, s.Frames, 1, "sample %d: the sampled PC alone", i)
		assert.Equal(t, "no_unwind_info", s.Stop, "sample %d: %d frame(s) where gdb has %d", i, len(s.Frames), len(gdbBT[i]))
	}
	assert.Contains(t, errb.String(), "ustack: 4 of 4 stacks ended early: no_unwind_info 4\n")
	assert.Contains(t, errb.String(), "ustack: 4 samples, 0 of 4 unwound to the outermost frame, 4 stopped early (no_unwind_info 4)\n")
}

// TestUnwindOutsideCheckout checks that `ustack unwind` finds a fixture's
// objects relative to the fixture's own testdata/ tree, not the source tree
// ustack was built from: a copy of one fixture and its objects unwinds the
// same, and an object missing from the copy is an error naming the copy's
// path.
func TestUnwindOutsideCheckout(t *testing.T) {
	src := filepath.Join("..", "..", "testdata")
	name := filepath.Join("fixtures", "x86_64", "signal_handler")
	var spec struct {
		Maps []struct {
			Object string `json:"object"`
		} `json:"maps"`
		DebugDirs []string `json:"debug_dirs"`
	}
	raw, err := os.ReadFile(filepath.Join(src, name+".json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &spec))
	dst := filepath.Join(t.TempDir(), "testdata")
	cp := func(rel string) {
		b, err := os.ReadFile(filepath.Join(src, rel))
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dst, rel), b, 0o644))
	}
	cp(name + ".json")
	cp(name + ".stack")
	var objects []string
	for _, m := range spec.Maps {
		if m.Object != "" && !slices.Contains(objects, m.Object) {
			objects = append(objects, m.Object)
			cp(filepath.FromSlash(m.Object))
		}
	}
	for _, d := range spec.DebugDirs {
		require.NoError(t, os.MkdirAll(filepath.Join(dst, d), 0o755))
	}

	var want, got, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"unwind", filepath.Join(src, name+".json")}, &want, &errb), errb.String())
	// From the copy's parent, with a path relative to the working directory.
	t.Chdir(filepath.Dir(dst))
	require.Equal(t, 0, run([]string{"unwind", filepath.Join("testdata", name+".json")}, &got, &errb), errb.String())
	assert.Equal(t, want.String(), got.String())
	assert.Contains(t, got.String(), "stopped: outermost")

	libc := filepath.Join("testdata", "objects", "x86_64", "libc.so.6")
	require.NoError(t, os.Remove(libc))
	got.Reset()
	errb.Reset()
	assert.Equal(t, 1, run([]string{"unwind", filepath.Join("testdata", name+".json")}, &got, &errb))
	assert.Contains(t, errb.String(), libc, "the error names the missing object of the copy")
}
