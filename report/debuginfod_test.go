package report

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/debuginfod"
	"github.com/ustack/ustack/perfdata"
)

// TestDebuginfodServerFailures reports the committed dwarf.data (a dash
// recorded with perf; its objects hidden behind an empty SymFS, so each is
// asked for by build-id) with debuginfod servers that fail: one answers
// every request with garbage, one is slower than the request timeout. The
// report must have every sample, the same frames as without debuginfod, a
// warning naming each server, and the objects listed as missing with the
// server's refusal; the JSON summary record must match the schema.
func TestDebuginfodServerFailures(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]int{}
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked[r.URL.Path]++
		mu.Unlock()
		w.Write([]byte("\x7fELF this is not an object"))
	}))
	defer garbage.Close()
	stop := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stop:
		case <-r.Context().Done(): // the client gave up
		case <-time.After(time.Minute):
		}
	}))
	defer slow.Close()
	defer close(stop)

	data := filepath.Join("..", "perfdata", "testdata", "dwarf.data")
	reportWith := func(c *debuginfod.Client, warn func(string)) ([]byte, *Summary) {
		r, err := perfdata.Open(data)
		require.NoError(t, err)
		defer r.Close()
		var b bytes.Buffer
		w := NewJSONWriter(&b, false)
		sum, err := Run(r, Options{Kallsyms: "-", SymFS: t.TempDir(), BuildIDDir: t.TempDir(), DebugDirs: []string{},
			Debuginfod: c, ObjectSources: true, Warn: warn}, w.Write)
		require.NoError(t, err)
		require.NoError(t, w.WriteSummary(sum))
		require.NoError(t, w.Flush())
		return b.Bytes(), sum
	}
	without, base := reportWith(nil, nil)
	require.NotZero(t, base.Samples)
	require.NotEmpty(t, base.Missing)

	var warnings []string
	warn := func(m string) { mu.Lock(); warnings = append(warnings, m); mu.Unlock() }
	c := debuginfod.New(debuginfod.Options{URLs: []string{garbage.URL, slow.URL}, CacheDir: t.TempDir(),
		RequestTimeout: 500 * time.Millisecond, Warn: warn})
	defer c.Close()
	start := time.Now()
	got, sum := reportWith(c, warn)
	// The slow server answers after a minute: a report that waited for it
	// takes that long; one that gave up after RequestTimeout is well under
	// it, however busy the machine.
	assert.Less(t, time.Since(start), 40*time.Second, "the slow server held the report up")
	assert.Equal(t, base.Samples, sum.Samples)
	assert.Equal(t, samplesOf(without), samplesOf(got), "frames changed by failing servers")

	mu.Lock()
	defer mu.Unlock()
	for _, id := range []string{"be6397ddffc3e384c505d7deab3bed190c884df9", "93ac61ec5a8eb1396f9fbd350e3169a558528a40"} {
		assert.NotZero(t, asked["/buildid/"+id+"/executable"], "%s not asked for", id)
	}
	joined := strings.Join(warnings, "\n")
	assert.Contains(t, joined, garbage.URL)
	assert.Contains(t, joined, "answer refused")
	assert.Contains(t, joined, slow.URL)
	for path := range base.Missing {
		if path != "[vdso]" {
			assert.Contains(t, sum.Missing[path], "debuginfod", "%s: why it is missing", path)
		}
	}
	validateLines(t, reportSchema(t), got)
	t.Logf("warnings:\n%s\nmissing: %v", joined, sum.Missing)
}

// samplesOf returns a JSON report's lines without its summary record.
func samplesOf(js []byte) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(js)), "\n") {
		if !strings.HasPrefix(l, `{"summary":`) {
			out = append(out, l)
		}
	}
	return out
}
