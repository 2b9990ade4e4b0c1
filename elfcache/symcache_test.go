package elfcache

import (
	"debug/dwarf"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
)

// symbolView is everything an object answers from its symbol tables: the
// symbols, where they came from, what Symbolize says at each symbol's
// start, middle and end, and FunctionNamed for every name (and one that is
// not there).
type symbolView struct {
	Syms    []Symbol
	From    Origin
	At      []string
	ByName  map[string]uint64
	Missing bool
}

func viewSymbols(t *testing.T, path string, opts Options) symbolView {
	t.Helper()
	o, err := Open(path, opts)
	require.NoError(t, err)
	defer o.Close()
	require.NoError(t, o.SymbolsError())
	v := symbolView{Syms: o.Symbols(), From: o.symFrom, ByName: map[string]uint64{}}
	for _, s := range v.Syms {
		for _, a := range []uint64{s.Addr, s.Addr + s.Size/2, s.Addr + s.Size - 1, s.Addr + s.Size} {
			name, off, ok := o.Symbolize(a)
			v.At = append(v.At, fmt.Sprintf("%#x %s+%#x %v", a, name, off, ok))
		}
		name, _, _ := strings.Cut(s.Name, "@")
		if a, ok := o.FunctionNamed(name); ok {
			v.ByName[name] = a
		}
	}
	_, v.Missing = o.FunctionNamed("no such function in any table")
	return v
}

// cacheEntries returns the SectionCache entries of dir whose names start
// with prefix.
func cacheEntries(t *testing.T, dir, prefix string) []string {
	var out []string
	for _, e := range testprog.Files(dir) {
		if strings.HasPrefix(filepath.Base(e), prefix) {
			out = append(out, e)
		}
	}
	return out
}

// TestSymbolTablesBuiltThenMapped: the report that builds an object's
// symbol table and function names holds them as the next report will,
// mapped from the entries it wrote, not on its heap (a large program's
// are megabytes, which the collector's headroom doubles), and they answer
// as the tables built without a cache do.
func TestSymbolTablesBuiltThenMapped(t *testing.T) {
	needFile(t, libcAMD64)
	want := viewSymbols(t, libcAMD64, Options{})
	c, err := NewSectionCache(t.TempDir(), 0)
	require.NoError(t, err)
	o, err := Open(libcAMD64, Options{SectionCache: c})
	require.NoError(t, err)
	defer o.Close()
	o.Symbols()
	require.NotNil(t, o.syms)
	assert.Equal(t, int64(len(o.syms.names)), o.held.heap.Load(), "the table built is on the heap, not the entry's")
	_, ok := o.FunctionNamed("malloc")
	require.True(t, ok)
	o.cachedMu.Lock()
	mapped := len(o.cached)
	o.cachedMu.Unlock()
	assert.GreaterOrEqual(t, mapped, 2, "the tables built were not taken back from their entries")
	got := symbolView{Syms: o.Symbols(), From: o.symFrom, ByName: map[string]uint64{}}
	assert.Equal(t, want.Syms, got.Syms)
	assert.Equal(t, want.From, got.From)
	for name, addr := range want.ByName {
		a, ok := o.FunctionNamed(name)
		if !assert.True(t, ok, name) || !assert.Equal(t, addr, a, name) {
			break
		}
	}
}

// TestSymbolTableCache checks that the symbol table and the function names
// kept in a SectionCache answer as the tables built without one: cold,
// warm (used from the entries, not rebuilt), with and without the debug
// file (other tables, other entries: the fingerprint tells them apart),
// and after the entries were damaged (rebuilt).
func TestSymbolTableCache(t *testing.T) {
	needFile(t, libcAMD64)
	dir := t.TempDir()
	c, err := NewSectionCache(dir, 0)
	require.NoError(t, err)

	variants := map[string]Options{"with debug file": {}, "without": {NoDebugFile: true}}
	want := map[string]symbolView{}
	for name, opts := range variants {
		want[name] = viewSymbols(t, libcAMD64, opts)
		require.NotEmpty(t, want[name].Syms, name)
		require.NotEmpty(t, want[name].ByName, name)
		require.False(t, want[name].Missing)
	}
	o, err := Open(libcAMD64, Options{})
	require.NoError(t, err)
	withDebug := o.DebugFile() != nil
	o.Close()
	if withDebug {
		require.NotEqual(t, want["with debug file"].Syms, want["without"].Syms,
			"the debug file's .symtab has more than .dynsym: the test tells the two apart")
	}

	for _, name := range []string{"with debug file", "without", "with debug file", "without"} {
		opts := variants[name]
		opts.SectionCache = c
		assert.Equal(t, want[name], viewSymbols(t, libcAMD64, opts), name)
	}
	syms, names := cacheEntries(t, dir, symtabEntry), cacheEntries(t, dir, funcNamesEntry)
	n := 1
	if withDebug {
		n = 2
	}
	require.Len(t, syms, n, "one symbol table entry a variant")
	require.Len(t, names, n, "one function names entry a variant")

	// Warm: the tables come from the entries, mapped, and nothing is
	// written again.
	before := map[string]os.FileInfo{}
	for _, e := range append(syms, names...) {
		st, err := os.Stat(e)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), e)
		before[e] = st
	}
	o, err = Open(libcAMD64, Options{SectionCache: c})
	require.NoError(t, err)
	o.Symbols()
	assert.Equal(t, int64(len(o.syms.names)), o.held.heap.Load(), "only the names are in the heap")
	o.FunctionNamed("malloc")
	o.cachedMu.Lock()
	mapped := len(o.cached)
	o.cachedMu.Unlock()
	assert.GreaterOrEqual(t, mapped, 2, "both tables mapped from the cache")
	o.Close()
	for e, st := range before {
		now, err := os.Stat(e)
		require.NoError(t, err)
		assert.Equal(t, st.ModTime(), now.ModTime(), "%s not rewritten", e)
	}

	damage := map[string]func(b []byte) []byte{
		"truncated":        func(b []byte) []byte { return b[:len(b)/2] },
		"data bit flipped": func(b []byte) []byte { b[len(b)-1] ^= 0x10; return b },
		"count":            func(b []byte) []byte { b[sectionHdrSize+16]++; return b },
		"other source":     func(b []byte) []byte { b[24] ^= 1; return b },
		"header only":      func(b []byte) []byte { return b[:sectionHdrSize] },
	}
	for what, f := range damage {
		for _, e := range append(syms, names...) {
			b, err := os.ReadFile(e)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(e, f(b), 0o600))
		}
		for _, name := range []string{"with debug file", "without"} {
			opts := variants[name]
			opts.SectionCache = c
			assert.Equal(t, want[name], viewSymbols(t, libcAMD64, opts), "%s after damage: %s", name, what)
		}
		for _, e := range append(syms, names...) {
			b, err := os.ReadFile(e)
			require.NoError(t, err)
			assert.Equal(t, sectionMagic, string(b[:8]), "%s: %s rebuilt", what, e)
		}
	}
}

// aligned copies b to 8-byte aligned memory, as a mapped entry is.
func aligned(b []byte) []byte {
	words := make([]uint64, (len(b)+7)/8)
	out := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), len(words)*8)[:len(b)]
	copy(out, b)
	return out
}

// FuzzDecodeCachedTables feeds damaged entry contents to the decoders of
// the kept symbol table, function names and unit index (the SectionCache checks its
// entries' checksums, but a table must never be trusted to index within
// itself): they refuse it or give tables whose every lookup stays inside.
func FuzzDecodeCachedTables(f *testing.F) {
	if _, err := os.Stat(libcAMD64); err == nil {
		dir := f.TempDir()
		c, err := NewSectionCache(dir, 0)
		if err == nil {
			o, err := Open(libcAMD64, Options{SectionCache: c})
			if err == nil {
				o.Symbols()
				o.FunctionNamed("malloc")
				o.SourceFrames(o.Symbols()[len(o.Symbols())/2].Addr, nil)
				o.Close()
			}
			for _, e := range testprog.Files(dir) {
				if b, err := os.ReadFile(e); err == nil && len(b) > sectionHdrSize && strings.HasPrefix(filepath.Base(e), "@") {
					b = b[sectionHdrSize:]
					f.Add(b[:min(len(b), 4096)])
				}
			}
		}
	}
	f.Add([]byte(symtabMagic + "\x04\x03\x02\x01"))
	f.Add([]byte(funcNamesMagic))
	f.Add([]byte(unitsMagic + "\x04\x03\x02\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		b = aligned(b)
		if tab, _, ok := decodeSymtab(b); ok {
			for _, sp := range tab.spans {
				s := &tab.syms[sp.sym]
				_ = tab.names[s.nameOff : s.nameOff+s.nameLen]
			}
		}
		if spans, rs, maxHi, ok := decodeUnits(b, 1<<20, 1<<16); ok {
			for _, r := range rs {
				_ = spans[r.cu]
			}
			_ = maxHi
		}
		if fn, ok := decodeFuncNames(b); ok {
			for _, ents := range [][]nameEnt{fn.dyn, fn.all} {
				for _, e := range ents {
					_ = fn.text[e.off : e.off+e.n]
				}
			}
			fn.lookup(fn.all, "malloc")
			fn.lookup(fn.dyn, "")
		}
	})
}

// TestUnitIndexCache checks that the index of DWARF units kept in a
// SectionCache is the one scanUnits builds: a warm open uses it (a scan
// would write the entry again) and has the same units, address ranges and running
// maxima as an open without a cache.
func TestUnitIndexCache(t *testing.T) {
	fresh := libcWithDWARF(t, Options{})
	want := fresh.lineIndex()
	require.NotNil(t, want)
	require.NotEmpty(t, want.units)
	dir := t.TempDir()
	c, err := NewSectionCache(dir, 0)
	require.NoError(t, err)
	spans := func(x *lineIndex) []unitSpan {
		var out []unitSpan
		for i := range x.units {
			out = append(out, x.units[i].span)
			assert.Equal(t, x.units[i].off, dwarf.Offset(x.units[i].span.die))
		}
		return out
	}
	var written time.Time // the entry's, after the cold run
	for _, run := range []string{"cold", "warm"} {
		o := libcWithDWARF(t, Options{SectionCache: c})
		got := o.lineIndex()
		require.NotNil(t, got, run)
		assert.Equal(t, spans(want), spans(got), run)
		assert.Equal(t, want.rs, got.rs, run)
		assert.Equal(t, want.maxHi, got.maxHi, run)
		assert.Equal(t, run == "warm", got.mappedRanges, "%s: ranges mapped from the entry (not counted held)", run)
		o.Close()
		entries := cacheEntries(t, dir, unitsEntry)
		require.Len(t, entries, 1, run)
		st, err := os.Stat(entries[0])
		require.NoError(t, err)
		if run == "warm" {
			assert.Equal(t, written, st.ModTime(), "the warm run used the entry: it did not write it again")
		}
		written = st.ModTime()
	}
	fresh.Close()
}

// TestDropMappedKeepsBytes: dropMapped lets pages of a mapping go, and
// must never touch bytes on the heap (MADV_DONTNEED on anonymous memory
// would zero them). libc's debug file's .debug_info, compressed, comes
// decompressed onto the heap without a SectionCache and mapped from one
// with it; the file's own .symtab is mapped, or read with NoMmap. Each is
// dropped and must read back as it was.
func TestDropMappedKeepsBytes(t *testing.T) {
	needFile(t, libcAMD64)
	c, err := NewSectionCache(t.TempDir(), 0)
	require.NoError(t, err)
	for name, opts := range map[string]Options{"heap": {}, "cache": {SectionCache: c}, "read": {NoMmap: true}} {
		o, err := Open(libcAMD64, opts)
		require.NoError(t, err)
		owner := o
		if d := o.DebugFile(); d != nil {
			owner = d
		}
		checked := 0
		for _, sec := range []string{".debug_info", ".symtab", ".dynsym", ".text"} {
			s := owner.section(sec)
			if s == nil || s.Type == elf.SHT_NOBITS {
				continue
			}
			b, err := owner.sectionData(s)
			if err != nil || len(b) < 3*4096 {
				continue
			}
			want := append([]byte(nil), b...)
			owner.dropMapped(b)
			owner.dropMapped(b[4097 : len(b)-5]) // not on a page
			require.Equal(t, want, b, "%s: %s changed by dropMapped", name, sec)
			checked++
		}
		require.NotZero(t, checked, name)
		o.Close()
	}
}
