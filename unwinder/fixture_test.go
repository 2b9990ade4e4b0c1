package unwinder_test

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ianlancetaylor/demangle"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/fixture"
	"github.com/ustack/ustack/unwinder"
)

// TestFixtures unwinds every committed capture and compares the frames with
// the backtrace gdb printed for the same stop (see testdata/FORMAT.md):
// same PCs, same functions, the expected stop reason.
func TestFixtures(t *testing.T) {
	for _, archName := range []string{"x86_64", "aarch64"} {
		paths, err := fixture.Glob(archName)
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range paths {
			name := archName + "/" + strings.TrimSuffix(filepath.Base(path), ".json")
			t.Run(name, func(t *testing.T) { checkFixture(t, path) })
		}
	}
}

// eachPrepared calls fn with every committed capture of both
// architectures, prepared (objects opened, address space built); the
// objects are closed when fn returns.
func eachPrepared(t *testing.T, fn func(path string, p *fixture.Prepared)) {
	t.Helper()
	for _, archName := range []string{"x86_64", "aarch64"} {
		paths, err := fixture.Glob(archName)
		require.NoError(t, err)
		for _, path := range paths {
			f, err := fixture.Load(path)
			require.NoError(t, err)
			cache := f.NewCache()
			p, err := f.Prepare(cache)
			if err != nil {
				cache.Close()
				t.Fatal(err)
			}
			fn(path, p)
			cache.Close()
		}
	}
}

func checkFixture(t *testing.T, path string) {
	f, err := fixture.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	cache := f.NewCache()
	defer cache.Close()
	p, err := f.Prepare(cache)
	if err != nil {
		t.Fatal(err)
	}
	u := unwinder.New(p.Arch, unwinder.Options{})
	frames := make([]unwinder.Frame, 512)
	res := u.Unwind(new(unwinder.Cache), p.Space, &p.Regs, &p.Stack, frames)
	got := frames[:res.Frames]

	want := f.GDB
	if f.Expect.Frames > 0 && f.Expect.Frames < len(want) && f.Expect.Stop != "truncated" {
		want = want[:f.Expect.Frames]
	}
	n := len(got)
	if n > len(want) {
		n = len(want)
	}
	bad := false
	for i := 0; i < n; i++ {
		g, w := got[i], want[i]
		gotName := ""
		if obj := p.Objects[max(g.Mapping, 0)]; g.Mapping >= 0 && obj != nil {
			gotName, _, _ = obj.Symbolize(g.LookupPC() - p.Space.Mapping(int(g.Mapping)).Bias)
		}
		isTramp := g.Flags&unwinder.FrameSignalTrampoline != 0
		switch {
		case g.PC != w.PC:
			t.Errorf("frame %d: pc %#x (%s, %v); gdb %#x (%s)", i, g.PC, gotName, g.Method, w.PC, w.Function)
			bad = true
		case w.Signal != isTramp:
			t.Errorf("frame %d: signal trampoline %v; gdb %v", i, isTramp, w.Signal)
		case w.Function != "" && gotName != w.Function && !sameFunction(p, g, w.Function):
			t.Errorf("frame %d: pc %#x function %q; gdb %q", i, g.PC, gotName, w.Function)
		case w.HasSP && !w.Signal && g.SP != w.SP:
			t.Errorf("frame %d: pc %#x (%s) sp %#x; gdb %#x", i, g.PC, gotName, g.SP, w.SP)
		}
		if bad {
			break
		}
	}
	wantStop := f.Expect.Stop
	if res.Stop.String() != wantStop {
		t.Errorf("stop %v (%v) after %d frames; want %s", res.Stop, res.Err, len(got), wantStop)
	}
	switch {
	case wantStop == "truncated":
		if len(got) < f.Expect.Frames || len(got) > len(f.GDB) {
			t.Errorf("%d frames before the snapshot ran out; want between %d and %d", len(got), f.Expect.Frames, len(f.GDB))
		}
	case len(got) != len(want):
		t.Errorf("%d frames; gdb has %d", len(got), len(want))
	}
	if t.Failed() {
		for i, g := range got {
			t.Logf("  got #%d pc %#x sp %#x %v", i, g.PC, g.SP, g.Method)
		}
		for i, w := range f.GDB {
			t.Logf("  gdb #%d pc %#x %s", i, w.PC, w.Function)
		}
	}
}

// sameFunction reports whether gdb's function name for frame g names the
// function that contains the frame's lookup address. It reads the object's
// symbol tables with debug/elf, independently of elfcache, so that aliases
// (glibc's __close and close, the vdso's clock_gettime and
// __vdso_clock_gettime), demangled C++ names and Go ABI wrappers all count.
func sameFunction(p *fixture.Prepared, g unwinder.Frame, gdbName string) bool {
	if g.Mapping < 0 || p.Objects[g.Mapping] == nil {
		return false
	}
	obj := p.Objects[g.Mapping]
	addr := g.LookupPC() - p.Space.Mapping(int(g.Mapping)).Bias
	paths := []string{obj.Path()}
	if d := obj.DebugPath(); d != "" {
		paths = append(paths, d)
	}
	for _, path := range paths {
		for _, sym := range elfSymbols(path) {
			if addr < sym.Value || addr >= sym.Value+max(sym.Size, 1) && sym.Size != 0 {
				continue
			}
			if sym.Size == 0 && addr != sym.Value {
				continue
			}
			if nameMatches(sym.Name, gdbName) {
				return true
			}
		}
	}
	return false
}

func nameMatches(sym, gdbName string) bool {
	if sym == gdbName {
		return true
	}
	if d := demangle.Filter(sym); d == gdbName {
		return true
	}
	// Go: gdb drops the ABI wrapper suffix.
	return strings.TrimSuffix(sym, ".abi0") == gdbName
}

var symCache = map[string][]elf.Symbol{}

func elfSymbols(path string) []elf.Symbol {
	if syms, ok := symCache[path]; ok {
		return syms
	}
	var all []elf.Symbol
	if f, err := elf.Open(path); err == nil {
		s1, _ := f.Symbols()
		s2, _ := f.DynamicSymbols()
		all = append(s1, s2...)
		f.Close()
	}
	symCache[path] = all
	return all
}

// TestEpilogueRestoredRegister checks, on the gdb fixtures swept over gcc
// -O0's "leave; ret" and "pop %rbp; ret" epilogues, that exactly the stops at
// the ret (where the CFI still puts rbp at CFA-16, below the SP) take the
// callee's rbp as already restored, and say so on the caller's frame.
func TestEpilogueRestoredRegister(t *testing.T) {
	paths, err := fixture.Glob("x86_64")
	require.NoError(t, err)
	rets := 0
	for _, path := range paths {
		base := filepath.Base(path)
		if !strings.HasPrefix(base, "epilogue_") {
			continue
		}
		f, err := fixture.Load(path)
		require.NoError(t, err)
		cache := f.NewCache()
		p, err := f.Prepare(cache)
		require.NoError(t, err)
		frames := make([]unwinder.Frame, 64)
		res := unwinder.New(p.Arch, unwinder.Options{}).Unwind(new(unwinder.Cache), p.Space, &p.Regs, &p.Stack, frames)
		cache.Close()
		require.Equal(t, unwinder.StopOutermost, res.Stop, "%s: %v", base, res.Err)
		atRet := strings.HasSuffix(f.Description, ": ret")
		if atRet {
			rets++
		}
		for i, fr := range frames[:res.Frames] {
			want := atRet && i == 1
			assert.Equal(t, want, fr.Flags&unwinder.FrameRestoredRegister != 0, "%s: frame %d FrameRestoredRegister", base, i)
		}
	}
	require.Equal(t, 2, rets, "fixtures stopped at an epilogue's ret (epilogue_leave_*, epilogue_pop_*)")
}

// TestReturnAddressOutsideCode replaces the saved return address into top
// in the arm64 frame-pointer fixture (gdb: close, leaf, mid, top, ...) by an
// address in no mapping, then by one in the [stack] mapping (neither
// executable nor an object's): either way the walk ends after close, leaf
// and mid with StopNoMapping naming the address, which is no frame.
func TestReturnAddressOutsideCode(t *testing.T) {
	f, err := fixture.Load(filepath.Join(fixture.Dir(), "fixtures", "aarch64", "a64_syscall_O2_fp.json"))
	if err != nil {
		t.Skip(err)
	}
	require.Equal(t, "top", f.GDB[3].Function)
	cache := f.NewCache()
	defer cache.Close()
	p, err := f.Prepare(cache)
	require.NoError(t, err)
	data := p.Stack.Data
	slot := -1
	for off := int(f.GDB[2].SP - p.Stack.Addr); off+8 <= len(data); off += 8 {
		if binary.LittleEndian.Uint64(data[off:]) == f.GDB[3].PC {
			slot = off
			break
		}
	}
	require.GreaterOrEqual(t, slot, 0, "top's return address is not in the snapshot")
	for _, tc := range []struct {
		name   string
		ra     uint64
		mapped bool
	}{
		{"unmapped", 0xdead0000, false},
		{"stack", p.Stack.Addr + 64, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stack := p.Stack
			stack.Data = append([]byte(nil), data...)
			binary.LittleEndian.PutUint64(stack.Data[slot:], tc.ra)
			frames := make([]unwinder.Frame, 64)
			res := unwinder.New(p.Arch, unwinder.Options{}).Unwind(new(unwinder.Cache), p.Space, &p.Regs, &stack, frames)
			require.Equal(t, unwinder.StopNoMapping, res.Stop, "%v", res.Err)
			require.Equal(t, 3, res.Frames)
			for i, fr := range frames[:res.Frames] {
				require.Equal(t, f.GDB[i].PC, fr.PC, "frame %d", i)
			}
			var nm *unwinder.NoMappingError
			require.ErrorAs(t, res.Err, &nm)
			require.Equal(t, tc.ra, nm.PC)
			require.Equal(t, tc.mapped, nm.Mapped)
			require.Contains(t, res.Err.Error(), fmt.Sprintf("%#x", tc.ra))
		})
	}
}
