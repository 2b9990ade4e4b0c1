package elfcache

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// muslLibc is Debian's musl libc.so (package musl): stripped to its dynamic
// symbols, whose assembly functions (memset, memcpy, ...) have no size.
const muslLibc = "/lib/x86_64-linux-musl/libc.so"

// TestZeroSizeSymbolEndsAtCall: musl's libc.so names its assembly
// functions without a size, and leaves out hidden ones laid after them.
// __syscall_cp_asm (src/thread/x86_64/syscall_cp.s: mov (%rdi),%eax; test
// %eax,%eax; jne __cp_cancel; ...; syscall; ret), where every thread
// blocked in a cancellable system call waits, follows memset, whose room up
// to the next symbol held it: the thread's first frame was memset+0x147,
// as gdb and perf name it. It is found here as the target of a direct call
// (objdump's listing) that begins with those instructions; neither it nor
// the ret after its syscall is named memset, which is still named at its
// start.
func TestZeroSizeSymbolEndsAtCall(t *testing.T) {
	if _, err := os.Stat(muslLibc); err != nil {
		t.Skipf("%s: %v (Debian package musl)", muslLibc, err)
	}
	needTool(t, "objdump")
	dis := run(t, "objdump", "-d", "--no-show-raw-insn", muslLibc)
	o := mustOpen(t, muslLibc, Options{})
	start, ok := o.FunctionNamed("memset")
	require.True(t, ok, "memset in %s", muslLibc)
	name, off, ok := o.Symbolize(start)
	require.True(t, ok && name == "memset" && off == 0, "at memset's start: %s+%#x %v", name, off, ok)
	found := 0
	for _, m := range regexp.MustCompile(`(?m)\scall\s+([0-9a-f]+) <memset\+0x[0-9a-f]+>`).FindAllStringSubmatch(dis, -1) {
		tgt := hexU(t, m[1])
		body := regexp.MustCompile(`(?m)^\s+` + m[1] + `:\s+mov\s+\(%rdi\),%eax\n\s+[0-9a-f]+:\s+test\s+%eax,%eax\n(?:.*\n){0,14}?\s+[0-9a-f]+:\s+syscall\s*\n\s+([0-9a-f]+):\s+ret`).FindStringSubmatch(dis)
		if body == nil {
			continue
		}
		found++
		for _, a := range []uint64{tgt, hexU(t, body[1])} {
			name, off, ok := o.Symbolize(a)
			assert.False(t, ok && name == "memset", "%#x in __syscall_cp_asm named %s+%#x", a, name, off)
		}
	}
	require.Equal(t, 1, found, "__syscall_cp_asm among the calls' targets objdump names after memset")
}
