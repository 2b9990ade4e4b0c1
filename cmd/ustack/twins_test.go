//go:build linux

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Build-ids given to both twins of an object, so that a recording of one
// is reported with the other in its place.
const (
	twinProgID = "0x11223344556677889900aabbccddeeff00112233"
	twinLibID  = "0x99887766554433221100ffeeddccbbaa99887766"
)

// buildTwin compiles dbgLibSrc and dbgProgSrc in dir/name with the given
// extra flags (gcc runs there, so that -gsplit-dwarf leaves its .dwo files
// there) and the fixed build-ids; the program finds the library in runDir.
func buildTwin(t *testing.T, dir, name, runDir string, flags ...string) (prog, lib string) {
	t.Helper()
	out := filepath.Join(dir, name)
	require.NoError(t, os.MkdirAll(out, 0o755))
	gcc := func(args ...string) {
		t.Helper()
		cmd := exec.Command("gcc", append(append([]string{"-O2", "-g"}, flags...), args...)...)
		cmd.Dir = out
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", cmd.Args, err, b)
		}
	}
	gcc("-fPIC", "-shared", "-Wl,--build-id="+twinLibID, "-Wl,-soname,libdemo.so", "-o", "libdemo.so", "../lib.c")
	gcc("-Wl,--build-id="+twinProgID, "-o", "prog", "../prog.c", "libdemo.so", "-Wl,-rpath,"+runDir)
	return filepath.Join(out, "prog"), filepath.Join(out, "libdemo.so")
}

// sameText fails the test unless two builds have the same machine code:
// only then is one a twin of the other.
func sameText(t *testing.T, a, b string) {
	t.Helper()
	text := func(p string) []byte {
		f := p + ".text"
		mustRun(t, "objcopy", "-O", "binary", "-j", ".text", p, f)
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		return data
	}
	require.True(t, bytes.Equal(text(a), text(b)), "%s and %s differ in .text: not twins", a, b)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	require.NoError(t, err)
	os.Remove(to)
	require.NoError(t, os.WriteFile(to, data, 0o755))
}

// TestReportProcessedDebugInfoTwins records a program and its library
// built plainly with -g, then reports the recording with each object
// replaced by a twin (the same machine code and build-id) whose debug
// information was processed: dwz with a supplementary file (-m), gcc
// -gsplit-dwarf with its .dwo files, the same packed into a .dwp by
// llvm-dwp. Each report must have the plain build's frames, inline chains
// and lines, frame for frame; and without the .dwo/.dwp files the inline
// chains must be gone, so that the split case proves they came from there.
func TestReportProcessedDebugInfoTwins(t *testing.T) {
	if testing.Short() {
		t.Skip("records with perf")
	}
	if os.Geteuid() != 0 {
		t.Skip("perf record needs root here")
	}
	for _, tool := range []string{"perf", "gcc", "objcopy"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (Debian packages linux-perf, gcc, binutils)", tool)
		}
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "lib.c"), []byte(dbgLibSrc), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "prog.c"), []byte(dbgProgSrc), 0o644))
	runDir := filepath.Join(dir, "run")
	require.NoError(t, os.MkdirAll(runDir, 0o755))
	plainProg, plainLib := buildTwin(t, dir, "plain", runDir)
	prog, lib := filepath.Join(runDir, "prog"), filepath.Join(runDir, "libdemo.so")
	install := func(p, l string) { copyFile(t, p, prog); copyFile(t, l, lib) }
	install(plainProg, plainLib)

	data := filepath.Join(dir, "perf.data")
	if out, err := exec.Command("perf", "record", "-q", "-N", "-e", "cpu-clock", "-F", "500", "--call-graph", "dwarf",
		"-o", data, "--", prog).CombinedOutput(); err != nil {
		t.Skipf("cannot record with perf here: %v\n%s", err, out)
	}
	empty := t.TempDir()
	report := func(args ...string) ([][]string, map[string]any) {
		t.Helper()
		rc, out, errs := run3(append([]string{"report", "-kallsyms", "-", "-archive", "-", "-perf-archive", "-", "-buildid-dir", empty,
			"-debug-dir", empty, "-no-debuginfod", "-format", "json", "-verbose", "-i", data}, args...))
		require.Equal(t, exitOK, rc, errs)
		return jsonSamples(t, out)
	}
	want, _ := report()
	require.NotEmpty(t, want)
	require.True(t, hasChain(want,
		"lib_leaf lib.c:2 inlined=true", "lib_mid lib.c:3 inlined=true", "lib_work lib.c:4 inlined=false",
		"inner prog.c:3 inlined=true", "outer prog.c:4 inlined=false", "main prog.c:5 inlined=false"),
		"the plain build's report lacks the inline chain: %v", want[:min(3, len(want))])

	// objects returns the summary record's objects by path.
	objects := func(sum map[string]any) map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, o := range sum["summary"].(map[string]any)["objects"].([]any) {
			m := o.(map[string]any)
			out[m["path"].(string)] = m
		}
		return out
	}

	t.Run("dwz", func(t *testing.T) {
		if _, err := exec.LookPath("dwz"); err != nil {
			t.Skip("dwz not installed (Debian package dwz)")
		}
		d := filepath.Join(dir, "dwz")
		require.NoError(t, os.MkdirAll(d, 0o755))
		p, l := filepath.Join(d, "prog"), filepath.Join(d, "libdemo.so")
		copyFile(t, plainProg, p)
		copyFile(t, plainLib, l)
		common := filepath.Join(d, "common.debug")
		mustRun(t, "dwz", "-m", common, "-M", common, p, l)
		sameText(t, plainProg, p)
		install(p, l)
		got, sum := report()
		assert.Equal(t, want, got)
		objs := objects(sum)
		for _, path := range []string{prog, lib} {
			if assert.Contains(t, objs, path) {
				assert.Equal(t, common, objs[path]["supplementary"], "%s: lines not read through the supplementary file", path)
			}
		}
	})
	splitProg, splitLib := buildTwin(t, dir, "split", runDir, "-gsplit-dwarf")
	dwos, err := filepath.Glob(filepath.Join(dir, "split", "*.dwo"))
	require.NoError(t, err)
	t.Run("split DWARF", func(t *testing.T) {
		require.Len(t, dwos, 2, "gcc -gsplit-dwarf made no .dwo files")
		sameText(t, plainProg, splitProg)
		sameText(t, plainLib, splitLib)
		install(splitProg, splitLib)
		got, _ := report()
		assert.Equal(t, want, got)
	})
	t.Run("dwp package", func(t *testing.T) {
		if _, err := exec.LookPath("llvm-dwp"); err != nil {
			t.Skip("llvm-dwp not installed (Debian package llvm): .dwp packages not tested")
		}
		install(splitProg, splitLib)
		// The program's .dwp next to it, its .dwo gone. (llvm-dwp 14
		// spins on the library's .dwo, so the library keeps its .dwo.)
		dwo := filepath.Join(dir, "split", "prog-prog.dwo")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "llvm-dwp", "-o", prog+".dwp", dwo).CombinedOutput(); err != nil {
			t.Fatalf("llvm-dwp: %v\n%s", err, out)
		}
		require.NoError(t, os.Rename(dwo, dwo+".gone"))
		defer os.Rename(dwo+".gone", dwo)
		got, _ := report()
		assert.Equal(t, want, got)

		// Without the package the program's inline chains are gone
		// (its line table stays in the skeleton): they came from it.
		require.NoError(t, os.Remove(prog+".dwp"))
		got, _ = report()
		assert.NotEqual(t, want, got)
		assert.False(t, hasChain(got, "inner prog.c:3 inlined=true"), "an inline frame without the .dwo and .dwp file")
		n := 0
		for _, s := range got {
			for _, f := range s {
				if strings.HasSuffix(f, " "+prog) {
					assert.Contains(t, f, "inlined=false", "an inline frame without the split DWARF")
					n++
				}
			}
		}
		assert.NotZero(t, n, "no frame of the program")
	})
}

// goBurnSrc is a Go program whose time goes to main.leaf, called through
// main.mid and main.top, none of them inlined, and to main.mix and
// main.step inlined into it.
const goBurnSrc = `package main

var sink int

func step(s, i int) int { return s + i ^ sink }

func mix(s, i int) int { return step(s, i) * 3 }

//go:noinline
func leaf(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s = mix(s, i)
	}
	return s
}

//go:noinline
func mid(n int) int { return leaf(n) + 1 }

//go:noinline
func top(n int) int { return mid(n) * 2 }

func main() {
	for i := 0; i < 2000; i++ {
		sink += top(200000)
	}
}
`

// goTopFrames are the functions Go's pclntab marks as the outermost of
// their stacks (abi.FuncFlagTopFrame). The plain build's .debug_frame
// unwinds on past runtime.mstart (into runtime.clone and a frame of no
// mapping), the pclntab rows stop there: frames are compared up to these.
var goTopFrames = map[string]bool{"runtime.goexit": true, "runtime.mstart": true, "runtime.rt0_go": true}

// TestReportStrippedGoTwin records a Go program built plainly, then
// reports the recording with the binary replaced by its twin built with
// -ldflags='-s -w' (the same machine code and GNU build-id; no .symtab, no
// DWARF, only .gopclntab): every sample must have the same frames, inlined
// ones included, with the same addresses, function names, source files
// and lines as with the plain build (whose come from its DWARF), the
// callers recovered from pclntab's pcsp rows rather than frame pointers,
// the lines and inline chains from its pcfile, pcln and inline trees. One
// difference is expected and counted: in compiler-made code the pclntab
// says <autogenerated>:1 where Go's DWARF has no line.
func TestReportStrippedGoTwin(t *testing.T) {
	if testing.Short() {
		t.Skip("records with perf")
	}
	if os.Geteuid() != 0 {
		t.Skip("perf record needs root here")
	}
	for _, tool := range []string{"perf", "go", "objcopy"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "burn.go")
	require.NoError(t, os.WriteFile(src, []byte(goBurnSrc), 0o644))
	build := func(name, ldflags string) string {
		out := filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", out, "-ldflags", ldflags+" -B "+twinProgID, src)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GO111MODULE=off", "CGO_ENABLED=0", "GOFLAGS=")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Skipf("go build: %v\n%s", err, b)
		}
		return out
	}
	full, stripped := build("full", ""), build("stripped", "-s -w")
	sameText(t, full, stripped)
	runDir := filepath.Join(dir, "run")
	require.NoError(t, os.MkdirAll(runDir, 0o755))
	bin := filepath.Join(runDir, "burn")
	copyFile(t, full, bin)
	data := filepath.Join(dir, "perf.data")
	if out, err := exec.Command("perf", "record", "-q", "-N", "-e", "cpu-clock", "-F", "500", "--call-graph", "dwarf",
		"-o", data, "--", bin).CombinedOutput(); err != nil {
		t.Skipf("cannot record with perf here: %v\n%s", err, out)
	}
	empty := t.TempDir()
	report := func() ([][]string, map[string]any) {
		t.Helper()
		rc, out, errs := run3([]string{"report", "-kallsyms", "-", "-archive", "-", "-perf-archive", "-", "-buildid-dir", empty,
			"-debug-dir", empty, "-no-debuginfod", "-format", "json", "-verbose", "-i", data})
		require.Equal(t, exitOK, rc, errs)
		return jsonSamples(t, out)
	}
	// frames keeps each frame's address, name, source line, whether it is
	// inlined, method and object, up to the outermost function; physical
	// only the frames that are not inlined, without their lines.
	frames := func(samples [][]string, physicalOnly bool) [][]string {
		out := make([][]string, len(samples))
		for i, s := range samples {
			for _, f := range s {
				if physicalOnly && strings.Contains(f, " inlined=true ") {
					continue
				}
				fs := strings.Fields(f) // addr symbol file:line inlined how module
				// .symtab names assembly functions with an .abi0 suffix
				// that the pclntab lacks.
				fs[1] = strings.TrimSuffix(fs[1], ".abi0")
				if physicalOnly {
					fs = []string{fs[0], fs[1], fs[4], fs[5]}
				}
				out[i] = append(out[i], strings.Join(fs, " "))
				if goTopFrames[fs[1]] && !strings.Contains(f, " inlined=true ") {
					break
				}
			}
		}
		return out
	}
	physical := func(samples [][]string) [][]string { return frames(samples, true) }
	want, _ := report()
	require.NotEmpty(t, want)
	require.True(t, hasChain(physical(want), "main.mid cfi", "main.top cfi", "main.main cfi", "runtime.main cfi"),
		"the plain build's report lacks main.mid < main.top < main.main < runtime.main: %v", physical(want)[:min(3, len(want))])

	copyFile(t, stripped, bin)
	got, sum := report()
	assert.Equal(t, physical(want), physical(got))
	wantAll, gotAll := frames(want, false), frames(got, false)
	autogen, inlined, lined := 0, 0, 0
	for i := range gotAll {
		for k, f := range gotAll[i] {
			if k < len(wantAll[i]) && strings.Contains(f, " <autogenerated>:1 ") && strings.Contains(wantAll[i][k], " ?:0 ") {
				gotAll[i][k] = strings.Replace(f, " <autogenerated>:1 ", " ?:0 ", 1)
				autogen++
			}
			if strings.Contains(f, " inlined=true ") {
				inlined++
			}
			if !strings.Contains(gotAll[i][k], ":0 ") {
				lined++
			}
		}
	}
	assert.Equal(t, wantAll, gotAll, "source frames differ from the plain build's")
	t.Logf("%d samples: %d frames with a line, %d inlined, %d in <autogenerated> code without a DWARF line", len(got), lined, inlined, autogen)
	require.Greater(t, lined, len(got), "few frames with a source line")
	require.True(t, hasChain(wantAll, "main.step burn.go:5 inlined=true", "main.mix burn.go:7 inlined=true", "main.leaf burn.go:13 inlined=false"),
		"the plain build's report lacks main.step < main.mix < main.leaf at the lines of goBurnSrc")
	var obj map[string]any
	for _, o := range sum["summary"].(map[string]any)["objects"].([]any) {
		if m := o.(map[string]any); m["path"] == bin {
			obj = m
		}
	}
	require.NotNil(t, obj, "the Go binary is not among the summary's objects")
	assert.Equal(t, "pclntab", obj["unwind"])
	assert.Equal(t, "pclntab", obj["symbols"])
	assert.Equal(t, "pclntab", obj["lines"])
}
