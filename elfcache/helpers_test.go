package elfcache

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
	"github.com/ustack/ustack/internal/testprog"
)

const (
	libcAMD64 = "/lib/x86_64-linux-gnu/libc.so.6"
	ldAMD64   = "/lib64/ld-linux-x86-64.so.2"
	libcARM64 = "/usr/aarch64-linux-gnu/lib/libc.so.6"
)

// needFile skips the test when path does not exist.
func needFile(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s: %v", path, err)
	}
}

// needTool skips the test when a command is not installed.
func needTool(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s not installed", name)
	}
}

// run runs a command in the test's directory and returns its standard
// output, skipping when it is not installed and failing on error.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	return testprog.Tool(t, "", name, args...)
}

func hexU(t testing.TB, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil {
		t.Fatalf("parse %q: %v", s, err)
	}
	return v
}

func mustOpen(t testing.TB, path string, opts Options) *Object {
	t.Helper()
	o, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

// nmFor returns the nm program that reads objects of architecture a.
func nmFor(a arch.Arch) string {
	if a == arch.ARM64 {
		if _, err := exec.LookPath("aarch64-linux-gnu-nm"); err == nil {
			return "aarch64-linux-gnu-nm"
		}
	}
	return "nm"
}

// nmSym is one line of nm -S output.
type nmSym struct {
	addr, size uint64
	sized      bool
	typ        byte
	name       string
}

// nmSyms runs nm (with extra args such as -D) and returns the defined
// text symbols (types T, t, W, w, i).
func nmSyms(t testing.TB, nm string, args ...string) []nmSym {
	out := run(t, nm, append([]string{"-S", "--defined-only"}, args...)...)
	var syms []nmSym
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		var s nmSym
		switch len(f) {
		case 4:
			s = nmSym{addr: hexU(t, f[0]), size: hexU(t, f[1]), sized: true, typ: f[2][0], name: f[3]}
		case 3:
			s = nmSym{addr: hexU(t, f[0]), typ: f[1][0], name: f[2]}
		default:
			continue
		}
		switch s.typ {
		case 'T', 't', 'W', 'w', 'i':
			if i := strings.IndexByte(s.name, '@'); i > 0 {
				s.name = s.name[:i] // nm adds @VERSION from .gnu.version
			}
			syms = append(syms, s)
		}
	}
	return syms
}

// readelfSection is one row of readelf -SW.
type readelfSection struct {
	name, typ       string
	addr, off, size uint64
	flags           string
}

func readelfSections(t testing.TB, path string) []readelfSection {
	out := run(t, "readelf", "-SW", path)
	var secs []readelfSection
	for _, line := range strings.Split(out, "\n") {
		i := strings.Index(line, "]")
		if !strings.HasPrefix(strings.TrimSpace(line), "[") || i < 0 {
			continue
		}
		f := strings.Fields(line[i+1:])
		if len(f) < 5 || f[0] == "Name" {
			continue
		}
		if f[0] == "NULL" {
			secs = append(secs, readelfSection{typ: "NULL"})
			continue
		}
		s := readelfSection{name: f[0], typ: f[1], addr: hexU(t, f[2]), off: hexU(t, f[3]), size: hexU(t, f[4])}
		if len(f) >= 10 {
			s.flags = f[6]
		}
		secs = append(secs, s)
	}
	return secs
}

// readelfLoad is one PT_LOAD row of readelf -lW.
type readelfLoad struct {
	off, vaddr, filesz, memsz uint64
	flags                     string
}

func readelfLoads(t testing.TB, path string) []readelfLoad {
	out := run(t, "readelf", "-lW", path)
	var loads []readelfLoad
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 7 || f[0] != "LOAD" {
			continue
		}
		l := readelfLoad{off: hexU(t, f[1]), vaddr: hexU(t, f[2]), filesz: hexU(t, f[4]), memsz: hexU(t, f[5])}
		l.flags = strings.Join(f[6:len(f)-1], "")
		loads = append(loads, l)
	}
	return loads
}

func readelfBuildID(t testing.TB, path string) string {
	out := run(t, "readelf", "-n", path)
	for _, line := range strings.Split(out, "\n") {
		if _, id, ok := strings.Cut(line, "Build ID:"); ok {
			return strings.TrimSpace(id)
		}
	}
	return ""
}

var (
	cfiOnce  sync.Once
	cfiReady bool
)

// requireCFI skips tests that need real CFI lookups while package cfi is
// still a stub whose functions panic with "TODO".
func requireCFI(t testing.TB) {
	t.Helper()
	cfiOnce.Do(func() {
		defer func() {
			if r := recover(); r != nil {
				cfiReady = fmt.Sprint(r) != "TODO"
			}
		}()
		cfi.NewTable(arch.AMD64, cfi.Sections{}, cfi.Options{})
		cfiReady = true
	})
	if !cfiReady {
		t.Skip("package cfi is not implemented yet")
	}
}

const cProgram = `
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) int leaf(int x) { return x * 3 + 1; }
__attribute__((noinline)) int middle(int x) { int s = 0; for (int i = 0; i < x; i++) s += leaf(i); return s; }
__attribute__((noinline)) static int hidden_helper(int x) { return middle(x) ^ 5; }
int main(int argc, char **argv) { printf("%d\n", hidden_helper(argc + 3)); return 0; }
`
