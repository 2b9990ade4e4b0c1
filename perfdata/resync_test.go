package perfdata

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestResyncSkipsTheFailedRecord: a sample whose type was overwritten with
// a user record type (THREAD_MAP, whose body perf defines and this one
// does not fit) fails to read, but the resync's checks take user types on
// trust. Before, the scan resumed at that very record: reading failed
// there again, and the one damage was reported twice, first at the
// intact record before it. Now one damage, at the record, and reading
// resumes at the next.
func TestResyncSkipsTheFailedRecord(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "dwarf.data"))
	require.NoError(t, err)
	full, err := NewFileReader(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	want, err := readAll(full)
	require.NoError(t, err)
	var samples []int
	for i, rec := range want {
		if rec.Header().Type == RecordSample {
			samples = append(samples, i)
		}
	}
	require.Greater(t, len(samples), 4)
	i := samples[len(samples)/2]
	require.Less(t, i+1, len(want))
	bad, next := want[i].Header().Offset, want[i+1].Header().Offset
	damaged := bytes.Clone(data)
	le.PutUint32(damaged[bad:], uint32(RecordThreadMap))
	r, err := NewFileReader(bytes.NewReader(damaged), int64(len(damaged)))
	require.NoError(t, err)
	got, err := readAll(r)
	require.NoError(t, err)
	require.Equal(t, []Damage{{Offset: bad, Resume: next, Err: r.Damages()[0].Err}}, r.Damages())
	assert.Len(t, got, len(want)-1)
}
