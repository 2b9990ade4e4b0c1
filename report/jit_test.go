package report

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
)

const jitSrc = `
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
static volatile int sink;
__attribute__((noinline)) void cb(void) { close(-1); sink++; }
int main(void) {
	/* push %rbp; mov %rsp,%rbp; call *%rdi; pop %rbp; ret */
	static const unsigned char code[] = {0x55, 0x48, 0x89, 0xe5, 0xff, 0xd7, 0x5d, 0xc3};
	unsigned char *p = mmap(0, 4096, PROT_READ|PROT_WRITE|PROT_EXEC, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
	memcpy(p, code, sizeof code);
	/* The test's own directory (not /tmp, shared with other test runs). */
	const char *dir = getenv("JIT_MAP_DIR");
	char path[4096];
	snprintf(path, sizeof path, "%s/perf-%d.map", dir ? dir : "/tmp", getpid());
	FILE *f = fopen(path, "w");
	fprintf(f, "%lx %zx jitted_trampoline\n", (unsigned long)p, sizeof code);
	fclose(f);
	for (int i = 0; i < 10; i++) ((void (*)(void (*)(void)))p)(cb);
	return 0;
}
`

// TestJITPerfMap: JIT code has no object and no CFI. Its frames are named
// from the JIT's perf-PID.map (in Options.PerfMapDir, /tmp by default) and
// unwound by the frame-pointer rule (marked fp), and the unwind continues
// into the code that called it.
func TestJITPerfMap(t *testing.T) {
	requirePerf(t)
	dir := t.TempDir()
	bin := build(t, dir, "jit", jitSrc, "-O2", "-fno-omit-frame-pointer")
	t.Setenv("JIT_MAP_DIR", dir)
	data := record(t, dir, bin)
	_, samples := ustackScriptWith(t, data, Options{PerfMapDir: dir})
	n := 0
	for _, s := range samples {
		if s.Event != "syscalls:sys_enter_close" || indexOf(userChain(s), "cb") < 0 {
			continue
		}
		n++
		c := userChain(s)
		i := indexOf(c, "cb")
		if !hasPrefixChain(c[i:], "cb", "jitted_trampoline", "main") {
			t.Errorf("close sample %d: chain %v (stop %s)", s.Index, c, s.Stop)
			break
		}
		for _, f := range s.Frames {
			if f.Symbol == "main" && f.How != "fp" {
				t.Errorf("main was recovered by %q; want fp (the JIT frame has no CFI)", f.How)
			}
			if f.Symbol == "jitted_trampoline" && !strings.HasPrefix(f.Module, filepath.Join(dir, "perf-")) {
				t.Errorf("JIT frame's module %q; want the perf map", f.Module)
			}
		}
	}
	if n != 10 {
		t.Errorf("%d close samples through the JIT code; want 10", n)
	}
}

// jitElsewhereSrc is jitSrc whose perf map names other code than the
// trampoline's.
var jitElsewhereSrc = strings.Replace(jitSrc, `"%lx %zx jitted_trampoline\n", (unsigned long)p, sizeof code`,
	`"%lx %zx elsewhere\n", (unsigned long)p + 0x800, sizeof code`, 1)

// TestJITUnnamedModule: a frame in anonymous memory that no perf map
// names is printed as perf script prints it, "[unknown]
// (/tmp/perf-PID.map)", both when the JIT's map exists without its
// address and when there is no map at all (perf names anonymous memory
// after the map either way); the frame's Module (JSON's module) stays the
// mapping's name, //anon. perf reads only /tmp/perf-PID.map: the map is
// written there and removed after (or, for no map, in the test's
// directory).
func TestJITUnnamedModule(t *testing.T) {
	requirePerf(t)
	dir := t.TempDir()
	bin := build(t, dir, "jitelse", jitElsewhereSrc, "-O2", "-fno-omit-frame-pointer")
	for _, withMap := range []bool{true, false} {
		name := "no_map"
		t.Setenv("JIT_MAP_DIR", dir)
		if withMap {
			name = "map_without_address"
			t.Setenv("JIT_MAP_DIR", "/tmp")
		}
		t.Run(name, func(t *testing.T) {
			data := recordWith(t, dir, name, []string{"--call-graph", "dwarf"}, bin)
			perf := testprog.Script(t, data, "-F", "comm,tid,time,event,ip,sym,symoff,dso")
			blocks, samples := ustackScriptWith(t, data, Options{})
			var text strings.Builder
			for _, b := range blocks {
				text.WriteString(strings.Join(b, "\n") + "\n")
			}
			var pid uint32
			n := 0
			for _, s := range samples {
				if s.Event != "syscalls:sys_enter_close" || indexOf(userChain(s), "cb") < 0 {
					continue
				}
				pid = s.Pid
				for _, f := range s.Frames {
					if f.Module != "//anon" || f.Symbol != "" {
						continue
					}
					n++
					want := fmt.Sprintf("%16x [unknown] (/tmp/perf-%d.map)", f.Addr, s.Pid)
					assert.Contains(t, text.String(), "\t"+want+"\n", "ustack's text")
					assert.Contains(t, perf, want+"\n", "perf script prints the frame so")
				}
			}
			assert.Equal(t, 10, n, "close samples through the unnamed JIT frame (JSON module //anon)")
			if withMap {
				mp := fmt.Sprintf("/tmp/perf-%d.map", pid)
				require.FileExists(t, mp)
				os.Remove(mp)
			}
		})
	}
}
