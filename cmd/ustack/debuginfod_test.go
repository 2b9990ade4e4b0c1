//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	hexenc "encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/debuginfod"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/internal/debuginfodtest"
	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/report"
)

// A library and a program, each with functions inlined into their
// callers and every function on one line, so that each frame's line is
// known from the source: lib_leaf on line 2 of lib.c is inlined into
// lib_mid (line 3, which calls it) into lib_work (line 4); inner (line 3
// of prog.c) into outer (line 4).
const (
	dbgLibSrc = `static volatile long sink;
static inline __attribute__((always_inline)) long lib_leaf(long x) { for (long i = 0; i < 4000; i++) sink += i ^ x; return sink; }
static inline __attribute__((always_inline)) long lib_mid(long x) { return lib_leaf(x + 1) * 3; }
__attribute__((noinline)) long lib_work(long x) { return lib_mid(x) - 5; }
`
	dbgProgSrc = `long lib_work(long);
static volatile long acc;
static inline __attribute__((always_inline)) void inner(long i) { acc += lib_work(i); for (int j = 0; j < 3000; j++) acc += j; }
__attribute__((noinline)) void outer(long n) { for (long i = 0; i < n; i++) inner(i); }
int main(void) { outer(100000); return 0; }
`
)

// dbgObject is one object of the test program: the stripped file the
// recording maps, its debug file, its build-id.
type dbgObject struct {
	path, debug string
	buildID     []byte
}

// buildDebuginfodProg builds the library and the program into dir/run
// stripped (the program finds the library there by its rpath), their debug
// files into dir/debug, and copies of both into srvDir for the server.
func buildDebuginfodProg(t *testing.T, dir, srvDir string) (prog, lib dbgObject) {
	t.Helper()
	for _, d := range []string{"run", "full", "debug"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(src), 0o644))
		return p
	}
	libC, progC := write("lib.c", dbgLibSrc), write("prog.c", dbgProgSrc)
	runDir := filepath.Join(dir, "run")
	fullLib, fullProg := filepath.Join(dir, "full", "libdemo.so"), filepath.Join(dir, "full", "prog")
	mustRun(t, "gcc", "-O2", "-g", "-fPIC", "-shared", "-Wl,--build-id", "-Wl,-soname,libdemo.so", "-o", fullLib, libC)
	mustRun(t, "gcc", "-O2", "-g", "-Wl,--build-id", "-o", fullProg, progC, fullLib, "-Wl,-rpath,"+runDir)
	split := func(full string) dbgObject {
		name := filepath.Base(full)
		o := dbgObject{path: filepath.Join(runDir, name), debug: filepath.Join(dir, "debug", name+".debug")}
		mustRun(t, "objcopy", "--only-keep-debug", full, o.debug)
		mustRun(t, "strip", "--strip-all", "-o", o.path, full)
		for _, f := range []string{o.path, o.debug} {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(srvDir, filepath.Base(f)), data, 0o755))
		}
		e, err := elfcache.Open(full, elfcache.Options{NoDebugFile: true})
		require.NoError(t, err)
		defer e.Close()
		o.buildID = append([]byte(nil), e.BuildID()...)
		require.NotEmpty(t, o.buildID, full)
		return o
	}
	return split(fullProg), split(fullLib)
}

// serveDebuginfodProg builds the program and library (buildDebuginfodProg)
// in a new directory, which it returns, and starts Debian's debuginfod
// serving them, once it has scanned all four files.
func serveDebuginfodProg(t *testing.T) (dir string, prog, lib dbgObject, srv *debuginfodtest.Server) {
	t.Helper()
	dir = t.TempDir()
	srvDir := filepath.Join(dir, "server")
	require.NoError(t, os.MkdirAll(srvDir, 0o755))
	prog, lib = buildDebuginfodProg(t, dir, srvDir)
	srv = debuginfodtest.Start(t, srvDir, dir)
	srv.WaitScanned(t, 4)
	return dir, prog, lib, srv
}

func mustRun(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// debugDirOf makes a debug directory holding the objects' debug files by
// build-id, as /usr/lib/debug does.
func debugDirOf(t *testing.T, dir string, objs ...dbgObject) string {
	t.Helper()
	for _, o := range objs {
		id := hexenc.EncodeToString(o.buildID)
		p := filepath.Join(dir, ".build-id", id[:2], id[2:]+".debug")
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		data, err := os.ReadFile(o.debug)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p, data, 0o644))
	}
	return dir
}

// dbgFrame is what the tests compare of a JSON report's frame.
type dbgFrame struct {
	Module  *string `json:"module"`
	Addr    string  `json:"addr"`
	Symbol  *string `json:"symbol"`
	File    *string `json:"file"`
	Line    *int    `json:"line"`
	Inlined bool    `json:"inlined"`
	How     string  `json:"how"`
}

func (f dbgFrame) String() string {
	s := func(p *string) string {
		if p == nil {
			return "?"
		}
		return *p
	}
	line := 0
	if f.Line != nil {
		line = *f.Line
	}
	return fmt.Sprintf("%s %s %s:%d inlined=%v %s %s", f.Addr, s(f.Symbol), filepath.Base(s(f.File)), line, f.Inlined, f.How, s(f.Module))
}

// jsonSamples returns the frames of every sample of a JSON report, one
// string per frame, and the summary record when there is one.
func jsonSamples(t *testing.T, js string) (samples [][]string, summary map[string]any) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(js))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), `{"summary":`) {
			require.NoError(t, json.Unmarshal(sc.Bytes(), &summary))
			continue
		}
		var s struct{ Frames []dbgFrame }
		require.NoError(t, json.Unmarshal(sc.Bytes(), &s), sc.Text())
		var fr []string
		for _, f := range s.Frames {
			fr = append(fr, f.String())
		}
		samples = append(samples, fr)
	}
	return samples, summary
}

// hasChain reports whether some sample's frames hold, in order and next to
// one another, frames whose text starts the way each of want does after
// the address.
func hasChain(samples [][]string, want ...string) bool {
	for _, s := range samples {
	next:
		for i := 0; i+len(want) <= len(s); i++ {
			for k, w := range want {
				_, rest, _ := strings.Cut(s[i+k], " ")
				if !strings.HasPrefix(rest, w) {
					continue next
				}
			}
			return true
		}
	}
	return false
}

// TestReportDebuginfod records a program and its library, both stripped,
// and reports the recording with Debian's debuginfod serving their debug
// files and executables: with the objects gone from the machine, the report
// has the same frames, inline chains and lines as with the debug files
// local; a second run answers from the client cache without a request
// (counted on the server); without servers the cache is still used;
// --no-debuginfod uses neither; and the server stopped halfway costs a
// warning and the frames of the object it had not served yet.
func TestReportDebuginfod(t *testing.T) {
	if testing.Short() {
		t.Skip("records with perf and runs debuginfod")
	}
	if os.Geteuid() != 0 {
		t.Skip("perf record needs root here")
	}
	if !debuginfodtest.InNetns(t, "perf", "gcc", "objcopy", "strip") {
		return
	}
	dir, prog, lib, srv := serveDebuginfodProg(t)

	data := filepath.Join(dir, "perf.data")
	// -N: perf's build-id cache must not keep copies of the objects.
	if out, err := exec.Command("perf", "record", "-q", "-N", "-e", "cpu-clock", "-F", "500", "--call-graph", "dwarf",
		"-o", data, "--", prog.path).CombinedOutput(); err != nil {
		t.Skipf("cannot record with perf here: %v\n%s", err, out)
	}
	// The recording names both objects by build-id.
	rd, err := perfdata.Open(data)
	require.NoError(t, err)
	ids := map[string]bool{}
	for _, b := range rd.Session().Features.BuildIDs {
		ids[hexenc.EncodeToString(b.BuildID)] = true
	}
	rd.Close()
	require.True(t, ids[hexenc.EncodeToString(prog.buildID)] && ids[hexenc.EncodeToString(lib.buildID)],
		"build-ids of the recording: %v, want %x and %x", ids, prog.buildID, lib.buildID)

	empty := t.TempDir()
	ureport := func(args ...string) (int, string, string) {
		return run3(append([]string{"report", "-kallsyms", "-", "-archive", "-", "-perf-archive", "-", "-buildid-dir", empty,
			"-format", "json", "-i", data}, args...))
	}
	// Reference: the stripped objects with their debug files local.
	t.Setenv("DEBUGINFOD_URLS", "")
	t.Setenv("DEBUGINFOD_CACHE_PATH", filepath.Join(dir, "unused-cache"))
	rc, out, errs := ureport("-debug-dir", debugDirOf(t, filepath.Join(dir, "localdebug"), prog, lib))
	require.Equal(t, exitOK, rc, errs)
	want, _ := jsonSamples(t, out)
	require.NotEmpty(t, want)
	// Hand-checked against the sources: each function on its line.
	libC, progC := filepath.Join(dir, "lib.c"), filepath.Join(dir, "prog.c")
	require.True(t, hasChain(want,
		"lib_leaf lib.c:2 inlined=true", "lib_mid lib.c:3 inlined=true", "lib_work lib.c:4 inlined=false",
		"inner prog.c:3 inlined=true", "outer prog.c:4 inlined=false", "main prog.c:5 inlined=false"),
		"no sample with the whole inline chain of %s and %s: %v", libC, progC, want[:min(3, len(want))])

	// The objects leave the machine: only the server has them.
	require.NoError(t, os.Rename(filepath.Join(dir, "run"), filepath.Join(dir, "gone")))
	cache := filepath.Join(dir, "cache")
	t.Setenv("DEBUGINFOD_URLS", srv.Base)
	t.Setenv("DEBUGINFOD_CACHE_PATH", cache)
	exe, dbg := `http_requests_total{type="executable"}`, `http_requests_total{type="debuginfo"}`

	t.Run("objects and debug files only on the server", func(t *testing.T) {
		rc, out, errs := ureport("-debug-dir", empty, "-verbose")
		require.Equal(t, exitOK, rc, errs)
		got, sum := jsonSamples(t, out)
		assert.Equal(t, want, got)
		assert.Equal(t, 2, srv.Metric(t, exe), "one executable request per object")
		assert.GreaterOrEqual(t, srv.Metric(t, dbg), 2)
		for _, o := range []dbgObject{prog, lib} {
			for _, kind := range []string{debuginfod.Executable, debuginfod.Debuginfo} {
				fi, err := os.Stat(filepath.Join(cache, hexenc.EncodeToString(o.buildID), kind))
				if assert.NoError(t, err, "%s %s not in the cache", o.path, kind) {
					assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
				}
			}
		}
		// The summary record says where each object came from.
		require.NotNil(t, sum, "no summary record with --verbose")
		objs := map[string]map[string]any{}
		for _, o := range sum["summary"].(map[string]any)["objects"].([]any) {
			m := o.(map[string]any)
			objs[m["path"].(string)] = m
		}
		for _, o := range []dbgObject{prog, lib} {
			m := objs[o.path]
			if assert.NotNil(t, m, "%s not among the summary's objects: %v", o.path, objs) {
				assert.Equal(t, "debuginfod", m["object"], o.path)
				assert.Equal(t, "debuginfod", m["lines"], o.path)
				assert.Equal(t, "debuginfod", m["symbols"], o.path)
				assert.Equal(t, hexenc.EncodeToString(o.buildID), m["build_id"], o.path)
			}
		}
		assert.NotContains(t, errs, "warning")
	})
	t.Run("second run from the cache", func(t *testing.T) {
		before := []int{srv.Metric(t, exe), srv.Metric(t, dbg)}
		rc, out, errs := ureport("-debug-dir", empty)
		require.Equal(t, exitOK, rc, errs)
		got, _ := jsonSamples(t, out)
		assert.Equal(t, want, got)
		assert.Equal(t, before, []int{srv.Metric(t, exe), srv.Metric(t, dbg)}, "requests on the second run")
	})
	t.Run("no servers: the cache is still used", func(t *testing.T) {
		t.Setenv("DEBUGINFOD_URLS", "")
		before := []int{srv.Metric(t, exe), srv.Metric(t, dbg)}
		rc, out, errs := ureport("-debug-dir", empty)
		require.Equal(t, exitOK, rc, errs)
		got, _ := jsonSamples(t, out)
		assert.Equal(t, want, got)
		assert.Equal(t, before, []int{srv.Metric(t, exe), srv.Metric(t, dbg)})
	})
	t.Run("--no-debuginfod", func(t *testing.T) {
		before := []int{srv.Metric(t, exe), srv.Metric(t, dbg)}
		rc, out, errs := ureport("-debug-dir", empty, "-no-debuginfod", "-verbose")
		require.Equal(t, exitOK, rc, errs)
		got, sum := jsonSamples(t, out)
		assert.NotEqual(t, want, got)
		assert.False(t, hasChain(got, "lib_work lib.c:4"), "lines without the debug files")
		assert.Equal(t, before, []int{srv.Metric(t, exe), srv.Metric(t, dbg)})
		missing := map[string]bool{}
		for _, m := range sum["summary"].(map[string]any)["missing"].([]any) {
			missing[m.(map[string]any)["path"].(string)] = true
		}
		assert.True(t, missing[prog.path] && missing[lib.path], "missing: %v", missing)
		assert.Contains(t, errs, "objects without unwind or symbol information")
	})

	// The objects are back, the debug files still only on the server; it
	// stops once it has served the first of them.
	require.NoError(t, os.Rename(filepath.Join(dir, "gone"), filepath.Join(dir, "run")))
	t.Run("server stopped halfway", func(t *testing.T) {
		cache := filepath.Join(dir, "cache2")
		var once sync.Once
		served := func() (string, bool) {
			for _, o := range []dbgObject{prog, lib} {
				if _, err := os.Stat(filepath.Join(cache, hexenc.EncodeToString(o.buildID), debuginfod.Debuginfo)); err == nil {
					return o.path, true
				}
			}
			return "", false
		}
		var mu sync.Mutex
		var warnings []string
		warn := func(m string) { mu.Lock(); warnings = append(warnings, m); mu.Unlock() }
		c := debuginfod.New(debuginfod.Options{URLs: []string{srv.Base}, CacheDir: cache, Parallel: 1,
			RequestTimeout: 5 * time.Second, Warn: warn,
			Progress: func(started, finished int) {
				if _, ok := served(); ok {
					once.Do(srv.Stop)
				}
			}})
		defer c.Close()
		rd, err := perfdata.Open(data)
		require.NoError(t, err)
		defer rd.Close()
		var b bytes.Buffer
		w := report.NewJSONWriter(&b, false)
		start := time.Now()
		sum, err := report.Run(rd, report.Options{Kallsyms: "-", BuildIDDir: empty, DebugDirs: []string{empty},
			Debuginfod: c, ObjectSources: true, Warn: warn}, w.Write)
		require.NoError(t, err)
		require.NoError(t, w.Flush())
		assert.Less(t, time.Since(start), time.Minute)
		first, ok := served()
		require.True(t, ok, "the server served no debug file")
		got, _ := jsonSamples(t, b.String())
		require.Equal(t, len(want), len(got), "samples")
		// Frames of the object served are as with the files local; those
		// of the other object have no line (and no inline frame).
		of := func(frames []string, module string) []string {
			var out []string
			for _, f := range frames {
				if strings.HasSuffix(f, " "+module) {
					out = append(out, f)
				}
			}
			return out
		}
		other := prog.path
		if first == prog.path {
			other = lib.path
		}
		resolved, unresolved := 0, 0
		for i := range want {
			mine := of(got[i], first)
			assert.Equal(t, of(want[i], first), mine, "sample %d", i)
			resolved += len(mine)
			for _, f := range of(got[i], other) {
				assert.Contains(t, f, ":0 inlined=false", "sample %d has a line without the debug file", i)
				unresolved++
			}
		}
		assert.NotZero(t, resolved)
		assert.NotZero(t, unresolved)
		mu.Lock()
		assert.NotEmpty(t, warnings, "no warning for the server that went away")
		for _, m := range warnings {
			assert.Contains(t, m, srv.Base)
		}
		mu.Unlock()
		for _, o := range sum.Objects {
			if o.Path == first {
				assert.Equal(t, elfcache.OriginDebuginfod, o.Sources.Lines)
			} else if o.Path == prog.path || o.Path == lib.path {
				assert.Equal(t, elfcache.OriginNone, o.Sources.Lines, o.Path)
				assert.Equal(t, elfcache.OriginFile, o.Sources.Unwind, o.Path)
			}
		}
	})
}

// TestCoreDebuginfod reports a core of the stripped program and library
// with Debian's debuginfod serving their executables and debug files, as
// gdb does with DEBUGINFOD_URLS: with both gone from the machine, the core's
// stack is the one it has with them local (names, lines, inline chains,
// the libc frames below main), the objects are fetched by the build-ids
// the core's memory gives, and without a server the summary says that
// DEBUGINFOD_URLS would find them. The core is gdb's gcore of the program
// stopped at lib_work's entry (hand-checked: lib_work, inner inlined in
// outer, main).
func TestCoreDebuginfod(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gdb and debuginfod")
	}
	if !debuginfodtest.InNetns(t, "gcc", "objcopy", "strip", "gdb") {
		return
	}
	dir, prog, lib, srv := serveDebuginfodProg(t)

	core := filepath.Join(dir, "core")
	ctx, cancel := context.WithTimeout(context.Background(), testprog.Timeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "gdb", "-nx", "-batch", "-ex", "break lib_work", "-ex", "run", "-ex", "gcore "+core,
		"-ex", "kill", "--args", prog.path).CombinedOutput(); err != nil {
		t.Fatalf("gdb gcore: %v\n%s", err, out)
	}
	empty := t.TempDir()
	ureport := func(args ...string) (int, string, string) {
		return run3(append([]string{"report", "-buildid-dir", empty, "-format", "json", "-i", core}, args...))
	}
	t.Setenv("DEBUGINFOD_URLS", "")
	t.Setenv("DEBUGINFOD_CACHE_PATH", filepath.Join(dir, "unused-cache"))
	rc, out, errs := ureport("-debug-dir", debugDirOf(t, filepath.Join(dir, "localdebug"), prog, lib))
	require.Equal(t, exitOK, rc, errs)
	want, _ := jsonSamples(t, out)
	require.Len(t, want, 1)
	require.True(t, hasChain(want, "lib_work lib.c:4 inlined=false", "inner prog.c:3 inlined=true", "outer prog.c:4 inlined=false",
		"main prog.c:5 inlined=false"), "the core's stack with the objects local: %v", want)

	require.NoError(t, os.Rename(filepath.Join(dir, "run"), filepath.Join(dir, "gone")))
	t.Run("without a server", func(t *testing.T) {
		rc, out, errs := ureport("-debug-dir", empty)
		require.Equal(t, exitOK, rc, errs)
		got, _ := jsonSamples(t, out)
		assert.NotEqual(t, want, got)
		assert.Contains(t, errs, "DEBUGINFOD_URLS=URL fetches them by build-id")
	})
	t.Run("objects and debug files only on the server", func(t *testing.T) {
		t.Setenv("DEBUGINFOD_URLS", srv.Base)
		t.Setenv("DEBUGINFOD_CACHE_PATH", filepath.Join(dir, "cache"))
		rc, out, errs := ureport("-debug-dir", empty)
		require.Equal(t, exitOK, rc, errs)
		got, _ := jsonSamples(t, out)
		assert.Equal(t, want, got)
		assert.Equal(t, 2, srv.Metric(t, `http_requests_total{type="executable"}`), "one executable request per object")
		assert.NotContains(t, errs, "warning")
	})
}
