package elfcache

import (
	"path"
	"strings"
	"testing"
)

// a2lFile turns a file name as addr2line and llvm-addr2line print it into
// the one SourceFrame gives: cleaned, and without the second copy of the
// compilation directory the tools join to DWARF 5's directory 0 (which is
// the compilation directory already): "./elf/./elf/dl-misc.c" is
// "elf/dl-misc.c".
func a2lFile(p string) string {
	if p == "" || p == "??" {
		return p
	}
	c := path.Clean(p)
	segs := strings.Split(c, "/")
	for k := len(segs) / 2; k >= 1; k-- {
		if strings.Join(segs[:k], "/") == strings.Join(segs[k:2*k], "/") {
			return strings.Join(segs[k:], "/")
		}
	}
	return c
}

// TestSourcePathsCleaned checks the source files of glibc's DWARF 5
// units, whose compilation directory and directory 0 are both "./nptl" (or
// "./misc"...): gdb names the files ./nptl/pthread_create.c and
// ../sysdeps/unix/sysv/linux/x86_64/clone3.S with those compilation
// directories, addr2line ./nptl/./nptl/pthread_create.c; in glibc's source
// tree they are nptl/pthread_create.c and sysdeps/unix/sysv/linux/x86_64/clone3.S.
func TestSourcePathsCleaned(t *testing.T) {
	needFile(t, libcAMD64)
	o := mustOpen(t, libcAMD64, Options{})
	want := map[string]string{
		"pthread_create": "nptl/pthread_create.c",
		"__clone3":       "sysdeps/unix/sysv/linux/x86_64/clone3.S",
	}
	found := 0
	for _, l := range strings.Split(run(t, "nm", "-D", "--defined-only", libcAMD64), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue
		}
		name, _, _ := strings.Cut(f[2], "@")
		file, ok := want[name]
		if !ok {
			continue
		}
		frames := o.SourceFrames(hexU(t, f[0]), nil)
		if len(frames) == 0 {
			t.Skipf("no debug info for libc (Debian package libc6-dbg)")
		}
		found++
		last := frames[len(frames)-1]
		if frames[0].File != file || last.File != file {
			t.Errorf("%s: files %q ... %q, want %q", name, frames[0].File, last.File, file)
		}
	}
	if found == 0 {
		t.Skip("libc exports neither pthread_create nor __clone3")
	}
}
