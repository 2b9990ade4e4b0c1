package elfcache

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testfiles"
)

// sameSlice compares two slices element by element (nil and empty alike).
func sameSlice[T any](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !reflect.DeepEqual(a[i], b[i]) {
			return false
		}
	}
	return true
}

func sameLines(a, b *cuLines) bool {
	return sameSlice(a.files, b.files) && sameSlice(a.rows, b.rows) && sameSlice(a.scopes, b.scopes) &&
		sameSlice(a.spans, b.spans) && reflect.DeepEqual(a.err, b.err)
}

func sameSites(a, b *cuCallSites) bool {
	if a == nil || b == nil {
		return (a == nil || len(a.sites)+len(a.tails)+len(a.funcs) == 0) && (b == nil || len(b.sites)+len(b.tails)+len(b.funcs) == 0)
	}
	return sameSlice(a.sites, b.sites) && sameSlice(a.tails, b.tails) && sameSlice(a.funcs, b.funcs)
}

// parseAll parses every unit of path's DWARF (its debug file's when it has
// one): lines and scopes, then call sites.
func parseAll(t *testing.T, path string, opts Options) ([]*cuLines, []*cuCallSites) {
	t.Helper()
	o, err := Open(path, opts)
	require.NoError(t, err)
	defer o.Close()
	owner := o
	if d := o.DebugFile(); d != nil {
		owner = d
	}
	lx := owner.lineIndex()
	require.NotNil(t, lx, "%s: no DWARF", path)
	cs := &callSites{lx: lx, obj: owner}
	var lines []*cuLines
	var sites []*cuCallSites
	for i := range lx.units {
		lx.mu.Lock()
		lines = append(lines, lx.parse(&lx.units[i]))
		lx.mu.Unlock()
		u, err := cs.parse(&lx.units[i])
		require.NoError(t, err, "%s: unit %d", path, i)
		sites = append(sites, u)
	}
	return lines, sites
}

// TestUnitParseCache: what parsing a unit makes is kept in the
// SectionCache and read back the same as parsing makes it, for every unit
// of glibc's debug file (libc6-dbg), the dynamic loader and a C++ program:
// cold (parsed and kept), warm (read, no unit's DWARF decoded), with
// entries damaged (parsed again and kept again), and never shared with
// another build of ustack (another key). A Go program's units, which refer to each
// other, are read with all units and not kept.
func TestUnitParseCache(t *testing.T) {
	testfiles.MustUnpack(t, testfiles.Dir())
	td := testfiles.Dir()
	for _, tc := range []struct {
		path string
		kept bool
	}{
		{filepath.Join(td, "minidumps", "x86_64", "bin", "cxx_threads"), true},
		{filepath.Join(td, "objects", "x86_64", "ld-linux-x86-64.so.2"), true},
		{libcAMD64, true},
		// Go's linker writes references across units: read with all
		// units, not alone, and not kept.
		{filepath.Join(td, "objects", "x86_64", "goprog"), false},
	} {
		path := tc.path
		needFile(t, path)
		t.Run(filepath.Base(path), func(t *testing.T) {
			want, wantSites := parseAll(t, path, Options{})
			dir := filepath.Join(t.TempDir(), "sections")
			c, err := NewSectionCache(dir, 0)
			require.NoError(t, err)
			opts := Options{SectionCache: c}
			check := func(what string, lines []*cuLines, sites []*cuCallSites) {
				t.Helper()
				require.Len(t, lines, len(want))
				for i := range want {
					require.True(t, sameLines(want[i], lines[i]), "%s: unit %d: lines and scopes differ from parsing's", what, i)
					require.True(t, sameSites(wantSites[i], sites[i]), "%s: unit %d: call sites differ from parsing's", what, i)
				}
			}

			lines, sites := parseAll(t, path, opts)
			check("cold", lines, sites)
			var kept []string
			for _, e := range filesUnder(t, dir) {
				if b := filepath.Base(e); strings.HasPrefix(b, cuLinesKind+"-") || strings.HasPrefix(b, cuSitesKind+"-") {
					kept = append(kept, e)
				}
			}
			t.Logf("%d units, %d entries kept", len(want), len(kept))
			if !tc.kept {
				require.Empty(t, kept)
				lines, sites = parseAll(t, path, opts)
				check("again", lines, sites)
				return
			}
			require.Equal(t, 2*len(want), len(kept), "every unit's lines and call sites are kept")

			decoded := unitsDecoded.Load()
			lines, sites = parseAll(t, path, opts)
			check("warm", lines, sites)
			require.Zero(t, unitsDecoded.Load()-decoded, "warm: a unit's DWARF was decoded though its parsing was kept")

			for _, e := range kept {
				b, err := os.ReadFile(e)
				require.NoError(t, err)
				b[len(b)-1] ^= 0x40
				require.NoError(t, os.WriteFile(e, b, 0o600))
			}
			lines, sites = parseAll(t, path, opts)
			check("damaged", lines, sites)
			lines, sites = parseAll(t, path, opts)
			check("kept again", lines, sites)

			// Another build of ustack reads none of this one's.
			defer func(f func() []byte) { selfBuildID = f }(selfBuildID)
			selfBuildID = func() []byte { return []byte("another build") }
			decoded = unitsDecoded.Load()
			lines, sites = parseAll(t, path, opts)
			check("another build", lines, sites)
			require.NotZero(t, unitsDecoded.Load()-decoded, "another build read this one's entries")
		})
	}
}

// filesUnder lists the files under dir.
func filesUnder(t *testing.T, dir string) []string {
	var out []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return err
	}))
	return out
}

// TestUnitParseEntryRefused: entries whose counts, indexes, offsets or
// order are not as parsing makes them are refused, and an entry made for
// another key (another unit, or another build of ustack) too.
func TestUnitParseEntryRefused(t *testing.T) {
	key := []byte("the key")
	cu := &cuLines{
		files:  []string{"a.c", "b.h"},
		rows:   []lineRow{{addr: 0x10, file: 0, line: 3}, {addr: 0x14, file: 1, line: 9}, {addr: 0x20, end: true}},
		scopes: []scope{{name: "f", linkage: "_Z1fv", entry: 0x10, parent: -1, callFile: -1}, {name: "g", entry: 0x14, parent: 0, inlined: true, callFile: 1, callLine: 9}},
		spans:  []scopeSpan{{lo: 0x10, hi: 0x14, scope: 0}, {lo: 0x14, hi: 0x18, scope: 1}, {lo: 0x18, hi: 0x20, scope: 0}},
	}
	b := encodeCULines(key, cu)
	got, ok := decodeCULines(b, key)
	require.True(t, ok)
	require.True(t, sameLines(cu, got))
	_, ok = decodeCULines(b, []byte("another key"))
	require.False(t, ok, "another key")

	hdr := cuHdrFixed + 8*5
	rows := hdr + 2*cuFileSize
	scopes := rows + 3*lineRowSize
	spans := scopes + 2*cuScopeSize
	for name, damage := range map[string]func(b []byte){
		"truncated":          func(b []byte) {},
		"row file":           func(b []byte) { b[rows+8] = 2 },
		"row order":          func(b []byte) { b[rows+lineRowSize] = 0 },
		"row end byte":       func(b []byte) { b[rows+16] = 2 },
		"scope parent":       func(b []byte) { b[scopes+cuScopeSize+24] = 1 },
		"scope call file":    func(b []byte) { b[scopes+cuScopeSize+28] = 2 },
		"scope name offset":  func(b []byte) { b[scopes+8] = 0x7f },
		"scope flags":        func(b []byte) { b[scopes+36] = 4 },
		"span scope":         func(b []byte) { b[spans+16] = 2 },
		"span order":         func(b []byte) { b[spans+cuSpanSize] = 0 },
		"span empty":         func(b []byte) { b[spans+8] = 0x10 },
		"count":              func(b []byte) { b[cuHdrFixed+8]++ },
		"magic":              func(b []byte) { b[0] = 'X' },
		"string count":       func(b []byte) { b[cuHdrFixed+32]-- },
		"file name too long": func(b []byte) { b[hdr+4] = 0x7f },
	} {
		d := append([]byte(nil), b...)
		if name == "truncated" {
			d = d[:len(d)-1]
		}
		damage(d)
		_, ok := decodeCULines(d, key)
		require.False(t, ok, name)
	}

	u := &cuCallSites{
		sites: []CallSite{{ReturnPC: 0x10, Func: 0x1, TargetName: "memcpy"}, {ReturnPC: 0x20, Func: 0x1, Target: 0x99, Tail: true}},
		tails: []CallSite{{ReturnPC: 0x20, Func: 0x1, Target: 0x99, Tail: true}},
		funcs: []funcSpan{{lo: 0x1, hi: 0x30, entry: 0x1}},
	}
	b = encodeCallSites(key, u)
	gotSites, ok := decodeCallSites(b, key)
	require.True(t, ok)
	require.True(t, sameSites(u, gotSites))
	sites := cuHdrFixed + 8*4
	for name, damage := range map[string]func(b []byte){
		"site order": func(b []byte) { b[sites+cuSiteSize] = 0 },
		"tail byte":  func(b []byte) { b[sites+40] = 3 },
		"name":       func(b []byte) { b[sites+32] = 0x7f },
	} {
		d := append([]byte(nil), b...)
		damage(d)
		_, ok := decodeCallSites(d, key)
		require.False(t, ok, name)
	}
}

// FuzzDecodeUnitEntries: no entry crashes the decoders, and one they
// accept reads back the same once encoded again.
func FuzzDecodeUnitEntries(f *testing.F) {
	key := []byte("k")
	f.Add(encodeCULines(key, &cuLines{files: []string{"x"}, rows: []lineRow{{addr: 1}, {addr: 2, end: true}},
		scopes: []scope{{name: "f", parent: -1, callFile: -1}}, spans: []scopeSpan{{lo: 1, hi: 2}}}))
	f.Add(encodeCallSites(key, &cuCallSites{sites: []CallSite{{ReturnPC: 1, TargetName: "g"}}, funcs: []funcSpan{{lo: 1, hi: 2, entry: 1}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if cu, ok := decodeCULines(b, key); ok {
			again, ok := decodeCULines(encodeCULines(key, cu), key)
			if !ok || !sameLines(cu, again) {
				t.Fatalf("lines accepted but not read back: %+v", cu)
			}
		}
		if u, ok := decodeCallSites(b, key); ok {
			again, ok := decodeCallSites(encodeCallSites(key, u), key)
			if !ok || !sameSites(u, again) {
				t.Fatalf("call sites accepted but not read back: %+v", u)
			}
		}
	})
}
