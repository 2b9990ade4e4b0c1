package perfdata

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
)

// zstdFiles are the committed perf record -z recordings (see
// testdata/gen.sh): a 2-page ring makes perf split records across
// COMPRESSED records.
var zstdFiles = []string{"zstd", "zstdpipe"}

var reCompressed = regexp.MustCompile(`# compressed : Zstd, level = (\d+), ratio = (\d+)`)

// TestCompressedTestdata reads the committed -z recordings and compares
// every decompressed record with perf script -D, and the header with perf
// report --header-only.
func TestCompressedTestdata(t *testing.T) {
	for _, name := range zstdFiles {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("testdata", name+".data")
			n, ns := compareWithDump(t, path, loadDump(t, name))
			require.NotZero(t, ns, "no samples")
			t.Logf("%s: %d records, %d samples match perf script -D", name, n, ns)
			hdr, err := os.ReadFile(filepath.Join("testdata", name+".header"))
			require.NoError(t, err)
			r, err := Open(path)
			require.NoError(t, err)
			defer r.Close()
			_, err = readAll(r)
			require.NoError(t, err)
			compareHeader(t, path, r.Session(), string(hdr))
			checkCompressionFeature(t, r.Session(), string(hdr))
			assert.Greater(t, splitRecords(t, path), 0, "the test file should have records split across COMPRESSED records")
		})
	}
}

func checkCompressionFeature(t *testing.T, s *Session, hdr string) {
	t.Helper()
	m := reCompressed.FindStringSubmatch(hdr)
	require.NotNil(t, m, "perf's header shows no compression")
	c := s.Features.Compression
	require.True(t, s.Features.Has(FeatCompressed))
	assert.Equal(t, CompZstd, c.Type)
	assert.Equal(t, m[1], fmt.Sprint(c.Level))
	assert.Equal(t, m[2], fmt.Sprint(c.Ratio))
	assert.NotZero(t, c.MmapLen)
}

// splitRecords counts the COMPRESSED records after which a decompressed
// record is incomplete.
func splitRecords(t *testing.T, path string) int {
	r, err := Open(path)
	require.NoError(t, err)
	defer r.Close()
	n := 0
	last := int64(-1)
	for {
		if _, err := r.Next(); err != nil {
			return n
		}
		if r.z == nil || r.z.chunkOff == last {
			continue
		}
		if p := r.z.pending(); len(p) > 0 && (len(p) < 8 || int(le.Uint16(p[6:])) > len(p)) {
			last = r.z.chunkOff
			n++
		}
	}
}

// outerRecords walks the records of a file-mode or pipe-mode perf.data
// without decoding them: offset and type of each.
func outerRecords(t *testing.T, data []byte) (offs []int64, types []RecordType) {
	off, end := int64(pipeHeaderSize), int64(len(data))
	if le.Uint64(data[8:]) == fileHeaderSize {
		off = int64(le.Uint64(data[40:]))
		end = off + int64(le.Uint64(data[48:]))
	}
	for off+8 <= end {
		size := int64(le.Uint16(data[off+6:]))
		require.GreaterOrEqual(t, size, int64(8))
		offs = append(offs, off)
		types = append(types, RecordType(le.Uint32(data[off:])))
		off += size
	}
	return offs, types
}

// samplesOf lists tid, time and ip of each sample in delivery order, the
// tid as perf prints it (a signed int: -1 for a sample no task owns).
func samplesOf(t *testing.T, r *Reader) []string {
	var out []string
	s := NewSorter(r, 0)
	for {
		rec, err := s.Next()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		if x, ok := rec.(*Sample); ok {
			out = append(out, fmt.Sprintf("%d %d.%09d %x", int32(x.Tid), x.Time/1e9, x.Time%1e9, x.IP))
		}
	}
}

// scriptSamples runs perf script -F tid,time,ip on path.
func scriptSamples(t *testing.T, path string) []string {
	out := testprog.Script(t, path, "--ns", "-G", "-F", "tid,time,ip")
	var s []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(strings.ReplaceAll(l, ":", ""))
		if len(f) == 3 {
			s = append(s, strings.Join(f, " "))
		}
	}
	return s
}

// TestLiveCompressed records with perf record -z on this machine, in file
// and pipe mode, with perf's default ring and a 2-page one (records split
// across COMPRESSED records), and system-wide, and checks every record against perf script
// -D and every sample's tid, time and ip against perf script.
func TestLiveCompressed(t *testing.T) {
	cases := []struct {
		name string
		pipe bool
		args []string
	}{
		{"file", false, nil},
		{"pipe", true, nil},
		{"file-small-ring", false, []string{"-m", "2"}},
		{"pipe-small-ring", true, []string{"-m", "2"}},
		// System-wide: perf synthesizes the maps of every process.
		{"system-wide", false, []string{"-a"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"-z", "-e", "cpu-clock", "-c", "100000", "--call-graph", "dwarf,4096"}, c.args...)
			workload := []string{"sh", "-c", busy}
			if c.name == "system-wide" {
				args = []string{"-z", "-a", "-e", "cpu-clock", "-c", "1000000"}
				workload = []string{"sleep", "0.2"}
			}
			p := record(t, c.pipe, append(append(args, "--"), workload...)...)
			s := checkLive(t, p)
			require.Equal(t, c.pipe, s.Pipe)
			want := scriptSamples(t, p)
			require.NotEmpty(t, want, "perf script printed no sample")
			r, err := Open(p)
			require.NoError(t, err)
			defer r.Close()
			got := samplesOf(t, r)
			assert.Equal(t, want, got, "tid time ip of each sample vs perf script")
			if c.pipe {
				// The same stream from a plain io.Reader (no seeking).
				data, err := os.ReadFile(p)
				require.NoError(t, err)
				r, err := NewReader(io.MultiReader(bytes.NewReader(data)))
				require.NoError(t, err)
				assert.Equal(t, want, samplesOf(t, r), "streamed")
			}
			t.Logf("%d samples, %d records split across COMPRESSED records", len(got), splitRecords(t, p))
		})
	}
}

// loadIntact reads a committed file and clones its records.
func loadIntact(t *testing.T, name string) ([]byte, []Record) {
	data, err := os.ReadFile(filepath.Join("testdata", name+".data"))
	require.NoError(t, err)
	full, err := NewFileReader(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	all, err := readAll(full)
	require.NoError(t, err)
	return data, all
}

// TestCompressedDamage corrupts the zstd data of one COMPRESSED record:
// the records decompressed before it come out intact, then an error naming
// that record's offset.
func TestCompressedDamage(t *testing.T) {
	for _, name := range zstdFiles {
		data, all := loadIntact(t, name)
		offs, types := outerRecords(t, data)
		var comp []int64
		for i, typ := range types {
			if typ == RecordCompressed {
				comp = append(comp, offs[i])
			}
		}
		require.Greater(t, len(comp), 4, name)
		errs := 0
		for _, victim := range comp[1:] {
			b := bytes.Clone(data)
			// Garble the middle of the zstd bytes.
			size := int64(le.Uint16(b[victim+6:]))
			for i := victim + 8 + size/3; i < victim+8+size/3+16 && i < victim+size; i++ {
				b[i] ^= 0x5a
			}
			r, err := NewFileReader(bytes.NewReader(b), int64(len(b)))
			require.NoError(t, err)
			got, err := readAll(r)
			var fe *FormatError
			if err == nil {
				// zstd blocks carry no checksum: garbage can decode. Then
				// it must still have stopped or decoded records of the
				// right structure; nothing more to assert.
				continue
			}
			errs++
			require.ErrorAs(t, err, &fe, "%s: victim %#x", name, victim)
			assert.GreaterOrEqual(t, fe.Offset, victim, "%s: error %v", name, err)
			// Every record before the damaged one is intact.
			for i, rec := range got {
				h, w := rec.Header(), all[i].Header()
				if w.Offset >= victim {
					break
				}
				require.Equal(t, *w, *h, "%s: record %d before the damage at %#x", name, i, victim)
			}
			before := 0
			for _, rec := range all {
				if rec.Header().Offset < victim {
					before++
				}
			}
			assert.GreaterOrEqual(t, len(got), before-1, "%s: damage at %#x: %d records, %d precede it (one may be split into it)", name, victim, len(got), before)
		}
		t.Logf("%s: %d of %d damaged COMPRESSED records reported", name, errs, len(comp)-1)
		assert.Greater(t, errs, len(comp)/2, "most damage must be detected")
	}
}

// TestCompressedTruncation cuts the -z recordings at many offsets: a
// prefix of the records, then an error naming an offset.
func TestCompressedTruncation(t *testing.T) {
	for _, name := range zstdFiles {
		data, all := loadIntact(t, name)
		offs, _ := outerRecords(t, data)
		bound := map[int64]bool{int64(len(data)): true}
		for _, o := range offs {
			bound[o] = true
		}
		for cut := 16; cut < len(data); cut += 1 + cut/211 {
			b := data[:cut]
			r, err := NewFileReader(bytes.NewReader(b), int64(len(b)))
			if err != nil {
				var fe *FormatError
				require.ErrorAs(t, err, &fe, "cut %d", cut)
				continue
			}
			got, err := readAll(r)
			require.LessOrEqual(t, len(got), len(all))
			for i, rec := range got {
				require.Equal(t, *all[i].Header(), *rec.Header(), "cut %d: record %d", cut, i)
			}
			if err == nil {
				require.True(t, r.Session().Pipe && bound[int64(cut)], "cut %d: no error after %d records", cut, len(got))
				continue
			}
			var fe *FormatError
			require.ErrorAs(t, err, &fe, "cut %d", cut)
			require.True(t, fe.Offset >= 0 && fe.Offset <= int64(cut), "cut %d: error offset %#x: %v", cut, fe.Offset, err)
		}
	}
}

// pipeStream builds pipe-mode perf.data: the header, a COMPRESSED feature
// record when mmapLen > 0, then the records given.
func pipeStream(mmapLen uint32, recs ...[]byte) []byte {
	var b []byte
	b = le.AppendUint64(b, magicLE)
	b = le.AppendUint64(b, pipeHeaderSize)
	if mmapLen > 0 {
		b = appendRecord(b, RecordHeaderFeature, func(p []byte) []byte {
			p = le.AppendUint64(p, uint64(FeatCompressed))
			for _, v := range []uint32{0, CompZstd, 1, 0, mmapLen} {
				p = le.AppendUint32(p, v)
			}
			return p
		})
	}
	for _, r := range recs {
		b = append(b, r...)
	}
	return b
}

func appendRecord(b []byte, typ RecordType, body func([]byte) []byte) []byte {
	start := len(b)
	b = le.AppendUint32(b, uint32(typ))
	b = le.AppendUint32(b, 0)
	b = body(b)
	le.PutUint16(b[start+6:], uint16(len(b)-start))
	return b
}

// compressedRecords compresses data as perf does (one stream, flushed at
// the end of each chunk of chunk bytes) into COMPRESSED records, or
// COMPRESSED2 records when v2 is set.
func compressedRecords(t *testing.T, data []byte, chunk int, v2 bool) [][]byte {
	var chunks [][]byte
	for len(data) > 0 {
		n := min(len(data), chunk)
		chunks = append(chunks, data[:n])
		data = data[n:]
	}
	return compressChunks(t, chunks, v2)
}

// compressChunks compresses each chunk into one or more records of one
// zstd stream, flushing after each.
func compressChunks(t *testing.T, chunks [][]byte, v2 bool) [][]byte {
	var zb bytes.Buffer
	w, err := zstd.NewWriter(&zb, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	require.NoError(t, err)
	var out [][]byte
	emit := func() {
		p := bytes.Clone(zb.Bytes())
		zb.Reset()
		for len(p) > 0 {
			n := min(len(p), 60000)
			typ := RecordCompressed
			if v2 {
				typ = RecordCompressed2
			}
			out = append(out, appendRecord(nil, typ, func(b []byte) []byte {
				if v2 {
					b = le.AppendUint64(b, uint64(n))
				}
				b = append(b, p[:n]...)
				if v2 {
					for len(b)%8 != 0 {
						b = append(b, 0)
					}
				}
				return b
			}))
			p = p[n:]
		}
	}
	for _, c := range chunks {
		_, err := w.Write(c)
		require.NoError(t, err)
		require.NoError(t, w.Flush())
		emit()
	}
	return out
}

// commRecords returns n COMM records (pid i, comm "tN") back to back.
func commRecords(n int) []byte {
	var b []byte
	for i := 0; i < n; i++ {
		b = appendRecord(b, RecordComm, func(p []byte) []byte {
			p = le.AppendUint32(p, uint32(i))
			p = le.AppendUint32(p, uint32(i))
			p = append(p, fmt.Sprintf("t%06d", i)...)
			return append(p, 0)
		})
	}
	return b
}

// TestCompressedSynthetic checks a stream made by the zstd encoder: chunks
// that split records anywhere (odd chunk sizes), both record versions, and
// FINISHED_ROUND records between the chunks delivered in file order.
func TestCompressedSynthetic(t *testing.T) {
	inner := commRecords(3000)
	for _, v2 := range []bool{false, true} {
		for _, chunk := range []int{7, 1000, 4093, len(inner)} {
			recs := compressedRecords(t, inner, chunk, v2)
			var all [][]byte
			for _, r := range recs {
				all = append(all, r, appendRecord(nil, RecordFinishedRound, func(b []byte) []byte { return b }))
			}
			data := pipeStream(1<<16, all...)
			r, err := NewReader(io.MultiReader(bytes.NewReader(data)))
			require.NoError(t, err)
			i, rounds := 0, 0
			for {
				rec, err := r.Next()
				if err == io.EOF {
					break
				}
				require.NoError(t, err, "v2 %v chunk %d", v2, chunk)
				switch x := rec.(type) {
				case *Comm:
					require.Equal(t, fmt.Sprintf("t%06d", i), x.Comm)
					require.EqualValues(t, i, x.Pid)
					i++
				case *Raw:
					if x.Type == RecordFinishedRound {
						rounds++
						// Each round follows the records its chunk completed:
						// the COMMs counted so far fill the chunks read.
						require.LessOrEqual(t, i*len(inner)/3000, rounds*chunk, "records ahead of their chunk")
					}
				}
			}
			require.Equal(t, 3000, i, "v2 %v chunk %d", v2, chunk)
		}
	}
}

// TestCompressedBomb checks that decompression is bounded per COMPRESSED
// record (by the feature's mmap_len) and in total (against the compressed
// input), with an error naming the record's offset, without the memory.
func TestCompressedBomb(t *testing.T) {
	round := appendRecord(nil, RecordFinishedRound, func(b []byte) []byte { return b })
	big := bytes.Repeat(round, 1<<20) // 8 MiB of records, compresses ~1000x
	t.Run("chunk", func(t *testing.T) {
		recs := compressedRecords(t, big, len(big), false)
		require.Len(t, recs, 1)
		data := pipeStream(1<<16, recs...)
		var err error
		alloc := allocated(func() {
			r, _ := NewReader(bytes.NewReader(data))
			_, err = readAll(r)
		})
		var fe *FormatError
		require.ErrorAs(t, err, &fe)
		assert.Contains(t, err.Error(), "decompresses to more than")
		assert.EqualValues(t, len(data)-len(recs[0]), fe.Offset)
		assert.Less(t, alloc, uint64(16<<20))
	})
	t.Run("total", func(t *testing.T) {
		// No feature: 16 MiB per record is allowed, the total is not.
		var chunks [][]byte
		for range 20 {
			chunks = append(chunks, big)
		}
		recs := compressChunks(t, chunks, false)
		data := pipeStream(0, recs...)
		require.Less(t, len(data), 200<<10)
		var err error
		alloc := allocated(func() {
			r, _ := NewReader(bytes.NewReader(data))
			for {
				if _, err = r.Next(); err != nil {
					break
				}
			}
		})
		var fe *FormatError
		require.ErrorAs(t, err, &fe)
		assert.Contains(t, err.Error(), "times the input")
		assert.Less(t, alloc, uint64(300<<20))
		assert.Greater(t, fe.Offset, int64(pipeHeaderSize))
	})
}

// TestCompressedNested rejects a COMPRESSED record inside compressed data.
func TestCompressedNested(t *testing.T) {
	innerRec := compressedRecords(t, commRecords(2), 100, false)[0]
	data := pipeStream(1<<16, compressedRecords(t, innerRec, 1000, false)...)
	r, err := NewReader(bytes.NewReader(data))
	require.NoError(t, err)
	_, err = readAll(r)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "inside the data of the COMPRESSED record")
	assert.True(t, errors.As(err, new(*FormatError)))
}

func FuzzZstdReader(f *testing.F) {
	seed(f, "zstd.data", 1024, 4096, 1<<20)
	f.Fuzz(func(t *testing.T, data []byte) {
		drain(t, func() (*Reader, error) { return NewFileReader(bytes.NewReader(data), int64(len(data))) })
	})
}

func FuzzZstdPipeReader(f *testing.F) {
	seed(f, "zstdpipe.data", 4096, 1<<20)
	f.Fuzz(func(t *testing.T, data []byte) {
		drain(t, func() (*Reader, error) { return NewReader(io.MultiReader(bytes.NewReader(data))) })
	})
}

// BenchmarkReadCompressed reads the committed -z recording: the cost of
// decompression and record decoding, per byte of perf.data.
func BenchmarkReadCompressed(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("testdata", "zstd.data"))
	require.NoError(b, err)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		r, err := NewFileReader(bytes.NewReader(data), int64(len(data)))
		require.NoError(b, err)
		for {
			if _, err := r.Next(); err != nil {
				break
			}
		}
	}
}

// TestCompressedAbandoned drops Readers in the middle of compressed data
// without Close: their decoders must not pile up.
func TestCompressedAbandoned(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "zstd.data"))
	require.NoError(t, err)
	before := runtime.NumGoroutine()
	for range 200 {
		r, err := NewFileReader(bytes.NewReader(data), int64(len(data)))
		require.NoError(t, err)
		for range 20 {
			_, err := r.Next()
			require.NoError(t, err)
		}
		require.NotNil(t, r.z, "20 records in, the zstd stream is open")
	}
	// Finalizers run on their own goroutine, later on a busy machine:
	// wait for them (ten seconds at most).
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
		if runtime.NumGoroutine() < before+20 {
			break
		}
	}
	assert.Less(t, runtime.NumGoroutine(), before+20, "decoder coroutines of dropped Readers are not released")
}
