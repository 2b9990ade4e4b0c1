package report

import (
	"path/filepath"
	"strings"
	"testing"
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
