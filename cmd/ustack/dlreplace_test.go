package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

// dlLibSrc is a library whose NAME_inner closes a file descriptor.
const dlLibSrc = `
#include <unistd.h>
#include <fcntl.h>
__attribute__((noinline)) void NAME_inner(void) { close(open("/dev/null", O_RDONLY)); }
void NAME_entry(void) { NAME_inner(); }
`

// dlProgSrc dlopens argv[1] and calls a_entry, dlcloses it; when argv[3]
// is not "-", waits for the file argv[3].go (the test's word that ustack
// record has seen the first mapping) and renames argv[3] over argv[2];
// then dlopens argv[2] and calls b_entry: the second library is mapped at
// the first one's addresses.
const dlProgSrc = `
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static int wait_for(const char *path) {
	for (int i = 0; access(path, F_OK); i++) {
		if (i == 12000) { fprintf(stderr, "%s never came\n", path); return 1; }
		usleep(10000);
	}
	return 0;
}
static int call(const char *path, const char *sym) {
	void *h = dlopen(path, RTLD_NOW);
	if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
	void (*f)(void) = (void (*)(void))dlsym(h, sym);
	if (!f) { fprintf(stderr, "%s\n", dlerror()); return 1; }
	f();
	printf("%s %p\n", sym, (void *)f);
	dlclose(h);
	return 0;
}
int main(int argc, char **argv) {
	if (argc != 4) return 2;
	if (call(argv[1], "a_entry")) return 1;
	if (strcmp(argv[3], "-")) {
		char go[4096];
		snprintf(go, sizeof go, "%s.go", argv[3]);
		if (wait_for(go)) return 1;
		if (rename(argv[3], argv[2])) { perror("rename"); return 1; }
	}
	return call(argv[2], "b_entry");
}
`

// TestRecordDlcloseReuse: a library dlclosed and another dlopened at the
// same addresses. With two paths, each close sample is named from the
// library mapped at its time (a_inner, then b_inner; hand-checked: perf
// script names them so). With the first file replaced by the second at the
// same path while recording, perf.data's build-ids, tied to paths, cannot
// say which mapping was which build: the report must say so, not name the
// first library's frames from the second in silence.
func TestRecordDlcloseReuse(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("recording tracepoints needs root")
	}
	dir := t.TempDir()
	liba := testprog.Build(t, dir, "liba.c", strings.ReplaceAll(dlLibSrc, "NAME", "a"), "-shared", "-fPIC", "-O1", "-g")
	libb := testprog.Build(t, dir, "libb.c", strings.ReplaceAll(dlLibSrc, "NAME", "b"), "-shared", "-fPIC", "-O1", "-g")
	prog := testprog.Build(t, dir, "dl.c", dlProgSrc, "-O1", "-g", "-ldl")

	// record records prog with args; while it runs, ready (when not nil)
	// is called with the recording's path.
	record := func(name string, ready func(data string), args ...string) (string, string) {
		data := filepath.Join(dir, name+".data")
		done := make(chan struct{})
		if ready != nil {
			go func() { defer close(done); ready(data) }()
		} else {
			close(done)
		}
		rc, _, errs := run3(append([]string{"record", "-q", "-e", "syscalls:sys_enter_close", "-o", data, "--", prog}, args...))
		<-done
		if rc != 0 {
			t.Skipf("ustack record cannot record here (status %d): %s", rc, errs)
		}
		rc, out, errs := run3([]string{"report", "-i", data, "--kallsyms", "-"})
		require.Equal(t, exitOK, rc, errs)
		return out, errs
	}
	inner := func(out string) []string {
		var names []string
		for _, s := range testprog.ParseScript(out) {
			for _, f := range s.Syms {
				if strings.HasSuffix(f, "_inner") {
					names = append(names, f)
				}
			}
		}
		return names
	}

	t.Run("two paths", func(t *testing.T) {
		out, errs := record("two", nil, liba, libb, "-")
		assert.Equal(t, []string{"a_inner", "b_inner"}, inner(out), "%s\n%s", head(out), errs)
		assert.NotContains(t, errs, "different builds")
	})
	t.Run("replaced", func(t *testing.T) {
		libx, next := filepath.Join(dir, "libx.so"), filepath.Join(dir, "libx.so.new")
		copyFile(t, liba, libx)
		copyFile(t, libb, next)
		// The file is replaced once ustack record has seen the first
		// mapping (its MMAP2 record, naming libx, is in the recording:
		// the recorder opened the file before writing it), not after a
		// time a busy machine may not have given the recorder.
		seen := func(data string) {
			defer os.WriteFile(next+".go", nil, 0o644)
			for deadline := time.Now().Add(testprog.Timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if b, err := os.ReadFile(data); err == nil && bytes.Contains(b, []byte(libx+"\x00")) {
					return
				}
			}
			t.Errorf("%s: no mapping of %s in %v", data, libx, testprog.Timeout)
		}
		out, errs := record("replaced", seen, libx, libx, next)
		assert.Len(t, inner(out), 2, "%s", head(out))
		assert.Contains(t, errs, libx+": the recording lists 2 different builds of this file")
	})
}
