package elfcache

import (
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dwzHeader is shared by both programs, so that dwz -m moves the inline
// functions' abstract instances (names in .debug_str) and types into the
// common file.
const dwzHeader = `
struct point { int x, y; const char *label; };
static inline __attribute__((always_inline)) int norm(struct point *p) { return p->x * p->x + p->y * p->y; }
static inline __attribute__((always_inline)) int scaled(struct point *p, int k) { return norm(p) * k + 1; }
int shared_helper(struct point *p);
`

var dwzProgs = map[string]string{
	"a": `#include "common.h"
__attribute__((noinline)) int shared_helper(struct point *p) { return scaled(p, 3); }
__attribute__((noinline)) int work_a(int v) { struct point p = {v, v + 1, "a"}; return scaled(&p, 2) + shared_helper(&p); }
int main(int argc, char **argv) { return work_a(argc); }
`,
	"b": `#include "common.h"
__attribute__((noinline)) int shared_helper(struct point *p) { return scaled(p, 5); }
__attribute__((noinline)) int work_b(int v) { struct point p = {v * 2, v, "b"}; return scaled(&p, 7) - shared_helper(&p); }
int main(int argc, char **argv) { return work_b(argc); }
`,
}

// TestDWZ checks debug files that Debian's dwz made share a supplementary
// file: the source frames (function names of inlined calls, files, lines)
// at every address of every function must equal those read from the debug
// files before dwz. Layouts: the GNU .gnu_debugaltlink with
// DW_FORM_GNU_ref_alt/strp_alt, and DWARF 5's .debug_sup with the _sup
// forms (dwz -5); the supplementary file found by its recorded path under
// a debug directory, next to the debug file, in .dwz/ of the debug
// directory, and by build-id.
func TestDWZ(t *testing.T) {
	for _, c := range []struct {
		name   string
		dwarf5 bool   // .debug_sup instead of .gnu_debugaltlink
		altArg string // dwz -M
		place  func(debugDir, common string) string
	}{
		{name: "gnu_altlink_path_under_debug_dir", altArg: "/usr/lib/debug/.dwz/common.debug",
			place: func(d, _ string) string { return filepath.Join(d, ".dwz", "common.debug") }},
		{name: "gnu_altlink_next_to_debug_file", altArg: "/elsewhere/common.debug",
			place: func(d, _ string) string { return filepath.Join(d, "common.debug") }},
		{name: "gnu_altlink_dwz_dir", altArg: "/elsewhere/common.debug",
			place: func(d, _ string) string { return filepath.Join(d, ".dwz", "common.debug") }},
		{name: "gnu_altlink_build_id", altArg: "/elsewhere/common.debug",
			place: func(d, common string) string {
				id := readelfBuildID(t, common)
				return filepath.Join(d, ".build-id", id[:2], id[2:]+".debug")
			}},
		{name: "debug_sup_dwz_dir", dwarf5: true, altArg: "/usr/lib/debug/.dwz/common.debug",
			place: func(d, _ string) string { return filepath.Join(d, ".dwz", "common.debug") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			debugDir := filepath.Join(dir, "debug")
			common := buildDWZ(t, dir, c.dwarf5, c.altArg)
			// Install the debug files by build-id, the common file where
			// the case says.
			for name := range dwzProgs {
				id := readelfBuildID(t, filepath.Join(dir, name))
				dst := filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug")
				require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
				require.NoError(t, os.Rename(filepath.Join(dir, name+".debug"), dst))
			}
			dsts := []string{c.place(debugDir, common)}
			if c.name == "gnu_altlink_next_to_debug_file" {
				// Next to the debug files: in their .build-id/xx/.
				dsts = nil
				for name := range dwzProgs {
					id := readelfBuildID(t, filepath.Join(dir, name))
					dsts = append(dsts, filepath.Join(debugDir, ".build-id", id[:2], "common.debug"))
				}
			}
			for _, dst := range dsts {
				require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
				if _, err := os.Stat(dst); err != nil { // both in one .build-id/xx
					require.NoError(t, os.Link(common, dst))
				}
			}

			inlined, checked := 0, 0
			for name := range dwzProgs {
				ref := mustOpen(t, filepath.Join(dir, name+".full"), Options{NoDebugFile: true})
				refDebug := mustOpen(t, filepath.Join(dir, name+".debug.orig"), Options{NoDebugFile: true})
				o := mustOpen(t, filepath.Join(dir, name), Options{DebugDirs: []string{debugDir}})
				require.NotNil(t, o.DebugFile(), "%s: debug file not found", name)
				require.NoError(t, o.SourceError())
				assert.NotEmpty(t, o.Sources().Supplementary, "%s: no supplementary file", name)
				for _, s := range ref.Symbols() {
					for a := s.Addr; a < s.Addr+s.Size; a++ {
						want := refDebug.SourceFrames(a, nil)
						got := o.SourceFrames(a, nil)
						if !assert.Equal(t, want, got, "%s at %#x (%s)", name, a, s.Name) {
							return
						}
						checked++
						for _, f := range got {
							if f.Inlined {
								inlined++
								assert.NotEmpty(t, f.Function, "%s at %#x: inlined call without a name", name, a)
							}
						}
					}
				}
			}
			t.Logf("%d addresses, %d inlined frames alike", checked, inlined)
			require.Greater(t, inlined, 10)
		})
	}
}

// buildDWZ compiles dwzProgs in dir (NAME, NAME.full, NAME.debug.orig) and
// runs dwz -m over their debug files (NAME.debug), which then refer to the
// returned common file.
func buildDWZ(t testing.TB, dir string, dwarf5 bool, altArg string) (common string) {
	for _, tool := range []string{"gcc", "dwz", "objcopy", "strip"} {
		needTool(t, tool)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "common.h"), []byte(dwzHeader), 0o644))
	var debugs []string
	for name, src := range dwzProgs {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".c"), []byte(src), 0o644))
		full := filepath.Join(dir, name+".full")
		run(t, "gcc", "-g", "-O2", "-o", full, filepath.Join(dir, name+".c"))
		run(t, "objcopy", "--only-keep-debug", full, filepath.Join(dir, name+".debug"))
		run(t, "strip", "--strip-all", "-o", filepath.Join(dir, name), full)
		debugs = append(debugs, filepath.Join(dir, name+".debug"))
	}
	// Keep the un-dwz'd debug files as the reference.
	for _, d := range debugs {
		data, err := os.ReadFile(d)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(d+".orig", data, 0o644))
	}
	common = filepath.Join(dir, "common.debug")
	args := []string{"-m", common, "-M", altArg}
	if dwarf5 {
		args = append(args, "-5")
	}
	run(t, "dwz", append(args, debugs...)...)
	sec := ".gnu_debugaltlink"
	if dwarf5 {
		sec = ".debug_sup"
	}
	for _, d := range debugs {
		o, err := Open(d, Options{NoDebugFile: true})
		require.NoError(t, err)
		require.NotNil(t, o.section(sec), "dwz wrote no %s in %s", sec, d)
		o.Close()
	}
	return common
}

// FuzzDWZ damages a dwz'd debug file or its supplementary file (GNU and
// DWARF 5 forms; each input names which, a section, an offset and bytes
// to write there) and checks that reading the altlink or .debug_sup and
// resolving names through the supplementary file neither panics nor
// hangs.
func FuzzDWZ(f *testing.F) {
	type pair struct {
		debug, common []byte
		addrs         []uint64
	}
	var pairs []pair
	for _, dwarf5 := range []bool{false, true} {
		dir := f.TempDir()
		common := buildDWZ(f, dir, dwarf5, "/usr/lib/debug/.dwz/common.debug")
		var p pair
		var err error
		p.debug, err = os.ReadFile(filepath.Join(dir, "a.debug"))
		require.NoError(f, err)
		p.common, err = os.ReadFile(common)
		require.NoError(f, err)
		ref := mustOpen(f, filepath.Join(dir, "a.full"), Options{NoDebugFile: true})
		for _, s := range ref.Symbols() {
			for a := s.Addr; a < s.Addr+s.Size; a += 3 {
				p.addrs = append(p.addrs, a)
			}
		}
		pairs = append(pairs, p)
	}
	for k := 0; k < 8; k++ {
		f.Add(uint8(k&1), k&2 != 0, uint8(k*5), uint32(k*41), []byte{0xff, 0x7f, 0x80, 0})
	}
	f.Fuzz(func(t *testing.T, which uint8, inCommon bool, secIdx uint8, off uint32, patch []byte) {
		defer failIfSlow(10 * time.Second)()
		p := pairs[int(which)%len(pairs)]
		debug, common := append([]byte(nil), p.debug...), append([]byte(nil), p.common...)
		target := debug
		if inCommon {
			target = common
		}
		if o, err := OpenBytes("t", target, Options{}); err == nil {
			var secs []Section
			for _, s := range o.Sections() {
				if (strings.HasPrefix(s.Name, ".debug_") || s.Name == ".gnu_debugaltlink") && s.Type != elf.SHT_NOBITS {
					secs = append(secs, s)
				}
			}
			o.Close()
			if len(secs) > 0 {
				s := secs[int(secIdx)%len(secs)]
				if s.Size > 0 && s.Offset+s.Size <= uint64(len(target)) {
					at := s.Offset + uint64(off)%s.Size
					copy(target[at:min(s.Offset+s.Size, at+uint64(len(patch)))], patch)
				}
			}
		}
		d, err := OpenBytes("a.debug", debug, Options{MaxSectionSize: 1 << 24})
		if err != nil {
			return
		}
		defer d.Close()
		d.readAltLink()
		if c, err := OpenBytes("common.debug", common, Options{MaxSectionSize: 1 << 24}); err == nil {
			c.supChecksum()
			d.altOnce.Do(func() { d.alt = c }) // as findAlt would
		}
		var buf []SourceFrame
		for _, a := range p.addrs {
			buf = d.SourceFrames(a, buf[:0])
		}
		d.SourceError()
	})
}
