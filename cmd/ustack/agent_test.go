package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/otlptest"
	"github.com/ustack/ustack/internal/testprog"
)

// busySrc spins for three seconds in main -> mid -> leaf (no frame
// pointers: the stacks need CFI), asking the clock between rounds; then it
// creates the file its argument names, if any.
const busySrc = `#include <stdio.h>
#include <time.h>
static volatile unsigned long sink;
__attribute__((noinline)) void leaf(void) { for (int i = 0; i < 1000; i++) sink += i; }
__attribute__((noinline)) void mid(void) { leaf(); }
int main(int argc, char **argv) {
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do { mid(); clock_gettime(CLOCK_MONOTONIC, &t); } while (t.tv_sec - t0.tv_sec < 3);
	if (argc > 1) fclose(fopen(argv[1], "w"));
	return 0;
}
`

// TestAgentMatchesReport runs ustack record --unwind --otlp-endpoint with
// 500ms intervals against a test endpoint on 127.0.0.1 that refuses its
// first two requests (HTTP 503, as a Collector restarting): the requests
// are retried, the intervals arrive (how many have samples depends on the
// machine's load), and together their stacks are,
// sample for sample and frame for frame, those of ustack report --format
// folded of the recording the same run wrote; the exit summary counts the
// profiles sent and none dropped.
func TestAgentMatchesReport(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the agent records with perf_event_open as root here; not root")
	}
	isolate(t)
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "busy.c", busySrc, "-O2", "-g", "-fomit-frame-pointer")
	var mu sync.Mutex
	var bodies [][]byte
	refused := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if refused < 2 {
			refused++
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		bodies = append(bodies, b)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()

	data := filepath.Join(dir, "agent.data")
	var out, errs bytes.Buffer
	rc := run([]string{"record", "--unwind", "-F", "200", "--otlp-endpoint", srv.URL, "--otlp-interval", "500ms",
		"-o", data, "--", bin}, &out, &errs)
	if rc != 0 {
		t.Skipf("ustack record cannot record here (status %d): %s", rc, errs.String())
	}
	assert.Regexp(t, `\[ ustack record: sent (\d+) of \d+ profiles \(\d+ samples\) to `+srv.URL+` \]`, errs.String())
	assert.NotContains(t, errs.String(), "dropped")

	rc, folded, rerrs := run3([]string{"report", "--no-debuginfod", "--format", "folded", data})
	require.Equal(t, exitOK, rc, rerrs)
	want := foldedStacks(t, folded)

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 2, refused)
	require.NotEmpty(t, bodies)
	t.Logf("%d intervals with samples arrived", len(bodies))
	got := map[string]uint64{}
	for _, b := range bodies {
		r, err := otlptest.Folded(parseOTLP(t, b, false))
		require.NoError(t, err)
		assert.Equal(t, []string{"cpu/nanoseconds"}, r.SampleTypes)
		for k, v := range r.Stacks {
			got[k] += v
		}
	}
	assert.Equal(t, want, got)
	assert.Contains(t, folded, ";main;leaf ", "mid tail-calls leaf at -O2")
}

// TestAgentBacklogDrops runs the agent with 50ms intervals and a backlog
// of 1 against an endpoint that refuses everything until the recorded
// program has ended: the backlog overflows as soon as two intervals have
// samples, the oldest are dropped; once the endpoint takes profiles again
// the one kept arrives, carrying ustack.dropped_intervals, and the exit
// summary counts sent plus dropped as every interval.
func TestAgentBacklogDrops(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the agent records with perf_event_open as root here; not root")
	}
	isolate(t)
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "busy.c", busySrc, "-O2", "-g")
	var mu sync.Mutex
	var bodies [][]byte
	ended := filepath.Join(dir, "ended")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if _, err := os.Stat(ended); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
	}))
	defer srv.Close()
	var out, errs bytes.Buffer
	rc := run([]string{"record", "--unwind", "-F", "200", "--otlp-endpoint", srv.URL, "--otlp-interval", "50ms",
		"--otlp-backlog", "1", "--otlp-timeout", "200ms", "-o", filepath.Join(dir, "agent.data"), "--", bin, ended}, &out, &errs)
	if rc != 0 {
		t.Skipf("ustack record cannot record here (status %d): %s", rc, errs.String())
	}
	m := regexp.MustCompile(`\[ ustack record: sent (\d+) of (\d+) profiles \(\d+ samples\) to \S+; (\d+) dropped: `).FindStringSubmatch(errs.String())
	require.NotNil(t, m, errs.String())
	sent, total, dropped := atoi(t, m[1]), atoi(t, m[2]), atoi(t, m[3])
	assert.Equal(t, total, sent+dropped)
	assert.Positive(t, dropped)
	assert.Equal(t, 1, sent, "the one interval the backlog kept")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, sent, len(bodies))
	marked := 0
	for _, b := range bodies {
		p := parseOTLP(t, b, false)
		d := p.Dictionary()
		prof := p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
		for _, i := range prof.AttributeIndices().All() {
			kv := d.AttributeTable().At(int(i))
			if d.StringTable().At(int(kv.KeyStrindex())) == "ustack.dropped_intervals" {
				assert.Positive(t, kv.Value().Int())
				assert.LessOrEqual(t, int(kv.Value().Int()), dropped)
				marked++
			}
		}
	}
	assert.Positive(t, marked, "the profiles after the drops say so")
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}
