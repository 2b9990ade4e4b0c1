package elfcache

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ustack/ustack/internal/testprog"
)

const cMiniProgram = `
#include <stdio.h>
__attribute__((noinline)) static int local_one(int x) { return x * 7 + 1; }
__attribute__((noinline)) static int local_two(int x) { return local_one(x) ^ 3; }
__attribute__((noinline)) int exported(int x) { return local_two(x) + 2; }
int main(int argc, char **argv) { printf("%d\n", exported(argc)); return 0; }
`

// makeMiniDebugInfo adds .gnu_debugdata to a stripped copy of full the way
// Fedora's find-debuginfo does: the symbols of functions that .dynsym
// lacks, kept in a debug-only ELF, xz-compressed.
func makeMiniDebugInfo(t *testing.T, dir, full string) string {
	t.Helper()
	needTool(t, "xz")
	dyn := map[string]bool{}
	for _, l := range strings.Split(run(t, "nm", "-D", "--format=posix", "--defined-only", full), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			dyn[f[0]] = true
		}
	}
	var keep []string
	for _, l := range strings.Split(run(t, "nm", "--format=posix", "--defined-only", full), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && (f[1] == "T" || f[1] == "t") && !dyn[f[0]] {
			keep = append(keep, f[0])
		}
	}
	sort.Strings(keep)
	keepFile := filepath.Join(dir, "keep_symbols")
	if err := os.WriteFile(keepFile, []byte(strings.Join(keep, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mini := filepath.Join(dir, "mini_debuginfo")
	run(t, "objcopy", "--only-keep-debug", full, mini)
	run(t, "objcopy", "-S", "--remove-section", ".gdb_index", "--remove-section", ".comment",
		"--keep-symbols="+keepFile, mini, mini+".tmp")
	os.Rename(mini+".tmp", mini)
	run(t, "xz", "-f", "--threads=1", mini)
	stripped := filepath.Join(dir, "stripped")
	run(t, "strip", "--strip-all", "-R", ".comment", "-o", stripped, full)
	run(t, "objcopy", "--add-section", ".gnu_debugdata="+mini+".xz", stripped)
	return stripped
}

// TestMiniDebugInfo checks that the local functions of a stripped binary
// are found through .gnu_debugdata, at the addresses nm gives them in the
// unstripped binary.
func TestMiniDebugInfo(t *testing.T) {
	dir := t.TempDir()
	full := testprog.Build(t, dir, "prog.c", cMiniProgram, "-O1", "-g")
	stripped := makeMiniDebugInfo(t, dir, full)
	o := mustOpen(t, stripped, Options{NoDebugFile: true})
	if o.section(".symtab") != nil {
		t.Fatal("stripped binary still has .symtab")
	}
	if err := o.SymbolsError(); err != nil {
		t.Fatal(err)
	}
	locals := 0
	for _, s := range nmSyms(t, "nm", full) {
		if s.size == 0 {
			continue
		}
		for _, a := range []uint64{s.addr, s.addr + s.size - 1} {
			name, off, ok := o.Symbolize(a)
			if !ok || name != s.name || off != a-s.addr {
				t.Errorf("Symbolize(%#x) = %q+%#x %v, nm: %s", a, name, off, ok, s.name)
			}
		}
		if s.typ == 't' && strings.HasPrefix(s.name, "local_") {
			locals++
		}
	}
	if locals != 2 {
		t.Errorf("nm lists %d local_ functions, want 2", locals)
	}
	if got := o.Sources(); got.Symbols != OriginMiniDebugInfo || got.Unwind != OriginFile {
		t.Errorf("Sources() = %+v, want symbols from MiniDebugInfo, unwind rows from the file", got)
	}
	// Without the section, the local functions are unknown.
	plain := filepath.Join(dir, "plain")
	run(t, "strip", "--strip-all", "-o", plain, full)
	p := mustOpen(t, plain, Options{NoDebugFile: true})
	for _, s := range p.Symbols() {
		if strings.HasPrefix(s.Name, "local_") {
			t.Errorf("%s found without .gnu_debugdata", s.Name)
		}
	}
}

// TestMiniDebugInfoCorrupt checks that a damaged .gnu_debugdata is
// reported, not fatal.
func TestMiniDebugInfoCorrupt(t *testing.T) {
	dir := t.TempDir()
	full := testprog.Build(t, dir, "prog.c", cMiniProgram, "-O1")
	junk := filepath.Join(dir, "junk.xz")
	os.WriteFile(junk, []byte("\xfd7zXZ\x00garbage garbage garbage"), 0o644)
	stripped := filepath.Join(dir, "stripped")
	run(t, "strip", "--strip-all", "-o", stripped, full)
	run(t, "objcopy", "--add-section", ".gnu_debugdata="+junk, stripped)
	o := mustOpen(t, stripped, Options{NoDebugFile: true})
	if o.SymbolsError() == nil {
		t.Error("no error for corrupt .gnu_debugdata")
	}
	if _, _, ok := o.Symbolize(o.Symbols()[0].Addr); !ok {
		t.Error(".dynsym symbols lost")
	}
}
