package resolve

import (
	"debug/elf"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/procmaps"
	"github.com/ustack/ustack/unwinder"
)

// The committed recording of the package Example and its program.
var (
	exampleDir   = filepath.Join("..", "testdata", "recordings", "static_close")
	exampleSymFS = filepath.Join(exampleDir, "symfs")
	examplePath  = "/tmp/ustack-example/prog"
)

// exampleMaps returns the program's mappings as the recording has them and
// the build-id perf recorded for it.
func exampleMaps(t testing.TB) ([]procmaps.Map, []byte) {
	t.Helper()
	r, err := perfdata.Open(filepath.Join(exampleDir, "perf.data"))
	require.NoError(t, err)
	defer r.Close()
	var id []byte
	for _, b := range r.Session().Features.BuildIDs {
		if b.Filename == examplePath {
			id = b.BuildID
		}
	}
	require.NotNil(t, id, "no build-id for %s in the recording", examplePath)
	var maps []procmaps.Map
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		if m, ok := rec.(*perfdata.Mmap); ok && m.Filename == examplePath {
			maps = append(maps, procmaps.Map{Start: m.Start, End: m.Start + m.Len, PgOff: m.PgOff, Path: m.Filename,
				BuildID: id, Prot: m.Prot, Exec: m.Prot&procmaps.ProtExec != 0})
		}
	}
	require.NotEmpty(t, maps)
	return maps, id
}

// elfSymbol returns a symbol's address read with debug/elf.
func elfSymbol(t *testing.T, path, name string) uint64 {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	syms, err := f.Symbols()
	require.NoError(t, err)
	for _, s := range syms {
		if s.Name == name {
			return s.Value
		}
	}
	t.Fatalf("%s has no symbol %s", path, name)
	return 0
}

// TestSpaceTagsSurviveSorting: NewSpace's mappings come back to their
// details through unwinder.Mapping.Tag although the address space sorts
// them, drops empty ones and clips overlaps. The address is leaf's return
// address from gdb's backtrace of the program (gdb-bt.txt); the symbol's
// address comes from debug/elf.
func TestSpaceTagsSurviveSorting(t *testing.T) {
	maps, _ := exampleMaps(t)
	var in []Mapping
	in = append(in, Mapping{Map: procmaps.Map{Start: 0x7000, End: 0x7000, Path: "//anon", Exec: true}}) // empty
	for i := len(maps) - 1; i >= 0; i-- {                                                               // reversed
		in = append(in, Mapping{Map: maps[i]})
	}
	in = append(in, Mapping{Map: procmaps.Map{Start: 0x7ffff000, End: 0x80001000, Path: "[stack]"}})
	r := New(Options{SymFS: exampleSymFS})
	defer r.Close()
	s := r.NewSpace(1, in)
	require.Less(t, s.AddressSpace().Len(), len(in), "the empty mapping is dropped")

	const ret = 0x40164b // gdb: #1 0x000000000040164b in leaf () at prog.c:6
	fr := unwinder.Frame{PC: ret, Mapping: int32(s.AddressSpace().Find(ret)), Flags: unwinder.FrameReturnAddress}
	got := NewSymbolizer().Append(nil, s, &fr, "cfi")
	require.Len(t, got, 1)
	leaf := elfSymbol(t, filepath.Join(exampleSymFS, examplePath), "leaf")
	assert.Equal(t, "leaf", got[0].Symbol)
	assert.Equal(t, uint64(ret-1-leaf), got[0].SymOff)
	assert.Equal(t, examplePath, got[0].Module)
	assert.Equal(t, 6, got[0].Line)
	assert.False(t, got[0].Inlined)

	// An address in no mapping is a frame without a module.
	fr = unwinder.Frame{PC: 0x1000, Mapping: int32(s.AddressSpace().Find(0x1000))}
	got = NewSymbolizer().Append(got[:0], s, &fr, "cfi")
	require.Len(t, got, 1)
	assert.Equal(t, "", got[0].Module)
	assert.Equal(t, uint64(0x1000), got[0].Offset)
}

// TestBuildIDPolicy: the file is used when its build-id is the recording's;
// a file or archive copy with another build-id is refused with one warning
// naming both ids; perf's build-id cache serves objects (the vdso too,
// under [vdso]/ID/vdso) whose file is gone.
func TestBuildIDPolicy(t *testing.T) {
	maps, id := exampleMaps(t)
	prog, err := os.ReadFile(filepath.Join(exampleSymFS, examplePath))
	require.NoError(t, err)
	with := func(path string, buildID []byte) []Mapping {
		out := make([]Mapping, len(maps))
		for i, m := range maps {
			m.Path, m.BuildID = path, buildID
			out[i] = Mapping{Map: m}
		}
		return out
	}
	resolved := func(s *Space) bool {
		for i := 0; i < s.AddressSpace().Len(); i++ {
			if s.Object(i) != nil {
				return true
			}
		}
		return false
	}

	t.Run("file", func(t *testing.T) {
		r := New(Options{SymFS: exampleSymFS})
		defer r.Close()
		assert.True(t, resolved(r.NewSpace(1, with(examplePath, id))))
		assert.Empty(t, r.Missing())
	})

	t.Run("mismatch", func(t *testing.T) {
		var warnings []string
		wrong := []byte{0xde, 0xad, 0xbe, 0xef}
		r := New(Options{SymFS: exampleSymFS, Objects: archive{string(wrong): prog}, Warn: func(m string) { warnings = append(warnings, m) }})
		defer r.Close()
		assert.False(t, resolved(r.NewSpace(1, with(examplePath, wrong))))
		assert.False(t, resolved(r.NewSpace(2, with(examplePath, wrong))))
		require.Len(t, warnings, 1, "one warning per path")
		assert.Contains(t, warnings[0], "deadbeef")
		assert.Contains(t, warnings[0], hex.EncodeToString(id))
		assert.Contains(t, r.Missing()[examplePath], "build-id mismatch")
	})

	t.Run("archive", func(t *testing.T) {
		r := New(Options{SymFS: t.TempDir(), Objects: archive{string(id): prog}})
		defer r.Close()
		s := r.NewSpace(1, with(examplePath, id))
		require.True(t, resolved(s))
		assert.Empty(t, r.Missing())
	})

	t.Run("buildid cache", func(t *testing.T) {
		dir := t.TempDir()
		h := hex.EncodeToString(id)
		for _, p := range []string{filepath.Join(dir, ".build-id", h[:2], h[2:], "elf"), filepath.Join(dir, "[vdso]", h, "vdso")} {
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			require.NoError(t, os.WriteFile(p, prog, 0o644))
		}
		r := New(Options{SymFS: t.TempDir(), BuildIDDir: dir})
		defer r.Close()
		assert.True(t, resolved(r.NewSpace(1, with("/gone/prog", id))), "by .build-id")
		assert.True(t, resolved(r.NewSpace(1, with("[vdso]", id))), "vdso by [vdso]/ID/vdso")
		assert.Empty(t, r.Missing())
	})

	t.Run("missing", func(t *testing.T) {
		root := t.TempDir()
		r := New(Options{SymFS: root})
		defer r.Close()
		assert.False(t, resolved(r.NewSpace(1, with("/gone/prog", id))))
		assert.Equal(t, "not found under "+root, r.Missing()["/gone/prog"], "names the root it looked in")
	})
}

// archive is an ObjectSource by build-id.
type archive map[string][]byte

func (a archive) Object(buildID []byte, path string) ([]byte, string, bool) {
	b, ok := a[string(buildID)]
	return b, path, ok
}

func TestUnversioned(t *testing.T) {
	for in, want := range map[string]string{
		"__libc_start_main@@GLIBC_2.34": "__libc_start_main",
		"fclose@GLIBC_2.2.5":            "fclose",
		"puts@plt":                      "puts@plt",
		"memcpy@GLIBC_2.14@plt":         "memcpy@plt",
		"main":                          "main",
		"_ZN3foo3barEv":                 "_ZN3foo3barEv",
	} {
		assert.Equal(t, want, Unversioned(in), in)
	}
}

// TestAppendAllocatesNothing: once the caller's slice has grown, turning a
// frame into symbolized frames does not allocate.
func TestAppendAllocatesNothing(t *testing.T) {
	maps, _ := exampleMaps(t)
	r := New(Options{SymFS: exampleSymFS})
	defer r.Close()
	s := r.NewSpace(1, FromProcmaps(nil, maps))
	z := NewSymbolizer()
	fr := unwinder.Frame{PC: 0x40164b, Mapping: int32(s.AddressSpace().Find(0x40164b)), Flags: unwinder.FrameReturnAddress}
	out := z.Append(nil, s, &fr, "cfi")
	require.True(t, strings.HasPrefix(out[0].Symbol, "leaf"))
	if n := testing.AllocsPerRun(100, func() { out = z.Append(out[:0], s, &fr, "cfi") }); n != 0 {
		t.Errorf("Append allocated %.0f times", n)
	}
}

// BenchmarkAppend measures symbolizing one return address of the example
// program (symbol, line and function lookups in warm caches).
func BenchmarkAppend(b *testing.B) {
	maps, _ := exampleMaps(b)
	r := New(Options{SymFS: exampleSymFS})
	defer r.Close()
	s := r.NewSpace(1, FromProcmaps(nil, maps))
	z := NewSymbolizer()
	fr := unwinder.Frame{PC: 0x40164b, Mapping: int32(s.AddressSpace().Find(0x40164b)), Flags: unwinder.FrameReturnAddress}
	out := z.Append(nil, s, &fr, "cfi")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		out = z.Append(out[:0], s, &fr, "cfi")
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
}

// TestAppendMemo: the Symbolizer's memo of recent addresses answers as
// the lookups themselves do (a new Symbolizer, which has seen nothing),
// also after entries were evicted by addresses hashing alike.
func TestAppendMemo(t *testing.T) {
	maps, _ := exampleMaps(t)
	r := New(Options{SymFS: exampleSymFS})
	defer r.Close()
	s := r.NewSpace(1, FromProcmaps(nil, maps))
	as := s.AddressSpace()
	var pcs []uint64
	for pc := uint64(0x401000); pc < 0x402000; pc += 7 {
		if as.Find(pc) >= 0 {
			pcs = append(pcs, pc)
		}
	}
	require.Greater(t, len(pcs), memoSize/2)
	z := NewSymbolizer()
	var named int
	for round := range 3 {
		for _, pc := range pcs {
			fr := unwinder.Frame{PC: pc, Mapping: int32(as.Find(pc)), Flags: unwinder.FrameReturnAddress}
			want := NewSymbolizer().Append(nil, s, &fr, "cfi")
			got := z.Append(nil, s, &fr, "cfi")
			require.Equal(t, want, got, "round %d, pc %#x", round, pc)
			if round == 0 && got[len(got)-1].Symbol != "" {
				named++
			}
		}
	}
	require.Greater(t, named, len(pcs)/2, "the addresses are mostly in named functions")
}
