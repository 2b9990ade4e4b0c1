package elfcache

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/filestamp"
	"github.com/ustack/ustack/internal/testprog"
)

// sourceLines symbolizes addrs of libc with opts and renders every source
// frame as one line, the output the cache must never change.
func sourceLines(t testing.TB, opts Options, addrs []uint64) []string {
	t.Helper()
	o := libcWithDWARF(t, opts)
	defer o.Close()
	var out []string
	var buf []SourceFrame
	for _, a := range addrs {
		buf = o.SourceFrames(a, buf[:0])
		for _, f := range buf {
			out = append(out, fmt.Sprintf("%#x %s %s:%d", a, f.Function, f.File, f.Line))
		}
	}
	return out
}

// TestSectionCache checks that source frames are the same with the cache
// off, cold, warm, and after its entries were truncated, bit-flipped or
// made from other compressed bytes; that bad entries are rebuilt; and
// that entries are private to the user.
func TestSectionCache(t *testing.T) {
	o := libcWithDWARF(t, Options{})
	addrs := sampleAddrs(o, 3000, nil)
	o.Close()
	want := sourceLines(t, Options{}, addrs)
	require.NotEmpty(t, want)

	dir := filepath.Join(t.TempDir(), "sections")
	c, err := NewSectionCache(dir, 0)
	require.NoError(t, err)
	opts := Options{SectionCache: c}

	assert.Equal(t, want, sourceLines(t, opts, addrs), "cold cache")
	entries := testprog.Files(dir)
	require.NotEmpty(t, entries, "the cold run stores the decompressed sections")
	for _, e := range entries {
		st, err := os.Stat(e)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), e)
		assert.False(t, strings.HasPrefix(filepath.Base(e), ".tmp-"), "no temporary file left: %s", e)
	}
	st, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())

	assert.Equal(t, want, sourceLines(t, opts, addrs), "warm cache")

	damage := map[string]func(b []byte) []byte{
		"truncated":        func(b []byte) []byte { return b[:len(b)/2] },
		"header only":      func(b []byte) []byte { return b[:sectionHdrSize] },
		"empty":            func(b []byte) []byte { return nil },
		"data bit flipped": func(b []byte) []byte { b[len(b)-100] ^= 0x10; return b },
		"magic":            func(b []byte) []byte { b[0] = 'X'; return b },
		"other source":     func(b []byte) []byte { b[24] ^= 1; return b },
		"size field":       func(b []byte) []byte { b[8]++; return b },
	}
	for name, f := range damage {
		for _, e := range entries {
			b, err := os.ReadFile(e)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(e, f(b), 0o600))
		}
		assert.Equal(t, want, sourceLines(t, opts, addrs), "after damage: %s", name)
		// The bad entries were replaced by good ones.
		for _, e := range entries {
			b, err := os.ReadFile(e)
			require.NoError(t, err, name)
			assert.Equal(t, sectionMagic, string(b[:8]), "%s: %s rebuilt", name, e)
		}
	}
}

// TestSectionCacheConcurrent runs readers on one cold cache at once: each
// gets the right frames, whoever writes first.
func TestSectionCacheConcurrent(t *testing.T) {
	o := libcWithDWARF(t, Options{})
	addrs := sampleAddrs(o, 500, nil)
	o.Close()
	want := sourceLines(t, Options{}, addrs)
	c, err := NewSectionCache(t.TempDir(), 0)
	require.NoError(t, err)
	var wg sync.WaitGroup
	got := make([][]string, 4)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = sourceLines(t, Options{SectionCache: c}, addrs)
		}()
	}
	wg.Wait()
	for i := range got {
		assert.Equal(t, want, got[i], "reader %d", i)
	}
}

// TestSectionCacheTrim bounds the cache: the oldest entries go first.
func TestSectionCacheTrim(t *testing.T) {
	dir := t.TempDir()
	c, err := NewSectionCache(dir, 10_000)
	require.NoError(t, err)
	id := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	src := []byte("compressed")
	base := time.Now().Add(-time.Hour)
	for i := 0; i < 10; i++ {
		name := fmt.Sprintf(".debug_%d", i)
		c.put(id, name, src, make([]byte, 2000))
		// File times are coarse: give each entry its own age.
		when := base.Add(time.Duration(i) * time.Minute)
		require.NoError(t, os.Chtimes(c.path(id, name), when, when))
	}
	require.NoError(t, c.Trim())
	var total int64
	for _, e := range testprog.Files(dir) {
		st, _ := os.Stat(e)
		total += st.Size()
	}
	assert.LessOrEqual(t, total, int64(10_000))
	_, _, ok := c.get(id, ".debug_9", src, 2000)
	assert.True(t, ok, "the newest entry stays")
	_, _, ok = c.get(id, ".debug_0", src, 2000)
	assert.False(t, ok, "the oldest entry went")
}

// BenchmarkSourceFramesIndexCached is BenchmarkSourceFramesIndex with a
// warm section cache: the sections are mapped, not inflated.
func BenchmarkSourceFramesIndexCached(b *testing.B) {
	c, err := NewSectionCache(b.TempDir(), 0)
	if err != nil {
		b.Fatal(err)
	}
	o := libcWithDWARF(b, Options{SectionCache: c})
	a := o.Symbols()[len(o.Symbols())/2].Addr
	o.SourceFrames(a, nil) // fills the cache
	o.Close()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		o, _ := Open(libcAMD64, Options{SectionCache: c})
		o.SourceFrames(a, nil)
		o.Close()
	}
}

// TestSectionCacheDamagedSource makes a compressed .debug_info's header
// claim 4 KB more than its zlib stream holds, so that a streamed
// decompression into a cache entry fails after writing most of it: the
// object reports the same error with the cache as without, naming the file
// and section, and leaves no entry or temporary file behind. (Damage inside
// the stream is not used: the bytes decoded from it, and so the error, if
// any, depend on what the compiler wrote there.)
func TestSectionCacheDamagedSource(t *testing.T) {
	dir := t.TempDir()
	bin := testprog.Compile(t, "gcc", dir, "inl.c", cInline, "-O2", "-g", "-gz=zlib")
	ef, err := elf.Open(bin)
	require.NoError(t, err)
	s := ef.Section(".debug_info")
	require.NotNil(t, s)
	require.NotZero(t, s.Flags&elf.SHF_COMPRESSED, "gcc -gz=zlib compressed no .debug_info")
	require.Equal(t, elf.ELFCLASS64, ef.Class)
	off := int64(s.Offset)
	ef.Close()
	b, err := os.ReadFile(bin)
	require.NoError(t, err)
	// Elf64_Chdr: ch_type, ch_reserved, ch_size at 8, ch_addralign.
	require.Equal(t, uint32(elf.COMPRESS_ZLIB), binary.LittleEndian.Uint32(b[off:]))
	size := binary.LittleEndian.Uint64(b[off+8:])
	binary.LittleEndian.PutUint64(b[off+8:], size+4096)
	require.NoError(t, os.WriteFile(bin, b, 0o700))

	errorOf := func(opts Options) error {
		o := mustOpen(t, bin, opts)
		defer o.Close()
		o.SourceFrames(0x1000, nil)
		return o.SourceError()
	}
	plain := errorOf(Options{NoDebugFile: true})
	require.Error(t, plain, "a damaged .debug_info read without complaint")
	cacheDir := filepath.Join(t.TempDir(), "sections")
	c, err := NewSectionCache(cacheDir, 0)
	require.NoError(t, err)
	cached := errorOf(Options{NoDebugFile: true, SectionCache: c})
	require.Error(t, cached, "with the cache")
	assert.Equal(t, plain.Error(), cached.Error())
	t.Logf("the error: %v", cached)
	assert.Contains(t, cached.Error(), bin)
	assert.Contains(t, cached.Error(), ".debug_info")
	for _, e := range testprog.Files(cacheDir) {
		assert.NotContains(t, filepath.Base(e), "debug_info", "an entry of the damaged section was kept: %s", e)
		assert.False(t, strings.HasPrefix(filepath.Base(e), ".tmp-"), "temporary file left: %s", e)
	}
}

// waitChangedBefore waits until entry p last changed at least age ago.
func waitChangedBefore(t *testing.T, p string, age time.Duration) {
	t.Helper()
	for {
		st, err := os.Stat(p)
		require.NoError(t, err)
		ctime, ok := filestamp.Changed(st)
		require.True(t, ok)
		if time.Since(time.Unix(0, ctime)) >= age {
			return
		}
		time.Sleep(age / 5)
	}
}

// TestSectionCacheStamp: an entry read in full and found good is stamped
// and then trusted without reading while its file stays as stamped; a
// fresh entry is not stamped; writing into it (even with its modification
// time set back), replacing it with the same bytes, or a damaged or
// foreign stamp makes the next use read it all again, and damage found
// removes entry and stamp. Trim removes a stamp whose entry is gone.
func TestSectionCacheStamp(t *testing.T) {
	defer func(d time.Duration) { filestamp.MinAge = d }(filestamp.MinAge)
	c, err := NewSectionCache(t.TempDir(), 0)
	require.NoError(t, err)
	id, src := []byte{1, 2, 3, 4, 5, 6, 7, 8}, []byte("the compressed bytes")
	data := []byte(strings.Repeat("section bytes ", 20000))
	p := c.path(id, ".debug_info")
	// get reports whether the entry was given and whether it was read in
	// full to be checked.
	get := func() (ok, read bool) {
		t.Helper()
		n := entriesSummed.Load()
		d, release, ok := c.get(id, ".debug_info", src, uint64(len(data)))
		if ok {
			require.Equal(t, data, d)
			require.NoError(t, release())
		}
		return ok, entriesSummed.Load() != n
	}
	put := func() {
		t.Helper()
		require.True(t, c.put(id, ".debug_info", src, data))
	}
	stamped := func() {
		t.Helper()
		waitChangedBefore(t, p, filestamp.MinAge)
		ok, read := get()
		require.True(t, ok)
		require.True(t, read)
		st, err := os.Stat(filestamp.Path(p))
		require.NoError(t, err, "stamped")
		require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
		ok, read = get()
		require.True(t, ok)
		require.False(t, read, "an entry as stamped is not read again")
	}

	put()
	filestamp.MinAge = time.Hour
	ok, read := get()
	require.True(t, ok)
	require.True(t, read)
	require.NoFileExists(t, filestamp.Path(p), "an entry changed less than filestamp.MinAge ago is not stamped")

	filestamp.MinAge = 50 * time.Millisecond
	stamped()

	// A byte of data changed in place, the modification time set back.
	st, err := os.Stat(p)
	require.NoError(t, err)
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{'#'}, sectionHdrSize+1000)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, os.Chtimes(p, st.ModTime(), st.ModTime()))
	ok, read = get()
	require.False(t, ok, "damage is found")
	require.True(t, read)
	require.NoFileExists(t, p)
	require.NoFileExists(t, filestamp.Path(p))

	// The same bytes in another file renamed over the entry.
	put()
	stamped()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p+"-copy", b, 0o600))
	require.NoError(t, os.Rename(p+"-copy", p))
	ok, read = get()
	require.True(t, ok)
	require.True(t, read, "another file is read")

	// Damaged stamps, and the stamp of another entry.
	stamped()
	good, err := os.ReadFile(filestamp.Path(p))
	require.NoError(t, err)
	for name, bad := range map[string][]byte{
		"empty": nil, "short": good[:filestamp.Size-1], "long": append(append([]byte(nil), good...), 0),
		"sum": append(append([]byte(nil), good[:filestamp.Size-1]...), good[filestamp.Size-1]^1),
	} {
		require.NoError(t, os.WriteFile(filestamp.Path(p), bad, 0o600))
		ok, read = get()
		require.True(t, ok, name)
		require.True(t, read, "stamp %s", name)
	}
	id2 := []byte{9, 9, 9, 9, 9, 9, 9, 9}
	require.True(t, c.put(id2, ".debug_info", src, data))
	p2 := c.path(id2, ".debug_info")
	waitChangedBefore(t, p2, filestamp.MinAge)
	_, release, ok := c.get(id2, ".debug_info", src, uint64(len(data)))
	require.True(t, ok)
	release()
	other, err := os.ReadFile(filestamp.Path(p2))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filestamp.Path(p), other, 0o600))
	ok, read = get()
	require.True(t, ok)
	require.True(t, read, "another entry's stamp")

	require.NoError(t, os.Remove(p2))
	require.NoError(t, c.Trim())
	require.NoFileExists(t, filestamp.Path(p2), "Trim removes a stamp whose entry is gone")
	require.FileExists(t, filestamp.Path(p), "and keeps the others")
}

// FuzzSectionCacheStamp: no stamp file but the entry's own lets its data
// go unread.
func FuzzSectionCacheStamp(f *testing.F) {
	c, err := NewSectionCache(f.TempDir(), 0)
	if err != nil {
		f.Fatal(err)
	}
	id, src, data := []byte{1, 2, 3, 4, 5, 6, 7, 8}, []byte("src"), []byte(strings.Repeat("data ", 100))
	if !c.put(id, ".debug_line", src, data) {
		f.Fatal("put")
	}
	p := c.path(id, ".debug_line")
	st, err := os.Stat(p)
	if err != nil {
		f.Fatal(err)
	}
	sum := crc32.Checksum(data, castagnoli)
	want, ok := filestamp.Of(st, sum)
	if !ok {
		f.Skip("no change times here")
	}
	f.Add(want[:])
	f.Add(want[:filestamp.Size-1])
	f.Add([]byte(filestamp.Magic))
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(filestamp.Path(p), b, 0o600); err != nil {
			t.Fatal(err)
		}
		if got := filestamp.Checked(p, st, sum); got != bytes.Equal(b, want[:]) {
			t.Fatalf("Checked = %v for stamp %x", got, b)
		}
	})
}

// TestSectionCacheGetRead: small entries read into the heap and large
// ones mapped give the bytes put, and a byte changed anywhere, another
// source or a truncation is refused and the entry removed.
func TestSectionCacheGetRead(t *testing.T) {
	c, err := NewSectionCache(t.TempDir(), 0)
	require.NoError(t, err)
	id, src := []byte{1, 2, 3, 4, 5, 6, 7, 8}, []byte("key")
	for _, size := range []int{0, 100, maxReadEntry + 4096} {
		data := []byte(strings.Repeat("x", size))
		name := fmt.Sprintf("@t-%d", size)
		require.True(t, c.put(id, name, src, data))
		got, ok := c.getRead(id, name, src, nil)
		require.True(t, ok, size)
		require.Equal(t, len(data), len(got))
		require.True(t, bytes.Equal(data, got))
		_, ok = c.getRead(id, name, []byte("another key"), make([]byte, 10))
		require.False(t, ok, "another source")
		p := c.path(id, name)
		require.NoFileExists(t, p, "an entry made from another source is stale: removed, as get removes it")
		for what, damage := range map[string]func([]byte) []byte{
			"last byte": func(b []byte) []byte { b[len(b)-1] ^= 1; return b },
			"header":    func(b []byte) []byte { b[9] ^= 1; return b },
			"truncated": func(b []byte) []byte { return b[:len(b)-1] },
		} {
			require.True(t, c.put(id, name, src, data))
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			if what == "last byte" && size == 0 {
				continue // no data byte
			}
			require.NoError(t, os.WriteFile(p, damage(b), 0o600))
			_, ok := c.getRead(id, name, src, nil)
			require.False(t, ok, "%d bytes, %s", size, what)
			require.NoFileExists(t, p, "%d bytes, %s: removed", size, what)
		}
	}
}
