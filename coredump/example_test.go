package coredump_test

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ustack/ustack/coredump"
)

// Example opens a zstd-compressed kernel core of a program that stored
// through a null pointer, and lists what killed it, its threads and the
// objects it had mapped, each with the build-id read from the core itself.
func Example() {
	dir := filepath.Join(testdataDir(), "cores", "x86_64")
	opts := &coredump.Options{OpenMapped: func(p string) (coredump.ReaderAt, error) {
		// The fixture's objects are committed next to it, or with glibc's
		// in testdata/objects; a real caller would use SymFS.
		for _, d := range []string{filepath.Join(dir, "bin"), filepath.Join(testdataDir(), "objects", "x86_64")} {
			if f, err := os.Open(filepath.Join(d, path.Base(p))); err == nil {
				return f, nil
			}
		}
		return nil, os.ErrNotExist
	}}
	c, err := coredump.Open(filepath.Join(dir, "crash_O2.core.zst"), opts)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	s := c.Signal
	fmt.Printf("%s (%s) at %#x, %s %s, %d thread(s)\n", s.Name(), coredump.CodeName(s.Signo, s.Code), s.Addr,
		c.Arch, c.Process.Comm, len(c.Threads))
	var objs []string // in name order: addresses change with every run
	for _, o := range c.Objects() {
		objs = append(objs, fmt.Sprintf("%s build-id %d bytes", path.Base(o.Path), len(o.BuildID)))
	}
	sort.Strings(objs)
	fmt.Println(strings.Join(objs, "\n"))
	// The instruction at the crashing pc: program text, which the kernel did
	// not dump, read from the mapped file.
	pc, _ := c.Threads[0].Regs.Get(c.Arch.PC())
	var insn [3]byte
	_, err = c.Memory().ReadAt(insn[:], pc)
	fmt.Println("text readable:", err == nil)
	// Output:
	// SIGSEGV (SEGV_MAPERR) at 0x0, x86_64 crash_O2, 1 thread(s)
	// [vdso] build-id 20 bytes
	// crash_O2 build-id 20 bytes
	// ld-linux-x86-64.so.2 build-id 20 bytes
	// libc.so.6 build-id 20 bytes
	// text readable: true
}
