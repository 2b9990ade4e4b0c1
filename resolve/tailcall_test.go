package resolve

import (
	"debug/elf"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/procmaps"
	"github.com/ustack/ustack/unwinder"
)

// cTailChain: main calls a, which tail-calls b, which tail-calls boom.
const cTailChain = `#include <string.h>
volatile int sink;
__attribute__((noipa)) void boom(char *p) { strcpy(p, "x"); }
__attribute__((noipa)) void b(int n) { sink = n; boom(0); }
__attribute__((noipa)) void a(int n) { sink = n + 1; b(n); }
int main(int c, char **v) { a(c); sink = 0; return 0; }
`

// objdumpNext returns, for each function, the address just past each
// instruction whose text matches re (objdump -d: the address plus the
// instruction's bytes): a call's or a jump's return pc.
func objdumpNext(t testing.TB, bin string, re *regexp.Regexp) map[string][]uint64 {
	t.Helper()
	out := testprog.Tool(t, "", "objdump", "-d", bin)
	fn := regexp.MustCompile(`^[0-9a-f]+ <(\S+)>:$`)
	insn := regexp.MustCompile(`^\s*([0-9a-f]+):\t([0-9a-f ]+)\t(.*)$`)
	next := map[string][]uint64{}
	cur := ""
	for _, line := range strings.Split(out, "\n") {
		if m := fn.FindStringSubmatch(line); m != nil {
			cur = m[1]
			continue
		}
		if m := insn.FindStringSubmatch(line); m != nil && re.MatchString(strings.TrimSpace(m[3])) {
			addr, err := strconv.ParseUint(m[1], 16, 64)
			require.NoError(t, err)
			next[cur] = append(next[cur], addr+uint64(len(strings.Fields(m[2]))))
		}
	}
	return next
}

// tailChainProgram is cTailChain built without PIE (link addresses are
// run-time addresses) in dir.
type tailChainProgram struct {
	bin          string
	text         *elf.Prog // the executable segment
	addr         map[string]uint64
	jmps, calls  map[string][]uint64 // objdumpNext's for jumps to b and boom, calls of a
	start, pgoff uint64
}

func buildTailChain(t testing.TB, dir string, flags ...string) *tailChainProgram {
	t.Helper()
	p := &tailChainProgram{bin: testprog.Build(t, dir, "tc.c", cTailChain, append([]string{"-O2", "-g", "-no-pie"}, flags...)...)}
	f, err := elf.Open(p.bin)
	require.NoError(t, err)
	defer f.Close()
	for _, ph := range f.Progs {
		if ph.Type == elf.PT_LOAD && ph.Flags&elf.PF_X != 0 {
			p.text = ph
		}
	}
	require.NotNil(t, p.text)
	p.start, p.pgoff = p.text.Vaddr&^0xfff, p.text.Off&^0xfff
	syms, err := f.Symbols()
	require.NoError(t, err)
	p.addr = map[string]uint64{}
	for _, s := range syms {
		p.addr[s.Name] = s.Value
	}
	p.jmps = objdumpNext(t, p.bin, regexp.MustCompile(`^jmp\s+[0-9a-f]+ <(b|boom)>$`))
	p.calls = objdumpNext(t, p.bin, regexp.MustCompile(`^call\s+[0-9a-f]+ <a>$`))
	require.Len(t, p.jmps["a"], 1, "a's jump to b")
	require.Len(t, p.jmps["b"], 1, "b's jump to boom")
	require.Len(t, p.calls["main"], 1, "main's call of a")
	return p
}

// space maps the program's text (from path, the program or a copy) in r.
func (p *tailChainProgram) space(r *Resolver, path string) *Space {
	return r.NewSpace(1, []Mapping{{Map: procmaps.Map{Start: p.start, End: p.text.Vaddr + p.text.Memsz, PgOff: p.pgoff,
		Path: path, Exec: true}, File: path}})
}

// frames are what an unwinder gives for a crash in boom: boom, then main
// at the return address of its call of a.
func (p *tailChainProgram) frames(s *Space) []unwinder.Frame {
	mi := int32(s.AddressSpace().Find(p.addr["boom"]))
	return []unwinder.Frame{
		{PC: p.addr["boom"] + 1, CFA: 0x7ff0, SP: 0x7fe0, Mapping: mi},
		{PC: p.calls["main"][0], SP: 0x7ff0, CFA: 0x8000, Mapping: mi, Method: unwinder.MethodCFI, Flags: unwinder.FrameReturnAddress},
	}
}

// TestTailCallChainFrames symbolizes, without a core, the two frames an
// unwinder gives for a crash in boom (boom, then main at the return
// address of its call of a) and checks that b and a come between them as
// tail call frames at the addresses just past their jumps (objdump), and
// that this allocates nothing once the buffers have grown.
func TestTailCallChainFrames(t *testing.T) {
	p := buildTailChain(t, t.TempDir())
	bin, addr, jmps, calls := p.bin, p.addr, p.jmps, p.calls
	r := New(Options{})
	defer r.Close()
	s := p.space(r, bin)
	frames := p.frames(s)
	require.GreaterOrEqual(t, frames[0].Mapping, int32(0))
	z := NewSymbolizer()
	var out []Frame
	stack := func() {
		out = out[:0]
		for i := range frames {
			out = z.Append(out, s, &frames[i], HowOf(frames[i].Method))
		}
	}
	stack()
	type frame struct {
		Symbol, How string
		PC          uint64
	}
	var got []frame
	for _, f := range out {
		got = append(got, frame{f.Symbol, string(f.How), f.PC})
	}
	assert.Equal(t, []frame{
		{"boom", "context", addr["boom"] + 1},
		{"b", "tailcall", jmps["b"][0]},
		{"a", "tailcall", jmps["a"][0]},
		{"main", "cfi", calls["main"][0]},
	}, got)
	for _, f := range out[1:3] {
		assert.Equal(t, f.PC-1, f.Addr, "a tail call frame is attributed to its jump")
		assert.True(t, f.HasSource)
		assert.Equal(t, bin, f.Module)
	}
	if n := testing.AllocsPerRun(100, stack); n != 0 {
		t.Errorf("a stack with tail call frames allocated %.0f times", n)
	}

	// A frame that is not the caller of the one before (its SP is not
	// that frame's CFA) gets none.
	frames[1].SP = 0x7ff8
	stack()
	assert.Len(t, out, 2)
	frames[1].SP = 0x7ff0

	// Nor with NoTailCall.
	r2 := New(Options{NoTailCall: true})
	defer r2.Close()
	s = p.space(r2, bin)
	stack()
	assert.Len(t, out, 2)
}

// BenchmarkTailCallStack symbolizes the two frames of a crash in boom into
// four (b and a from tail call sites), in warm caches.
func BenchmarkTailCallStack(b *testing.B) {
	p := buildTailChain(b, b.TempDir())
	r := New(Options{})
	defer r.Close()
	s := p.space(r, p.bin)
	frames := p.frames(s)
	z := NewSymbolizer()
	var out []Frame
	stack := func() {
		out = out[:0]
		for i := range frames {
			out = z.Append(out, s, &frames[i], "cfi")
		}
	}
	stack()
	require.Len(b, out, 4)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		stack()
	}
	b.ReportMetric(float64(b.N*len(frames))/b.Elapsed().Seconds(), "frames/s")
}

// TestTailCallUnreadableCallSites breaks the form of DW_AT_call_return_pc
// in .debug_abbrev so that the call sites cannot be read, and checks that
// the Symbolizer warns once, naming the file and the offset, and adds no
// frame.
func TestTailCallUnreadableCallSites(t *testing.T) {
	dir := t.TempDir()
	p := buildTailChain(t, dir, "-gdwarf-5")
	data, err := os.ReadFile(p.bin)
	require.NoError(t, err)
	f, err := elf.Open(p.bin)
	require.NoError(t, err)
	abbrev := f.Section(".debug_abbrev")
	f.Close()
	require.NotNil(t, abbrev)
	off := int(abbrev.Offset)
	ab := data[off : off+int(abbrev.Size)]
	// Abbreviations: code, tag, children, (attribute, form, [implicit
	// const]) pairs ending with 0, 0; all below 0x80 here but the tags.
	patched := 0
	for i := 0; i < len(ab) && ab[i] != 0; {
		i++ // code
		tag := uint64(ab[i] & 0x7f)
		if ab[i]&0x80 != 0 {
			tag |= uint64(ab[i+1]) << 7
			i++
		}
		i += 2 // tag's last byte, children
		for ab[i] != 0 || ab[i+1] != 0 {
			attr, form := ab[i], ab[i+1]
			if tag == 0x48 && attr == 0x7d {
				ab[i+1] = 0x7f // no such form
				patched++
			}
			i += 2
			if form == 0x21 { // DW_FORM_implicit_const
				for ab[i]&0x80 != 0 {
					i++
				}
				i++
			}
		}
		i += 2
	}
	require.Positive(t, patched, "a DW_TAG_call_site abbreviation with DW_AT_call_return_pc")
	bad := filepath.Join(dir, "bad")
	require.NoError(t, os.WriteFile(bad, data, 0o755))

	var warnings []string
	r := New(Options{Warn: func(msg string) { warnings = append(warnings, msg) }})
	defer r.Close()
	s := p.space(r, bad)
	frames := p.frames(s)
	z := NewSymbolizer()
	for k := 0; k < 2; k++ {
		var out []Frame
		for i := range frames {
			out = z.Append(out, s, &frames[i], "cfi")
		}
		assert.Len(t, out, 2, "no tail call frames from unreadable call sites")
	}
	t.Logf("warning: %s", warnings)
	require.Len(t, warnings, 1, "one warning: %q", warnings)
	assert.Contains(t, warnings[0], bad)
	assert.Contains(t, warnings[0], ".debug_info")
	assert.Contains(t, warnings[0], "offset 0x")
	assert.Contains(t, warnings[0], "tail calls")
}

// TestCallSiteMemo: the Symbolizer's memo of call sites answers as
// CallSiteAt and Known do, for every address of the program's text, three
// rounds over: addresses hashing alike evict each other's entries, which
// are then filled again.
func TestCallSiteMemo(t *testing.T) {
	p := buildTailChain(t, t.TempDir())
	r := New(Options{})
	defer r.Close()
	s := p.space(r, p.bin)
	m := s.mapOf(s.AddressSpace().Find(p.addr["main"]))
	require.NotNil(t, m)
	require.NotNil(t, m.obj)
	lo, hi := p.text.Vaddr, p.text.Vaddr+p.text.Memsz // -no-pie: link-time addresses
	slots := map[uint64]int{}
	for ret := lo; ret < hi; ret++ {
		slots[(ret*0x9e3779b97f4a7c15)>>(64-siteBits)]++
	}
	require.Less(t, len(slots), int(hi-lo), "addresses share memo entries")
	z := NewSymbolizer()
	known := 0
	for round := range 3 {
		for ret := lo; ret < hi; ret++ {
			site, ok := m.obj.CallSiteAt(ret)
			target, name, k := z.callSite(m.obj, ret)
			require.Equal(t, ok && site.Known(), k, "round %d, %#x", round, ret)
			if k {
				require.Equal(t, site.Target, target, "round %d, %#x", round, ret)
				require.Equal(t, site.TargetName, name, "round %d, %#x", round, ret)
				if round == 0 {
					known++
				}
			}
		}
	}
	require.GreaterOrEqual(t, known, 3, "the calls of a and the jumps to b and boom are known call sites")
}
