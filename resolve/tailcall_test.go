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
func objdumpNext(t *testing.T, bin string, re *regexp.Regexp) map[string][]uint64 {
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

// TestTailCallChainFrames symbolizes, without a core, the two frames an
// unwinder gives for a crash in boom (boom, then main at the return
// address of its call of a) and checks that b and a come between them as
// tail call frames at the addresses just past their jumps (objdump), and
// that this allocates nothing once the buffers have grown.
func TestTailCallChainFrames(t *testing.T) {
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "tc.c", cTailChain, "-O2", "-g", "-no-pie")
	f, err := elf.Open(bin)
	require.NoError(t, err)
	var text *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			text = p
		}
	}
	syms, err := f.Symbols()
	require.NoError(t, err)
	f.Close()
	require.NotNil(t, text)
	addr := map[string]uint64{}
	for _, s := range syms {
		addr[s.Name] = s.Value
	}
	jmps := objdumpNext(t, bin, regexp.MustCompile(`^jmp\s+[0-9a-f]+ <(b|boom)>$`))
	calls := objdumpNext(t, bin, regexp.MustCompile(`^call\s+[0-9a-f]+ <a>$`))
	require.Len(t, jmps["a"], 1, "a's jump to b")
	require.Len(t, jmps["b"], 1, "b's jump to boom")
	require.Len(t, calls["main"], 1, "main's call of a")

	r := New(Options{})
	defer r.Close()
	start := text.Vaddr &^ 0xfff
	s := r.NewSpace(1, []Mapping{{Map: procmaps.Map{Start: start, End: text.Vaddr + text.Memsz, PgOff: text.Off &^ 0xfff,
		Path: bin, Exec: true}, File: bin}})
	mi := int32(s.AddressSpace().Find(addr["boom"]))
	require.GreaterOrEqual(t, mi, int32(0))
	frames := []unwinder.Frame{
		{PC: addr["boom"] + 1, CFA: 0x7ff0, SP: 0x7fe0, Mapping: mi},
		{PC: calls["main"][0], SP: 0x7ff0, CFA: 0x8000, Mapping: mi, Method: unwinder.MethodCFI, Flags: unwinder.FrameReturnAddress},
	}
	z := NewSymbolizer()
	var out []Frame
	stack := func() {
		out = out[:0]
		for i := range frames {
			out = z.Append(out, s, &frames[i], frames[i].Method.String())
		}
	}
	stack()
	type frame struct {
		Symbol, How string
		PC          uint64
	}
	var got []frame
	for _, f := range out {
		got = append(got, frame{f.Symbol, f.How, f.PC})
	}
	assert.Equal(t, []frame{
		{"boom", "context", addr["boom"] + 1},
		{"b", HowTailCall, jmps["b"][0]},
		{"a", HowTailCall, jmps["a"][0]},
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
	s = r2.NewSpace(1, []Mapping{{Map: procmaps.Map{Start: start, End: text.Vaddr + text.Memsz, PgOff: text.Off &^ 0xfff,
		Path: bin, Exec: true}, File: bin}})
	stack()
	assert.Len(t, out, 2)
}

// TestTailCallUnreadableCallSites breaks the form of DW_AT_call_return_pc
// in .debug_abbrev so that the call sites cannot be read, and checks that
// the Symbolizer warns once, naming the file and the offset, and adds no
// frame.
func TestTailCallUnreadableCallSites(t *testing.T) {
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "tc.c", cTailChain, "-O2", "-g", "-gdwarf-5", "-no-pie")
	data, err := os.ReadFile(bin)
	require.NoError(t, err)
	f, err := elf.Open(bin)
	require.NoError(t, err)
	abbrev := f.Section(".debug_abbrev")
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
	var text *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			text = p
		}
	}
	syms, _ := f.Symbols()
	f.Close()
	addr := map[string]uint64{}
	for _, s := range syms {
		addr[s.Name] = s.Value
	}
	calls := objdumpNext(t, bin, regexp.MustCompile(`^call\s+[0-9a-f]+ <a>$`))
	require.Len(t, calls["main"], 1)

	var warnings []string
	r := New(Options{Warn: func(msg string) { warnings = append(warnings, msg) }})
	defer r.Close()
	s := r.NewSpace(1, []Mapping{{Map: procmaps.Map{Start: text.Vaddr &^ 0xfff, End: text.Vaddr + text.Memsz, PgOff: text.Off &^ 0xfff,
		Path: bad, Exec: true}, File: bad}})
	mi := int32(s.AddressSpace().Find(addr["boom"]))
	frames := []unwinder.Frame{
		{PC: addr["boom"] + 1, CFA: 0x7ff0, SP: 0x7fe0, Mapping: mi},
		{PC: calls["main"][0], SP: 0x7ff0, CFA: 0x8000, Mapping: mi, Flags: unwinder.FrameReturnAddress},
	}
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
