package report

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/perfdata"
)

// pprofOf reports a recording into a pprof file through NewWriter, as
// ustack report --format pprof does.
func pprofOf(t *testing.T, data, out string) {
	t.Helper()
	r, err := perfdata.Open(data)
	require.NoError(t, err)
	defer r.Close()
	f, err := os.Create(out)
	require.NoError(t, err)
	defer f.Close()
	w, err := NewWriter("pprof", f, WriterOptions{Attrs: r.Session().Attrs})
	require.NoError(t, err)
	_, err = Run(r, Options{}, w.Write)
	require.NoError(t, err)
	require.NoError(t, w.Close())
}

// goTool runs go tool pprof with args (testprog.Tool: skips without the
// go command of this toolchain, fails with pprof's message) and returns
// its report.
func goTool(t *testing.T, args ...string) string {
	t.Helper()
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	return testprog.Tool(t, "", goBin, append([]string{"tool", "pprof"}, args...)...)
}

// TestPprofMappingsAndUnit records cpu-clock with a DWARF call graph and
// checks the profile with go tool pprof: the program's own binary is the
// profile's file (its first mapping), with the build-id readelf gives;
// its mapping has the start, limit and file offset of the executable
// mapping perf script --show-mmap-events shows; the sample type is cpu
// time in nanoseconds, so -top prints times.
func TestPprofMappingsAndUnit(t *testing.T) {
	requirePerf(t)
	dir := t.TempDir()
	bin := build(t, dir, "chain", chainSrc, "-O2", "-g")
	data := testprog.Record(t, filepath.Join(dir, "cpu.data"), "-e", "cpu-clock", "--call-graph", "dwarf", "--", bin)
	prof := filepath.Join(dir, "cpu.pb.gz")
	pprofOf(t, data, prof)

	top := goTool(t, "-top", prof)
	require.Contains(t, top, "File: chain\n")
	require.Contains(t, top, "Type: cpu\n")
	require.Regexp(t, `Showing nodes accounting for [0-9.]+(?:ns|us|ms|s), [0-9.]+% of [0-9.]+(?:ns|us|ms|s) total`, top)
	require.Regexp(t, `(?m)^ +[0-9.]+(?:ns|us|ms|s) +[0-9.]+% .* leaf$`, top)

	// The truth for the mapping: perf's own view of the mmap and
	// readelf's build-id.
	mm := testprog.Script(t, data, "--show-mmap-events")
	re := regexp.MustCompile(`PERF_RECORD_MMAP2 \d+/\d+: \[0x([0-9a-f]+)\(0x([0-9a-f]+)\) @ (0x[0-9a-f]+|0) .*\]: r-xp ` + regexp.QuoteMeta(bin) + `\n`)
	m := re.FindStringSubmatch(mm)
	require.NotNil(t, m, "no executable mmap of %s in\n%s", bin, mm)
	start, size := hexOf(t, m[1]), hexOf(t, m[2])
	off := hexOf(t, strings.TrimPrefix(m[3], "0x"))
	note := testprog.Tool(t, "", "readelf", "-n", bin)
	id := regexp.MustCompile(`Build ID: ([0-9a-f]+)`).FindStringSubmatch(note)
	require.NotNil(t, id)

	raw := goTool(t, "-raw", prof)
	maps := raw[strings.Index(raw, "Mappings\n"):]
	first := strings.SplitN(maps, "\n", 3)[1]
	want := "1: 0x" + hexDigits(start) + "/0x" + hexDigits(start+size) + "/0x" + hexDigits(off) + " " + bin + " " + id[1] + " [FN]"
	require.Equal(t, want, strings.TrimSpace(first))
	require.NotContains(t, maps, "0x0/0x0/0x0")
}

// TestPprofSampleTypesMixedEvents checks a recording of a tracepoint and
// cpu-clock: samples count every sample (the default), cpu the clock's
// nanoseconds.
func TestPprofSampleTypesMixedEvents(t *testing.T) {
	requirePerf(t)
	dir := t.TempDir()
	bin := build(t, dir, "chain", chainSrc, "-O2", "-g")
	prof := filepath.Join(dir, "mixed.pb.gz")
	pprofOf(t, record(t, dir, bin), prof)
	top := goTool(t, "-top", prof)
	require.Contains(t, top, "Type: samples\n")
	require.Contains(t, top, "File: chain\n")
	cpu := goTool(t, "-top", "-sample_index=cpu", prof)
	require.Contains(t, cpu, "Type: cpu\n")
	require.Regexp(t, `of [0-9.]+(?:ns|us|ms|s) total`, cpu)
}

func hexOf(t *testing.T, s string) uint64 {
	t.Helper()
	var v uint64
	for _, c := range s {
		d := strings.IndexRune("0123456789abcdef", c)
		require.GreaterOrEqual(t, d, 0, "bad hex %q", s)
		v = v*16 + uint64(d)
	}
	return v
}

func hexDigits(v uint64) string { return strings.TrimPrefix(hexString(v), "0x") }
