package inflate

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"errors"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"testing"

	kzlib "github.com/klauspost/compress/zlib"
)

// compressed returns data compressed by compress/zlib at level.
func compressed(t testing.TB, data []byte, level int) []byte {
	var b bytes.Buffer
	w, err := zlib.NewWriterLevel(&b, level)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	w.Close()
	return b.Bytes()
}

func readAll(src []byte) ([]byte, error) {
	r, err := NewZlibReader(src)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

// TestRoundTrip inflates what compress/zlib deflated, at every level
// (stored, fixed and dynamic blocks, long and short matches, runs), from
// random, repetitive and periodic data of sizes around the window's.
func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	sizes := []int{0, 1, 7, 258, 32 << 10, winLen - 1, winLen, winLen + 1, 3 * winLen}
	for i := 0; i < 200; i++ {
		sizes = append(sizes, r.Intn(400000))
	}
	for i, size := range sizes {
		data := make([]byte, size)
		mode := i % 4
		for j := range data {
			switch mode {
			case 0:
				data[j] = byte(r.Intn(256))
			case 1:
				data[j] = byte(r.Intn(4))
			case 2:
				if j > 300 && r.Intn(20) > 0 {
					data[j] = data[j-1-r.Intn(300)]
				} else {
					data[j] = byte(r.Intn(256))
				}
			default:
				data[j] = "abcabcabdxyz"[j%(1+i%12)]
			}
		}
		level := i%11 - 1
		z := compressed(t, data, level)
		got, err := readAll(z)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("case %d (%d bytes, level %d, mode %d): %v, %d bytes back, equal %v", i, size, level, mode, err, len(got), bytes.Equal(got, data))
		}
	}
}

// TestDebugSections inflates the SHF_COMPRESSED sections of the system's
// debug files (glibc's when libc6-dbg is installed) and compares them with
// klauspost/compress's inflating.
func TestDebugSections(t *testing.T) {
	files, _ := filepath.Glob("/usr/lib/debug/.build-id/*/*.debug")
	if len(files) == 0 {
		t.Skip("no debug files in /usr/lib/debug/.build-id (Debian's libc6-dbg has glibc's; .ci/run installs it)")
	}
	// The largest first (glibc's, with its 5.8 MB .debug_info), then
	// smaller ones.
	size := func(p string) int64 {
		st, err := os.Stat(p)
		if err != nil {
			return 0
		}
		return st.Size()
	}
	sort.Slice(files, func(i, j int) bool { return size(files[i]) > size(files[j]) })
	if len(files) > 12 {
		files = files[:12]
	}
	sections := 0
	for _, path := range files {
		f, err := elf.Open(path)
		if err != nil {
			continue
		}
		raw, _ := os.ReadFile(path)
		for _, s := range f.Sections {
			if s.Flags&elf.SHF_COMPRESSED == 0 || s.Offset+s.FileSize > uint64(len(raw)) || s.FileSize < 24 {
				continue
			}
			z := raw[s.Offset+24 : s.Offset+s.FileSize]
			kr, err := kzlib.NewReader(bytes.NewReader(z))
			if err != nil {
				continue
			}
			want, werr := io.ReadAll(kr)
			got, err := readAll(z)
			if werr != nil || err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s %s: klauspost %v (%d bytes), inflate %v (%d bytes), equal %v", path, s.Name, werr, len(want), err, len(got), bytes.Equal(got, want))
			}
			sections++
		}
		f.Close()
	}
	t.Logf("%d sections of %d files", sections, len(files))
}

// TestDamage: a truncated stream, a flipped byte and a wrong checksum give
// errors, never wrong data with io.EOF.
func TestDamage(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	data := make([]byte, 200000)
	for j := range data {
		data[j] = byte(r.Intn(16))
	}
	z := compressed(t, data, 6)
	for _, n := range []int{0, 1, 2, 3, len(z) / 2, len(z) - 5, len(z) - 4, len(z) - 1} {
		if _, err := readAll(z[:n]); err == nil {
			t.Errorf("truncated to %d of %d bytes: no error", n, len(z))
		}
	}
	bad := bytes.Clone(z)
	bad[len(bad)-1] ^= 1
	if _, err := readAll(bad); !errors.Is(err, ErrChecksum) {
		t.Errorf("wrong checksum: %v", err)
	}
	for i := 0; i < 200; i++ {
		bad := bytes.Clone(z)
		bad[2+r.Intn(len(bad)-2)] ^= byte(1 + r.Intn(255))
		if got, err := readAll(bad); err == nil && !bytes.Equal(got, data) {
			t.Fatalf("flipped byte: wrong data without an error")
		}
	}
}

// FuzzInflate: any input gives the data compress/zlib gives, or an error
// when compress/zlib gives one; it never panics or hangs.
func FuzzInflate(f *testing.F) {
	f.Add(compressed(f, []byte("hello, hello, hello world"), 6))
	f.Add(compressed(f, bytes.Repeat([]byte{1, 2, 3}, 1000), 9))
	f.Add(compressed(f, []byte("stored"), 0))
	f.Add([]byte{0x78, 0x9c})
	f.Fuzz(func(t *testing.T, z []byte) {
		var got []byte
		r, err := NewZlibReader(z)
		if err == nil {
			got, err = io.ReadAll(io.LimitReader(r, 1<<24))
		}
		zr, zerr := zlib.NewReader(bytes.NewReader(z))
		var want []byte
		if zerr == nil {
			want, zerr = io.ReadAll(io.LimitReader(zr, 1<<24))
		}
		if err == nil && (zerr != nil || !bytes.Equal(got, want)) {
			t.Fatalf("inflate: %d bytes, no error; compress/zlib: %d bytes, %v", len(got), len(want), zerr)
		}
		if zerr == nil && err != nil {
			t.Fatalf("inflate: %v; compress/zlib: %d bytes", err, len(want))
		}
	})
}

func benchSection(b *testing.B) []byte {
	// glibc's debug file: the largest in /usr/lib/debug/.build-id.
	files, _ := filepath.Glob("/usr/lib/debug/.build-id/*/*.debug")
	var path string
	var most int64
	for _, p := range files {
		if st, err := os.Stat(p); err == nil && st.Size() > most {
			path, most = p, st.Size()
		}
	}
	if path == "" {
		b.Skip("no debug files in /usr/lib/debug/.build-id")
	}
	f, err := elf.Open(path)
	if err != nil {
		b.Skip(err)
	}
	defer f.Close()
	var best *elf.Section
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_COMPRESSED != 0 && (best == nil || s.Size > best.Size) {
			best = s
		}
	}
	if best == nil {
		b.Skip("no compressed section")
	}
	// The raw bytes (debug/elf's ReaderAt is nil for a compressed one).
	fh, err := os.Open(path)
	if err != nil {
		b.Skip(err)
	}
	defer fh.Close()
	raw := make([]byte, best.FileSize)
	if _, err := fh.ReadAt(raw, int64(best.Offset)); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(best.Size))
	return raw[24:]
}

// BenchmarkInflate inflates the largest compressed section of glibc's
// debug file (libc6-dbg) with this package, klauspost/compress and
// compress/zlib.
func BenchmarkInflate(b *testing.B) {
	buf := make([]byte, 32<<10)
	run := func(b *testing.B, open func([]byte) (io.Reader, error)) {
		z := benchSection(b)
		for b.Loop() {
			r, err := open(z)
			if err != nil {
				b.Fatal(err)
			}
			for {
				if _, err := r.Read(buf); err != nil {
					if err != io.EOF {
						b.Fatal(err)
					}
					break
				}
			}
		}
	}
	b.Run("inflate", func(b *testing.B) {
		run(b, func(z []byte) (io.Reader, error) { return NewZlibReader(z) })
	})
	b.Run("klauspost", func(b *testing.B) {
		run(b, func(z []byte) (io.Reader, error) { return kzlib.NewReader(bytes.NewReader(z)) })
	})
	b.Run("stdlib", func(b *testing.B) {
		run(b, func(z []byte) (io.Reader, error) { return zlib.NewReader(bytes.NewReader(z)) })
	})
}
