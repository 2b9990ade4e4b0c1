package report

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/perfdata"
)

// TestMappedSamplesWithoutTime reports a mapped recording in which most
// samples have time 0 (delivered at once, not through the sorter) among
// samples with a time (whose stacks the sorter leaves in the mapping). A
// job that had held a sorted sample's stack, a slice of the read-only
// mapping, copied the next unsorted sample's stack into it: SIGSEGV, the
// process gone. The report must match the buffered reader's, sample for
// sample.
func TestMappedSamplesWithoutTime(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "perfdata", "testdata", "dwarf.data"))
	require.NoError(t, err)
	data := withSampleCopies(t, src, 20)
	path := filepath.Join(t.TempDir(), "timezero.data")
	require.NoError(t, os.WriteFile(path, data, 0o600))

	report := func(r *perfdata.Reader) []string {
		defer r.Close()
		var out []string
		var buf bytes.Buffer
		tw := NewTextWriter(&buf, 10, false)
		sum, err := Run(r, Options{Kallsyms: "-", Jobs: 2, SectionCache: testSections(t)}, func(s *Sample) error {
			buf.Reset()
			require.NoError(t, tw.Write(s))
			tw.Flush()
			out = append(out, buf.String())
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, len(out), sum.Samples)
		return out
	}
	mr, err := perfdata.OpenMapped(path)
	require.NoError(t, err)
	mapped := report(mr)
	br, err := perfdata.NewFileReader(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	buffered := report(br)
	require.Greater(t, len(mapped), 400)
	require.Equal(t, buffered, mapped)
}

// withSampleCopies returns the perf.data file src with n more copies of
// its samples appended to its data section, their times set to 0, and its
// feature sections moved after them.
func withSampleCopies(t testing.TB, src []byte, n int) []byte {
	t.Helper()
	le := binary.LittleEndian
	dataOff, dataSize := le.Uint64(src[40:]), le.Uint64(src[48:])
	recs, _ := scanRecords(t, src)
	r, err := perfdata.NewFileReader(bytes.NewReader(src), int64(len(src)))
	require.NoError(t, err)
	attrs := r.Session().Attrs
	require.Len(t, attrs, 1)
	st := attrs[0].SampleType
	require.NotZero(t, st&perfdata.SampleTime)
	// The time's offset in a sample: after the header and the
	// identifier, IP and TID present before it.
	timeOff := 8 + 8*bits.OnesCount64(st&(perfdata.SampleIdentifier|perfdata.SampleIP|perfdata.SampleTID))
	var copies []byte
	for i := 0; i < n; i++ {
		for _, rec := range recs {
			if rec.typ != perfdata.RecordSample {
				continue
			}
			b := append([]byte(nil), src[rec.off:rec.end]...)
			le.PutUint64(b[timeOff:], 0)
			copies = append(copies, b...)
		}
	}
	end := dataOff + dataSize
	out := append(append(append([]byte(nil), src[:end]...), copies...), src[end:]...)
	le.PutUint64(out[48:], dataSize+uint64(len(copies)))
	// The feature table follows the data: one (offset, size) per
	// feature bit set in the header's bitmap (at 72, 256 bits).
	nfeat := 0
	for i := 0; i < 4; i++ {
		nfeat += bits.OnesCount64(le.Uint64(src[72+8*i:]))
	}
	tab := end + uint64(len(copies))
	for i := 0; i < nfeat; i++ {
		p := tab + uint64(16*i)
		le.PutUint64(out[p:], le.Uint64(out[p:])+uint64(len(copies)))
	}
	return out
}

// FuzzRunRecording: no perf.data file crashes, hangs or exhausts memory in
// its report, and a mapped recording (what `ustack report FILE` reads) is
// reported as the same bytes read through the buffered reader (pipes,
// archives) are. Seeds: dwarf.data, and with a time-0 copy of each of its
// samples (the mapped path's crash TestMappedSamplesWithoutTime keeps). The
// objects are looked for in an empty directory: only the recording is
// read.
func FuzzRunRecording(f *testing.F) {
	src, err := os.ReadFile(filepath.Join("..", "perfdata", "testdata", "dwarf.data"))
	require.NoError(f, err)
	f.Add(src)
	f.Add(withSampleCopies(f, src, 1))
	empty := f.TempDir()
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		report := func(r *perfdata.Reader) ([]string, *Summary, error) {
			defer r.Close()
			var out []string
			var buf bytes.Buffer
			tw := NewTextWriter(&buf, 10, false)
			opts := Options{Kallsyms: "-", SymFS: empty, BuildIDDir: empty, Jobs: 2, MaxFrames: 256}
			sum, err := Run(r, opts, func(s *Sample) error {
				buf.Reset()
				if err := tw.Write(s); err != nil {
					return err
				}
				tw.Flush()
				out = append(out, buf.String())
				return nil
			})
			return out, sum, err
		}
		br, err := perfdata.NewFileReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		buffered, bsum, berr := report(br)
		path := filepath.Join(dir, "fuzz.data")
		require.NoError(t, os.WriteFile(path, data, 0o600))
		mr, err := perfdata.OpenMapped(path)
		require.NoError(t, err, "the buffered reader opened it")
		mapped, msum, merr := report(mr)
		require.Equal(t, berr == nil, merr == nil, "buffered: %v; mapped: %v", berr, merr)
		require.Equal(t, buffered, mapped)
		if bsum != nil && msum != nil {
			require.Equal(t, bsum.Samples, msum.Samples)
		}
	})
}
