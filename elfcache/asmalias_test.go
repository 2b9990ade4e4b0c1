package elfcache

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

// asmAliases is an assembly function with three names, as glibc writes
// clone3.S: the assembler gives each of them a DW_TAG_subprogram of the
// same range (GNU as 2.35 and later). GLOBALS lists the .globl lines.
const asmAliases = `
	.text
	GLOBALS
	.type	FIRST, @function
	.type	__GI___asmfn, @function
	.type	LAST, @function
FIRST:
__GI___asmfn:
LAST:
	nop
	nop
	ret
	.size	FIRST, .-FIRST
	.size	__GI___asmfn, .-__GI___asmfn
	.size	LAST, .-LAST
`

// TestAsmAliasName: a frame in an assembly function with several names is
// named as perf names it, by the symbol table's rules, not after whichever
// DIE comes first. glibc's clone3 (three local symbols __clone3,
// __GI___clone3 and clone3) was printed __clone3 in every thread's
// outermost frame where perf script, gdb and addr2line print clone3.
func TestAsmAliasName(t *testing.T) {
	for _, tc := range []struct {
		name, globals, first, last string
		want                       string
		addr2line                  bool // addr2line names it the same (not for the global: it says __GI___asmfn)
	}{
		// glibc's shape: all local (hidden by the version script);
		// perf takes the name with the fewest leading underscores.
		{name: "local", first: "__asmfn", last: "asmfn", want: "asmfn", addr2line: true},
		// One global name: perf prefers it over the local ones; here
		// it is the last DIE, the first being another name.
		{name: "global", globals: ".globl __asmfn", first: "asmfn", last: "__asmfn", want: "__asmfn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.NewReplacer("GLOBALS", tc.globals, "FIRST", tc.first, "LAST", tc.last).Replace(asmAliases)
			dir := t.TempDir()
			so := testprog.Compile(t, "gcc", dir, "alias.S", src, "-g", "-shared", "-nostdlib")
			addr := symAddr(t, nmSyms(t, "nm", so), tc.want)

			o, err := Open(so, Options{})
			require.NoError(t, err)
			defer o.Close()
			subprograms := 0
			for _, s := range o.SourceFrames(addr, nil) {
				subprograms++
				assert.False(t, s.Inlined)
			}
			if subprograms == 0 {
				t.Skipf("%s: the assembler wrote no DWARF function for alias.S (GNU as before 2.35)", so)
			}
			for _, pc := range []uint64{addr, addr + 1, addr + 2} {
				fr := o.SourceFrames(pc, nil)
				require.Len(t, fr, 1, "%#x", pc)
				assert.Equal(t, tc.want, fr[0].Function, "%#x", pc)
				sym, _, ok := o.Symbolize(pc)
				require.True(t, ok)
				assert.Equal(t, tc.want, sym, "%#x: the symbol table's choice", pc)
				if tc.addr2line {
					out := testprog.Tool(t, "", "addr2line", "-f", "-e", so, fmt.Sprintf("%#x", pc))
					assert.Equal(t, tc.want, strings.SplitN(out, "\n", 2)[0], "%#x: addr2line", pc)
				}
			}
		})
	}
}
