package perfdata

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTracingData checks that the tracing data is kept in pipe mode (the
// TRACING_DATA record's payload) and file mode (the feature): the
// committed pipe.data records syscalls:sys_enter_close, whose format file
// perf wrote into it.
func TestTracingData(t *testing.T) {
	r, err := Open(filepath.Join("testdata", "pipe.data"))
	require.NoError(t, err)
	defer r.Close()
	_, err = readAll(r)
	require.NoError(t, err)
	td := r.Session().Features.TracingData
	require.True(t, r.Session().Features.Has(FeatTracingData))
	assert.True(t, bytes.HasPrefix(td, []byte("\x17\x08\x44tracing")), "tracing data starts %q", td[:min(len(td), 12)])
	assert.Contains(t, string(td), "name: sys_enter_close\n")

	// The same data written as a feature section of a file-mode file.
	path := filepath.Join(t.TempDir(), "f.data")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	require.NoError(t, err)
	w, err := NewWriter(f, r.Session().Attrs, &Features{})
	require.NoError(t, err)
	w.SetFeatureSection(FeatTracingData, td)
	require.NoError(t, w.Close())
	require.NoError(t, f.Close())
	r2, err := Open(path)
	require.NoError(t, err)
	defer r2.Close()
	assert.Equal(t, td, r2.Session().Features.TracingData)

	r3, err := Open(filepath.Join("testdata", "dwarf.data"))
	require.NoError(t, err)
	defer r3.Close()
	assert.Nil(t, r3.Session().Features.TracingData, "dwarf.data records no tracepoint")
}
