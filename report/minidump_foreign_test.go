package report

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/internal/coretruth"
	"github.com/ustack/ustack/internal/testfiles"
	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/minidump"
)

// lldbDumpTruth is a testdata/minidumps/<arch>/<name>.json file
// (testdata/minidumps/README.md): lldb 15's minidump of a live process,
// gdb's reading of a core of the same stop and lldb's of the minidump.
type lldbDumpTruth struct {
	Name   string            `json:"name"`
	Exe    string            `json:"exe"`
	SHA256 string            `json:"sha256"`
	Dump   string            `json:"dump"`
	Files  map[string]string `json:"files"`
	Elided []struct {
		Offset     int64  `json:"offset"`
		Size       int64  `json:"size"`
		Path       string `json:"path"`
		FileOffset int64  `json:"file_offset"`
	} `json:"elided"`
	GDB struct {
		Threads []struct {
			LWP    int                  `json:"lwp"`
			Regs   map[string]string    `json:"regs"`
			Frames []coretruth.GDBFrame `json:"frames"`
		} `json:"threads"`
	} `json:"gdb"`
	LLDB struct {
		Version string `json:"version"`
		Threads []struct {
			TID    int    `json:"tid"`
			Stop   string `json:"stop"`
			Frames []struct {
				PC, Module, Function, Line string
			} `json:"frames"`
		} `json:"threads"`
	} `json:"lldb"`

	live bool
}

// TestLLDBMinidump reports minidumps lldb 15 wrote of live C and C++
// processes (threads blocked in nanosleep, read, futex and poll, one in a
// SIGUSR1 handler; -O2 -g, no frame pointers; and the benchmark's 65
// threads) and compares every thread
// with lldb's own bt all of the minidump and with gdb's backtrace of a
// core of the same stop (testdata/gen/minidumps/gen.py): the committed
// fixtures, and the same programs captured again here when lldb-15, gdb,
// gcc and g++ are installed and this user may ptrace them.
//
// What lldb 15's minidumps hold (the test checks it of each): per thread
// a 720-byte CONTEXT_AMD64 with the control, integer and segment flags
// (no floating point) whose eflags and segment registers are 0xffffffff
// and 0xffff, not the thread's; the thread's whole stack mapping (in the
// thread list and again in the memory list); the whole mapping around each
// thread's pc (glibc's text); no other memory (no heap, no data, no
// vdso); modules with 'BpEL' build-ids named by the dynamic linker's
// paths (/lib/x86_64-linux-gnu/libc.so.6 where LinuxMaps says
// /usr/lib/...) and sized as their first segment only; an exception
// stream naming the SIGSTOP lldb's attach caused on the first thread; the
// Linux streams (maps, auxv, cmdline, environ, status, cpuinfo, and
// /proc/PID/stat, 0x4767000b); no thread names.
//
// Where lldb and gdb differ, the report is compared with each as far as
// it goes:
//   - lldb 15 shows a tail call frame ([artificial]) only where it can
//     prove it (___pthread_join); gdb shows one more
//     (__GI___futex_abstimed_wait_cancelable64) and so does the report.
//     The tail call frames lldb shows must be the report's, at the same pc.
//   - lldb prints an inlined function's frame under its containing
//     function's name and gives the outer frames of an inline chain the
//     address where the inlined code begins: consecutive lldb frames in
//     the same function of the same module are one machine frame, at the
//     first one's pc.
//
// lldb invents no frame by stack scanning in these dumps: its frames are
// gdb's.
func TestLLDBMinidump(t *testing.T) {
	for _, tr := range lldbDumpFixtures(t) {
		t.Run(tr.Name, func(t *testing.T) { checkLLDBMinidump(t, tr) })
	}
	t.Run("live", func(t *testing.T) {
		for _, tool := range []string{"lldb-15", "gdb", "gcc", "g++", "python3"} {
			if _, err := exec.LookPath(tool); err != nil {
				t.Skipf("%s is not installed (Debian: lldb-15, gdb, gcc, g++, python3): lldb's minidumps are not captured live", tool)
			}
		}
		if scope, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil && strings.TrimSpace(string(scope)) != "0" && os.Geteuid() != 0 {
			t.Skip("kernel.yama.ptrace_scope is not 0 and this is not root: lldb and gdb cannot attach to the test's programs")
		}
		out := t.TempDir()
		cmd := exec.Command("python3", filepath.Join(testdataDir, "gen", "minidumps", "gen.py"), "--live", out)
		log, err := cmd.CombinedOutput()
		require.NoError(t, err, "gen.py --live: %s", log)
		for _, tr := range loadLLDBDumpTruth(t, out) {
			tr.live = true
			t.Run(tr.Name, func(t *testing.T) { checkLLDBMinidump(t, tr) })
		}
	})
}

func lldbDumpFixtures(t *testing.T) []*lldbDumpTruth {
	t.Helper()
	require.NoError(t, testfiles.Unpack(testdataDir))
	return loadLLDBDumpTruth(t, filepath.Join(testdataDir, "minidumps", "x86_64"))
}

func loadLLDBDumpTruth(t testing.TB, dir string) []*lldbDumpTruth {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	require.NoError(t, err)
	big, err := filepath.Glob(filepath.Join(dir, "*.json.zst"))
	require.NoError(t, err)
	paths = append(paths, big...)
	require.NotEmpty(t, paths, "no minidump truth files in %s", dir)
	var out []*lldbDumpTruth
	for _, p := range paths {
		data := readMaybeZstd(t, p)
		tr := &lldbDumpTruth{}
		require.NoError(t, json.Unmarshal(data, tr), p)
		out = append(out, tr)
	}
	return out
}

// readMaybeZstd reads the file at path, decompressing a .zst file.
func readMaybeZstd(t testing.TB, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	if !strings.HasSuffix(path, ".zst") {
		data, err := io.ReadAll(f)
		require.NoError(t, err)
		return data
	}
	zr, err := zstd.NewReader(f)
	require.NoError(t, err)
	defer zr.Close()
	data, err := io.ReadAll(zr)
	require.NoError(t, err)
	return data
}

// lldbDump returns lldb's minidump: a live run's as written, a committed
// one decompressed with its elided ranges put back from the committed
// files and checked against lldb's SHA-256.
func lldbDump(t *testing.T, tr *lldbDumpTruth) string {
	t.Helper()
	if tr.live {
		return tr.Dump
	}
	return restoreLLDBDump(t, tr, t.TempDir())
}

// restoreLLDBDump writes a committed minidump, its elided ranges put
// back, into dir.
func restoreLLDBDump(t testing.TB, tr *lldbDumpTruth, dir string) string {
	t.Helper()
	data := readMaybeZstd(t, filepath.Join(testdataDir, tr.Dump))
	for _, e := range tr.Elided {
		obj, err := os.ReadFile(filepath.Join(testdataDir, tr.Files[e.Path]))
		require.NoError(t, err)
		require.LessOrEqual(t, e.FileOffset+e.Size, int64(len(obj)), "elided range of %s", e.Path)
		copy(data[e.Offset:e.Offset+e.Size], obj[e.FileOffset:])
	}
	sum := sha256.Sum256(data)
	require.Equal(t, tr.SHA256, hex.EncodeToString(sum[:]), "the restored minidump is lldb's")
	path := filepath.Join(dir, tr.Name+".dmp")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

// lldbDumpSymfs lays out the committed files at their recorded paths and,
// where this machine has them, the system libraries' debug files by
// build-id (gdb and lldb read them). A live run uses the machine's own
// files: no symfs.
func lldbDumpSymfs(t *testing.T, tr *lldbDumpTruth, d *minidump.Dump) string {
	t.Helper()
	if tr.live {
		return ""
	}
	return layoutSymfs(t, tr, d, t.TempDir())
}

func layoutSymfs(t testing.TB, tr *lldbDumpTruth, d *minidump.Dump, dir string) string {
	t.Helper()
	for rec, rel := range tr.Files {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(rec)), 0o755))
		data, err := os.ReadFile(filepath.Join(testdataDir, rel))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, rec), data, 0o644))
	}
	for _, m := range d.Modules {
		id := hex.EncodeToString(m.BuildID)
		if len(id) < 3 {
			continue
		}
		dbg := filepath.Join("usr", "lib", "debug", ".build-id", id[:2], id[2:]+".debug")
		if data, err := os.ReadFile(filepath.Join("/", dbg)); err == nil {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(dbg)), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, dbg), data, 0o644))
		}
	}
	return dir
}

var gdbRegDWARF = map[string]int{"rax": 0, "rdx": 1, "rcx": 2, "rbx": 3, "rsi": 4, "rdi": 5, "rbp": 6, "rsp": 7,
	"r8": 8, "r9": 9, "r10": 10, "r11": 11, "r12": 12, "r13": 13, "r14": 14, "r15": 15, "rip": arch.AMD64_RIP}

var lldbFrameLine = regexp.MustCompile("^\\*?\\s*frame #\\d+: 0x[0-9a-f]+ [^`]*`(.*?)( \\[artificial\\])?$")

// lldbFunction reads a line of lldb's bt: the function a frame is in (for
// an inlined function's frame, the function it is inlined in: lldb prints
// "outer [inlined] inner" or only the outer function), without lldb's
// argument values, pc offset and line, and whether lldb marked the frame
// [artificial] (a tail call frame).
func lldbFunction(line string) (name string, artificial bool) {
	m := lldbFrameLine.FindStringSubmatch(line)
	if m == nil {
		return "", false
	}
	name, _, _ = strings.Cut(m[1], " [inlined] ")
	name = lldbLine.ReplaceAllString(name, "")
	name = lldbOffset.ReplaceAllString(name, "")
	return withoutParams(name), m[2] != ""
}

var (
	lldbLine   = regexp.MustCompile(` at [^ ]+:\d+(:\d+)?$`)
	lldbOffset = regexp.MustCompile(` \+ \d+$`)
)

func checkLLDBMinidump(t *testing.T, tr *lldbDumpTruth) {
	path := lldbDump(t, tr)
	d, err := minidump.Open(path, nil)
	require.NoError(t, err)
	defer d.Close()

	// What lldb 15 wrote (the test's doc comment).
	require.Len(t, d.Threads, len(tr.GDB.Threads))
	for _, th := range d.Threads {
		assert.Equal(t, uint64(0x100007), th.ContextFlags, "tid %d: lldb's context flags", th.ID)
		assert.Equal(t, uint64(0xffffffff), th.PState, "tid %d: lldb 15 writes eflags as all ones", th.ID)
	}
	require.NotNil(t, d.Exception)
	assert.Equal(t, uint32(19), d.Exception.Code, "lldb's exception stream: the SIGSTOP of its attach")

	// The same registers as gdb's core of the same stop.
	byTid := map[uint32]*minidump.Thread{}
	for i := range d.Threads {
		byTid[d.Threads[i].ID] = &d.Threads[i]
	}
	for _, g := range tr.GDB.Threads {
		th := byTid[uint32(g.LWP)]
		require.NotNil(t, th, "gdb's LWP %d is not in lldb's minidump", g.LWP)
		for name, r := range gdbRegDWARF {
			v, _ := th.Regs.Get(r)
			assert.Equal(t, hexAddr(t, g.Regs[name]), v, "LWP %d: %s, gdb's core and lldb's minidump", g.LWP, name)
		}
	}

	symfs := lldbDumpSymfs(t, tr, d)
	opts := CoreOptions{Options: Options{SymFS: symfs, Kallsyms: "-", BuildIDDir: t.TempDir()}}
	js, sum := coreReport(t, path, "json", opts)
	if !tr.live {
		// The minidump holds no memory of the vdso and the symfs no copy
		// of it: the report says so, and no thread is in it.
		for obj, why := range sum.Missing {
			assert.Equal(t, "[vdso]", obj, "every object but the vdso is in the symfs: %s", why)
			assert.Contains(t, why, "not in the minidump: "+path+" holds no memory at", "[vdso]")
		}
		refusesOtherLibc(t, tr, d, path)
	}
	got := testprog.JSONLines[coreSample](t, js)
	require.Len(t, got, len(tr.LLDB.Threads))
	samples := map[int]*coreSample{}
	for i := range got {
		samples[got[i].Tid] = &got[i]
	}
	for _, g := range tr.GDB.Threads {
		s := samples[g.LWP]
		require.NotNil(t, s, "LWP %d is not in the report", g.LWP)
		assert.Equal(t, "outermost", str(s.Stop), "LWP %d: %s", g.LWP, str(s.StopErr))
		compareGDB(t, g.LWP, g.Frames, s)
	}
	for _, l := range tr.LLDB.Threads {
		s := samples[l.TID]
		require.NotNil(t, s, "lldb's tid %d is not in the report", l.TID)
		type group struct {
			pc, module, name string
			artificial       bool
		}
		var want []group
		for _, f := range l.Frames {
			g := group{pc: f.PC, module: f.Module}
			g.name, g.artificial = lldbFunction(f.Line)
			if n := len(want); n > 0 && !g.artificial && !want[n-1].artificial && want[n-1].module == g.module && want[n-1].name == g.name {
				continue // the rest of an inline chain
			}
			want = append(want, g)
		}
		var pcs, tails []string
		var names [][]string
		var chain []string
		for _, f := range s.Frames {
			chain = append(chain, str(f.Symbol))
			switch {
			case f.Inlined:
				continue
			case f.How == "tailcall":
				tails = append(tails, f.PC+" "+strings.TrimLeft(str(f.Symbol), "_"))
			default:
				pcs = append(pcs, f.PC)
				names = append(names, chain)
			}
			chain = nil
		}
		var wantPCs []string
		for _, g := range want {
			if g.artificial {
				assert.Contains(t, tails, "0x"+strings.TrimLeft(strings.TrimPrefix(g.pc, "0x"), "0")+" "+strings.TrimLeft(g.name, "_"),
					"tid %d: lldb's tail call frame %s %s", l.TID, g.pc, g.name)
				continue
			}
			wantPCs = append(wantPCs, g.pc)
		}
		assert.Equal(t, dedup(wantPCs), dedup(pcs), "tid %d: machine frames against lldb's bt all", l.TID)
		k := 0
		for _, g := range want {
			if g.artificial || k >= len(names) {
				continue
			}
			assert.Contains(t, unaliased(names[k]), strings.TrimLeft(g.name, "_"), "tid %d frame %d (%s)", l.TID, k, g.pc)
			k++
		}
	}
}

// compareGDB compares a thread of the report with gdb's backtrace of it:
// the machine frames' and tail call frames' pcs, and each one's function.
func compareGDB(t *testing.T, lwp int, frames []coretruth.GDBFrame, s *coreSample) {
	t.Helper()
	var want []string
	var wantNames []string
	for _, f := range frames {
		if f.Kind != "inline" && f.PC != "" {
			want = append(want, f.PC)
			wantNames = append(wantNames, f.Function)
		}
	}
	var pcs []string
	var names [][]string
	var chain []string
	for _, f := range s.Frames {
		chain = append(chain, str(f.Symbol))
		if f.Inlined {
			continue
		}
		pcs = append(pcs, f.PC)
		names = append(names, chain)
		chain = nil
	}
	assert.Equal(t, dedup(want), dedup(pcs), "LWP %d: pcs against gdb", lwp)
	for i, n := range wantNames {
		if i < len(names) && n != "" {
			assert.Contains(t, unaliased(names[i]), strings.TrimLeft(withoutParams(n), "_"), "LWP %d frame %d", lwp, i)
		}
	}
}

// refusesOtherLibc reports the minidump with another file in place of
// glibc's libc.so.6 at the path LinuxMaps names (ld.so's bytes): its
// build-id is not the one lldb's module list gives for the libc the
// module list names by another path (/lib/... where the maps say
// /usr/lib/...), and the report must refuse it, not unwind with it.
func refusesOtherLibc(t *testing.T, tr *lldbDumpTruth, d *minidump.Dump, dump string) {
	t.Helper()
	const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	require.Contains(t, tr.Files, libc)
	other, err := os.ReadFile(filepath.Join(testdataDir, "objects", "x86_64", "ld-linux-x86-64.so.2"))
	require.NoError(t, err)
	dir := t.TempDir()
	for rec, rel := range tr.Files {
		data, err := os.ReadFile(filepath.Join(testdataDir, rel))
		require.NoError(t, err)
		if strings.HasSuffix(rec, "/libc.so.6") {
			data = other
		}
		require.NoError(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(rec)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, rec), data, 0o644))
	}
	_, sum := coreReport(t, dump, "json", CoreOptions{Options: Options{SymFS: dir, Kallsyms: "-", BuildIDDir: t.TempDir()}})
	var id string
	for _, m := range d.Modules {
		if strings.HasSuffix(m.Name, "/libc.so.6") {
			id = hex.EncodeToString(m.BuildID)
		}
	}
	require.NotEmpty(t, id, "lldb's module list has libc.so.6's build-id")
	assert.Contains(t, sum.Missing[libc], id, "a libc of another build-id is refused, naming the minidump's")
}

// TestLLDBReadsMemory64List checks the reader's 64-bit memory list
// against lldb 15's reading of one. No writer on this machine makes one
// (lldb 15 writes minidumps of style stack only, with a 32-bit memory
// list): the test moves the memory list of lldb's c_threads minidump into
// a Memory64List (MINIDUMP_MEMORY64_LIST: a 64-bit count and base RVA,
// then address and size per range, the bytes one after another from the
// base), in place of the memory list's directory entry. The reader must
// find the same ranges with the same bytes as in the memory list, and lldb
// must read the same words at each thread's stack pointer and in glibc's
// text from both files, and unwind both alike.
func TestLLDBReadsMemory64List(t *testing.T) {
	var tr *lldbDumpTruth
	for _, x := range lldbDumpFixtures(t) {
		if x.Name == "c_threads" {
			tr = x
		}
	}
	require.NotNil(t, tr)
	orig := lldbDump(t, tr)
	data, err := os.ReadFile(orig)
	require.NoError(t, err)
	d32, err := minidump.Parse(data, orig)
	require.NoError(t, err)

	// The memory list's ranges, moved into a Memory64List at the end.
	var list *minidump.Stream
	dirRVA := le32(data[12:])
	for i := range d32.Streams {
		if d32.Streams[i].Type == minidump.StreamMemoryList {
			list = &d32.Streams[i]
			dirRVA += uint32(i) * 12
		}
	}
	require.NotNil(t, list)
	n := int(le32(data[list.Offset:]))
	conv := append([]byte(nil), data...)
	for len(conv)%8 != 0 {
		conv = append(conv, 0)
	}
	at := len(conv)
	size := 16 + 16*n
	base := uint64(at + size)
	conv = binary.LittleEndian.AppendUint64(conv, uint64(n))
	conv = binary.LittleEndian.AppendUint64(conv, base)
	var blob []byte
	want := map[uint64][]byte{}
	for i := 0; i < n; i++ {
		e := data[int(list.Offset)+4+16*i:]
		addr, sz, rva := binary.LittleEndian.Uint64(e), le32(e[8:]), le32(e[12:])
		conv = binary.LittleEndian.AppendUint64(conv, addr)
		conv = binary.LittleEndian.AppendUint64(conv, uint64(sz))
		blob = append(blob, data[rva:rva+sz]...)
		want[addr] = data[rva : rva+sz]
	}
	conv = append(conv, blob...)
	binary.LittleEndian.PutUint32(conv[dirRVA:], minidump.StreamMemory64List)
	binary.LittleEndian.PutUint32(conv[dirRVA+4:], uint32(size))
	binary.LittleEndian.PutUint32(conv[dirRVA+8:], uint32(at))
	conv64 := filepath.Join(t.TempDir(), "c_threads64.dmp")
	require.NoError(t, os.WriteFile(conv64, conv, 0o600))

	d64, err := minidump.Parse(conv, conv64)
	require.NoError(t, err)
	assert.Empty(t, d64.Warnings)
	got := map[uint64][]byte{}
	for _, r := range d64.Memory {
		got[r.Addr] = r.Data
		assert.GreaterOrEqual(t, r.Offset, int64(base), "range at %#x comes from the 64-bit list", r.Addr)
	}
	require.Equal(t, len(want), len(got))
	for a, b := range want {
		assert.True(t, bytes.Equal(b, got[a]), "range at %#x", a)
	}

	lldb, err := exec.LookPath("lldb-15")
	if err != nil {
		t.Skip("lldb-15 is not installed (Debian package lldb-15): lldb's reading of the 64-bit memory list is not compared")
	}
	cmds := []string{}
	for _, th := range d32.Threads {
		sp, _ := th.Regs.Get(arch.AMD64_RSP)
		cmds = append(cmds, "-o", fmt.Sprintf("memory read --format x --size 8 --count 4 %#x", sp))
	}
	for a := range want {
		cmds = append(cmds, "-o", fmt.Sprintf("memory read --format x --size 8 --count 2 %#x", a+64))
	}
	cmds = append(cmds, "-o", "bt all")
	read := func(path string) string {
		ctx, cancel := context.WithTimeout(context.Background(), testprog.Timeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, lldb, append([]string{"--batch", "-o", "target create --core " + path}, cmds...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		s := string(out)
		s = s[strings.Index(s, "(lldb) memory read"):]
		assert.NotContains(t, s, "error:", "lldb reads every address from %s", path)
		return s
	}
	assert.Equal(t, read(orig), read(conv64), "lldb reads the same memory and stacks from the 64-bit memory list")
}

func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

// BenchmarkLLDBMinidump64 reports lldb 15's minidump of 65 threads
// (threads64: 64 blocked at the end of 8 calls of their own; objects from
// a symfs, JSON to memory) after a first report that fills the object
// caches. scripts/bench-minidump.sh times the ustack command against
// lldb's bt all of the same kind of minidump.
func BenchmarkLLDBMinidump64(b *testing.B) {
	var tr *lldbDumpTruth
	require.NoError(b, testfiles.Unpack(testdataDir))
	for _, x := range loadLLDBDumpTruth(b, filepath.Join(testdataDir, "minidumps", "x86_64")) {
		if x.Name == "threads64" {
			tr = x
		}
	}
	require.NotNil(b, tr)
	path := restoreLLDBDump(b, tr, b.TempDir())
	d, err := minidump.Open(path, nil)
	require.NoError(b, err)
	defer d.Close()
	opts := CoreOptions{Options: Options{SymFS: layoutSymfs(b, tr, d, b.TempDir()), BuildIDDir: b.TempDir()}}
	c, err := OpenCore(path, opts)
	require.NoError(b, err)
	defer c.Close()
	var buf bytes.Buffer
	threads := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		buf.Reset()
		w := NewJSONWriter(&buf, false)
		sum, err := RunCore(c, opts, w.Write)
		if err != nil {
			b.Fatal(err)
		}
		threads += sum.Samples
		w.Flush()
	}
	b.ReportMetric(float64(threads)/b.Elapsed().Seconds(), "threads/s")
}
