package coredump_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ulikunitz/xz"

	"github.com/ustack/ustack/coredump"
	"github.com/ustack/ustack/unwinder"
)

// rawCore returns the decompressed bytes of a fixture's core.
func rawCore(t testing.TB, tr *truth) []byte {
	t.Helper()
	f, err := os.Open(tr.corePath())
	require.NoError(t, err)
	defer f.Close()
	d, err := zstd.NewReader(f)
	require.NoError(t, err)
	defer d.Close()
	data, err := io.ReadAll(d)
	require.NoError(t, err)
	return data
}

// summary is what a reader of the core sees, for comparing two readings.
type summary struct {
	Threads  []coredump.Thread
	Signal   *coredump.Siginfo
	Process  coredump.Process
	Auxv     []coredump.AuxvEntry
	Mappings []coredump.Mapping
	Objects  []coredump.Object
	Segments []coredump.Segment
	Words    []uint64
}

func summarize(t testing.TB, c *coredump.Core, tr *truth) summary {
	s := summary{Threads: c.Threads, Signal: c.Signal, Process: c.Process, Auxv: c.Auxv,
		Mappings: c.Mappings, Objects: c.Objects(), Segments: c.Memory().Segments()}
	for _, w := range tr.GDB.Memory {
		v, _ := c.Memory().ReadUint64(hex(t, w.Addr))
		s.Words = append(s.Words, v)
	}
	for i := range s.Threads {
		s.Threads[i].NoteOffset = 0
	}
	return s
}

// TestCompressedCopiesGiveIdenticalResults: the raw core and its zstd, xz
// and lz4 copies read the same.
func TestCompressedCopiesGiveIdenticalResults(t *testing.T) {
	for _, tr := range fixtures(t) {
		t.Run(tr.Arch+"/"+tr.Name, func(t *testing.T) {
			raw := rawCore(t, tr)
			dir := t.TempDir()
			write := func(name string, enc func(io.Writer) io.WriteCloser) string {
				p := filepath.Join(dir, name)
				f, err := os.Create(p)
				require.NoError(t, err)
				w := enc(f)
				_, err = w.Write(raw)
				require.NoError(t, err)
				require.NoError(t, w.Close())
				require.NoError(t, f.Close())
				return p
			}
			paths := map[string]string{
				"raw":  write("core", func(w io.Writer) io.WriteCloser { return nopCloser{w} }),
				"zstd": tr.corePath(),
				"xz": write("core.xz", func(w io.Writer) io.WriteCloser {
					x, err := xz.NewWriter(w)
					require.NoError(t, err)
					return x
				}),
				"lz4": write("core.lz4", func(w io.Writer) io.WriteCloser { return lz4.NewWriter(w) }),
			}
			kinds := []string{"raw", "zstd", "xz", "lz4"}
			// Ubuntu's apport reports, as its problem_report writes
			// them (testdata/gen/apport_write.py), gzip and legacy zlib.
			if py, err := exec.LookPath("python3"); err == nil {
				for kind, args := range map[string][]string{"apport": nil, "apport-legacy": {"--legacy"}} {
					p := filepath.Join(dir, kind+".crash")
					cmd := exec.Command(py, append([]string{filepath.Join("..", "testdata", "gen", "apport_write.py"), paths["raw"], p}, args...)...)
					out, err := cmd.CombinedOutput()
					require.NoError(t, err, "%s", out)
					paths[kind] = p
					kinds = append(kinds, kind)
				}
			}
			var want summary
			for _, kind := range kinds {
				head := make([]byte, 64)
				f, err := os.Open(paths[kind])
				require.NoError(t, err)
				_, err = io.ReadFull(f, head)
				f.Close()
				require.NoError(t, err)
				comp, ok := coredump.Sniff(head)
				require.True(t, ok, kind)
				if kind != "raw" {
					assert.Equal(t, strings.TrimSuffix(kind, "-legacy"), string(comp))
				}
				c, err := coredump.Open(paths[kind], tr.options())
				require.NoError(t, err, kind)
				got := summarize(t, c, tr)
				c.Close()
				if kind == "raw" {
					want = got
					continue
				}
				assert.Equal(t, want, got, "%s copy differs from the raw core", kind)
			}
		})
	}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// TestDecompressBound: a core larger than MaxDecompressed is refused with
// an error naming the file and the bound.
func TestDecompressBound(t *testing.T) {
	tr := fixtures(t)[0]
	_, err := coredump.Open(tr.corePath(), &coredump.Options{MaxDecompressed: 4096})
	require.Error(t, err)
	assert.Contains(t, err.Error(), tr.corePath())
	assert.Contains(t, err.Error(), "4096")
}

// TestTruncatedCores: a core cut anywhere gives every thread whose
// NT_PRSTATUS is wholly before the cut, with the same registers, and reads
// of memory past the cut fail with ErrTruncated; never a panic.
func TestTruncatedCores(t *testing.T) {
	for _, tr := range fixtures(t) {
		if tr.Name != "threads" && tr.Name != "crash_O2" {
			continue
		}
		t.Run(tr.Arch+"/"+tr.Name, func(t *testing.T) {
			raw := rawCore(t, tr)
			full, err := coredump.Parse(raw, "full", &coredump.Options{NoMappedFiles: true})
			require.NoError(t, err)
			require.Empty(t, full.Warnings)
			size := 336 // x86_64 struct elf_prstatus
			if full.Arch.String() == "aarch64" {
				size = 392
			}
			prstatusEnd := func(th coredump.Thread) int {
				return int(th.NoteOffset) + 12 + 8 + size // header, "CORE\0" padded, elf_prstatus
			}
			cuts := []int{0, 3, 20, 63, 64, 100, 0x200}
			for _, th := range full.Threads {
				e := prstatusEnd(th)
				cuts = append(cuts, e-1, e, e+1)
			}
			for _, s := range full.Memory().Segments() {
				if s.Present > 0 {
					cuts = append(cuts, int(s.Offset)+int(s.Present)/2)
				}
			}
			cuts = append(cuts, len(raw)-1)
			for _, cut := range cuts {
				data := raw[:cut]
				c, err := coredump.Parse(data, "cut", &coredump.Options{NoMappedFiles: true})
				if cut < 64+56 {
					require.Error(t, err, "cut at %d", cut)
					assert.Contains(t, err.Error(), "cut")
					continue
				}
				var want []coredump.Thread
				for _, th := range full.Threads {
					if prstatusEnd(th) <= cut {
						want = append(want, th)
					}
				}
				if len(want) == 0 {
					require.Error(t, err, "cut at %#x", cut)
					assert.Contains(t, err.Error(), "no thread")
					continue
				}
				require.NoError(t, err, "cut at %#x", cut)
				require.Len(t, c.Threads, len(want), "cut at %#x", cut)
				if cut < len(raw) {
					assert.NotEmpty(t, c.Warnings, "cut at %#x gives no warning", cut)
				}
				for i := range want {
					// Thread order: signalled first, the same partition.
					assert.Equal(t, want[i].Regs, findThread(c, want[i].TID).Regs, "cut at %#x", cut)
				}
				for _, s := range c.Memory().Segments() {
					if s.Present < s.Dumped {
						var b [1]byte
						_, err := c.Memory().ReadAt(b[:], s.Addr+s.Present)
						require.ErrorIs(t, err, coredump.ErrTruncated, "cut at %#x", cut)
						assert.Contains(t, err.Error(), "cut")
					}
				}
			}
		})
	}
}

func findThread(c *coredump.Core, tid int) *coredump.Thread {
	for i := range c.Threads {
		if c.Threads[i].TID == tid {
			return &c.Threads[i]
		}
	}
	return &coredump.Thread{}
}

// TestZeroedCores: zeroed memory leaves every thread readable; a zeroed ELF
// header is ErrNotCore; zeroed notes lose those notes only.
func TestZeroedCores(t *testing.T) {
	var tr *truth
	for _, x := range fixtures(t) {
		if x.Name == "threads" {
			tr = x
		}
	}
	require.NotNil(t, tr)
	raw := rawCore(t, tr)
	full, err := coredump.Parse(raw, "full", nil)
	require.NoError(t, err)

	data := bytes.Clone(raw)
	for _, s := range full.Memory().Segments() {
		clear(data[s.Offset : s.Offset+s.Present])
	}
	c, err := coredump.Parse(data, "zeroed-memory", &coredump.Options{NoMappedFiles: true})
	require.NoError(t, err)
	assert.Equal(t, len(full.Threads), len(c.Threads))
	sp, _ := c.Threads[0].Regs.Get(c.Arch.SP())
	v, st := c.Memory().ReadUint64(sp)
	ok := st == unwinder.MemOK
	assert.True(t, ok)
	assert.Zero(t, v)
	for _, o := range c.Objects() {
		assert.Equal(t, "[vdso]", o.Path, "only the vdso (found by AT_SYSINFO_EHDR) is listed without ELF headers")
		assert.Error(t, o.Err)
	}

	data = bytes.Clone(raw)
	clear(data[:64])
	_, err = coredump.Parse(data, "zeroed-header", nil)
	assert.ErrorIs(t, err, coredump.ErrNotCore)

	// Zero the second thread's NT_PRSTATUS descriptor: its note is still
	// framed (namesz and descsz are in its header), so the others survive.
	data = bytes.Clone(raw)
	second := full.Threads[1]
	clear(data[second.NoteOffset+20 : second.NoteOffset+20+336])
	c, err = coredump.Parse(data, "zeroed-note", nil)
	require.NoError(t, err)
	assert.Len(t, c.Threads, len(full.Threads))
	for _, th := range full.Threads {
		if th.TID != second.TID {
			assert.Equal(t, th.Regs, findThread(c, th.TID).Regs)
		}
	}
}

// TestBitFlippedCores: random bit flips never crash or hang the reader, and
// a flip outside the notes and headers leaves every thread intact.
func TestBitFlippedCores(t *testing.T) {
	tr := fixtures(t)[0]
	raw := rawCore(t, tr)
	full, err := coredump.Parse(raw, "full", nil)
	require.NoError(t, err)
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 300; i++ {
		data := bytes.Clone(raw)
		for k := 0; k < 1+rng.Intn(8); k++ {
			var pos int
			if rng.Intn(2) == 0 {
				pos = rng.Intn(0x2000) // headers and notes
			} else {
				pos = rng.Intn(len(data))
			}
			data[pos] ^= 1 << rng.Intn(8)
		}
		c, err := coredump.Parse(data, "flipped", &coredump.Options{NoMappedFiles: true})
		if err != nil {
			continue
		}
		exercise(c)
	}
	// Flip every byte of the first stack word: memory changes, threads don't.
	sp, _ := full.Threads[0].Regs.Get(full.Arch.SP())
	data := bytes.Clone(raw)
	for _, s := range full.Memory().Segments() {
		if sp >= s.Addr && sp < s.Addr+s.Present {
			data[s.Offset+sp-s.Addr] ^= 0xff
		}
	}
	c, err := coredump.Parse(data, "flipped-stack", nil)
	require.NoError(t, err)
	assert.Equal(t, full.Threads, c.Threads)
}

// exercise calls everything a user of a Core would.
func exercise(c *coredump.Core) {
	mem := c.Memory()
	var buf [64]byte
	for _, th := range c.Threads {
		sp, _ := th.Regs.Get(c.Arch.SP())
		pc, _ := th.Regs.Get(c.Arch.PC())
		mem.ReadUint64(sp)
		mem.ReadUint64(pc)
		mem.ReadAt(buf[:], sp-8)
	}
	for _, s := range mem.Segments() {
		mem.ReadAt(buf[:], s.Addr+s.Size-8)
	}
	c.ExecFn()
	c.VDSOImage()
	_ = c.Objects()
	if c.Signal != nil {
		_ = c.Signal.Name()
		_ = coredump.CodeName(c.Signal.Signo, c.Signal.Code)
	}
}

// TestDamagedCompressedCore: a zstd core cut short is read as far as its
// data goes, as the plain core cut where decompression stopped is, with a
// warning naming the file, the format and that offset. Before, it was
// refused whole: a core whose compressed copy lost its last 10 bytes gave
// no thread at all, though every byte of the core had come out.
func TestDamagedCompressedCore(t *testing.T) {
	tr := fixtures(t)[0]
	data, err := os.ReadFile(tr.corePath())
	require.NoError(t, err)
	dir := t.TempDir()
	p := filepath.Join(dir, "core.zst")
	cut := data[:len(data)/2]

	// What a decoder gets out of the cut data before it fails, as a
	// plain core (at the same path: messages name it).
	d, err := zstd.NewReader(bytes.NewReader(cut))
	require.NoError(t, err)
	got, err := io.ReadAll(d)
	d.Close()
	require.Error(t, err, "the cut stream decodes without error")
	require.NotEmpty(t, got, "nothing decodes from half the stream")
	require.NoError(t, os.WriteFile(p, got, 0o600))
	want, err := coredump.Open(p, nil)
	require.NoError(t, err)
	defer want.Close()
	wantSum, wantWarnings := summarize(t, want, tr), len(want.Warnings)

	// A new file at the path: the one want maps stays as it is.
	require.NoError(t, os.Remove(p))
	require.NoError(t, os.WriteFile(p, cut, 0o600))
	c, err := coredump.Open(p, nil)
	require.NoError(t, err)
	defer c.Close()
	require.NotEmpty(t, c.Warnings)
	w := c.Warnings[len(c.Warnings)-1].Error()
	assert.Contains(t, w, p)
	assert.Contains(t, w, "zstd")
	assert.Contains(t, w, fmt.Sprintf("decompressed offset %#x", len(got)))
	assert.NotEmpty(t, c.Threads)
	assert.Equal(t, wantSum, summarize(t, c, tr))
	assert.Equal(t, wantWarnings+1, len(c.Warnings), "%v", c.Warnings)

	// Nothing decodes from the first bytes alone: an error.
	require.NoError(t, os.WriteFile(p, data[:16], 0o600))
	_, err = coredump.Open(p, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), p)
	assert.Contains(t, err.Error(), "zstd")
}

// TestOpenPipe: a core read from a pipe (ustack report -i - < core.zst),
// compressed or not, reads as the file does.
func TestOpenPipe(t *testing.T) {
	tr := fixtures(t)[0]
	want := tr.open(t)
	zst, err := os.ReadFile(tr.corePath())
	require.NoError(t, err)
	for name, data := range map[string][]byte{"zstd": zst, "raw": rawCore(t, tr)} {
		r, w, err := os.Pipe()
		require.NoError(t, err)
		go func() {
			w.Write(data)
			w.Close()
		}()
		c, err := coredump.Open(fmt.Sprintf("/proc/self/fd/%d", r.Fd()), tr.options())
		require.NoError(t, err, name)
		assert.Equal(t, summarize(t, want, tr), summarize(t, c, tr), name)
		c.Close()
		r.Close()
	}
}

// TestApportReportErrors: an apport report without a core, or with a
// CoreDump whose base64 is damaged, gives an error naming the file and
// what is wrong.
func TestApportReportErrors(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"nocore.crash":  "ProblemType: Crash\nSignal: 11\nExecutablePath: /usr/bin/prog\n",
		"badb64.crash":  "ProblemType: Crash\nCoreDump: base64\n H4sICAAAAAAC/0NvcmVEdW1wAA==\n !!!not base64!!!\n",
		"notb64.crash":  "ProblemType: Crash\nCoreDump: some text\n",
		"cutgzip.crash": "ProblemType: Crash\nCoreDump: base64\n H4sI\n",
	} {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		_, err := coredump.Open(p, nil)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), p, name)
		want := map[string]string{"nocore.crash": "holds no CoreDump", "badb64.crash": "base64", "notb64.crash": "not base64-encoded",
			"cutgzip.crash": "gzip header cut short"}[name]
		assert.Contains(t, err.Error(), want, name)
	}
}

// TestDamagedSegmentSize: one PT_LOAD's p_memsz overwritten with a size
// of terabytes ran over every segment above it, which were then ignored
// as overlaps (the thread stacks among them, blamed on coredump_filter).
// Its dumped bytes end where they did: it is cut at the next segment, and
// the core reads as the intact one does, with one warning.
func TestDamagedSegmentSize(t *testing.T) {
	tr := fixtures(t)[0]
	raw := rawCore(t, tr)
	ef, err := elf.NewFile(bytes.NewReader(raw))
	require.NoError(t, err)
	var loads []int
	for i, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Filesz > 0 {
			loads = append(loads, i)
		}
	}
	require.Greater(t, len(loads), 4)
	k := loads[len(loads)/2]
	phoff := binary.LittleEndian.Uint64(raw[32:])
	damaged := bytes.Clone(raw)
	binary.LittleEndian.PutUint64(damaged[phoff+uint64(k)*56+40:], 0x650000001000)

	want, err := coredump.Parse(raw, "core", nil)
	require.NoError(t, err)
	got, err := coredump.Parse(damaged, "core", nil)
	require.NoError(t, err)
	require.Len(t, got.Warnings, len(want.Warnings)+1, "%v", got.Warnings)
	assert.Contains(t, got.Warnings[len(got.Warnings)-1].Error(), "claims 0x650000001000 bytes")
	assert.Equal(t, summarize(t, want, tr).Threads, summarize(t, got, tr).Threads)
	assert.Equal(t, summarize(t, want, tr).Words, summarize(t, got, tr).Words)
	assert.Equal(t, len(want.Memory().Segments()), len(got.Memory().Segments()))
}
