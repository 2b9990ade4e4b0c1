package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/perfdata"
)

// chunkedSrc recurses 40 to 80 frames deep, each frame with a 256-byte array,
// and works at the bottom: stack snapshots of 32 KB are mostly full.
const chunkedSrc = `
static volatile long sink;
__attribute__((noinline)) long rec(int n, long x) {
	volatile char pad[256];
	pad[n & 255] = (char)x;
	sink += pad[x & 255];
	if (n == 0) {
		for (long i = 0; i < 400000; i++) sink += i ^ x;
		return sink;
	}
	return rec(n - 1, x + 1) + 1;
}
int main(void) { for (int i = 0; i < 2000; i++) rec(40 + i % 40, i); return 0; }
`

// TestChunkedRecording: a recording of 16 MB and more is read in chunks
// (perfdata.OpenMapped), the samples' stacks left in them, and a chunk is
// read into again once the report has released its samples. With two
// workers, the report is byte for byte the one the buffered reader gives
// (perfdata.Open, whose Sorter copies every queued sample), and its stacks
// are whole: nearly every sample unwinds through the recursion to main.
func TestChunkedRecording(t *testing.T) {
	requirePerf(t)
	dir := t.TempDir()
	bin := build(t, dir, "deep", chunkedSrc, "-O1", "-g")
	// A sample every 250 us of the program's CPU time: as many on a busy
	// machine as on a quiet one.
	data := testprog.Record(t, filepath.Join(dir, "perf.data"), "-e", "cpu-clock", "-c", "250000",
		"--call-graph", "dwarf,32768", "--", bin)
	st, err := os.Stat(data)
	require.NoError(t, err)
	require.GreaterOrEqual(t, st.Size(), int64(16<<20), "the recording must be large enough to be read in chunks")

	report := func(open func(string) (*perfdata.Reader, error), wantMapped bool) (string, *Summary) {
		r, err := open(data)
		require.NoError(t, err)
		defer r.Close()
		require.Equal(t, wantMapped, r.Mapped())
		var buf bytes.Buffer
		tw := NewTextWriter(&buf, 0, false)
		sum, err := Run(r, Options{Jobs: 2}, tw.Write)
		require.NoError(t, err)
		require.NoError(t, tw.Flush())
		return buf.String(), sum
	}
	chunked, sum := report(perfdata.OpenMapped, false)
	buffered, sumB := report(perfdata.Open, false)
	require.Equal(t, sumB.Samples, sum.Samples)
	require.Equal(t, sumB.Stops, sum.Stops)
	if chunked != buffered {
		a, b := splitSamples(chunked), splitSamples(buffered)
		for i := range min(len(a), len(b)) {
			if strings.Join(a[i], "\n") != strings.Join(b[i], "\n") {
				t.Fatalf("sample %d read in chunks:\n%s\nbuffered:\n%s", i, strings.Join(a[i], "\n"), strings.Join(b[i], "\n"))
			}
		}
		t.Fatalf("reports differ: %d samples in chunks, %d buffered", len(a), len(b))
	}
	samples := splitSamples(chunked)
	require.Greater(t, len(samples), 500, "samples")
	inMain := 0
	for _, s := range samples {
		if testprog.HasChain(frameSymbols(s), []string{"rec", "rec", "rec", "main"}) {
			inMain++
		}
	}
	t.Logf("%d MB, %d samples, %d through rec into main; stops %v", st.Size()>>20, len(samples), inMain, sum.Stops)
	require.GreaterOrEqual(t, inMain*100, len(samples)*90, "samples unwound through the recursion into main")
}

// frameSymbols returns the symbols of a perf-script text sample's frame
// lines (its first line is the header), without their offsets.
func frameSymbols(sample []string) []string {
	var out []string
	for _, line := range sample[1:] {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(f[1], "+")
		out = append(out, name)
	}
	return out
}
