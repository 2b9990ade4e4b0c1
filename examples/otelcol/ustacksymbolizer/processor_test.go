package ustacksymbolizer

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/collector/processor/xprocessor"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ustack/ustack/examples/otelcol/internal/coreprofile"
	"github.com/ustack/ustack/internal/otlptest"
)

var testdata = filepath.Join("..", "..", "..", "testdata")

func coreProfiles(t testing.TB, name string) (pprofile.Profiles, string) {
	return coreprofile.Of(t, testdata, name)
}

// TestSymbolizesAsUstackReport strips the names from ustack's own
// profiles of core dumps of real programs (C, C++ with inline frames and
// exceptions, Go) and runs them through the processor made by its factory:
// at least 99% of the stripped locations come out with the functions,
// inline chain included, that ustack report gave the same addresses.
func TestSymbolizesAsUstackReport(t *testing.T) {
	for _, name := range []string{"x86_64/threads", "x86_64/crash_O2", "x86_64/cxx_terminate", "x86_64/go_abort"} {
		t.Run(strings.ReplaceAll(name, "/", "_"), func(t *testing.T) {
			p, symfs := coreProfiles(t, name)
			want := otlptest.StripNative(p)
			require.NotEmpty(t, want)

			sink := new(consumertest.ProfilesSink)
			f := NewFactory()
			cfg := f.CreateDefaultConfig().(*Config)
			cfg.SymFS = symfs
			proc, err := f.CreateProfiles(context.Background(), processortest.NewNopSettings(Type), cfg, sink)
			require.NoError(t, err)
			require.NoError(t, proc.ConsumeProfiles(context.Background(), p))
			require.Len(t, sink.AllProfiles(), 1)
			out := sink.AllProfiles()[0]
			d := out.Dictionary()
			same, inlined := 0, 0
			for i, names := range want {
				if len(names) > 1 {
					inlined++
				}
				got := otlptest.LineNames(d, d.LocationTable().At(i))
				if assert.Equal(t, names, got, "location %d at %#x", i, d.LocationTable().At(i).Address()) {
					same++
				}
			}
			share := float64(same) / float64(len(want))
			t.Logf("%s: %d of %d locations (%d with inline frames) named as ustack report names them (%.1f%%)", name, same, len(want), inlined, 100*share)
			assert.GreaterOrEqual(t, share, 0.99)
			require.NoError(t, proc.Shutdown(context.Background()))
		})
	}
}

// TestLeavesNamedLocations runs a profile through twice: the second pass
// names nothing more and changes nothing.
func TestLeavesNamedLocations(t *testing.T) {
	p, symfs := coreProfiles(t, "x86_64/threads")
	want := otlptest.StripNative(p)
	s := New(&Config{SymFS: symfs})
	defer s.Close()
	_, err := s.Process(context.Background(), p)
	require.NoError(t, err)
	first := s.Stats()
	assert.Equal(t, uint64(len(want)), first.Named+first.Unnamed)
	var m pprofile.ProtoMarshaler
	before, err := m.MarshalProfiles(p)
	require.NoError(t, err)
	_, err = s.Process(context.Background(), p)
	require.NoError(t, err)
	after, err := m.MarshalProfiles(p)
	require.NoError(t, err)
	assert.Equal(t, before, after, "named locations are left alone")
	assert.Equal(t, first.Named, s.Stats().Named)
}

// TestMetrics reads the processor's counters, through the MeterProvider of
// its settings as a Collector gives it, against counts checked by hand on
// two real programs' profiles:
//
//   - the threads core's: 24 locations to name, 13 in the program
//     (crash_leaf, crash_mid, crasher, in_futex, waiter, main, _start,
//     in_read, reader, in_nanosleep, sleeper, in_poll, poller) and 11 in
//     libc.so.6 (start_thread, clone3, __futex_abstimed_wait_common,
//     ___pthread_cond_wait, __pthread_clockjoin_ex,
//     __libc_start_call_main, __libc_start_main_impl, read,
//     clock_nanosleep, nanosleep, poll: gdb's frames in threads.json).
//     With libc's build-id replaced by one no file has, the 13 are named
//     and the 11 counted unnamed for no_object; the two mappings' address
//     spaces are made once (2 misses, 22 hits). Sent again, the 13 now
//     have lines and are left alone, the 11 are counted again (11 hits).
//   - the crash_stripped core's, without the program's debug file: 7
//     locations, 5 in the stripped program (leaf, mid, top, main, _start;
//     nm -D lists no defined symbol in it) counted no_symbol, 2 in libc
//     (__libc_start_call_main, __libc_start_main_impl) named.
//
// The objects open are the files under the symfs that the test process
// maps (/proc/self/maps), an object's debug files counted with it.
func TestMetrics(t *testing.T) {
	t.Run("threads_unknown_libc", func(t *testing.T) {
		p, symfs := coreProfiles(t, "x86_64/threads")
		require.Len(t, otlptest.StripNative(p), 24)
		d := p.Dictionary()
		libc := 0
		for i, m := range d.MappingTable().All() {
			if strings.HasSuffix(d.StringTable().At(int(m.FilenameStrindex())), "/libc.so.6") {
				require.Zero(t, libc, "one libc mapping")
				libc = i
				replaceBuildID(t, d, m, strings.Repeat("ee", 20))
			}
		}
		inLibc := 0
		for _, l := range d.LocationTable().All() {
			if int(l.MappingIndex()) == libc {
				inLibc++
			}
		}
		require.Equal(t, 11, inLibc, "the profile's libc locations")

		sink := new(consumertest.ProfilesSink)
		proc, reader := instrumented(t, symfs, sink)
		require.NoError(t, proc.ConsumeProfiles(context.Background(), p))
		assert.Equal(t, map[string]int64{
			"ustack_symbolizer_locations_named":                     13,
			"ustack_symbolizer_locations_unnamed{reason=no_object}": 11,
			"ustack_symbolizer_mapping_cache_misses":                2,
			"ustack_symbolizer_mapping_cache_hits":                  22,
			"ustack_symbolizer_objects_open":                        2,
		}, collect(t, reader))
		// libc.so.6 at its path was opened, its build-id found to differ:
		// it stays open, refused.
		assert.Equal(t, []string{"tmp/ustack-cores/x86_64/threads/threads", "usr/lib/x86_64-linux-gnu/libc.so.6"}, mappedUnder(t, symfs))
		require.NoError(t, proc.ConsumeProfiles(context.Background(), sink.AllProfiles()[0]))
		assert.Equal(t, map[string]int64{
			"ustack_symbolizer_locations_named":                     13,
			"ustack_symbolizer_locations_unnamed{reason=no_object}": 22,
			"ustack_symbolizer_mapping_cache_misses":                2,
			"ustack_symbolizer_mapping_cache_hits":                  33,
			"ustack_symbolizer_objects_open":                        2,
		}, collect(t, reader))
		require.NoError(t, proc.Shutdown(context.Background()))
	})
	t.Run("stripped_without_debug_file", func(t *testing.T) {
		p, symfs := coreProfiles(t, "x86_64/crash_stripped")
		require.Len(t, otlptest.StripNative(p), 7)
		debug := filepath.Join(symfs, "tmp/ustack-cores/x86_64/crash_stripped/crash_stripped.debug")
		require.FileExists(t, debug)
		require.NoError(t, os.Remove(debug))
		proc, reader := instrumented(t, symfs, new(consumertest.ProfilesSink))
		require.NoError(t, proc.ConsumeProfiles(context.Background(), p))
		assert.Equal(t, map[string]int64{
			"ustack_symbolizer_locations_named":                     2,
			"ustack_symbolizer_locations_unnamed{reason=no_symbol}": 5,
			"ustack_symbolizer_mapping_cache_misses":                2,
			"ustack_symbolizer_mapping_cache_hits":                  5,
			"ustack_symbolizer_objects_open":                        2,
		}, collect(t, reader))
		// libc's debug file is open with libc, one object.
		assert.Equal(t, []string{"tmp/ustack-cores/x86_64/crash_stripped/crash_stripped",
			"usr/lib/debug/.build-id/93/ac61ec5a8eb1396f9fbd350e3169a558528a40.debug",
			"usr/lib/x86_64-linux-gnu/libc.so.6"}, mappedUnder(t, symfs))
		require.NoError(t, proc.Shutdown(context.Background()))
	})
}

// mappedUnder returns the files under dir that this process maps
// (/proc/self/maps), relative to dir, sorted: the objects the
// symbolizer holds open.
func mappedUnder(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	seen := map[string]bool{}
	var files []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		if rel, ok := strings.CutPrefix(f[5], dir+"/"); ok && !seen[rel] {
			seen[rel] = true
			files = append(files, rel)
		}
	}
	sort.Strings(files)
	return files
}

// replaceBuildID sets the build-id attribute of mapping m to id.
func replaceBuildID(t *testing.T, d pprofile.ProfilesDictionary, m pprofile.Mapping, id string) {
	t.Helper()
	for _, i := range m.AttributeIndices().All() {
		kv := d.AttributeTable().At(int(i))
		if d.StringTable().At(int(kv.KeyStrindex())) == buildIDKey {
			kv.Value().SetStr(id)
			return
		}
	}
	t.Fatal("the mapping has no build-id")
}

// instrumented returns the processor made by its factory with symfs and
// the settings a Collector gives it, its MeterProvider one whose metrics
// the reader returned reads.
func instrumented(t *testing.T, symfs string, next *consumertest.ProfilesSink) (xprocessor.Profiles, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	set := processortest.NewNopSettings(Type)
	set.MeterProvider = mp
	f := NewFactory()
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.SymFS = symfs
	proc, err := f.CreateProfiles(context.Background(), set, cfg, next)
	require.NoError(t, err)
	return proc, reader
}

// collect reads the reader's ustack_symbolizer_* metrics: each counter's
// or gauge's value by name, with {reason=...} for the unnamed ones.
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if !strings.HasPrefix(m.Name, "ustack_symbolizer_") {
				continue // processorhelper's own
			}
			var points []metricdata.DataPoint[int64]
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				require.True(t, data.IsMonotonic, m.Name)
				require.Equal(t, metricdata.CumulativeTemporality, data.Temporality, m.Name)
				points = data.DataPoints
			case metricdata.Gauge[int64]:
				points = data.DataPoints
			default:
				t.Fatalf("%s: %T", m.Name, m.Data)
			}
			for _, dp := range points {
				name := m.Name
				if r, ok := dp.Attributes.Value(attribute.Key("reason")); ok {
					name += "{reason=" + r.AsString() + "}"
				}
				got[name] += dp.Value
			}
		}
	}
	return got
}

// BenchmarkSymbolize measures locations named per second: the go_abort
// core's profile, stripped, through one Symbolizer (objects open, as in a
// running Collector).
func BenchmarkSymbolize(b *testing.B) {
	p, symfs := coreProfiles(b, "x86_64/go_abort")
	s := New(&Config{SymFS: symfs})
	defer s.Close()
	n := 0
	start := time.Now()
	for b.Loop() {
		q := pprofile.NewProfiles()
		p.CopyTo(q)
		n += len(otlptest.StripNative(q))
		s.Process(context.Background(), q)
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "locations/s")
}
