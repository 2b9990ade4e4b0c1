package resolve

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fetcher serves one file as the "executable" of one build-id (what a
// debuginfod client returns: the path of a local copy) and counts the
// requests by kind.
type fetcher struct {
	id   string
	file string

	mu    sync.Mutex
	asked map[string]int
}

var errNoSuchFile = errors.New("no such file on the server")

func (f *fetcher) Fetch(_ context.Context, buildID []byte, kind string) (string, error) {
	f.mu.Lock()
	f.asked[kind]++
	f.mu.Unlock()
	if string(buildID) == f.id && kind == "executable" {
		return f.file, nil
	}
	return "", errNoSuchFile
}

// TestFetcher: an object found in no local source is fetched by build-id,
// and only then (the file on disk comes first); Objects says it came from
// the fetcher; a build-id the fetcher has not got is missing with the
// fetcher's reason; Prepare opens what NewSpace then uses without asking
// again.
func TestFetcher(t *testing.T) {
	maps, id := exampleMaps(t)
	with := func(path string, buildID []byte) []Mapping {
		out := make([]Mapping, len(maps))
		for i, m := range maps {
			m.Path, m.BuildID = path, buildID
			out[i] = Mapping{Map: m}
		}
		return out
	}
	newFetcher := func() *fetcher {
		return &fetcher{id: string(id), file: filepath.Join(exampleSymFS, examplePath), asked: map[string]int{}}
	}

	t.Run("local file first", func(t *testing.T) {
		f := newFetcher()
		r := New(Options{SymFS: exampleSymFS, Fetcher: f})
		defer r.Close()
		r.NewSpace(1, with(examplePath, id))
		assert.Zero(t, f.asked["executable"])
		objs := r.Objects()
		require.Len(t, objs, 1)
		assert.Equal(t, FoundFile, objs[0].FoundIn)
	})
	t.Run("fetched by build-id", func(t *testing.T) {
		f := newFetcher()
		r := New(Options{SymFS: t.TempDir(), Fetcher: f})
		defer r.Close()
		r.Prepare("/gone/prog", id)
		s := r.NewSpace(1, with("/gone/prog", id))
		assert.Equal(t, 1, f.asked["executable"], "asked again after Prepare")
		found := false
		for i := 0; i < s.AddressSpace().Len(); i++ {
			found = found || s.Object(i) != nil
		}
		assert.True(t, found, "the fetched object is not used")
		assert.Empty(t, r.Missing())
		objs := r.Objects()
		require.Len(t, objs, 1)
		assert.Equal(t, "/gone/prog", objs[0].Path)
		assert.Equal(t, FoundDebuginfod, objs[0].FoundIn)
		assert.Equal(t, id, objs[0].BuildID)
	})
	t.Run("not on the server", func(t *testing.T) {
		f := newFetcher()
		root := t.TempDir()
		r := New(Options{SymFS: root, Fetcher: f})
		defer r.Close()
		r.NewSpace(1, with("/gone/prog", []byte{1, 2, 3, 4}))
		why := r.Missing()["/gone/prog"]
		assert.Contains(t, why, "not found under "+root+"; ")
		assert.Contains(t, why, "01020304")
		assert.Contains(t, why, errNoSuchFile.Error())
		assert.NotContains(t, why, "/gone/prog", "the summary names the path already")
		assert.Empty(t, r.Objects())
	})
}
