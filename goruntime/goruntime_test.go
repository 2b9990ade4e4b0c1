package goruntime

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/internal/testprog"
)

// goOldToolchain is the oldest Go goruntime reads (.ci/run fetches it).
const goOldToolchain = "go1.21.13"

// buildDir holds the programs built by buildGo, once per test binary run.
var (
	buildDir string
	built    = map[string]string{}
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// buildGo builds the goroutine test program for goarch with toolchain
// ("" for the local Go), skipping when Go or the toolchain is missing.
func buildGo(t *testing.T, toolchain, goarch string, ldflags string) string {
	t.Helper()
	key := toolchain + "/" + goarch + "/" + ldflags
	if exe, ok := built[key]; ok {
		return exe
	}
	if buildDir == "" {
		var err error
		buildDir, err = os.MkdirTemp("", "goruntime-test")
		require.NoError(t, err)
	}
	src, err := os.ReadFile("../report/testdata/goroutines/main.go")
	require.NoError(t, err)
	name := strings.NewReplacer("/", "_", " ", "_").Replace("prog_" + key)
	exe := testprog.BuildGo(t, buildDir, name, string(src), toolchain, goarch, ldflags)
	built[key] = exe
	return exe
}

// fileMemory is a non-PIE executable's memory as the file lays it out.
type fileMemory struct{ o *elfcache.Object }

func (m fileMemory) ReadAt(p []byte, addr uint64) (int, error) {
	n := 0
	for n < len(p) {
		k := m.o.ReadCode(addr+uint64(n), p[n:])
		if k == 0 {
			return n, fmt.Errorf("%#x: not in the file", addr+uint64(n))
		}
		n += k
	}
	return n, nil
}

var builds = []struct{ name, toolchain, goarch string }{
	{"local_amd64", "", "amd64"},
	{"local_arm64", "", "arm64"},
	{"go1.21_amd64", goOldToolchain, "amd64"},
	{"go1.21_arm64", goOldToolchain, "arm64"},
}

// TestTypeDescriptorsMatchDWARF: the layout read from the runtime's type
// descriptors (what a stripped binary has) is the one DWARF gives, field
// for field, for the local Go and Go 1.21 on amd64 and arm64; and the
// stripped build of the same program reads the same layout.
func TestTypeDescriptorsMatchDWARF(t *testing.T) {
	for _, b := range builds {
		t.Run(b.name, func(t *testing.T) {
			full, stripped := buildGo(t, b.toolchain, b.goarch, ""), buildGo(t, b.toolchain, b.goarch, "-s -w")
			o, err := elfcache.Open(full, elfcache.Options{})
			require.NoError(t, err)
			defer o.Close()
			d, err := o.DWARF()
			require.NoError(t, err)
			require.NotNil(t, d)
			want, err := dwarfLayout(d)
			require.NoError(t, err)
			mod, ok := o.GoModule()
			require.True(t, ok)
			got, err := typeLayout(fileMemory{o}, mod.Types, mod.ETypes)
			require.NoError(t, err)
			got.Source = want.Source
			require.Equal(t, want, got)
			require.Greater(t, want.Goid, want.Status)

			s, err := elfcache.Open(stripped, elfcache.Options{})
			require.NoError(t, err)
			defer s.Close()
			sd, _ := s.DWARF()
			require.Nil(t, sd, "-ldflags='-s -w' left DWARF")
			smod, ok := s.GoModule()
			require.True(t, ok)
			sgot, err := typeLayout(fileMemory{s}, smod.Types, smod.ETypes)
			require.NoError(t, err)
			sgot.Source = want.Source
			require.Equal(t, want, sgot)
		})
	}
}

// TestAllGsFromCode: the slice runtime.forEachG loads from the runtime's
// zero-initialized data is runtime.allgs (the symbol table's), on amd64
// and arm64, for the local Go and Go 1.21.
func TestAllGsFromCode(t *testing.T) {
	for _, b := range builds {
		t.Run(b.name, func(t *testing.T) {
			o, err := elfcache.Open(buildGo(t, b.toolchain, b.goarch, ""), elfcache.Options{})
			require.NoError(t, err)
			defer o.Close()
			want, _, ok := o.DataSymbol("runtime.allgs")
			require.True(t, ok)
			mod, ok := o.GoModule()
			require.True(t, ok)
			for _, fn := range allgsFuncs[:2] {
				entry, end, ok := o.GoFunction(fn)
				require.True(t, ok, fn)
				code := make([]byte, end-entry)
				require.Equal(t, len(code), o.ReadCode(entry, code))
				cands := sliceCandidates(codeRefs(o.Arch(), code, entry), mod.Bss, mod.EBss)
				require.Contains(t, cands, want, "%s loads %#v", fn, cands)
				require.LessOrEqual(t, len(cands), 3, "%s: %#x", fn, cands)
			}
		})
	}
}

func TestKnownVersion(t *testing.T) {
	for v, want := range map[string]bool{"go1.21.13": true, "go1.26.8": true, "go1.22rc1": true, "go1.20.14": false,
		"go1.27.3": false, "go1.2": false, "devel go1.27-abc": false, "": false} {
		require.Equal(t, want, knownVersion(v), v)
	}
}

// synthType lays out struct type descriptors the way internal/abi does,
// for tests: memory from base, names and fields after the types.
type synthType struct {
	base uint64
	mem  []byte
}

func (s *synthType) ReadAt(p []byte, addr uint64) (int, error) {
	if addr < s.base || addr-s.base >= uint64(len(s.mem)) {
		return 0, fmt.Errorf("%#x: outside", addr)
	}
	n := copy(p, s.mem[addr-s.base:])
	if n < len(p) {
		return n, fmt.Errorf("%#x: short", addr)
	}
	return n, nil
}

func (s *synthType) alloc(n int) uint64 {
	for len(s.mem)%8 != 0 {
		s.mem = append(s.mem, 0)
	}
	a := s.base + uint64(len(s.mem))
	s.mem = append(s.mem, make([]byte, n)...)
	return a
}

func (s *synthType) name(n string) uint64 {
	a := s.base + uint64(len(s.mem))
	s.mem = append(s.mem, 0, byte(len(n)))
	s.mem = append(s.mem, n...)
	return a
}

func (s *synthType) put(a, v uint64) { binary.LittleEndian.PutUint64(s.mem[a-s.base:], v) }

type synthField struct {
	name string
	off  uint64
	typ  uint64 // a struct type's address, or 0
}

// structType adds a struct type named name ("runtime.g") of size bytes.
func (s *synthType) structType(name string, size uint64, fields []synthField) uint64 {
	str := s.name("*" + name)
	t := s.alloc(typeSize + 8 + 24)
	s.put(t, size)
	s.mem[t-s.base+typeTFlagOff] = tflagExtraStar
	s.mem[t-s.base+typeKindOff] = kindStruct
	binary.LittleEndian.PutUint32(s.mem[t-s.base+typeStrOff:], uint32(str-s.base))
	fa := s.alloc(len(fields) * structFieldSize)
	for i, f := range fields {
		at := fa + uint64(i*structFieldSize)
		s.put(at, s.name(f.name))
		s.put(at+8, f.typ)
		s.put(at+16, f.off)
	}
	s.put(t+structFieldsOff, fa)
	s.put(t+structFieldsOff+8, uint64(len(fields)))
	s.put(t+structFieldsOff+16, uint64(len(fields)))
	return t
}

// synthRuntime lays out a g and an m with the fields ustack reads, less
// the ones named in drop.
func synthRuntime(drop ...string) *synthType {
	s := &synthType{base: 0x40000}
	keep := func(fs []synthField) []synthField {
		var out []synthField
		for _, f := range fs {
			if !strings.Contains(strings.Join(drop, " "), f.name) {
				out = append(out, f)
			}
		}
		return out
	}
	stack := s.structType("runtime.stack", 16, []synthField{{"lo", 0, 0}, {"hi", 8, 0}})
	gobuf := s.structType("runtime.gobuf", 56, keep([]synthField{{"sp", 0, 0}, {"pc", 8, 0}, {"g", 16, 0}, {"lr", 32, 0}, {"bp", 48, 0}}))
	s.structType("runtime.g", 320, keep([]synthField{{"stack", 0, stack}, {"m", 48, 0}, {"sched", 56, gobuf},
		{"syscallsp", 112, 0}, {"syscallpc", 120, 0}, {"atomicstatus", 144, 0}, {"goid", 152, 0},
		{"waitreason", 176, 0}, {"gopc", 288, 0}, {"startpc", 304, 0}}))
	s.structType("runtime.m", 1024, []synthField{{"g0", 0, 0}, {"procid", 64, 0}, {"curg", 184, 0}})
	return s
}

// TestTypeLayoutSynthetic: descriptors laid out as internal/abi lays them
// give their offsets; a g without a field ustack reads is refused, naming
// the field, not guessed (a runtime ustack does not know).
func TestTypeLayoutSynthetic(t *testing.T) {
	s := synthRuntime()
	l, err := typeLayout(s, s.base, s.base+uint64(len(s.mem)))
	require.NoError(t, err)
	require.Equal(t, Layout{Source: "type descriptors", GSize: 320, StackLo: 0, StackHi: 8, M: 48, SchedSP: 56, SchedPC: 64,
		SchedBP: 104, SchedLR: 88, SyscallSP: 112, SyscallPC: 120, SyscallBP: -1, Status: 144, Goid: 152, WaitReason: 176,
		ParentGoid: -1, GoPC: 288, StartPC: 304, MSize: 1024, MProcID: 64, MCurG: 184}, l)

	s = synthRuntime("goid")
	_, err = typeLayout(s, s.base, s.base+uint64(len(s.mem)))
	require.ErrorIs(t, err, errField)
	require.ErrorContains(t, err, "runtime.g.goid")

	s = synthRuntime("bp")
	_, err = typeLayout(s, s.base, s.base+uint64(len(s.mem)))
	require.ErrorContains(t, err, "runtime.g.sched.bp")
}

// FuzzTypeLayout: damaged type descriptors give an error, never a panic
// or a layout with a field outside its struct.
func FuzzTypeLayout(f *testing.F) {
	f.Add(synthRuntime().mem)
	f.Add(synthRuntime("sched").mem)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, mem []byte) {
		s := &synthType{base: 0x40000, mem: mem}
		l, err := typeLayout(s, s.base, s.base+uint64(len(mem)))
		if err != nil {
			return
		}
		for _, off := range []int64{l.StackHi, l.SchedSP, l.SchedPC, l.SchedBP, l.Goid, l.GoPC, l.StartPC} {
			if off < 0 || off+8 > l.GSize {
				t.Fatalf("offset %d outside a %d-byte g: %+v", off, l.GSize, l)
			}
		}
	})
}

// FuzzCodeRefs: any bytes decode without a panic, on both architectures.
func FuzzCodeRefs(f *testing.F) {
	f.Add([]byte{0x48, 0x8b, 0x05, 0x10, 0, 0, 0, 0x48, 0x8b, 0x0d, 0x11, 0, 0, 0})
	f.Add([]byte{0x1b, 0, 0, 0x90, 0x61, 0x03, 0x40, 0xa9})
	f.Fuzz(func(t *testing.T, code []byte) {
		for _, a := range []arch.Arch{arch.AMD64, arch.ARM64} {
			codeRefs(a, code, 0x401000)
		}
	})
}

// TestOpenRefusesNotGo: a program that is not Go (no .go.buildinfo) is
// refused with ErrNotGo. (Go versions outside 1.21 to 1.26 are refused by
// knownVersion: TestKnownVersion.)
func TestOpenRefusesNotGo(t *testing.T) {
	o, err := elfcache.Open("/bin/true", elfcache.Options{})
	if err != nil {
		t.Skipf("/bin/true: %v", err)
	}
	defer o.Close()
	_, err = Open(o, 0, &synthType{})
	require.True(t, errors.Is(err, ErrNotGo), "%v", err)
}

// FuzzGoroutines: goroutines read from damaged memory (allgs, the gs, the
// ms, the wait reasons' strings) give an error or goroutines, never a
// panic.
func FuzzGoroutines(f *testing.F) {
	s := synthRuntime()
	l, err := typeLayout(s, s.base, s.base+uint64(len(s.mem)))
	require.NoError(f, err)
	// allgs {ptr, 1, 1} at 0x1000, one g at 0x1100 with goid 1 waiting.
	seed := make([]byte, 0x1400)
	binary.LittleEndian.PutUint64(seed[0:], 0x1000+0x20)
	binary.LittleEndian.PutUint64(seed[8:], 1)
	binary.LittleEndian.PutUint64(seed[16:], 1)
	binary.LittleEndian.PutUint64(seed[0x20:], 0x1100)
	binary.LittleEndian.PutUint64(seed[0x100+l.Goid:], 1)
	binary.LittleEndian.PutUint32(seed[0x100+l.Status:], StatusWaiting)
	f.Add(seed, uint8(0))
	f.Add(seed[:0x40], uint8(2))
	f.Fuzz(func(t *testing.T, mem []byte, arch8 uint8) {
		m := &synthType{base: 0x1000, mem: mem}
		r := &Runtime{Layout: l, AllGs: 0x1000, mem: m, arch: arch.AMD64}
		if arch8&1 != 0 {
			r.arch = arch.ARM64
		}
		r.findWaitReasons(0x1000, 0x1000+uint64(len(mem)))
		r.checkAllGs(0x1000)
		gs, err := r.Goroutines()
		if err == nil {
			for _, g := range gs {
				_ = g.StatusName()
			}
		}
	})
}
