package report

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/fixture"
	"github.com/ustack/ustack/perfdata"
)

// TestReturnAddressInNoMappingIsNoFrame takes the arm64 frame-pointer
// fixture (gdb: close, leaf, mid, top, main, ...), replaces the saved
// return address into top, found in the snapshot above mid's SP, by an
// address no mapping holds, and reports it in every format: the walk must
// end after close, leaf and mid with stop no_mapping and the address in
// the stop details, and no format may print a frame for it.
func TestReturnAddressInNoMappingIsNoFrame(t *testing.T) {
	f, err := fixture.Load(filepath.Join(fixture.Dir(), "fixtures", "aarch64", "a64_syscall_O2_fp.json"))
	if err != nil {
		t.Skip(err)
	}
	require.GreaterOrEqual(t, len(f.GDB), 4)
	require.Equal(t, "mid", f.GDB[2].Function)
	require.Equal(t, "top", f.GDB[3].Function)
	const bad = 0xdead0000
	for _, m := range f.Maps {
		require.False(t, m.Start <= bad && bad < m.End, "%#x is mapped (%s)", bad, m.Name)
	}
	stack := append([]byte(nil), f.Stack.Data...)
	// The slot holding top's return address: the first word above mid's
	// frame (its SP, gdb's sp of frame 2) that equals gdb's pc of frame 3.
	slot := -1
	for off := int(f.GDB[2].SP - f.Stack.Addr); off+8 <= len(stack); off += 8 {
		if binary.LittleEndian.Uint64(stack[off:]) == f.GDB[3].PC {
			slot = off
			break
		}
	}
	require.GreaterOrEqual(t, slot, 0, "top's return address is not in the snapshot")
	binary.LittleEndian.PutUint64(stack[slot:], bad)
	data := arm64PerfData(t, t.TempDir(), f, arm64PerfRegs(f), stack, f.Maps)

	r, err := perfdata.Open(data)
	require.NoError(t, err)
	defer r.Close()
	samples := collectSamples(t, r, Options{Kallsyms: "-", BuildIDDir: t.TempDir(), Jobs: 1})
	require.Len(t, samples, 1)
	s := samples[0]
	require.Equal(t, "no_mapping", s.Stop)
	require.Contains(t, s.StopErr, "0xdead0000")
	var names []string
	for _, fr := range s.Frames {
		require.NotEqual(t, uint64(bad), fr.PC, "the unmapped return address is a frame")
		if !fr.Kernel && !fr.Inlined {
			names = append(names, fr.Symbol)
		}
	}
	// gdb's first three frames; libc's close is also __close.
	require.Len(t, names, 3, "frames before the bad return address: %q", names)
	require.Contains(t, names[0], "close")
	require.Equal(t, []string{"leaf", "mid"}, names[1:], "frames before the bad return address")

	for _, format := range Formats() {
		t.Run(format, func(t *testing.T) {
			var out bytes.Buffer
			w, err := NewWriter(format, &out, WriterOptions{Session: r.Session(), Events: []string{"cpu-clock"}})
			require.NoError(t, err)
			require.NoError(t, w.Write(s))
			require.NoError(t, w.Close())
			text := out.String()
			if format == "pprof" {
				p, err := profile.Parse(&out)
				require.NoError(t, err)
				for _, loc := range p.Location {
					require.NotEqual(t, uint64(bad), loc.Address, "pprof location for the unmapped return address")
					require.NotNil(t, loc.Mapping, "pprof location %#x has no mapping", loc.Address)
				}
				require.Len(t, p.Sample, 1)
				require.Len(t, p.Sample[0].Location, 3, "pprof: close, leaf, mid")
				return
			}
			require.NotContains(t, text, "[unknown]", "%s prints an unknown frame", format)
			if format == "json" {
				// The address belongs in the stop details only.
				require.Equal(t, 1, strings.Count(text, "0xdead0000"), "json: the address outside stop_error")
				require.Contains(t, text, `"stop_error":"`)
				return
			}
			require.NotContains(t, strings.ToLower(text), "dead0000", "%s prints the unmapped return address", format)
			require.Contains(t, text, "mid")
		})
	}
}
