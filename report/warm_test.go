package report

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/archive"
	"github.com/ustack/ustack/perfdata"
)

// TestWarmingOpensNothingMore reports the bundled hello recording (its
// objects in its archive) twice: whole, and with a filter that keeps none
// of its samples. Building objects' tables ahead (warmSpace) is for the
// objects kept samples' processes map, so the filtered report opens no
// object at all and warns of none, as before there was any building ahead
// (a build ahead from the recording's build-id list would open them all).
// The whole report shows that the objects are there to open.
func TestWarmingOpensNothingMore(t *testing.T) {
	const data = "../testdata/recordings/hello/perf.data"
	report := func(filter *SampleFilter) (*Summary, []string) {
		a, err := archive.Open(data+".ustack", archive.Options{})
		require.NoError(t, err)
		defer a.Close()
		r, err := perfdata.OpenMapped(data)
		require.NoError(t, err)
		defer r.Close()
		var warnings []string
		sum, err := Run(r, Options{Kallsyms: "-", SymFS: t.TempDir(), BuildIDDir: t.TempDir(), DebugDirs: []string{},
			Objects: a, DebugData: a.DebugFile, ObjectSources: true, Filter: filter,
			Warn: func(m string) { warnings = append(warnings, m) }}, func(*Sample) error { return nil })
		require.NoError(t, err)
		return sum, warnings
	}
	whole, _ := report(nil)
	require.NotZero(t, whole.Samples)
	require.NotEmpty(t, whole.Objects, "the whole report opened no object: the filtered one shows nothing")

	none, warnings := report(&SampleFilter{Pids: map[uint32]bool{1<<31 + 7: true}})
	require.Zero(t, none.Samples)
	require.Equal(t, whole.Samples, none.Filtered)
	require.Empty(t, none.Objects, "objects opened for a report that kept no sample")
	require.Empty(t, warnings)
}
