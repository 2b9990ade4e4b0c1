package unwinder_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/unwinder"
)

// TestAddressSpaceKeepsTags checks that each mapping's caller Tag travels
// with it through NewAddressSpace's sorting, clipping and dropping, so that a
// Frame's Mapping index leads back to the caller's own record.
func TestAddressSpaceKeepsTags(t *testing.T) {
	space := unwinder.NewAddressSpace([]unwinder.Mapping{
		{Start: 0x5000, End: 0x6000, Name: "c", Tag: 30},
		{Start: 0x1000, End: 0x3000, Name: "a", Tag: 10}, // clipped by b
		{Start: 0x4000, End: 0x4000, Name: "empty", Tag: 99},
		{Start: 0x2000, End: 0x3000, Name: "b", Tag: 20},
		{Start: 0x7000, End: 0x7000 + 0x1000, Name: "d", Tag: 40, Exec: true},
	})
	require.Equal(t, 4, space.Len())
	want := []struct {
		start, end uint64
		name       string
		tag        int
	}{
		{0x1000, 0x2000, "a", 10},
		{0x2000, 0x3000, "b", 20},
		{0x5000, 0x6000, "c", 30},
		{0x7000, 0x8000, "d", 40},
	}
	for i, w := range want {
		m := space.Mapping(i)
		assert.Equal(t, w.start, m.Start, "mapping %d", i)
		assert.Equal(t, w.end, m.End, "mapping %d", i)
		assert.Equal(t, w.name, m.Name, "mapping %d", i)
		assert.Equal(t, w.tag, m.Tag, "mapping %d", i)
	}
	assert.Equal(t, 10, space.Mapping(space.Find(0x1fff)).Tag)
	assert.Equal(t, 40, space.Mapping(space.Find(0x7000)).Tag)
	assert.Equal(t, -1, space.Find(0x4000))
}
