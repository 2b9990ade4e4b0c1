package archive

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/elfcache"
)

// source is one file put into the test archive, with the bytes a reader
// must give back.
type source struct {
	kind, path string
	buildID    []byte
	data       []byte
}

// realSources gathers real files of this machine: executables and the
// dynamic loader (by build-id), the loader's separate debug file when
// installed, a file without a build-id (found by path), the vDSO and the
// start of /proc/kallsyms.
func realSources(t testing.TB) []source {
	var out []source
	for _, p := range []string{"/usr/bin/true", "/usr/bin/env", "/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"} {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		o, err := elfcache.Open(p, elfcache.Options{NoDebugFile: true})
		require.NoError(t, err, p)
		id := o.BuildID()
		o.Close()
		require.NotEmpty(t, id, "%s has no build-id", p)
		out = append(out, source{kind: KindObject, path: p, buildID: id, data: data})
		h := hex.EncodeToString(id)
		dbg := filepath.Join("/usr/lib/debug/.build-id", h[:2], h[2:]+".debug")
		if d, err := os.ReadFile(dbg); err == nil {
			out = append(out, source{kind: KindDebug, path: dbg, buildID: id, data: d})
		}
	}
	if len(out) < 2 {
		t.Skip("no system executables to archive")
	}
	if d, err := os.ReadFile("/etc/os-release"); err == nil {
		out = append(out, source{kind: KindObject, path: "/etc/os-release", data: d})
	}
	if v := readVDSO(t); v != nil {
		out = append(out, source{kind: KindVDSO, path: "[vdso]", buildID: []byte{0xfe, 0xed}, data: v})
	}
	if f, err := os.Open("/proc/kallsyms"); err == nil {
		b, _ := io.ReadAll(io.LimitReader(f, 256<<10))
		f.Close()
		out = append(out, source{kind: KindKallsyms, path: "/proc/kallsyms", data: b})
	}
	return out
}

// readVDSO copies this process's [vdso] mapping.
func readVDSO(t testing.TB) []byte {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil
	}
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		if !strings.HasSuffix(sc.Text(), "[vdso]") {
			continue
		}
		lo, hi, _ := strings.Cut(strings.Fields(sc.Text())[0], "-")
		a, _ := strconv.ParseUint(lo, 16, 64)
		b, _ := strconv.ParseUint(hi, 16, 64)
		f, err := os.Open("/proc/self/mem")
		if err != nil {
			return nil
		}
		defer f.Close()
		buf := make([]byte, b-a)
		if _, err := f.ReadAt(buf, int64(a)); err != nil {
			return nil
		}
		return buf
	}
	return nil
}

// writeReal writes the sources as the recorder does (objects and debug
// files streamed from their files, uncompressed), optionally compacted,
// and returns the archive's bytes and where the writer put each member.
func writeReal(t testing.TB, dir string, srcs []source, compact bool) ([]byte, []Entry) {
	p := filepath.Join(dir, "real.ustack")
	aw, err := Create(p, Meta{Hostname: "testhost", Arch: runtime.GOARCH}, false)
	require.NoError(t, err)
	for _, s := range srcs {
		switch s.kind {
		case KindObject:
			if s.buildID == nil {
				require.NoError(t, aw.AddObject(nil, s.path, s.data))
			} else {
				require.NoError(t, aw.AddObjectFile(s.buildID, s.path, bytes.NewReader(s.data), int64(len(s.data)), nil))
			}
		case KindDebug:
			require.NoError(t, aw.AddDebugFileStream(s.buildID, s.path, bytes.NewReader(s.data), int64(len(s.data)), nil))
		case KindVDSO:
			require.NoError(t, aw.AddVDSO(s.buildID, s.data))
		case KindKallsyms:
			require.NoError(t, aw.AddKallsyms(s.data))
		}
	}
	require.NoError(t, aw.Close())
	if compact {
		require.NoError(t, Compact(p))
	}
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	// The layout as the writer made it (the compacted archive's, when
	// compacted: read it back by its headers, checked against GNU tar in
	// TestLayoutAgreesWithGNUTar).
	r, err := NewReader(bytes.NewReader(b), int64(len(b)), Options{})
	require.NoError(t, err)
	require.NoError(t, r.Err())
	if !compact {
		require.Equal(t, len(aw.Entries()), len(r.entries))
		for i, e := range aw.Entries() {
			require.Equal(t, e.hdrOff, r.entries[i].hdrOff, e.Member)
			require.Equal(t, e.off, r.entries[i].off, e.Member)
		}
	}
	return b, r.entries
}

// TestLayoutAgreesWithGNUTar: GNU tar, reading the archive on its own,
// finds the same members at the same blocks with the same stored sizes,
// and extracts the same bytes; so the offsets the corruption test takes as
// truth are the archive's.
func TestLayoutAgreesWithGNUTar(t *testing.T) {
	tarBin, err := exec.LookPath("tar")
	if err != nil {
		t.Skip("GNU tar not installed")
	}
	srcs := realSources(t)
	for _, compact := range []bool{false, true} {
		dir := t.TempDir()
		b, entries := writeReal(t, dir, srcs, compact)
		p := filepath.Join(dir, "real.ustack")
		out, err := exec.Command(tarBin, "--warning=no-unknown-keyword", "-R", "-tvf", p).Output()
		require.NoError(t, err)
		re := regexp.MustCompile(`(?m)^block (\d+): \S+ \S+\s+(\d+) \S+ \S+ (.*)$`)
		ms := re.FindAllStringSubmatch(string(out), -1)
		require.Len(t, ms, len(entries), "GNU tar lists:\n%s", out)
		for i, m := range ms {
			e := entries[i]
			blk, _ := strconv.ParseInt(m[1], 10, 64)
			size, _ := strconv.ParseInt(m[2], 10, 64)
			assert.Equal(t, e.Member, m[3])
			assert.Equal(t, e.off/block-1, blk, "%s: regular header block", e.Member)
			assert.Equal(t, e.csize, size, e.Member)
			data, err := exec.Command(tarBin, "--warning=no-unknown-keyword", "-xOf", p, e.Member).Output()
			require.NoError(t, err)
			assert.True(t, bytes.Equal(b[e.off:e.off+e.csize], data), "%s: bytes differ from GNU tar's", e.Member)
		}
	}
}

// get reads a source back through the accessor a report uses for it.
func get(r *Reader, s source) ([]byte, bool) {
	switch s.kind {
	case KindObject:
		if s.buildID == nil {
			d, _, ok := r.ObjectByPath(s.path)
			return d, ok
		}
		d, _, ok := r.Object(s.buildID, s.path)
		return d, ok
	case KindDebug:
		return r.DebugFile(s.buildID)
	case KindVDSO:
		d, _, ok := r.VDSO()
		return d, ok
	case KindKallsyms:
		k := r.Kallsyms()
		if k == nil {
			return nil, false
		}
		d, _ := io.ReadAll(k)
		return d, true
	}
	return nil, false
}

// extent is the byte range of a member: its first header block to the end
// of its data's last block.
func extent(e Entry) (int64, int64) { return e.hdrOff, e.off + (e.csize+block-1)/block*block }

// damageCase is one corruption: the damaged bytes and the range they hit.
type damageCase struct {
	name   string
	data   []byte
	lo, hi int64 // damaged bytes [lo, hi); for a cut, [cut, len)
}

func cases(b []byte, entries []Entry) []damageCase {
	var out []damageCase
	n := int64(len(b))
	cut := func(at int64) {
		if at >= 0 && at < n {
			out = append(out, damageCase{fmt.Sprintf("cut@%#x", at), b[:at], at, n})
		}
	}
	flip := func(at int64, bit uint) {
		if at >= 0 && at < n {
			d := bytes.Clone(b)
			d[at] ^= 1 << bit
			out = append(out, damageCase{fmt.Sprintf("flip@%#x.%d", at, bit), d, at, at + 1})
		}
	}
	zero := func(at, size int64) {
		if at >= 0 && at < n {
			d := bytes.Clone(b)
			end := min(at+size, n)
			clear(d[at:end])
			out = append(out, damageCase{fmt.Sprintf("zero@%#x+%d", at, size), d, at, end})
		}
	}
	for i, e := range entries {
		for _, d := range []int64{0, 1, 511, 512, 700, 1024, 1500} {
			cut(e.hdrOff + d)
		}
		cut(e.off + e.csize/2)
		cut(e.off + e.csize - 1)
		for _, d := range []int64{0, 100, 124, 148, 156, 257, 345} {
			flip(e.hdrOff+d, uint(d%8)) // the PAX header block
			flip(e.off-block+d, 3)      // the member's own header
		}
		for d := e.hdrOff + block; d < e.off-block; d += 37 {
			flip(d, uint(d%8)) // the PAX records
		}
		flip(e.off, 0)
		flip(e.off+e.csize/2, 5)
		flip(e.off+e.csize-1, 7)
		zero(e.hdrOff, block)
		zero(e.off-block, block)
		zero(e.hdrOff, 2*block)
		if i%2 == 0 {
			zero(e.off+e.csize/3, 4096)
		}
	}
	for i := int64(1); i < 60; i++ {
		at := n * i / 60
		cut(at)
		flip(at, uint(i%8))
		zero(at/block*block, 8*block)
	}
	zero(n/3, 64<<10)
	return out
}

// TestDamagedArchive corrupts an archive of real objects in many ways
// (truncation, bit flips, zeroed blocks; written uncompressed as while
// recording and compacted as at the end) and checks that every member the
// damage did not touch reads back byte for byte, that nothing ever reads
// back wrong, that each loss is reported with the file and an offset, and
// that reading costs memory in proportion to the archive.
func TestDamagedArchive(t *testing.T) {
	srcs := realSources(t)
	total := 0
	for _, s := range srcs {
		total += len(s.data)
	}
	for _, compact := range []bool{false, true} {
		b, entries := writeReal(t, t.TempDir(), srcs, compact)
		// Which entry holds each source.
		holder := make([]int, len(srcs))
		for i, s := range srcs {
			holder[i] = -1
			for j, e := range entries {
				if e.Kind == s.kind && e.Path == s.path {
					holder[i] = j
				}
			}
			require.GreaterOrEqual(t, holder[i], 0, "source %s not in the archive", s.path)
		}
		cs := cases(b, entries)
		t.Logf("compact=%v: %d-byte archive of %d members, %d corruptions", compact, len(b), len(entries), len(cs))
		for _, c := range cs {
			var warned []string
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			r, err := NewReader(bytes.NewReader(c.data), int64(len(c.data)),
				Options{Name: "real.ustack", Warn: func(msg string) { warned = append(warned, msg) }})
			intact := func(j int) bool {
				lo, hi := extent(entries[j])
				return hi <= c.lo || lo >= c.hi
			}
			if err != nil {
				assert.ErrorIs(t, err, ErrNotArchive, c.name)
				for i := range srcs {
					assert.False(t, intact(holder[i]), "%s: no archive, but %s was intact (%v)", c.name, srcs[i].path, err)
				}
				continue
			}
			lost := 0
			for i, s := range srcs {
				data, ok := get(r, s)
				if ok && !bytes.Equal(data, s.data) {
					t.Errorf("%s: %s %s read back wrong (%d bytes, want %d)", c.name, s.kind, s.path, len(data), len(s.data))
				}
				if !ok {
					lost++
					if intact(holder[i]) {
						t.Errorf("%s: intact %s %s (bytes %#x..) not readable; warnings %q", c.name, s.kind, s.path, entries[holder[i]].hdrOff, warned)
					}
				}
				e := entries[holder[i]]
				if !ok && c.lo >= e.off && c.hi <= e.off+e.csize {
					// Damage inside the data: the warning names the member.
					named := false
					for _, w := range warned {
						named = named || strings.Contains(w, e.Member)
					}
					assert.True(t, named, "%s: no warning names %s: %q", c.name, e.Member, warned)
				}
			}
			if lost > 0 && intact(len(entries)-1) {
				// The manifest survived: every lost member is named.
				for i, s := range srcs {
					if _, ok := get(r, s); ok {
						continue
					}
					named := false
					for _, w := range warned {
						named = named || strings.Contains(w, entries[holder[i]].Member)
					}
					assert.True(t, named, "%s: %s lost, the manifest survived, but no warning names %s: %q", c.name, s.path, entries[holder[i]].Member, warned)
				}
			}
			if m := r.Meta(); intact(0) && m.Hostname != "testhost" {
				t.Errorf("%s: intact meta reads %+v", c.name, m)
			}
			if lost > 0 || strings.HasPrefix(c.name, "cut") {
				assert.NotEmpty(t, warned, "%s: %d members lost without a warning", c.name, lost)
			}
			for _, w := range warned {
				assert.Regexp(t, `^archive real\.ustack: offset 0x[0-9a-f]+: `, w, c.name)
			}
			assert.Equal(t, len(warned), len(r.Damage()), c.name)
			runtime.ReadMemStats(&after)
			if used := after.TotalAlloc - before.TotalAlloc; used > uint64(4*total+len(b)+(8<<20)) {
				t.Errorf("%s: reading allocated %d bytes for %d bytes of contents", c.name, used, total)
			}
		}
	}
}
