package report

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/resolve"
)

// rustCrashSrc crashes in a thread, under closures and iterator adapters
// inlined into each other, in a function whose name starts with
// underscores (as std's __rust_begin_short_backtrace, on the stack too).
const rustCrashSrc = `// black_box without std::hint (Rust 1.66), for older rustc.
#[inline(never)] fn black_box(x: usize) -> usize { unsafe { std::ptr::read_volatile(&x) } }
#[inline(never)]
fn crash(p: usize) { unsafe { std::ptr::write_volatile(p as *mut u8, 1) } }
#[inline(never)]
fn __level2(v: &[usize]) -> usize {
    v.iter().map(|&x| { if x == 3 { crash(black_box(0)) } x + 1 }).sum()
}
#[inline(never)]
fn level1(n: usize) -> usize {
    let v: Vec<usize> = (0..n).collect();
    let f = |k: usize| __level2(&v[..k]);
    f(black_box(n))
}
fn main() {
    let n = black_box(std::env::args().count() + 4);
    let h = std::thread::spawn(move || level1(n));
    println!("{}", h.join().unwrap());
}
`

// gdbCoreFrames returns gdb's frames of core's current (signalled)
// thread, newest first, as gdb reads them from the core (a live stop at
// the first instruction of an inlined function hides that function;
// the core's reading does not).
func gdbCoreFrames(t *testing.T, dir, bin, core string) []gdbFrame {
	t.Helper()
	py := filepath.Join(dir, "core-frames.py")
	require.NoError(t, os.WriteFile(py, []byte(gdbFramesPy), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), testprog.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "gdb", "-nx", "-batch", "-x", py, bin, core)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "gdb: %s", out)
	return parseGDBFrames(t, out)
}

// rustPathOf reduces a Rust function's name, as gdb gives it (from DWARF's
// scopes: {closure#0}, {impl#N}, generic arguments) or ustack (from the
// demangled linkage name: {{closure}}, <T as Trait>, none), to what both
// conventions say: the path without generic arguments, closures as
// {closure}, a vtable shim as its function; only the last element when
// either has an impl ({impl#N}, <T as Trait>), which names its type
// differently.
func rustPathOf(name string) (path string, lastOnly bool) {
	var b strings.Builder
	depth := 0
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '<' && (i > 0 && (isIdent(name[i-1]) || name[i-1] == '}') || depth > 0):
			depth++
		case c == '>' && depth > 0 && name[i-1] != '-':
			depth--
		case depth == 0:
			b.WriteByte(c)
		}
	}
	path = b.String()
	path = strings.ReplaceAll(path, "{{vtable.shim}}", "")
	path = regexp.MustCompile(`\{\{closure\}\}|\{closure#\d+\}`).ReplaceAllString(path, "{closure}")
	lastOnly = strings.HasPrefix(path, "<") || strings.Contains(path, "{impl#")
	if lastOnly {
		depth = 0
		last := 0
		for i := 0; i+1 < len(path); i++ {
			switch path[i] {
			case '<', '(':
				depth++
			case '>', ')':
				depth--
			case ':':
				if depth == 0 && path[i+1] == ':' {
					last = i + 2
				}
			}
		}
		path = path[last:]
	}
	return path, lastOnly
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// TestRustCoreMatchesGDB crashes a Rust program (rustc -O -g) in a thread
// and compares every frame of the crashing thread, the inlined ones
// included, with gdb's reading of the core: the same pcs, the same kind
// (inlined, tail call, normal), the same functions, named by Rust's
// demangling of the linkage name where gdb names them from DWARF's scopes
// (see rustPathOf). std::sys::backtrace::__rust_begin_short_backtrace and
// the program's __level2 keep both underscores.
func TestRustCoreMatchesGDB(t *testing.T) {
	dir := t.TempDir()
	bin := testprog.BuildRust(t, dir, "crash.rs", rustCrashSrc, "-C", "opt-level=2", "-g")
	_, core := crashUnderGDB(t, dir, bin)
	gdbFrames := gdbCoreFrames(t, dir, bin, core)
	opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}}
	var got []Frame
	for _, f := range signalledFrames(t, core, opts) {
		if !f.Kernel {
			got = append(got, f)
		}
	}
	var gs, us []string
	for _, g := range gdbFrames {
		gs = append(gs, fmt.Sprintf("%s %s@%#x", g.kind, g.name, g.pc))
	}
	for _, f := range got {
		us = append(us, fmt.Sprintf("%s %s@%#x", f.How, elfcache.DemangleShort(f.Symbol), f.PC))
	}
	t.Logf("gdb:\n\t%s", strings.Join(gs, "\n\t"))
	t.Logf("ustack:\n\t%s", strings.Join(us, "\n\t"))
	require.Len(t, got, len(gdbFrames), "frames against gdb's")
	for i, g := range gdbFrames {
		f := got[i]
		assert.Equal(t, fmt.Sprintf("%#x", g.pc), fmt.Sprintf("%#x", f.PC), "frame %d (%s) pc", i, g.name)
		kind := "normal"
		if f.Inlined {
			kind = "inline"
		} else if f.How == resolve.HowTailCall {
			kind = "tailcall"
		}
		assert.Equal(t, g.kind, kind, "frame %d (%s) kind", i, g.name)
		if f.Module != bin {
			continue // glibc's aliases (clone3, __clone3) are another matter
		}
		name := elfcache.DemangleShort(f.Symbol)
		gp, gLast := rustPathOf(g.name)
		up, uLast := rustPathOf(name)
		if gLast != uLast {
			gp, _ = rustPathOf("<>::" + gp)
			up, _ = rustPathOf("<>::" + up)
		}
		assert.Equal(t, gp, up, "frame %d: gdb's %s, ustack's %s", i, g.name, name)
	}
	names := strings.Join(us, " ")
	for _, want := range []string{" std::sys::backtrace::__rust_begin_short_backtrace@", "::__level2@", " crash::crash@"} {
		assert.Contains(t, names, want)
	}
}
