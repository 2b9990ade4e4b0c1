package report

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/resolve"
)

// sourcesSummary has an object of each kind a summary describes: fetched
// from debuginfod with a dwz supplementary file, a stripped Go binary, a
// local object without debug information, and one that stayed missing.
func sourcesSummary() *Summary {
	return &Summary{Samples: 12, Filtered: 2, Lost: 1,
		Missing: map[string]string{"/usr/lib/libgone.so": "not found; object with build-id 0102: debuginfod: not found"},
		Objects: []resolve.ObjectInfo{
			{Path: "/usr/bin/prog", BuildID: []byte{0xab, 0xcd}, FoundIn: resolve.FoundDebuginfod,
				Sources: elfcache.Sources{Unwind: elfcache.OriginFile, Symbols: elfcache.OriginDebuginfod, Lines: elfcache.OriginDebuginfod,
					DebugFile: "/cache/abcd/debuginfo", Supplementary: "/cache/0a0b/debuginfo"}},
			{Path: "/srv/gosrv", FoundIn: resolve.FoundFile,
				Sources: elfcache.Sources{Unwind: elfcache.OriginGoPCLN, Symbols: elfcache.OriginGoPCLN}},
			{Path: "/usr/lib/libc.so.6", BuildID: []byte{0x01}, FoundIn: resolve.FoundBuildIDCache,
				Sources: elfcache.Sources{Unwind: elfcache.OriginFile, Symbols: elfcache.OriginFile}},
		}}
}

// TestSummarySources checks the text summary's lines on where each
// object's information came from, word for word, and that a summary
// without Objects (no --verbose) prints none.
func TestSummarySources(t *testing.T) {
	var b bytes.Buffer
	sourcesSummary().WriteSummary(&b)
	assert.Contains(t, b.String(), "ustack: where the information of 3 objects came from:\n"+
		"  /usr/bin/prog: object debuginfod, unwind file, symbols debuginfod, lines debuginfod; debug file /cache/abcd/debuginfo; supplementary /cache/0a0b/debuginfo; build-id abcd\n"+
		"  /srv/gosrv: object file, unwind pclntab, symbols pclntab, lines none\n"+
		"  /usr/lib/libc.so.6: object build-id cache, unwind file, symbols file, lines none; build-id 01\n")
	assert.Contains(t, b.String(), "  /usr/lib/libgone.so: not found; object with build-id 0102: debuginfod: not found\n")
	b.Reset()
	s := sourcesSummary()
	s.Objects = nil
	s.WriteSummary(&b)
	assert.NotContains(t, b.String(), "where the information")
}

// TestJSONSummaryRecord checks the JSON summary record key by key and
// against docs/report.schema.json, and that the schema refuses an origin
// it does not list (so that the check can fail).
func TestJSONSummaryRecord(t *testing.T) {
	var b bytes.Buffer
	w, err := NewWriter("json", &b, WriterOptions{})
	require.NoError(t, err)
	sw, ok := w.(SummaryWriter)
	require.True(t, ok, "the JSON writer writes no summary record")
	require.NoError(t, sw.WriteSummary(sourcesSummary()))
	require.NoError(t, w.Close())
	want := `{"summary":{"samples":12,"filtered":2,"lost":1,"objects":[` +
		`{"path":"/usr/bin/prog","build_id":"abcd","object":"debuginfod","unwind":"file","symbols":"debuginfod","lines":"debuginfod","debug_file":"/cache/abcd/debuginfo","supplementary":"/cache/0a0b/debuginfo","split_dwarf":[],"file":null},` +
		`{"path":"/srv/gosrv","build_id":null,"object":"file","unwind":"pclntab","symbols":"pclntab","lines":"none","debug_file":null,"supplementary":null,"split_dwarf":[],"file":null},` +
		`{"path":"/usr/lib/libc.so.6","build_id":"01","object":"build-id cache","unwind":"file","symbols":"file","lines":"none","debug_file":null,"supplementary":null,"split_dwarf":[],"file":null}],` +
		`"missing":[{"path":"/usr/lib/libgone.so","why":"not found; object with build-id 0102: debuginfod: not found"}],` +
		`"fp_audit":{"stacks":0,"cfi_frames":0,"fp_found":0,"cut_short":0,"objects":[]},` +
		`"stops":{},"snapshot_cut":0,"no_user_data":0,"no_maps":0,"unmapped_pc":0,"signal_stack_missing":0,"no_unwind_in":{},"skipped_records":{},"damage":[],"decode_error":null}}` + "\n"
	require.Equal(t, want, b.String())
	sch := reportSchema(t)
	validateLines(t, sch, b.Bytes())

	var doc map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &doc))
	doc["summary"].(map[string]any)["objects"].([]any)[0].(map[string]any)["lines"] = "somewhere"
	bad, _ := json.Marshal(doc)
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(bad))
	require.NoError(t, err)
	require.Error(t, sch.Validate(v), "the schema accepts an unknown origin")
}
