package kallsyms

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/filestamp"
)

// loadProc is LoadProc with its entry written at once, as report does
// after handing the table on.
func loadProc(dir string) (*Table, error) {
	t, store, err := LoadProc(dir, "")
	if store != nil {
		store()
	}
	return t, err
}

// readsWhole reports whether f made LoadProc read /proc/kallsyms whole
// (rather than answer from its entry or from perf's copy).
func readsWhole(f func()) bool {
	n := procReads.Load()
	f()
	return procReads.Load() > n
}

// fakeKernel stands in for the running kernel: a kallsyms file and a boot
// id file, restored when the test ends.
func fakeKernel(t *testing.T, text, boot string) (kallsymsFile, bootFile string) {
	t.Helper()
	d := t.TempDir()
	kallsymsFile, bootFile = filepath.Join(d, "kallsyms"), filepath.Join(d, "boot_id")
	require.NoError(t, os.WriteFile(kallsymsFile, []byte(text), 0o600))
	require.NoError(t, os.WriteFile(bootFile, []byte(boot+"\n"), 0o600))
	oldK, oldB := procKallsyms, procBootID
	procKallsyms, procBootID = kallsymsFile, bootFile
	t.Cleanup(func() { procKallsyms, procBootID = oldK, oldB })
	return kallsymsFile, bootFile
}

// fakeTable is a kallsyms text of n kernel functions from base, some
// aliases and data, then two modules' functions and an ftrace trampoline
// above the kernel, as /proc/kallsyms lists them.
func fakeTable(base uint64, n int) string {
	var b strings.Builder
	b.WriteString("0000000000000000 A fixed_percpu_data\n")
	for i := 0; i < n; i++ {
		a := base + uint64(i)*0x40
		fmt.Fprintf(&b, "%016x t __pfx_f%d\n%016x T f%d\n", a, i, a+0x10, i)
		if i%7 == 0 {
			fmt.Fprintf(&b, "%016x T f%d_alias\n", a+0x10, i)
		}
		if i%5 == 0 {
			fmt.Fprintf(&b, "%016x D d%d\n", a+0x20, i)
		}
	}
	fmt.Fprintf(&b, "%016x t mod_a\t[ext4]\n%016x t mod_b\t[ext4]\n", base+0x40000000, base+0x40000100)
	fmt.Fprintf(&b, "%016x t ftrace_trampoline\t[__builtin__ftrace]\n", base+0x40100000)
	return b.String()
}

// lookupRef answers a lookup from the reference parser's symbols.
func lookupRef(syms []Symbol, addr uint64) (Symbol, uint64, bool) {
	i := sort.Search(len(syms), func(i int) bool { return syms[i].Addr > addr }) - 1
	if i < 0 {
		return Symbol{}, 0, false
	}
	return syms[i], addr - syms[i].Addr, true
}

// probes are the addresses worth asking about: every symbol's address,
// the bytes either side of it, and the extremes.
func probes(syms []Symbol) []uint64 {
	out := []uint64{0, 1, ^uint64(0)}
	for _, s := range syms {
		out = append(out, s.Addr-1, s.Addr, s.Addr+1, s.Addr+0x1000)
	}
	return out
}

// checkAgainstReference asserts that t answers every probe it covers as
// the reference parser's table of text does, and says how many it covered.
func checkAgainstReference(t *testing.T, tab *Table, text string) int {
	t.Helper()
	ref := referenceParse(text)
	covered := 0
	for _, a := range probes(ref) {
		if !tab.Covers(a) {
			continue
		}
		covered++
		ws, woff, wok := lookupRef(ref, a)
		s, off, ok := tab.Lookup(a)
		if ok != wok || ok && (s != ws || off != woff) {
			t.Fatalf("Lookup(%#x) = %+v+%#x %v; reference %+v+%#x %v", a, s, off, ok, ws, woff, wok)
		}
	}
	return covered
}

func TestLoadProcCache(t *testing.T) {
	const boot = "0b1d2c3e-aaaa-4bbb-8ccc-123456789abc"
	text := fakeTable(0xffffffff81000000, 3000)
	fakeKernel(t, text, boot)
	dir := filepath.Join(t.TempDir(), "kallsyms")

	var first *Table
	var store func()
	var err error
	assert.True(t, readsWhole(func() { first, store, err = LoadProc(dir, "") }), "the first load reads the whole table")
	require.NoError(t, err)
	assert.True(t, first.partial, "the table handed on is the entry's")
	entry := filepath.Join(dir, boot)
	_, err = os.Stat(entry)
	require.ErrorIs(t, err, os.ErrNotExist, "the entry was written before store ran")
	require.NotNil(t, store)
	// Lookups go on while store moves the table onto the entry.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2000 {
			first.Lookup(0xffffffff81000000 + uint64(i)*0x40)
		}
	}()
	store()
	<-done
	st, err := os.Stat(entry)
	require.NoError(t, err, "no cache entry written")
	// The table built is now the entry's, mapped, not the heap's bytes.
	mappedEntry.Lock()
	m := mappedEntry.data
	mappedEntry.Unlock()
	require.NotEmpty(t, m, "the entry written was not mapped")
	p := first.packed.Load()
	at, lo := uintptr(unsafe.Pointer(unsafe.SliceData(p.b))), uintptr(unsafe.Pointer(unsafe.SliceData(m)))
	assert.True(t, at >= lo && at < lo+uintptr(len(m)), "the table handed on was not moved onto the entry's mapping")
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "kernel addresses readable by others")

	var cached *Table
	require.False(t, readsWhole(func() { cached, store, err = LoadProc(dir, "") }), "the second load did not use the cache")
	require.NoError(t, err)
	require.True(t, cached.partial)
	assert.Nil(t, store, "nothing to write after a cache hit")
	assert.Equal(t, 3000*2, cached.Len(), "the kernel image's text symbols, aliases folded")
	n := checkAgainstReference(t, cached, text)
	assert.Greater(t, n, 4*3000, "the cached table covers the kernel image")
	// The modules above the image are not in the cache: not covered, and
	// the whole table answers them.
	for _, a := range []uint64{0xffffffff81000000 + 0x40000000, 0xffffffff81000000 + 0x40100004} {
		assert.False(t, cached.Covers(a), "module address %#x covered", a)
	}
	// Past the image's last symbol, or below its first, a module loaded
	// later may lie: those are left to the whole table.
	last := uint64(0xffffffff81000000 + 2999*0x40 + 0x10)
	assert.True(t, cached.Covers(last), "the image's last symbol")
	assert.False(t, cached.Covers(last+1), "past the image's last symbol")
	assert.False(t, cached.Covers(0xffffffff81000000-1), "below the image")
	checkAgainstReference(t, first, text)
	// The entry is mapped, not read: a third load of the same file reuses
	// the mapping (its pages leave the resident set after the checks),
	// and both tables still answer from it.
	var again *Table
	require.False(t, readsWhole(func() { again, _, err = LoadProc(dir, "") }), "the third load did not use the cache")
	require.NoError(t, err)
	checkAgainstReference(t, again, text)
	checkAgainstReference(t, cached, text)
	var nilTable *Table
	assert.False(t, nilTable.Covers(0xffffffff81000000))
}

func TestLoadProcCacheRebuilds(t *testing.T) {
	const boot = "0b1d2c3e-aaaa-4bbb-8ccc-123456789abc"
	text := fakeTable(0xffffffff81000000, 500)
	kfile, bfile := fakeKernel(t, text, boot)
	dir := t.TempDir()
	_, err := loadProc(dir)
	require.NoError(t, err)
	entry := filepath.Join(dir, boot)
	good, err := os.ReadFile(entry)
	require.NoError(t, err)

	damage := map[string]func([]byte) []byte{
		"truncated":    func(b []byte) []byte { return b[:len(b)/2] },
		"empty":        func([]byte) []byte { return nil },
		"flipped name": func(b []byte) []byte { b[len(b)-3] ^= 0x20; return b },
		"flipped addr": func(b []byte) []byte { b[len(b)/2] ^= 1; return b },
		"bad magic":    func(b []byte) []byte { b[0] = 'X'; return b },
	}
	for name, f := range damage {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(entry, f(append([]byte(nil), good...)), 0o600))
			var tab *Table
			var err error
			assert.True(t, readsWhole(func() { tab, err = loadProc(dir) }), "a damaged entry was used")
			require.NoError(t, err)
			checkAgainstReference(t, tab, text)
			again, err := os.ReadFile(entry)
			require.NoError(t, err)
			assert.Equal(t, good, again, "the entry was not rebuilt")
		})
	}

	t.Run("other addresses, same boot id", func(t *testing.T) {
		// A kernel at other addresses (randomized again, or shown to a
		// reader without the privilege) must not be answered from the
		// entry of the old ones.
		moved := fakeTable(0xffffffff9a200000, 500)
		require.NoError(t, os.WriteFile(kfile, []byte(moved), 0o600))
		var tab *Table
		var err error
		assert.True(t, readsWhole(func() { tab, err = loadProc(dir) }))
		require.NoError(t, err)
		checkAgainstReference(t, tab, moved)
		assert.False(t, readsWhole(func() { tab, err = loadProc(dir) }), "the entry was not rebuilt for the new addresses")
		require.NoError(t, err)
		checkAgainstReference(t, tab, moved)
	})

	t.Run("zeroed addresses", func(t *testing.T) {
		zero := regexp.MustCompile(`(?m)^[0-9a-f]{16}`).ReplaceAllString(fakeTable(0xffffffff9a200000, 500), "0000000000000000")
		require.NoError(t, os.WriteFile(kfile, []byte(zero), 0o600))
		_, err := loadProc(dir)
		require.ErrorContains(t, err, "all addresses are zero")
	})

	t.Run("another boot", func(t *testing.T) {
		require.NoError(t, os.WriteFile(kfile, []byte(text), 0o600))
		const boot2 = "11111111-2222-4333-8444-555555555555"
		require.NoError(t, os.WriteFile(bfile, []byte(boot2+"\n"), 0o600))
		var err error
		assert.True(t, readsWhole(func() { _, err = loadProc(dir) }), "another boot's entry was used")
		require.NoError(t, err)
		_, err = os.Stat(filepath.Join(dir, boot2))
		require.NoError(t, err)
		_, err = os.Stat(entry)
		assert.ErrorIs(t, err, os.ErrNotExist, "the old boot's entry was kept")
	})
}

func TestLoadProcNoEntry(t *testing.T) {
	// Module symbols among the kernel's: no range of the image alone
	// answers like the whole table, so nothing is kept.
	text := "ffffffff81000000 T a\nffffffff81000100 t m\t[mod]\nffffffff81000200 T b\n"
	fakeKernel(t, text, "0b1d2c3e-aaaa-4bbb-8ccc-123456789abc")
	dir := t.TempDir()
	for range 2 {
		tab, err := loadProc(dir)
		require.NoError(t, err)
		assert.False(t, tab.partial)
		checkAgainstReference(t, tab, text)
	}
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, ents)

	// No boot id to key by: no cache.
	fakeKernel(t, fakeTable(0xffffffff81000000, 10), "not a boot id!")
	dir = t.TempDir()
	_, err = loadProc(dir)
	require.NoError(t, err)
	ents, err = os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, ents)

	// An unusable cache directory costs only the speed-up.
	f := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(f, nil, 0o600))
	tab, err := loadProc(filepath.Join(f, "sub"))
	require.NoError(t, err)
	assert.Equal(t, 10*2+3, tab.Len(), "the whole table")
}

// TestLoadProcReal checks the cache on this machine's kernel against the
// reference parser's reading of /proc/kallsyms.
func TestLoadProcReal(t *testing.T) {
	text := string(realKallsyms(t))
	if bootID() == "" {
		t.Skip("no boot id in " + procBootID)
	}
	dir := t.TempDir()
	_, err := loadProc(dir)
	require.NoError(t, err)
	tab, err := loadProc(dir)
	require.NoError(t, err)
	if !tab.partial {
		t.Skip("this kernel's symbols interleave with modules': nothing cached")
	}
	n := checkAgainstReference(t, tab, text)
	t.Logf("%d of the kernel image's symbols cached, covering %#x-%#x, %d probes answered", tab.Len(), tab.lo, tab.hi, n)
	assert.Greater(t, n, tab.Len(), "the cache answers the kernel image")
}

func FuzzDecodeEntry(f *testing.F) {
	text := fakeTable(0xffffffff81000000, 20)
	tab, err := ParseBytes([]byte(text))
	if err != nil {
		f.Fatal(err)
	}
	syms, lo, hi, _ := tab.core()
	good := encodeEntry(syms, lo, hi, prefixOf([]byte(text)))
	if good == nil {
		f.Fatal("no entry made")
	}
	f.Add(good)
	f.Add(good[:entryHdrSize])
	f.Add([]byte(entryMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		// Unchecked (a stamped entry's), only the header's sizes hold: it
		// must not fail on anything, and lookups must stay in bounds.
		if tab, _ := decodeEntry(b, false); tab != nil {
			for _, a := range []uint64{0, tab.lo, tab.hi, tab.hi + 1, ^uint64(0)} {
				tab.Lookup(a)
			}
			for i := range tab.Len() {
				tab.Lookup(tab.packedAddr(i))
			}
			tab.Address("_text")
		}
		tab, prefix := decodeEntry(b, true)
		if tab == nil {
			return
		}
		if len(prefix) == 0 || len(prefix) > prefixLen || !tab.partial {
			t.Fatalf("accepted entry with prefix %d bytes, partial %v", len(prefix), tab.partial)
		}
		if tab.packed.Load() == nil || len(tab.syms) != 0 {
			t.Fatalf("a cache entry's table is not packed")
		}
		for i := range tab.Len() {
			a := tab.packedAddr(i)
			if a < tab.lo || a > tab.hi || (i > 0 && a <= tab.packedAddr(i-1)) {
				t.Fatalf("symbol %d at %#x: unsorted or outside %#x-%#x", i, a, tab.lo, tab.hi)
			}
			_ = tab.packedName(i)
		}
		tab.Lookup(tab.lo)
		tab.Lookup(tab.hi)
	})
}

// BenchmarkLoadProc reads this machine's /proc/kallsyms whole, as a report
// without the cache does.
func BenchmarkLoadProc(b *testing.B) {
	realKallsyms(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := loadProc(""); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadProcCached loads the kernel image's symbols from the cache
// entry of this boot, as every report after the first does.
func BenchmarkLoadProcCached(b *testing.B) {
	realKallsyms(b)
	dir := b.TempDir()
	if _, err := loadProc(dir); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		t, err := loadProc(dir)
		if err != nil {
			b.Fatal(err)
		}
		if !t.partial {
			b.Skip("nothing cached for this kernel")
		}
	}
}

// notes returns a /sys/kernel/notes image for a 20-byte build-id, laid
// out as this machine's kernel (6.12) has it: the GNU build-id note, then
// a "Linux" note.
func notes(id []byte) []byte {
	if len(id) != 20 {
		panic("notes: a build-id of 20 bytes")
	}
	h := func(s string) []byte {
		b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
		if err != nil {
			panic(err)
		}
		return b
	}
	b := h("04000000 14000000 03000000 474e5500")
	b = append(b, id...)
	return append(b, h("06000000 04000000 01010000 4c696e75 78000000 00000000")...)
}

func TestLoadProcFromPerfCache(t *testing.T) {
	const boot = "0b1d2c3e-aaaa-4bbb-8ccc-123456789abc"
	text := fakeTable(0xffffffff81000000, 800)
	kfile, _ := fakeKernel(t, text, boot)
	id := []byte{0x24, 0xa3, 0x59, 0x8f, 0xd7, 0, 0x11, 0x4d, 0x0a, 0x1b, 0x1a, 0x48, 0x71, 0xba, 0xdc, 0xee, 0x75, 0xd0, 0xac, 0xac}
	notesFile := filepath.Join(t.TempDir(), "notes")
	require.NoError(t, os.WriteFile(notesFile, notes(id), 0o600))
	old := kernelNotes
	kernelNotes = notesFile
	t.Cleanup(func() { kernelNotes = old })
	require.Equal(t, hex.EncodeToString(id), RunningBuildID())

	perf := t.TempDir()
	copyDir := filepath.Join(perf, "[kernel.kallsyms]", hex.EncodeToString(id))
	require.NoError(t, os.MkdirAll(copyDir, 0o755))
	perfCopy := filepath.Join(copyDir, "kallsyms")
	// perf's copy was made earlier in the boot: a module since unloaded.
	require.NoError(t, os.WriteFile(perfCopy, []byte(text+"ffffffffc1000000 t gone\t[gone]\n"), 0o644))
	// /proc/kallsyms must not be read whole: make the rest unreadable
	// garbage after the first page, which is all LoadProc may compare.
	first := prefixOf([]byte(text))
	require.NoError(t, os.WriteFile(kfile, append(append([]byte(nil), first...), "not kallsyms\n"...), 0o600))

	dir := t.TempDir()
	var tab *Table
	var store func()
	var err error
	require.False(t, readsWhole(func() { tab, store, err = LoadProc(dir, perf) }), "perf's copy was not used")
	require.NoError(t, err)
	require.True(t, tab.partial)
	require.Greater(t, checkAgainstReference(t, tab, text), 4*800)
	assert.False(t, tab.Covers(0xffffffffc1000000), "a module of perf's copy answered")
	require.NotNil(t, store)
	store()
	var again *Table
	assert.False(t, readsWhole(func() { again, store, err = LoadProc(dir, "") }), "the entry made from perf's copy was not used")
	require.NoError(t, err)
	assert.Nil(t, store)
	checkAgainstReference(t, again, text)

	require.NoError(t, os.WriteFile(kfile, []byte(text), 0o600))
	// Each case spoils one thing: perf's copy is not used, the whole table
	// is read.
	for name, c := range map[string]struct{ copy, notes []byte }{
		"other addresses": {[]byte(fakeTable(0xffffffff9a200000, 800)), notes(id)},
		"other build-id":  {[]byte(text), notes([]byte("another kernel build"[:20]))},
		"damaged notes":   {[]byte(text), notes(id)[:30]},
	} {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(perfCopy, c.copy, 0o644))
			require.NoError(t, os.WriteFile(notesFile, c.notes, 0o600))
			dir := t.TempDir()
			var tab *Table
			var err error
			assert.True(t, readsWhole(func() { tab, _, err = LoadProc(dir, perf) }), "perf's copy was used")
			require.NoError(t, err)
			checkAgainstReference(t, tab, text)
		})
	}
}

// TestReferenceSymbolAddress: the kernel's reference symbols (_text,
// _stext), which report relocates another boot's addresses by, are found
// by Address though aliases at their address fold into the last one
// listed, in the whole table and in LoadProc's cached partial one (whose
// first lines of /proc/kallsyms hold them), at the address the text gives.
func TestReferenceSymbolAddress(t *testing.T) {
	const boot = "0b1d2c3e-aaaa-4bbb-8ccc-123456789abd"
	const base uint64 = 0xffffffff81000000
	text := fmt.Sprintf("%016x T srso_alias_untrain_ret\n%016x T _stext\n%016x T _text\n%016x T __pi__text\n", base, base, base, base) +
		fakeTable(base+0x1000, 3000)
	fakeKernel(t, text, boot)
	dir := filepath.Join(t.TempDir(), "kallsyms")
	first, store, err := LoadProc(dir, "")
	require.NoError(t, err)
	require.NotNil(t, store)
	store()
	cached, _, err := LoadProc(dir, "")
	require.NoError(t, err)
	require.True(t, cached.partial, "the second load did not use the cache")
	for name, tab := range map[string]*Table{"whole": first, "cached": cached} {
		sym, _, ok := tab.Lookup(base)
		require.True(t, ok)
		assert.Equal(t, "__pi__text", sym.Name, "%s: the last alias names the address", name)
		for _, ref := range []string{"_text", "_stext"} {
			a, ok := tab.Address(ref)
			assert.True(t, ok, "%s: %s not found", name, ref)
			assert.Equal(t, base, a, "%s: %s", name, ref)
		}
		_, ok = tab.Address("no_such_symbol")
		assert.False(t, ok)
	}
	var nilTable *Table
	_, ok := nilTable.Address("_text")
	assert.False(t, ok)
}

// TestLoadProcCacheStamp: an entry read in full and found good is stamped
// (internal/filestamp) once it is older than filestamp.MinAge, and the
// next load trusts it unread, answering as the checked one did; an entry
// written over afterwards (its change time moves) is checked again, and
// found damaged, rebuilt.
func TestLoadProcCacheStamp(t *testing.T) {
	const boot = "0b1d2c3e-aaaa-4bbb-8ccc-123456789abc"
	text := fakeTable(0xffffffff81000000, 2000)
	fakeKernel(t, text, boot)
	dir := t.TempDir()
	defer func(d time.Duration) { filestamp.MinAge = d }(filestamp.MinAge)
	filestamp.MinAge = 50 * time.Millisecond
	_, err := loadProc(dir)
	require.NoError(t, err)
	entry := filepath.Join(dir, boot)
	waitUnchanged := func() {
		for {
			st, err := os.Stat(entry)
			require.NoError(t, err)
			ctime, ok := filestamp.Changed(st)
			if !ok {
				t.Skip("no change times here")
			}
			if time.Since(time.Unix(0, ctime)) > filestamp.MinAge {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitUnchanged()

	n := entriesChecked.Load()
	tab, err := loadProc(dir)
	require.NoError(t, err)
	require.True(t, tab.partial)
	require.Equal(t, n+1, entriesChecked.Load(), "the first use reads the entry in full")
	require.FileExists(t, filestamp.Path(entry), "and stamps it")
	checkAgainstReference(t, tab, text)

	for range 2 {
		tab, err = loadProc(dir)
		require.NoError(t, err)
		require.True(t, tab.partial)
		require.Equal(t, n+1, entriesChecked.Load(), "a stamped entry is not read in full again")
		checkAgainstReference(t, tab, text)
	}

	// Damage written over the entry in place: same size, same
	// modification time, but a new change time.
	good, err := os.ReadFile(entry)
	require.NoError(t, err)
	st, err := os.Stat(entry)
	require.NoError(t, err)
	bad := append([]byte(nil), good...)
	bad[len(bad)-3] ^= 0x20
	require.NoError(t, os.WriteFile(entry, bad, 0o600))
	require.NoError(t, os.Chtimes(entry, st.ModTime(), st.ModTime()))
	assert.True(t, readsWhole(func() { tab, err = loadProc(dir) }), "the damaged entry was trusted by its stamp")
	require.NoError(t, err)
	assert.Equal(t, n+2, entriesChecked.Load())
	checkAgainstReference(t, tab, text)

	// A trusted entry is not checked: names whose offsets are out of order
	// (damage below the filesystem) must still not crash a lookup.
	le := binary.LittleEndian
	count, plen := int(le.Uint32(good[24:])), int(le.Uint32(good[32:]))
	ends := good[entryHdrSize+plen+8*count:]
	le.PutUint32(ends[4*(count/2):], ^uint32(0))
	unchecked, _ := decodeEntry(good, false)
	require.NotNil(t, unchecked)
	for i := range unchecked.Len() {
		unchecked.Lookup(unchecked.packedAddr(i))
	}
	s, _, ok := unchecked.Lookup(unchecked.packedAddr(count / 2))
	assert.True(t, ok)
	assert.Empty(t, s.Name, "a name out of bounds")
	checked, _ := decodeEntry(good, true)
	assert.Nil(t, checked, "the checksum catches it")
}
