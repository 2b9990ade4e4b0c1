package testprog

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// perfOut is perf script's default output for two samples, as perf 6.1
// prints it (hand-trimmed): the first unwound through leaf, mid, top and
// main, the second only to a kernel frame.
const perfOut = `prog  1234 10.000001:     250000 cpu-clock:
	    55d0c0a01150 leaf+0x10 (/tmp/prog)
	    55d0c0a01180 mid+0x9 (/tmp/prog)
	    55d0c0a011a0 top+0x9 (/tmp/prog)
	    55d0c0a01040 main+0x20 (/tmp/prog)
	    7f1c2a829d90 __libc_start_call_main+0x80 (/usr/lib/x86_64-linux-gnu/libc.so.6)

prog  1234 10.000251:     250000 cpu-clock:
	ffffffff81a0 do_syscall_64+0x5c ([kernel.kallsyms])

`

func TestParseScript(t *testing.T) {
	ss := ParseScript(perfOut)
	require.Len(t, ss, 2)
	assert.Equal(t, "prog  1234 10.000001:     250000 cpu-clock:", ss[0].Header)
	assert.Equal(t, []string{"leaf", "mid", "top", "main", "__libc_start_call_main"}, ss[0].Syms)
	assert.Equal(t, []string{"do_syscall_64"}, ss[1].Syms)
	assert.True(t, HasChain(ss[0].Syms, []string{"mid", "top", "main"}))
	assert.False(t, HasChain(ss[0].Syms, []string{"leaf", "top"}), "frames must be consecutive")
	assert.False(t, HasChain(ss[1].Syms, []string{"leaf"}))
}

func TestChainCount(t *testing.T) {
	assert.Equal(t, 1, ChainCount(perfOut, "leaf", "mid", "top", "main"))
	assert.Equal(t, 0, ChainCount(perfOut, "mid", "leaf"), "order matters")
	assert.Equal(t, 0, ChainCount(perfOut, "leaf", "nothere"))
	assert.Equal(t, 0, ChainCount(perfOut), "an empty chain matches nothing")
}

// TestBuild builds a program that exits with status 7, once fresh and
// twice shared: the shared builds are one file, and it runs.
func TestBuild(t *testing.T) {
	const src = "int main(void) { return 7; }\n"
	bin := Build(t, t.TempDir(), "seven.c", src, "-O1")
	assert.Equal(t, "seven", filepath.Base(bin))
	t.Cleanup(RemoveShared)
	a, b := Shared(t, "seven.c", src), Shared(t, "seven.c", src)
	assert.Equal(t, a, b, "Shared builds once")
	assert.NotEqual(t, a, Shared(t, "seven.c", src, "-O2"), "other flags, another build")
	defer func() {
		RemoveShared()
		_, err := os.Stat(filepath.Dir(a))
		assert.True(t, os.IsNotExist(err), "RemoveShared deletes %s", filepath.Dir(a))
	}()
	for _, p := range []string{bin, a} {
		err := exec.Command(p).Run()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, p)
		assert.Equal(t, 7, ee.ExitCode(), p)
	}
}
