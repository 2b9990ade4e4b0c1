package ustacksymbolizer

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor/processortest"

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
