package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ustack/ustack/internal/testprog"
)

const progSrc = `
#include <unistd.h>
static volatile long sink;
__attribute__((noinline)) void leaf(int n) { for (long i = 0; i < 100000; i++) sink += i * n; close(-1); sink++; }
__attribute__((noinline)) void mid(int n) { leaf(n); sink++; }
__attribute__((noinline)) void top(int n) { mid(n); sink++; }
int main(void) { for (int i = 0; i < 20; i++) top(i); return 0; }
`

// TestRecordReportPortable records a program with ustack record, reports
// it, then reports it again as if on another machine (an empty --symfs, no
// debug directories, no build-id cache, the program deleted): the objects,
// debug files and kallsyms carried by the recording's archive must give the
// same report, with the chain gdb prints for this code (leaf, mid, top,
// main; fixture syscall_gcc_O2).
func TestRecordReportPortable(t *testing.T) {
	if testing.Short() {
		t.Skip("records with perf_event_open")
	}
	bin, data := recordClose(t, "-O2", "-g")
	for _, f := range []string{data, data + ".ustack"} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v; want 0600", f, st.Mode().Perm())
		}
	}

	report := func(extra ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		args := append([]string{"report", "-i", data}, extra...)
		if rc := run(args, &out, &errb); rc != 0 {
			t.Fatalf("ustack %v: status %d: %s", args, rc, errb.String())
		}
		return out.String()
	}
	local := report("--archive", "-")
	if !strings.Contains(local, "leaf+") {
		t.Fatalf("local report has no leaf frame:\n%s", local)
	}

	os.Remove(bin)
	empty := t.TempDir()
	portable := report("--symfs", empty, "--debug-dir", empty, "--buildid-dir", empty, "--kallsyms", "-")
	withArchive := report()
	if portable != withArchive {
		t.Errorf("the archive gives a different report with and without an empty --symfs")
	}
	// Kernel frames aside (tracepoint samples have none here), the
	// portable report equals the one made with the files on disk.
	if portable != local {
		t.Errorf("report from the archive differs from the local one:\n--- local\n%s\n--- archive\n%s", head(local), head(portable))
	}
	n := 0
	for _, block := range strings.Split(portable, "\n\n") {
		if !strings.Contains(block, "leaf+") {
			continue
		}
		n++
		if chainCount(block) != 1 {
			t.Errorf("sample without the chain leaf, mid, top, main:\n%s", block)
			break
		}
	}
	if n != 20 {
		t.Errorf("%d close samples from leaf; want 20", n)
	}
}

// recordClose builds progSrc with gcc and flags into a fresh directory and
// records it with ustack record at syscalls:sys_enter_close, returning the
// program and the recording (in the same directory). It skips where ustack
// cannot record tracepoints (not root, no tracefs).
func recordClose(t *testing.T, flags ...string) (bin, data string) {
	t.Helper()
	return recordCloseWith(t, nil, flags...)
}

// recordCloseWith is recordClose with further ustack record flags.
func recordCloseWith(t *testing.T, recordFlags []string, flags ...string) (bin, data string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("recording tracepoints needs root")
	}
	dir := t.TempDir()
	bin = testprog.Build(t, dir, "prog.c", progSrc, flags...)
	data = filepath.Join(dir, "rec.data")
	var stdout, stderr bytes.Buffer
	args := append([]string{"record", "-q", "-e", "syscalls:sys_enter_close", "-o", data}, recordFlags...)
	if rc := run(append(args, "--", bin), &stdout, &stderr); rc != 0 {
		t.Skipf("ustack record cannot record here (status %d): %s", rc, stderr.String())
	}
	return bin, data
}

func head(s string) string {
	if len(s) > 3000 {
		return s[:3000]
	}
	return s
}
