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
// main: NULL without arguments, or, with two, a pointer to the heap (not
// executable); with one, it jumps to NULL from viatail (a tail call at
// -O2), whose frame is then gone. The empty asm after each call keeps it
// a call (not a tail call's jump).
const badCallSrc = `#include <stdlib.h>
typedef void (*fn)(int);
fn volatile target;
__attribute__((noinline)) void level2(int n) { target(n); __asm__ volatile(""); }
__attribute__((noinline)) void viatail(int n) { target(n); }
__attribute__((noinline)) void level1(int n) {
	if (n == 2)
		viatail(n);
	else
		level2(n + 1);
	__asm__ volatile("");
}
int main(int c, char **v) {
	if (c > 2)
		target = (fn)malloc(64);
	level1(c);
	return 0;
}
`

// TestCoreBadCallMatchesGDB: a program that crashed calling (or jumping,
// in a tail call) through a NULL or heap function pointer stopped at an
// address that is no code. gdb goes on from the return address the call
// pushed; so does the report (how bad_call), where the instruction before
// it is a call: the same pcs and functions as gdb's down to main, and the
// stack ends outermost, as gdb's does. Built with and without frame pointers, as an indirect call through
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
		{"null-tail-O2", []string{"-O2"}, []string{"x"}},
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
			assert.Equal(t, resolve.HowBadCall, got[1].How, "the caller is found from the return address the call left")
			caller := "level2"
			if len(tc.args) == 1 {
				caller = "level1" // viatail jumped: its frame is gone, as gdb has it
			}
			assert.Equal(t, caller, got[1].Symbol)
			assert.Equal(t, "_start", all[len(all)-1].Symbol, "the walk goes on to the program's entry")
		})
	}
}
