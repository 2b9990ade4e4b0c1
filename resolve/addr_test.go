package resolve

import (
	"debug/elf"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/procmaps"
)

// cInlined has functions inlined into main, two deep.
const cInlined = `volatile int sink;
static inline __attribute__((always_inline)) void inner(int n) { sink = n * 3; sink += n; }
static inline __attribute__((always_inline)) void outer(int n) { sink = n; inner(n + 1); sink -= 2; }
int main(int c, char **v) { outer(c); inner(c * 5); return sink; }
`

// TestAppendAddrAsAddr2line symbolizes every instruction address of main
// with AppendAddr and compares the chain of functions and lines with
// binutils' addr2line -f -i, innermost first.
func TestAppendAddrAsAddr2line(t *testing.T) {
	bin := testprog.Build(t, t.TempDir(), "inl.c", cInlined, "-O2", "-g", "-no-pie")
	f, err := elf.Open(bin)
	require.NoError(t, err)
	var text *elf.Prog
	for _, ph := range f.Progs {
		if ph.Type == elf.PT_LOAD && ph.Flags&elf.PF_X != 0 {
			text = ph
		}
	}
	syms, err := f.Symbols()
	require.NoError(t, err)
	f.Close()
	var mainSym elf.Symbol
	for _, s := range syms {
		if s.Name == "main" {
			mainSym = s
		}
	}
	require.NotZero(t, mainSym.Size)
	r := New(Options{})
	defer r.Close()
	s := r.NewSpace(1, []Mapping{{Map: procmaps.Map{Start: text.Vaddr &^ 0xfff, End: text.Vaddr + text.Memsz, PgOff: text.Off &^ 0xfff,
		Path: bin, Exec: true}}})
	var addrs []string
	for a := mainSym.Value; a < mainSym.Value+mainSym.Size; a++ {
		addrs = append(addrs, fmt.Sprintf("%#x", a))
	}
	out := strings.Split(strings.TrimSpace(testprog.Tool(t, "", "addr2line", append([]string{"-f", "-i", "-a", "-e", bin}, addrs...)...)), "\n")
	z := NewSymbolizer()
	var frames []Frame
	inlined, i := 0, 0
	for _, a := range addrs {
		require.Equal(t, a, strings.Replace(out[i], "0x0000000000", "0x", 1))
		i++
		var want []string
		for i < len(out) && !strings.HasPrefix(out[i], "0x") {
			want = append(want, out[i]+" "+filepath.Base(strings.Fields(out[i+1])[0]))
			i += 2
		}
		var addr uint64
		fmt.Sscanf(a, "0x%x", &addr)
		frames = z.AppendAddr(frames[:0], s, addr)
		var got []string
		for k, fr := range frames {
			got = append(got, fmt.Sprintf("%s %s:%d", fr.Symbol, filepath.Base(fr.File), fr.Line))
			assert.Equal(t, k < len(frames)-1, fr.Inlined, "%s frame %d", a, k)
			assert.Equal(t, HowContext, fr.How)
			assert.Equal(t, bin, fr.Module)
		}
		assert.Equal(t, want, got, "at %s", a)
		if len(frames) > 1 {
			inlined++
		}
	}
	assert.Greater(t, inlined, 0, "no address of main had inlined functions")
	if n := testing.AllocsPerRun(100, func() { frames = z.AppendAddr(frames[:0], s, mainSym.Value) }); n != 0 {
		t.Errorf("AppendAddr allocated %.0f times", n)
	}
	// An address in no mapping: one frame, no module.
	frames = z.AppendAddr(frames[:0], s, 0x10)
	require.Len(t, frames, 1)
	assert.Equal(t, Frame{Addr: 0x10, PC: 0x10, Offset: 0x10, How: HowContext}, frames[0])
}

// TestSymbolizerReset: a stack's first frame whose SP happens to be the
// CFA of the last frame of the stack before is taken for its caller, with
// tail call frames between, unless Reset says a new stack begins.
func TestSymbolizerReset(t *testing.T) {
	p := buildTailChain(t, t.TempDir())
	r := New(Options{})
	defer r.Close()
	s := p.space(r, p.bin)
	frames := p.frames(s)
	z := NewSymbolizer()
	out := z.Append(nil, s, &frames[0], HowContext) // one stack: boom alone
	main := frames[1]
	out = z.Append(out[:0], s, &main, HowCFI) // the next stack, without Reset
	assert.Len(t, out, 3, "main with a and b tail-called before it: the previous stack taken for this one's")
	out = z.Append(out[:0], s, &frames[0], HowContext)
	z.Reset()
	out = z.Append(out[:0], s, &main, HowCFI)
	require.Len(t, out, 1)
	assert.Equal(t, "main", out[0].Symbol)
}

// TestDataMappingOfObjectFileIsNotMissing: a program may map an object
// file's bytes outside its loadable segments as data (gdb maps the
// sections of the programs it debugs). Such a mapping is no code and
// nothing is missing for it, even beside the same file's code mapping; an
// executable mapping at such an offset is the object's missing segment.
func TestDataMappingOfObjectFileIsNotMissing(t *testing.T) {
	bin := testprog.Build(t, t.TempDir(), "inl.c", cInlined, "-O2", "-g", "-no-pie")
	f, err := elf.Open(bin)
	require.NoError(t, err)
	var text *elf.Prog
	end := uint64(0)
	for _, ph := range f.Progs {
		if ph.Type == elf.PT_LOAD {
			end = max(end, ph.Off+ph.Filesz)
			if ph.Flags&elf.PF_X != 0 {
				text = ph
			}
		}
	}
	f.Close()
	require.NotNil(t, text)
	// A page of the file past every loadable segment (its DWARF).
	dataOff := (end + 0xfff) &^ 0xfff
	code := Mapping{Map: procmaps.Map{Start: text.Vaddr &^ 0xfff, End: text.Vaddr + text.Memsz, PgOff: text.Off &^ 0xfff, Path: bin, Exec: true}}
	data := Mapping{Map: procmaps.Map{Start: 0x7f0000000000, End: 0x7f0000001000, PgOff: dataOff, Path: bin}, File: bin}

	r := New(Options{})
	defer r.Close()
	s := r.NewSpace(1, []Mapping{code, data})
	assert.Empty(t, r.Missing(), "a data mapping outside the segments is nothing missing")
	_, ok := s.Mapping(0)
	assert.True(t, ok)
	assert.NotNil(t, s.Object(0), "the code mapping has its object")
	assert.Nil(t, s.Object(1), "the data mapping has none")

	r2 := New(Options{})
	defer r2.Close()
	data.Exec = true
	r2.NewSpace(1, []Mapping{data})
	assert.Contains(t, r2.Missing()[bin], "no loadable segment maps file offset", "code at such an offset is missing")
}
