package report

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/perfdata"
)

// TestRunSharedCache: runs given one Options.Cache print what runs without
// it print, open each object once between them, and hold none after.
func TestRunSharedCache(t *testing.T) {
	data, err := os.ReadFile(damagedData)
	require.NoError(t, err)
	run := func(c *elfcache.Cache) string {
		r, err := perfdata.NewFileReader(bytes.NewReader(data), int64(len(data)))
		require.NoError(t, err)
		var names []string
		for _, a := range r.Session().Attrs {
			names = append(names, a.Name)
		}
		var buf bytes.Buffer
		tw := NewTextWriter(&buf, EventWidth(names), false)
		_, err = Run(r, Options{Kallsyms: "-", Cache: c, SectionCache: testSections(t)}, tw.Write)
		require.NoError(t, err)
		tw.Flush()
		return buf.String()
	}
	alone := run(nil)
	require.Contains(t, alone, "main+0x", "the fixture's stacks are not symbolized on this machine")

	c := elfcache.NewCache(elfcache.Options{SectionCache: testSections(t)})
	defer c.Close()
	first := run(c)
	st := c.Stats()
	require.Equal(t, alone, first)
	require.NotZero(t, st.Misses, "nothing was opened through the cache")
	require.Zero(t, st.InUse, "Run kept references to the cache's objects")

	second := run(c)
	require.Equal(t, alone, second)
	st2 := c.Stats()
	require.Equal(t, st.Misses, st2.Misses, "the second run opened objects again")
	require.Equal(t, st.Objects, st2.Objects)
}
