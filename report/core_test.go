package report

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/coredump"
	"github.com/ustack/ustack/internal/coretruth"
	"github.com/ustack/ustack/internal/testprog"
)

var testdataDir = filepath.Join("..", "testdata")

func coreFixtures(t *testing.T) []*coretruth.Truth {
	t.Helper()
	all, err := coretruth.Load(testdataDir)
	require.NoError(t, err)
	return all
}

func corePath(tr *coretruth.Truth) string { return filepath.Join(testdataDir, tr.Core) }

// symfs lays out the fixture's objects for --symfs (coretruth.Truth.Symfs).
func symfs(t *testing.T, tr *coretruth.Truth) (dir string, systemDebug bool) {
	t.Helper()
	dir = t.TempDir()
	systemDebug, err := tr.Symfs(dir, testdataDir)
	require.NoError(t, err)
	return dir, systemDebug
}

// coreReport runs the core at path through RunCore and the named writer.
func coreReport(t *testing.T, path, format string, opts CoreOptions) ([]byte, *Summary) {
	t.Helper()
	c, err := OpenCore(path, opts)
	require.NoError(t, err)
	defer c.Close()
	var b bytes.Buffer
	w, err := NewWriter(format, &b, WriterOptions{Events: []string{CoreEvent}})
	require.NoError(t, err)
	sum, err := RunCore(c, opts, w.Write)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return b.Bytes(), sum
}

type coreSample struct {
	Pid, Tid int
	Comm     string
	Event    string
	Period   *int
	Signal   *string
	Stop     *string
	StopErr  *string `json:"stop_error"`
	Frames   []struct {
		PC      string
		Module  *string
		Symbol  *string
		File    *string
		Inlined bool
		How     string
	}
}

func hexAddr(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	require.NoError(t, err, "hex %q", s)
	return v
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// coreCorrections are the threads where the report rightly differs from
// gdb, and why (the fixture's README tells the same).
var coreCorrections = map[string]string{
	"x86_64/go_abort": "gdb walks past the outermost Go frames (runtime.goexit, runtime.mstart, runtime.clone) into words that are no code (0, a Go heap address); the report stops at the outermost frame's CFI",
}

// TestCoreReportMatchesGDB reports every core fixture through RunCore and
// the JSON writer and compares every thread with gdb's backtrace of the same
// core: the threads in the order the core has them with the signalled one
// first, each machine frame's pc and each tail call frame's (gdb's inline
// frames have no machine frame; its tail call frames are the report's of
// how "tailcall"), the function each frame is in, the signal on the
// signalled thread only, and why each stack ended.
func TestCoreReportMatchesGDB(t *testing.T) {
	sch := reportSchema(t)
	for _, tr := range coreFixtures(t) {
		t.Run(tr.Arch+"/"+tr.Name, func(t *testing.T) {
			symfs, libcDebug := symfs(t, tr)
			if !libcDebug {
				t.Logf("glibc's debug file (libc6-dbg) is not on this machine: the names of glibc's frames are not compared")
			}
			js, sum := coreReport(t, corePath(tr), "json", CoreOptions{Options: Options{SymFS: symfs, Kallsyms: "-", BuildIDDir: t.TempDir()}})
			validateLines(t, sch, js)
			assert.Empty(t, sum.Missing, "every object of the fixture is in the symfs")
			got := testprog.JSONLines[coreSample](t, js)
			require.Len(t, got, len(tr.GDB.Threads))
			require.Equal(t, tr.GDB.SelectedLWP, got[0].Tid, "the signalled thread comes first")
			byTid := map[int]*coreSample{}
			for i := range got {
				byTid[got[i].Tid] = &got[i]
				assert.Equal(t, CoreEvent, got[i].Event)
				assert.Nil(t, got[i].Period, "a core's thread was not sampled: no period")
				if i == 0 && tr.GDB.Siginfo != nil {
					assert.NotNil(t, got[i].Signal, "the signalled thread names its signal")
				} else if i > 0 {
					assert.Nil(t, got[i].Signal, "tid %d did not receive the signal", got[i].Tid)
				}
			}
			for _, g := range tr.GDB.Threads {
				s := byTid[g.LWP]
				require.NotNil(t, s, "gdb's LWP %d is not in the report", g.LWP)
				type frame struct {
					pc   uint64
					name string
				}
				var want []frame
				for _, f := range g.Frames {
					if f.Kind != "inline" && f.PC != "" {
						want = append(want, frame{hexAddr(t, f.PC), f.Function})
					}
				}
				// Correction (go_abort): gdb walks past the outermost Go
				// frame into words that are no code; the report follows
				// it at most one word (no frame of its own there), which
				// it says by stopping with no_mapping.
				full := want
				if _, ok := coreCorrections[tr.Arch+"/"+tr.Name]; ok {
					for len(want) > 0 && !inCode(t, tr, want[len(want)-1].pc) {
						want = want[:len(want)-1]
					}
				}
				// The machine frames (each inline chain ends with one),
				// with the names of their inline chains.
				var pcs []uint64
				var names [][]string
				var chain []string
				var modules []string
				for _, f := range s.Frames {
					chain = append(chain, str(f.Symbol))
					if f.Inlined {
						continue
					}
					pcs = append(pcs, hexAddr(t, f.PC))
					names = append(names, chain)
					modules = append(modules, str(f.Module))
					chain = nil
				}
				// Where gdb went on into a word that is no code, the walk
				// may follow it as far as that return address and end
				// there with no_mapping, naming it, without a frame for it.
				wantStop := "outermost"
				if len(full) > len(want) && str(s.Stop) == "no_mapping" {
					wantStop = "no_mapping"
					assert.Contains(t, str(s.StopErr), fmt.Sprintf("%#x", full[len(want)].pc), "LWP %d: the stop names gdb's next word", g.LWP)
				}
				var wantPCs []uint64
				for _, f := range want {
					wantPCs = append(wantPCs, f.pc)
				}
				assert.Equal(t, hexList(wantPCs), hexList(pcs), "LWP %d: pcs against gdb (stop %s %s)", g.LWP, str(s.Stop), str(s.StopErr))
				assert.Equal(t, wantStop, str(s.Stop), "LWP %d: %s", g.LWP, str(s.StopErr))
				for i, f := range want {
					if i >= len(names) || f.name == "" {
						continue // gdb knows no name either
					}
					if tr.IsSystem(modules[i]) && !libcDebug {
						continue
					}
					assert.Contains(t, unaliased(names[i]), strings.TrimLeft(withoutParams(f.name), "_"), "LWP %d frame %d (%#x in %s)", g.LWP, i, f.pc, modules[i])
				}
			}
		})
	}
}

// inCode opens the fixture's core for coretruth.InCode.
func inCode(t *testing.T, tr *coretruth.Truth, addr uint64) bool {
	c, err := OpenCore(corePath(tr), CoreOptions{})
	require.NoError(t, err)
	defer c.Close()
	return coretruth.InCode(c.Core, addr)
}

// unaliased strips the leading underscores that tell glibc's aliases of
// one function apart (gdb names clone3 what the symbol table calls
// __clone3).
// withoutParams turns gdb's name of a C++ function ("run(int)",
// "thrower(int) [clone .cold]") into the name ustack prints in every format,
// as perf does: without the parameter list and clone suffix.
func withoutParams(name string) string {
	if i := strings.Index(name, " [clone "); i > 0 {
		name = name[:i]
	}
	name = strings.TrimSuffix(name, " const")
	if !strings.HasSuffix(name, ")") {
		return name
	}
	depth := 0
	for i := len(name) - 1; i >= 0; i-- {
		switch name[i] {
		case ')':
			depth++
		case '(':
			depth--
			if depth == 0 {
				if strings.HasSuffix(name[:i], "operator") {
					return name // gdb's "operator()" of a lambda: no parameters
				}
				return name[:i]
			}
		}
	}
	return name
}

func unaliased(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strings.TrimLeft(n, "_")
	}
	return out
}

func hexList(v []uint64) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = "0x" + strconv.FormatUint(x, 16)
	}
	return out
}

// TestCoreReportMatchesEuStack compares every thread's machine frames with
// eu-stack's (elfutils 0.188, `eu-stack -n 0 -m --core`, committed in the
// truth files): the same pcs, in the same order. Where they differ, gdb
// settles it:
//   - go_abort: eu-stack exits 1 at runtime.sigreturn__sigaction, Go's
//     signal return trampoline, which has no CFI ("no matching address
//     range"); gdb, like the report, goes on through the signal frame into
//     the interrupted code, so there only eu-stack's frames are compared,
//     as a prefix (its last frame, the trampoline, is the report's too).
//
// Everywhere else eu-stack, gdb and the report agree frame for frame.
func TestCoreReportMatchesEuStack(t *testing.T) {
	for _, tr := range coreFixtures(t) {
		t.Run(tr.Arch+"/"+tr.Name, func(t *testing.T) {
			dir, _ := symfs(t, tr)
			js, _ := coreReport(t, corePath(tr), "json", CoreOptions{Options: Options{SymFS: dir, Kallsyms: "-", BuildIDDir: t.TempDir()}})
			got := map[int][]string{}
			for _, s := range testprog.JSONLines[coreSample](t, js) {
				for _, f := range s.Frames {
					// eu-stack recovers no tail call frames.
					if !f.Inlined && f.How != "tailcall" {
						got[s.Tid] = append(got[s.Tid], f.PC)
					}
				}
			}
			require.NotEmpty(t, tr.EuStack.Threads, "eu-stack's truth")
			for _, e := range tr.EuStack.Threads {
				var eu []string
				for _, f := range e.Frames {
					eu = append(eu, "0x"+strconv.FormatUint(hexAddr(t, f.PC), 16))
				}
				g := got[e.TID]
				if tr.EuStack.Exit != 0 && len(eu) < len(g) {
					// eu-stack gave up (exit 1) where gdb went on.
					g = g[:len(eu)]
				}
				assert.Equal(t, eu, g, "tid %d against eu-stack", e.TID)
			}
		})
	}
}

// rawCore returns the fixture's core, decompressed.
func rawCore(t testing.TB, tr *coretruth.Truth) []byte {
	t.Helper()
	f, err := os.Open(corePath(tr))
	require.NoError(t, err)
	defer f.Close()
	d, err := zstd.NewReader(f)
	require.NoError(t, err)
	defer d.Close()
	raw, err := io.ReadAll(d)
	require.NoError(t, err)
	return raw
}

// FuzzRunCore: no core crashes, hangs or exhausts memory in the report of
// its threads (the unwinder reading the core's memory, the resolver its
// mappings, the JSON writer), every thread the reader found is reported,
// and the core read from a file, mapped read-only, reports as the same
// bytes in memory do. Seeds: the x86_64 threads core cut to its headers and
// notes, and to its first 128 KiB (small inputs fuzz fast; the unwinder
// then reads truncated and absent memory; TestReportCoreDamaged in
// cmd/ustack flips bits in the whole core). The objects are not at their
// recorded paths: only the core's memory is read, as for a core from
// another machine.
func FuzzRunCore(f *testing.F) {
	raw := threadsCore(f)
	f.Add(raw[:16<<10])
	f.Add(raw[:128<<10])
	empty, dir := f.TempDir(), f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) { checkRunCore(t, data, empty, dir) })
}

// threadsCore returns the raw x86_64 threads core.
func threadsCore(t testing.TB) []byte {
	all, err := coretruth.Load(testdataDir)
	require.NoError(t, err)
	for _, tr := range all {
		if tr.Arch+"/"+tr.Name == "x86_64/threads" {
			return rawCore(t, tr)
		}
	}
	t.Fatal("no x86_64/threads core")
	return nil
}

// checkRunCore reports the core data (if it parses) from memory and from a
// file in dir, objects looked for in empty, and checks both reports.
func checkRunCore(t *testing.T, data []byte, empty, dir string) {
	report := func(cd *coredump.Core) []byte {
		c := &Core{Core: cd, ExePath: mainExecutable(cd)}
		var b bytes.Buffer
		w := NewJSONWriter(&b, false)
		opts := CoreOptions{Options: Options{SymFS: empty, BuildIDDir: empty, MaxFrames: 256}}
		sum, err := RunCore(c, opts, w.Write)
		require.NoError(t, err)
		require.NoError(t, w.Flush())
		require.Equal(t, len(cd.Threads), sum.Samples)
		require.Len(t, testprog.JSONLines[coreSample](t, b.Bytes()), sum.Samples)
		return b.Bytes()
	}
	cd, err := coredump.Parse(data, "fuzz", &coredump.Options{NoMappedFiles: true})
	if err != nil {
		return
	}
	inMemory := report(cd)
	// The same bytes as a file, mapped read-only (what `ustack report -i
	// core` reads): the same report, and nothing written to them.
	path := filepath.Join(dir, "fuzz")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	mc, err := coredump.Open(path, &coredump.Options{NoMappedFiles: true})
	require.NoError(t, err, "Parse read it")
	defer mc.Close()
	require.Equal(t, string(bytes.ReplaceAll(inMemory, []byte(`"fuzz"`), []byte(strconv.Quote(path)))), string(report(mc)))
}

// BenchmarkRunCore reports the six threads of x86_64/threads (objects from
// a symfs, JSON to memory): a whole ustack report of a small core after the
// first, which fills the object caches.
func BenchmarkRunCore(b *testing.B) {
	all, err := coretruth.Load(testdataDir)
	require.NoError(b, err)
	var tr *coretruth.Truth
	for _, c := range all {
		if c.Arch+"/"+c.Name == "x86_64/threads" {
			tr = c
		}
	}
	require.NotNil(b, tr)
	dir := b.TempDir()
	_, err = tr.Symfs(dir, testdataDir)
	require.NoError(b, err)
	opts := CoreOptions{Options: Options{SymFS: dir, BuildIDDir: b.TempDir()}}
	c, err := OpenCore(corePath(tr), opts)
	require.NoError(b, err)
	defer c.Close()
	var buf bytes.Buffer
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf.Reset()
		w := NewJSONWriter(&buf, false)
		if _, err := RunCore(c, opts, w.Write); err != nil {
			b.Fatal(err)
		}
		w.Flush()
	}
}

// TestRunCoreWithoutOpenCore reports a Core made from a coredump.Core the
// caller opened (as FuzzRunCore does) whose NT_FILE lists a mapping the
// core has no segment for: a Core not made by OpenCore had no way to open
// mapped files, and RunCore panicked (nil func) asking whether the file was
// data. It now looks at the recorded path, as OpenCore without --symfs
// does.
func TestRunCoreWithoutOpenCore(t *testing.T) {
	cd, err := coredump.Parse(threadsCore(t), "threads", &coredump.Options{NoMappedFiles: true})
	require.NoError(t, err)
	cd.Mappings = append(cd.Mappings, coredump.Mapping{Start: 0x10000, End: 0x11000, Path: filepath.Join(t.TempDir(), "gone.so")})
	c := &Core{Core: cd, ExePath: mainExecutable(cd)}
	empty := t.TempDir()
	n := 0
	sum, err := RunCore(c, CoreOptions{Options: Options{SymFS: empty, BuildIDDir: empty}}, func(*Sample) error { n++; return nil })
	require.NoError(t, err)
	require.Equal(t, len(cd.Threads), sum.Samples)
	require.Equal(t, len(cd.Threads), n)
}

// TestCoreWithoutFileNote: memory outside NT_FILE is called anonymous
// ("//anon", where JITs put code) only when the core's NT_FILE is whole.
// The x86_64 threads core with its NT_FILE note's type changed (a core
// without one, as old gcores and other tools write): the first page of
// each object's text the kernel dumps becomes an executable segment no
// mapping covers, and before, coreMappings named it //anon.
func TestCoreWithoutFileNote(t *testing.T) {
	raw := threadsCore(t)
	whole, err := coredump.Parse(raw, "threads", &coredump.Options{NoMappedFiles: true})
	require.NoError(t, err)
	require.True(t, whole.MappingsComplete, "the intact core's NT_FILE")
	require.NotEmpty(t, whole.Mappings)

	// The note header of NT_FILE: namesz 5, descsz, type "FILE", "CORE\0".
	broken := append([]byte(nil), raw...)
	hdr := []byte{5, 0, 0, 0}
	n := 0
	for i := 0; i+20 <= len(broken); i += 4 {
		if bytes.Equal(broken[i:i+4], hdr) && binary.LittleEndian.Uint32(broken[i+8:]) == 0x46494c45 && string(broken[i+12:i+17]) == "CORE\x00" {
			binary.LittleEndian.PutUint32(broken[i+8:], 0x7fff0001) // an unknown note
			n++
		}
	}
	require.Equal(t, 1, n, "NT_FILE notes found in the core")
	cd, err := coredump.Parse(broken, "threads", &coredump.Options{NoMappedFiles: true})
	require.NoError(t, err)
	require.False(t, cd.MappingsComplete)
	require.Empty(t, cd.Mappings)

	uncovered := 0
	for _, m := range coreMappings(&Core{Core: cd}) {
		if m.Exec && m.Path != "[vdso]" {
			uncovered++
			assert.NotEqual(t, "//anon", m.Path, "segment %#x-%#x is not known to be anonymous", m.Start, m.End)
		}
	}
	require.NotZero(t, uncovered, "executable segments outside any mapping")
	// With NT_FILE whole, an executable segment outside it is anonymous.
	for _, m := range coreMappings(&Core{Core: whole}) {
		if m.Path == "" {
			t.Errorf("mapping %#x-%#x of the intact core has no path", m.Start, m.End)
		}
	}
}
