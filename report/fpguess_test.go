package report

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

// fpGuessSrc calls back through one of three hand-written functions
// without CFI: asm_tramp never sets up a frame pointer, so the register
// still holds its caller's when it calls, but its code up to the call is
// straight-line pushes and an adjustment of the stack pointer;
// asm_tramp_br is the same with a branch before the call; asm_tramp_and
// realigns the stack pointer (and $-16,%rsp), whose change no decoding can
// know; asm_tramp_fp pushes a frame pointer and points %rbp at it, as
// compiled code with frame pointers does. cb_inner writes through the NULL
// pointer it is given.
const fpGuessSrc = `volatile int sink;
void asm_tramp(void (*fn)(int *), int *arg);
void asm_tramp_fp(void (*fn)(int *), int *arg);
void asm_tramp_br(void (*fn)(int *), int *arg);
void asm_tramp_and(void (*fn)(int *), int *arg);
__asm__(".text\n"
	".globl asm_tramp\n.type asm_tramp,@function\nasm_tramp:\n"
	" push %rbx\n sub $16,%rsp\n mov %rdi,%rax\n mov %rsi,%rdi\n call *%rax\n add $16,%rsp\n pop %rbx\n ret\n"
	".size asm_tramp,.-asm_tramp\n"
	".globl asm_tramp_fp\n.type asm_tramp_fp,@function\nasm_tramp_fp:\n"
	" push %rbp\n mov %rsp,%rbp\n push %rbx\n sub $8,%rsp\n mov %rdi,%rax\n mov %rsi,%rdi\n call *%rax\n add $8,%rsp\n pop %rbx\n pop %rbp\n ret\n"
	".size asm_tramp_fp,.-asm_tramp_fp\n"
	".globl asm_tramp_br\n.type asm_tramp_br,@function\nasm_tramp_br:\n"
	" push %rbx\n test %rdi,%rdi\n je 1f\n1:\n sub $16,%rsp\n mov %rdi,%rax\n mov %rsi,%rdi\n call *%rax\n add $16,%rsp\n pop %rbx\n ret\n"
	".size asm_tramp_br,.-asm_tramp_br\n"
	".globl asm_tramp_and\n.type asm_tramp_and,@function\nasm_tramp_and:\n"
	" push %rbx\n mov %rsp,%rbx\n and $-16,%rsp\n mov %rdi,%rax\n mov %rsi,%rdi\n call *%rax\n mov %rbx,%rsp\n pop %rbx\n ret\n"
	".size asm_tramp_and,.-asm_tramp_and\n");
__attribute__((noinline)) void cb_inner(int *p) { *p = 5; sink++; }
__attribute__((noinline)) void cb(int *p) { cb_inner(p); sink++; }
__attribute__((noinline)) void outer(int m) {
	if (m == 1) asm_tramp(cb, 0); else if (m == 2) asm_tramp_fp(cb, 0); else if (m == 3) asm_tramp_br(cb, 0); else asm_tramp_and(cb, 0);
	sink++;
}
__attribute__((noinline)) void outer2(int m) { outer(m); sink++; }
int main(int argc, char **argv) { outer2(argc); return 0; }
`

// TestFramePointerGuessNotComplete: a stack through a function without CFI
// is complete only where the step out of it is proven. Built with frame
// pointers, the program's own functions keep %rbp chained, so following
// %rbp out of asm_tramp_and (which never set it up, and whose realigned
// stack pointer its code does not tell) lands on outer2, outer skipped:
// gdb, whose prologue analysis finds no frame set up, stops there ("??").
// ustack keeps the frames it found and gdb's up to asm_tramp_and, but must
// not call the stack complete (fp_guess, naming its frame by its pc).
// Through asm_tramp, whose code up to the call is straight-line (a push
// and a sub), and asm_tramp_br, whose branch lands where its fall-through
// does with the same stack, the step is proven by their instructions (how
// prologue): outer, which calls them (the source says so; gdb stops at
// "??" there too), then outer2 and main, outermost. Through
// asm_tramp_fp, whose prologue sets up its frame pointer, the step is
// proven: every frame gdb shows, outermost.
func TestFramePointerGuessNotComplete(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the functions without CFI are x86_64 assembly")
	}
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "fpguess.c", fpGuessSrc, "-O2", "-g", "-fno-omit-frame-pointer")
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"asm_tramp", nil},
		{"asm_tramp_fp", []string{"x"}},
		{"asm_tramp_br", []string{"x", "y"}},
		{"asm_tramp_and", []string{"x", "y", "z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gdbFrames, core := crashUnderGDBArgs(t, t.TempDir(), bin, tc.args...)
			got, stop, stopErr := firstCoreStack(t, core)
			t.Logf("gdb:    %s", describeGDB(gdbFrames))
			t.Logf("ustack: %s (%s: %s)", describeFrames(got), stop, stopErr)
			trampAt := -1
			for i, g := range gdbFrames {
				if g.name == tc.name {
					trampAt = i
				}
			}
			require.GreaterOrEqual(t, trampAt, 2, "gdb shows %s: %s", tc.name, describeGDB(gdbFrames))
			want := gdbFrames
			if tc.name != "asm_tramp_fp" {
				// gdb ends at "??" above the trampoline.
				want = gdbFrames[:trampAt+1]
				require.Greater(t, len(got), len(want), "the frames after the trampoline are kept")
			} else {
				// gdb stops at main; ustack goes on to _start.
				require.GreaterOrEqual(t, len(got), len(want))
			}
			for i, g := range want {
				assert.Equal(t, fmt.Sprintf("%#x", g.pc), fmt.Sprintf("%#x", got[i].PC), "frame %d pc", i)
				assert.Equal(t, g.name, plainName(got[i].Symbol), "frame %d", i)
			}
			switch tc.name {
			case "asm_tramp_and":
				assert.Equal(t, "fp_guess", stop, "a stack through asm_tramp_and's unproven frame-pointer step is not complete")
				assert.Contains(t, stopErr, fmt.Sprintf("frame at pc %#x ", gdbFrames[trampAt].pc))
				assert.Equal(t, "fp", string(got[trampAt+1].How), "the frame after asm_tramp_and comes from its frame pointer")
				assert.Equal(t, "outer2", plainName(got[trampAt+1].Symbol), "the frame pointer skips outer")
			case "asm_tramp", "asm_tramp_br":
				assert.Equal(t, "outermost", stop)
				assert.Equal(t, "prologue", string(got[trampAt+1].How), "the frame after the trampoline comes from its instructions")
				var names []string
				for _, f := range got[trampAt+1:] {
					names = append(names, plainName(f.Symbol))
				}
				require.GreaterOrEqual(t, len(names), 3)
				assert.Equal(t, []string{"outer", "outer2", "main"}, names[:3], "the trampoline's callers")
			default:
				assert.Equal(t, "outermost", stop)
				assert.Equal(t, "fp", string(got[trampAt+1].How), "the frame after asm_tramp_fp comes from its frame pointer")
			}
		})
	}
}

// firstCoreStack reports the first thread of core: its user frames
// (neither inlined nor kernel), innermost first, and why its stack ended.
func firstCoreStack(t *testing.T, core string) (got []Frame, stop, stopErr string) {
	t.Helper()
	opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}}
	c, err := OpenCore(core, opts)
	require.NoError(t, err)
	defer c.Close()
	n := 0
	_, err = RunCore(c, opts, func(s *Sample) error {
		if n++; n == 1 {
			for _, f := range s.Frames {
				if !f.Inlined && !f.Kernel {
					got = append(got, f)
				}
			}
			stop, stopErr = s.Stop, s.StopErr
		}
		return nil
	})
	require.NoError(t, err)
	return got, stop, stopErr
}
