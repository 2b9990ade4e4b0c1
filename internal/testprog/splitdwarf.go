package testprog

import (
	"os"
	"path/filepath"
	"testing"
)

// SplitSources is a C program of two compilation units (a.c, b.c) that
// share three levels of always-inlined functions (outer, middle, leaf,
// which calls close on a negative descriptor) from common.h: main calls
// work_a (a.c), work_b and hop (b.c), fifty times each, and hop
// tail-calls work_b. hop is cold, in gcc's .text.unlikely, so that both
// units have code in two sections and their skeletons a range list with
// base address 0, as main's .text.startup gives a.c: gcc 12 writes the
// empty range of inlined code that starts at a unit's low_pc as the pair
// (0, 0), which ends the list, and gdb and llvm then see no inlined calls
// there.
var SplitSources = map[string]string{
	"common.h": `#include <unistd.h>
static inline __attribute__((always_inline)) int leaf(int x) { close(x); return x + 1; }
static inline __attribute__((always_inline)) int middle(int x) { return leaf(x) * 3; }
static inline __attribute__((always_inline)) int outer(int x) { return middle(x - 1) - 2; }
int work_a(int x);
int work_b(int x);
int hop(int x);
`,
	"a.c": `#include "common.h"
__attribute__((noinline)) int work_a(int x) { return outer(x) + 1; }
int main(int argc, char **argv) {
	int s = 0;
	for (int i = 0; i < 50; i++)
		s += work_a(-argc) + work_b(-argc) + hop(-argc);
	return s == 7;
}
`,
	"b.c": `#include "common.h"
__attribute__((noinline, cold)) int hop(int x) { return work_b(x + 1); }
__attribute__((noinline)) int work_b(int x) { return outer(x * 2) ^ 5; }
`,
}

// BuildSplit writes SplitSources to dir and builds them with cc (gcc or
// clang) as split DWARF of the version given (4: the GNU form, 5): -O2
// -gsplit-dwarf, each unit compiled in dir (so its skeleton names its
// .dwo there, dir as the compilation directory), and linked into
// dir/prog, whose path it returns. With pack set ("dwp" or "llvm-dwp"),
// the .dwo files are then packed into dir/prog.dwp with that tool and
// moved into dir/dwo, out of the way. It skips t when cc or pack is not
// installed.
func BuildSplit(t testing.TB, dir, cc string, version int, pack string) string {
	t.Helper()
	need(t, cc)
	if pack != "" {
		need(t, pack)
	}
	for name, src := range SplitSources {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dwarf := "-gdwarf-4"
	if version == 5 {
		dwarf = "-gdwarf-5"
	}
	for _, u := range []string{"a", "b"} {
		Tool(t, dir, cc, "-O2", "-g", dwarf, "-gsplit-dwarf", "-fomit-frame-pointer", "-c", "-o", u+".o", u+".c")
	}
	Tool(t, dir, cc, "-o", "prog", "a.o", "b.o")
	bin := filepath.Join(dir, "prog")
	if pack == "" {
		return bin
	}
	Tool(t, dir, pack, "-e", "prog", "-o", "prog.dwp")
	if err := os.MkdirAll(filepath.Join(dir, "dwo"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"a", "b"} {
		if err := os.Rename(filepath.Join(dir, u+".dwo"), filepath.Join(dir, "dwo", u+".dwo")); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}
