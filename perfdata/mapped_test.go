package perfdata

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// sortedRecords reads a file through a Sorter and returns copies of its
// records and the error that ended them.
func sortedRecords(t *testing.T, open func(string) (*Reader, error), path string) ([]Record, string) {
	t.Helper()
	r, err := open(path)
	if err != nil {
		return nil, "open: " + err.Error()
	}
	defer r.Close()
	s := NewSorter(r, 0)
	var out []Record
	for {
		rec, err := s.Next()
		if err == io.EOF {
			return out, ""
		}
		if err != nil {
			return out, err.Error()
		}
		out = append(out, rec.Clone()) // valid after Close
	}
}

// TestOpenMapped checks that a mapped reader, through a Sorter, gives the
// records Open gives, in the same order, with the same errors, for the
// test files whole and cut at many offsets (perf.data truncated), and
// that it really is mapped.
func TestOpenMapped(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"dwarf", "pipe", "zstd"} {
		data, err := os.ReadFile(filepath.Join("testdata", name+".data"))
		require.NoError(t, err)
		r, err := OpenMapped(filepath.Join("testdata", name+".data"))
		require.NoError(t, err)
		require.Equal(t, name != "pipe", r.Mapped(), name)
		r.Close()
		cuts := []int{len(data)}
		for cut := 0; cut < len(data); cut += 1 + cut/61 {
			cuts = append(cuts, cut)
		}
		for _, cut := range cuts {
			p := filepath.Join(dir, "cut.data")
			require.NoError(t, os.WriteFile(p, data[:cut], 0o600))
			want, wantErr := sortedRecords(t, Open, p)
			got, gotErr := sortedRecords(t, OpenMapped, p)
			require.Equal(t, wantErr, gotErr, "%s cut at %d", name, cut)
			require.Equal(t, len(want), len(got), "%s cut at %d", name, cut)
			for i := range want {
				if !reflect.DeepEqual(want[i], got[i]) {
					t.Fatalf("%s cut at %d: record %d differs:\nOpen:       %+v\nOpenMapped: %+v", name, cut, i, want[i], got[i])
				}
			}
		}
	}
}
