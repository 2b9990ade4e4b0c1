package perfdata

import (
	"fmt"
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

// TestOpenChunked: a file OpenMapped reads in chunks (made small here, so
// that records cross their ends and some are larger than one), through a
// Sorter, gives the records Open gives, with the same errors, whole and
// cut at many offsets; so it does when the samples are released as they
// come or some time later, their chunks then read into again while queued
// samples still share others.
func TestOpenChunked(t *testing.T) {
	defer func(from int64, size int) { chunkedFromSize, chunkBytes = from, size }(chunkedFromSize, chunkBytes)
	chunkedFromSize, chunkBytes = 0, 4096
	dir := t.TempDir()
	for _, name := range []string{"dwarf", "zstd"} {
		data, err := os.ReadFile(filepath.Join("testdata", name+".data"))
		require.NoError(t, err)
		r, err := OpenMapped(filepath.Join("testdata", name+".data"))
		require.NoError(t, err)
		require.False(t, r.Mapped(), name)
		require.NotNil(t, r.free, name)
		r.Close()
		cuts := []int{len(data)}
		for cut := 0; cut < len(data); cut += 1 + cut/41 {
			cuts = append(cuts, cut)
		}
		for _, cut := range cuts {
			p := filepath.Join(dir, "cut.data")
			require.NoError(t, os.WriteFile(p, data[:cut], 0o600))
			want, wantErr := sortedRecords(t, Open, p)
			for _, lag := range []int{-1, 0, 5} {
				got, gotErr, reused := releasedRecords(t, p, lag)
				what := fmt.Sprintf("%s cut at %d, released %d samples behind", name, cut, lag)
				require.Equal(t, wantErr, gotErr, what)
				require.Equal(t, len(want), len(got), what)
				for i := range want {
					if !reflect.DeepEqual(want[i], got[i]) {
						t.Fatalf("%s: record %d differs:\nOpen:      %+v\nin chunks: %+v", what, i, want[i], got[i])
					}
				}
				if name == "dwarf" && cut == len(data) && lag >= 0 {
					require.Greater(t, reused, 0, "%s: chunks read into again", what)
				}
			}
		}
	}
}

// releasedRecords is sortedRecords through OpenMapped, each sample copied
// only when lag more have come after it (never with lag -1), then
// released; reused counts the chunks taken back from the Reader's free
// list.
func releasedRecords(t *testing.T, path string, lag int) ([]Record, string, int) {
	t.Helper()
	r, err := OpenMapped(path)
	if err != nil {
		return nil, "open: " + err.Error(), 0
	}
	defer r.Close()
	s := NewSorter(r, 0)
	var out []Record
	var held []int // indexes in out of the samples not yet copied
	reused := 0
	settle := func(keep int) {
		for len(held) > keep {
			smp := out[held[0]].(*Sample)
			out[held[0]] = smp.Clone()
			smp.Release()
			if len(r.free) > 0 {
				reused++
			}
			held = held[1:]
		}
	}
	for {
		rec, err := s.Next()
		if err != nil {
			settle(0)
			if err == io.EOF {
				return out, "", reused
			}
			return out, err.Error(), reused
		}
		if smp, ok := rec.(*Sample); ok && smp.chunk != nil && lag >= 0 {
			out = append(out, smp)
			held = append(held, len(out)-1)
			settle(lag)
			continue
		}
		out = append(out, rec.Clone())
	}
}
