package report

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/resolve"
)

// badCallSrc calls through a bad function pointer two calls down from
// main: NULL with any argument, or, with two, a pointer to the heap (not
// executable). The empty asm after each call keeps it a call (not a tail
// call's jump).
const badCallSrc = `#include <stdlib.h>
typedef void (*fn)(int);
fn volatile target;
__attribute__((noinline)) void level2(int n) { target(n); __asm__ volatile(""); }
__attribute__((noinline)) void level1(int n) { level2(n + 1); __asm__ volatile(""); }
int main(int c, char **v) {
	if (c > 2)
		target = (fn)malloc(64);
	level1(c);
	return 0;
}
`

// TestCoreBadCallMatchesGDB: a program that crashed calling through a NULL
// or heap function pointer stopped at an address that is no code. gdb goes
// on from the return address the call pushed; so does the report (how
// bad_call), where the instruction before it is a call: the same pcs and
// functions as gdb's down to main, and the stack ends outermost, as gdb's
// does. Built with and without frame pointers, as an indirect call through
// a register and through memory (-O0 loads the pointer into a register;
// -O2 calls through memory, or loads it too).
func TestCoreBadCallMatchesGDB(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
		args  []string
	}{
		{"null-O2", []string{"-O2"}, nil},
		{"null-O0", []string{"-O0"}, nil},
		{"heap-O2-fp", []string{"-O2", "-fno-omit-frame-pointer"}, []string{"x", "y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := testprog.Build(t, dir, "badcall.c", badCallSrc, append(tc.flags, "-g")...)
			gdbFrames, core := crashUnderGDBArgs(t, dir, bin, tc.args...)
			opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}}
			all := signalledFrames(t, core, opts)
			got := reportFrames(t, core, opts)
			t.Logf("gdb:    %s", describeGDB(gdbFrames))
			t.Logf("ustack: %s", describeFrames(got))
			require.Len(t, got, len(gdbFrames), "frames against gdb's")
			for i, g := range gdbFrames {
				assert.Equal(t, fmt.Sprintf("%#x", g.pc), fmt.Sprintf("%#x", got[i].PC), "frame %d pc", i)
				if i > 0 {
					assert.Equal(t, g.name, plainName(got[i].Symbol), "frame %d", i)
				}
			}
			require.GreaterOrEqual(t, len(got), 2)
			assert.Equal(t, resolve.HowContext, got[0].How)
			assert.Equal(t, resolve.HowBadCall, got[1].How, "level2 is found from the return address the call left")
			assert.Equal(t, "level2", got[1].Symbol)
			assert.Equal(t, "_start", all[len(all)-1].Symbol, "the walk goes on to the program's entry")
		})
	}
}
