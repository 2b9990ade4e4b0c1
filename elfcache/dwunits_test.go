package elfcache

import (
	"debug/dwarf"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

// dwarfUnitsByDebugDWARF lists the compilation and skeleton units of d
// with their ranges as debug/dwarf reads them: the truth scanUnits is held
// to.
func dwarfUnitsByDebugDWARF(t *testing.T, d *dwarf.Data) (offs []dwarf.Offset, ranges [][][2]uint64) {
	r := d.Reader()
	for {
		e, err := r.Next()
		require.NoError(t, err)
		if e == nil {
			return offs, ranges
		}
		if e.Tag == dwarf.TagCompileUnit || e.Tag == dwarf.TagSkeletonUnit {
			rs, err := d.Ranges(e)
			require.NoError(t, err, "unit at %#x", e.Offset)
			offs = append(offs, e.Offset)
			ranges = append(ranges, rs)
		}
		r.SkipChildren()
	}
}

// checkScanUnits compares scanUnits on o's DWARF with debug/dwarf's reading
// of all its units and returns how many units there are, how many refer
// across units and how many have a range list.
func checkScanUnits(t *testing.T, o *Object) (units, cross, lists int) {
	t.Helper()
	secs, err := o.dwarfSections()
	require.NoError(t, err)
	require.NotNil(t, secs.info, "%s: no DWARF", o.path)
	d, err := newDWARF(o.path, secs, secs.info)
	require.NoError(t, err)
	offs, ranges := dwarfUnitsByDebugDWARF(t, d)
	got, err := scanUnits(secs)
	require.NoError(t, err)
	require.Len(t, got, len(offs), "%s: units", o.path)
	for i, u := range got {
		require.Equal(t, uint64(offs[i]), u.die, "%s: unit %d", o.path, i)
		assert.Equal(t, ranges[i], u.ranges, "%s: ranges of the unit at %#x", o.path, u.die)
		if refersAcrossUnits(secs.abbrev, u.abbrev) {
			cross++
		}
		if len(u.ranges) > 1 {
			lists++
		}
	}
	return len(got), cross, lists
}

// TestScanUnits holds the unit index to debug/dwarf's reading of the same
// files: the same units, in order, with the same address ranges, for
// gcc's DWARF 4 and 5 (low_pc/high_pc and .debug_ranges/.debug_rnglists
// offsets), gcc's split DWARF skeletons, clang's DWARF 5 (addrx,
// rnglistx) and glibc's debug file.
func TestScanUnits(t *testing.T) {
	dir := t.TempDir()
	type build struct {
		cc, name string
		flags    []string
	}
	builds := []build{
		{"gcc", "gcc4", []string{"-O2", "-g", "-gdwarf-4"}},
		{"gcc", "gcc4fs", []string{"-O2", "-g", "-gdwarf-4", "-ffunction-sections"}},
		{"gcc", "gcc5", []string{"-O2", "-g", "-gdwarf-5"}},
		{"gcc", "gcc5split", []string{"-O2", "-g", "-gdwarf-5", "-gsplit-dwarf"}},
		{"gcc", "gcc5fs", []string{"-O2", "-g", "-gdwarf-5", "-ffunction-sections"}},
		{"clang", "clang5", []string{"-O2", "-g", "-gdwarf-5", "-ffunction-sections"}},
		{"clang", "clang4", []string{"-O2", "-g", "-gdwarf-4", "-ffunction-sections"}},
	}
	for _, b := range builds {
		t.Run(b.name, func(t *testing.T) {
			bin := testprog.Compile(t, b.cc, dir, b.name+".c", cInline, b.flags...)
			o := mustOpen(t, bin, Options{NoDebugFile: true})
			n, _, lists := checkScanUnits(t, o)
			assert.Positive(t, n)
			assert.Positive(t, lists, "units with a range list (gcc -O2 puts main in .text.startup)")
		})
	}
	t.Run("libc", func(t *testing.T) {
		o := libcWithDWARF(t, Options{})
		defer o.Close()
		n, cross, lists := checkScanUnits(t, o.DebugFile())
		t.Logf("libc: %d units, %d with DW_FORM_ref_addr, %d with a range list", n, cross, lists)
		assert.Greater(t, n, 100)
		assert.Positive(t, lists)
	})
}

// TestSourceFramesReadsOneUnit checks that looking up libc addresses reads
// only the units they are in, each from its own slice of .debug_info:
// debug/dwarf's reading of all units (slow to make: every unit's
// abbreviations) is never made for glibc's DWARF, which has no
// cross-unit references.
func TestSourceFramesReadsOneUnit(t *testing.T) {
	o := libcWithDWARF(t, Options{})
	defer o.Close()
	var buf []SourceFrame
	n := 0
	for _, a := range sampleAddrs(o, 50, nil) {
		buf = o.SourceFrames(a, buf[:0])
		if len(buf) > 0 && buf[0].Line > 0 {
			n++
		}
	}
	require.Greater(t, n, 25, "lookups with a source line")
	x := o.lineIndex()
	x.mu.Lock()
	defer x.mu.Unlock()
	assert.True(t, x.perUnit)
	assert.Nil(t, x.d, "debug/dwarf read all units")
	assert.NotEmpty(t, x.live)
	assert.Less(t, len(x.live), len(x.units)/10, "units parsed")
}

// FuzzScanUnits feeds damaged .debug_info and .debug_abbrev of a gcc and
// a clang program to scanUnits and checks that it does not panic and that
// what it returns lies inside the section.
func FuzzScanUnits(f *testing.F) {
	dir := f.TempDir()
	var seeds []dwarfSecs
	for _, b := range []struct {
		cc    string
		flags []string
	}{{"gcc", []string{"-O2", "-g", "-gdwarf-4"}}, {"gcc", []string{"-O2", "-g", "-gdwarf-5", "-gsplit-dwarf"}}, {"clang", []string{"-O2", "-g", "-gdwarf-5"}}} {
		bin := testprog.Compile(f, b.cc, dir, b.cc+".c", cInline, b.flags...)
		o := mustOpen(f, bin, Options{NoDebugFile: true})
		s, err := o.dwarfSections()
		if err != nil || s.info == nil {
			f.Fatalf("%s: no DWARF (%v)", bin, err)
		}
		seeds = append(seeds, s)
	}
	for i, s := range seeds {
		f.Add(uint8(i), uint32(0), s.info[:min(len(s.info), 64)], false)
		f.Add(uint8(i), uint32(0), s.abbrev[:min(len(s.abbrev), 32)], true)
		f.Add(uint8(i), uint32(11), []byte{0xff, 0xff, 0x80}, false)
	}
	f.Fuzz(func(t *testing.T, which uint8, off uint32, patch []byte, inAbbrev bool) {
		s := seeds[int(which)%len(seeds)]
		sec := &s.info
		if inAbbrev {
			sec = &s.abbrev
		}
		b := append([]byte(nil), (*sec)...)
		if len(b) > 0 {
			at := int(off % uint32(len(b)))
			copy(b[at:], patch)
			if off&(1<<31) != 0 {
				b = b[:at] // truncated
			}
		}
		*sec = b
		units, _ := scanUnits(s)
		for _, u := range units {
			if u.start >= u.die || u.die > u.end || u.end > uint64(len(s.info)) {
				t.Fatalf("unit %+v outside .debug_info of %d bytes", u.unitSpan, len(s.info))
			}
			refersAcrossUnits(s.abbrev, u.abbrev)
		}
	})
}

// TestSourceFramesCrossUnitRefs runs dwz on one executable of two units
// sharing a header: dwz moves the shared entries into a partial unit that
// both units refer to with DW_FORM_ref_addr, so those units must be read
// by debug/dwarf over all units. Frames are held to addr2line's.
func TestSourceFramesCrossUnitRefs(t *testing.T) {
	needTool(t, "dwz")
	needTool(t, "gcc")
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "common.h"), []byte(dwzHeader), 0o644))
	main := `#include "common.h"
__attribute__((noinline)) int work_a(int v) { struct point p = {v, v + 1, "a"}; return scaled(&p, 2) + shared_helper(&p); }
int main(int argc, char **argv) { return work_a(argc); }
`
	helper := `#include "common.h"
__attribute__((noinline)) int shared_helper(struct point *p) { return scaled(p, 3) + norm(p); }
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.c"), []byte(main), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "helper.c"), []byte(helper), 0o644))
	bin := filepath.Join(dir, "prog")
	testprog.Tool(t, dir, "gcc", "-O2", "-g", "-o", bin, "main.c", "helper.c")
	testprog.Tool(t, dir, "dwz", bin)
	o := mustOpen(t, bin, Options{NoDebugFile: true})
	secs, err := o.dwarfSections()
	require.NoError(t, err)
	units, err := scanUnits(secs)
	require.NoError(t, err)
	cross := 0
	for _, u := range units {
		if refersAcrossUnits(secs.abbrev, u.abbrev) {
			cross++
		}
	}
	if cross == 0 {
		t.Skip("dwz made no cross-unit references here")
	}
	compareA2L(t, o, bin, sampleAddrs(o, 200, nil))
	require.NoError(t, o.SourceError())
	x := o.lineIndex()
	x.mu.Lock()
	defer x.mu.Unlock()
	assert.NotNil(t, x.d, "units with DW_FORM_ref_addr read by debug/dwarf over all units")
}

// BenchmarkScanUnits builds glibc's unit index from its (decompressed)
// sections: what a report does before its first libc sample besides
// reading the sections.
func BenchmarkScanUnits(b *testing.B) {
	secs := libcSections(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := scanUnits(secs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScanUnitsDebugDWARF builds the same index with debug/dwarf (all
// units' abbreviations parsed by dwarf.New, then each unit's first entry
// and Data.Ranges), as lineIndex did before scanUnits: the figure to
// compare BenchmarkScanUnits with.
func BenchmarkScanUnitsDebugDWARF(b *testing.B) {
	secs := libcSections(b)
	b.ReportAllocs()
	for b.Loop() {
		d, err := newDWARF("libc", secs, secs.info)
		if err != nil {
			b.Fatal(err)
		}
		r := d.Reader()
		for {
			e, err := r.Next()
			if err != nil || e == nil {
				break
			}
			if e.Tag == dwarf.TagCompileUnit {
				d.Ranges(e)
			}
			r.SkipChildren()
		}
	}
}

// libcSections returns the DWARF sections of glibc's debug file.
func libcSections(b *testing.B) dwarfSecs {
	o := libcWithDWARF(b, Options{})
	b.Cleanup(func() { o.Close() })
	secs, err := o.DebugFile().dwarfSections()
	if err != nil {
		b.Fatal(err)
	}
	return secs
}
