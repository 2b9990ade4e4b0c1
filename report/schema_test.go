package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/perfdata"
)

// reportSchema compiles docs/report.schema.json.
func reportSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "docs", "report.schema.json"))
	require.NoError(t, err)
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("report.schema.json", doc))
	sch, err := c.Compile("report.schema.json")
	require.NoError(t, err)
	return sch
}

// validateLines validates every line of a JSON report and returns the
// samples decoded.
func validateLines(t *testing.T, sch *jsonschema.Schema, js []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(js))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(sc.Bytes()))
		require.NoError(t, err)
		require.NoError(t, sch.Validate(v), "sample %d: %s", len(out), sc.Text())
		out = append(out, v.(map[string]any))
	}
	return out
}

func jsonReport(t *testing.T, data string, opts Options) []byte {
	t.Helper()
	r, err := perfdata.Open(data)
	require.NoError(t, err)
	defer r.Close()
	var b bytes.Buffer
	w := NewJSONWriter(&b, false)
	_, err = Run(r, opts, w.Write)
	require.NoError(t, err)
	require.NoError(t, w.Flush())
	return b.Bytes()
}

// TestJSONMatchesSchema validates the JSON of real recordings against
// docs/report.schema.json, which requires every key on every sample and
// frame (null where unknown) and allows no other: the committed
// dwarf.data, reported without its objects (symbols, files and lines
// unknown: null), and a fresh recording of chainSrc with debug info (files
// and lines known, inlined and physical frames).
func TestJSONMatchesSchema(t *testing.T) {
	sch := reportSchema(t)
	samples := validateLines(t, sch, jsonReport(t, filepath.Join("..", "perfdata", "testdata", "dwarf.data"),
		Options{Kallsyms: "-", SymFS: t.TempDir()}))
	require.NotEmpty(t, samples)
	nulls := 0
	for _, s := range samples {
		for _, f := range s["frames"].([]any) {
			if f.(map[string]any)["file"] == nil {
				nulls++
			}
		}
	}
	require.NotZero(t, nulls, "no frame without a file: the null case is not exercised")

	requirePerf(t)
	dir := t.TempDir()
	bin := build(t, dir, "chain", chainSrc, "-O2", "-g")
	samples = validateLines(t, sch, jsonReport(t, record(t, dir, bin), Options{}))
	var withLine, physical int
	for _, s := range samples {
		for _, fr := range s["frames"].([]any) {
			f := fr.(map[string]any)
			if f["line"] != nil {
				withLine++
			}
			if f["inlined"] == false {
				physical++
			}
			if file, ok := f["file"].(string); ok && (strings.Contains(file, "/./") || strings.HasPrefix(file, "./") || strings.Contains(file, "/../")) {
				t.Errorf("source path not cleaned: %q", file)
			}
		}
	}
	require.NotZero(t, withLine)
	require.NotZero(t, physical)
}

// TestJSONTraceFieldsAndNulls writes one hand-made sample with tracepoint
// fields and a frame that knows nothing, and checks the exact JSON: fields
// as an object in the format's order, every frame key, nulls for unknowns.
// It also checks that the schema rejects a frame without "inlined", so that
// the schema test can fail.
func TestJSONTraceFieldsAndNulls(t *testing.T) {
	s := &Sample{Index: 3, Pid: 7, Tid: 8, CPU: 1, Time: 1500, Period: 1, Comm: "prog", Event: "syscalls:sys_enter_openat", IP: 0x401000,
		TraceFields: TraceFields{Text: []byte("dfd: 0xffffff9c, filename: 0x7f00"), List: []TraceField{
			{"dfd", int64(-100)}, {"filename", "/etc/hostname"}, {"flags", uint64(0x80000)}, {"buf", []byte{1, 2}}}},
		Frames: []Frame{{Addr: 0x401000, PC: 0x401000, Offset: 0x401000, How: "context"}}}
	var b bytes.Buffer
	w := NewJSONWriter(&b, false)
	require.NoError(t, w.Write(s))
	require.NoError(t, w.Flush())
	want := `{"index":3,"pid":7,"tid":8,"cpu":1,"time":1500,"period":1,"comm":"prog","event":"syscalls:sys_enter_openat","signal":null,"ip":"0x401000",` +
		`"fields":{"dfd":-100,"filename":"/etc/hostname","flags":524288,"buf":[1,2]},` +
		`"frames":[{"pc":"0x401000","addr":"0x401000","module":null,"offset":"0x401000","symbol":null,"mangled":null,"symoff":0,` +
		`"file":null,"line":null,"inlined":false,"kernel":false,"how":"context","signal_trampoline":false,"restored_registers":false}],` +
		`"stop":null,"stop_error":null,"fp_frames":null,"fp_stop":null}` + "\n"
	require.Equal(t, want, b.String())
	sch := reportSchema(t)
	validateLines(t, sch, b.Bytes())

	var doc map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &doc))
	delete(doc["frames"].([]any)[0].(map[string]any), "inlined")
	bad, _ := json.Marshal(doc)
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(bad))
	require.NoError(t, err)
	require.Error(t, sch.Validate(v), "the schema accepts a frame without inlined")
}

// TestJSONSummaryCountsMatchSamples: the summary record's stops are the
// stops of the samples the same report wrote, counted from its lines, and
// its sample count theirs: the formats do not contradict each other.
func TestJSONSummaryCountsMatchSamples(t *testing.T) {
	r, err := perfdata.Open(filepath.Join("..", "perfdata", "testdata", "dwarf.data"))
	require.NoError(t, err)
	defer r.Close()
	var b bytes.Buffer
	w := NewJSONWriter(&b, false)
	sum, err := Run(r, Options{Kallsyms: "-", SymFS: t.TempDir()}, w.Write)
	require.NoError(t, err)
	require.NoError(t, w.WriteSummary(sum))
	require.NoError(t, w.Flush())
	lines := validateLines(t, reportSchema(t), b.Bytes())
	require.Greater(t, len(lines), 1)
	stops := map[string]int{}
	for _, l := range lines[:len(lines)-1] {
		stops[l["stop"].(string)]++
	}
	all := bytes.Split(bytes.TrimSpace(b.Bytes()), []byte("\n"))
	var rec struct {
		Summary struct {
			Samples int
			Stops   map[string]int
		}
	}
	require.NoError(t, json.Unmarshal(all[len(all)-1], &rec))
	require.Equal(t, stops, rec.Summary.Stops, "stops by the samples' lines and by the summary record")
	require.Equal(t, len(lines)-1, rec.Summary.Samples)
	require.GreaterOrEqual(t, len(stops), 2, "one kind of stop: the test does not tell counts apart")
}
