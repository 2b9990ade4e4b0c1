package elfcache

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testfiles"
	"github.com/ustack/ustack/unwinder"
)

var _ unwinder.OutermostObject = (*Object)(nil)

// TestOutermost checks which functions begin a stack, against nm's symbol
// table: musl's _start (the entry point, without CFI) and glibc's clone do;
// _start_c, main and __libc_start_main, which have callers, do not. The
// address just before a return address past _start's end (its call is its
// last instruction) is still _start.
func TestOutermost(t *testing.T) {
	needTool(t, "nm")
	testfiles.MustUnpack(t, testfiles.Dir())
	objects := filepath.Join(testfiles.Dir(), "objects", "x86_64")
	for _, c := range []struct {
		file  string
		nmArg string // -D for an object with only dynamic symbols
		want  map[string]bool
	}{
		{"musl_signal", "-S", map[string]bool{"_start": true, "_start_c": false, "main": false}},
		{"libc.so.6", "-D", map[string]bool{"__clone": true, "__libc_start_main": false, "abort": false}},
	} {
		path := filepath.Join(objects, c.file)
		// name -> address, size; a symbol without a size (musl's
		// assembly _start) reaches the next one in address order.
		syms := map[string][2]uint64{}
		var unsized []string
		for _, line := range strings.Split(run(t, "nm", c.nmArg, "-S", "-n", "--defined-only", path), "\n") {
			f := strings.Fields(line)
			if len(f) < 3 {
				continue
			}
			addr := hexU(t, f[0])
			for _, n := range unsized {
				if s := syms[n]; addr > s[0] {
					syms[n] = [2]uint64{s[0], addr - s[0]}
				}
			}
			unsized = unsized[:0]
			name, _, _ := strings.Cut(f[len(f)-1], "@")
			if len(f) == 4 {
				syms[name] = [2]uint64{addr, hexU(t, f[1])}
			} else if _, ok := syms[name]; !ok {
				syms[name] = [2]uint64{addr, 0}
				unsized = append(unsized, name)
			}
		}
		o := mustOpen(t, path, Options{DebugDirs: []string{}})
		for name, want := range c.want {
			s, ok := syms[name]
			if !ok {
				t.Fatalf("%s: nm lists no %s", c.file, name)
			}
			for _, addr := range []uint64{s[0], s[0] + s[1]/2, s[0] + s[1] - 1} {
				if got := o.Outermost(addr); got != want {
					t.Errorf("%s: Outermost(%#x, in %s) = %v; want %v", c.file, addr, name, got, want)
				}
			}
		}
		o.Close()
	}
}

// TestOutermostStrippedEntry: Debian's ld.so names no function at its
// entry point (no .symtab; _start is not a dynamic symbol), yet its entry
// code's call to _dl_start is where every process's first stack ends.
// The entry point comes from readelf, the call from objdump.
func TestOutermostStrippedEntry(t *testing.T) {
	needTool(t, "readelf")
	needTool(t, "objdump")
	testfiles.MustUnpack(t, testfiles.Dir())
	path := filepath.Join(testfiles.Dir(), "objects", "x86_64", "ld-linux-x86-64.so.2")
	var entry uint64
	for _, l := range strings.Split(run(t, "readelf", "-h", path), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "Entry point address:"); ok {
			entry = hexU(t, strings.TrimPrefix(strings.TrimSpace(v), "0x"))
		}
	}
	require.NotZero(t, entry)
	// The first call after the entry point, and its return address.
	var ret uint64
	dis := run(t, "objdump", "-d", fmt.Sprintf("--start-address=%#x", entry), fmt.Sprintf("--stop-address=%#x", entry+32), path)
	lines := strings.Split(dis, "\n")
	for i, l := range lines {
		if strings.Contains(l, "\tcall ") && i+1 < len(lines) {
			a, _, _ := strings.Cut(strings.TrimSpace(lines[i+1]), ":")
			ret = hexU(t, a)
			break
		}
	}
	require.NotZero(t, ret, "no call in ld.so's entry code:\n%s", dis)
	o := mustOpen(t, path, Options{DebugDirs: []string{}})
	_, _, named := o.Symbolize(ret - 1)
	assert.False(t, named, "this ld.so names its entry code; the test needs a stripped one")
	assert.True(t, o.Outermost(ret-1), "ld.so's _start calling _dl_start (return address %#x, entry %#x)", ret, entry)
	assert.False(t, o.Outermost(entry-1), "the byte before the entry point")
	assert.False(t, o.Outermost(entry+0x400), "far past the entry point")
}
