package testprog

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Timeout bounds every command this package runs (a compiler or perf): a
// hung tool fails the test instead of hanging the test binary.
const Timeout = 2 * time.Minute

// compilers maps a source file's extension to the compiler Build uses.
var compilers = map[string]string{".c": "gcc", ".cc": "g++", ".cpp": "g++", ".cxx": "g++"}

// Build writes src to dir/file and compiles it with gcc (a .c file) or g++
// (.cc, .cpp, .cxx) and flags into dir/file-without-extension, whose path
// it returns. The compiler runs in the test's working directory on
// absolute paths, so DWARF names the source by its full path. Build skips
// t when the compiler is not installed and fails it, with the compiler's
// output, when the source does not compile.
func Build(t testing.TB, dir, file, src string, flags ...string) string {
	t.Helper()
	ext := filepath.Ext(file)
	cc, ok := compilers[ext]
	if !ok {
		t.Fatalf("testprog.Build %s: no compiler for %q files", file, ext)
	}
	return Compile(t, cc, dir, file, src, flags...)
}

// Compile is Build with the compiler named (clang, clang++,
// aarch64-linux-gnu-gcc...).
func Compile(t testing.TB, cc, dir, file, src string, flags ...string) string {
	t.Helper()
	path := filepath.Join(dir, file)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := strings.TrimSuffix(path, filepath.Ext(path))
	Tool(t, "", cc, append(append([]string{}, flags...), "-o", out, path)...)
	return out
}

// Tool runs name with args in dir ("" for the test's working directory)
// under Timeout and the C locale, and returns its standard output. It skips
// t when name is not installed and fails it, with the tool's standard
// error, when the tool fails.
func Tool(t testing.TB, dir, name string, args ...string) string {
	t.Helper()
	path := need(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stderr.String(), out)
	}
	return string(out)
}

// need returns the path of the command name, skipping t when it is not
// installed.
func need(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed: this test needs it", name)
	}
	return path
}

// shared holds the programs Shared built in this test binary run, by
// compiler flags and source.
var shared sync.Map // key string -> *sharedBuild

type sharedBuild struct {
	once sync.Once
	path string
	err  error
}

// Shared is Build done once per test binary run for each file, source and
// flags: every test asking for the same program gets the same path, in a
// directory of its own under os.TempDir that outlives the tests (no test
// may modify or delete the program; copy it first). A missing compiler
// skips every caller; a compiler error fails every caller.
func Shared(t testing.TB, file, src string, flags ...string) string {
	t.Helper()
	cc, ok := compilers[filepath.Ext(file)]
	if !ok {
		t.Fatalf("testprog.Shared %s: no compiler for %q files", file, filepath.Ext(file))
	}
	need(t, cc)
	key := fmt.Sprintf("%s\x00%q\x00%s", file, flags, src)
	v, _ := shared.LoadOrStore(key, new(sharedBuild))
	b := v.(*sharedBuild)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "ustack-testprog-")
		if err != nil {
			b.err = err
			return
		}
		path := filepath.Join(dir, file)
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			b.err = err
			return
		}
		out := strings.TrimSuffix(path, filepath.Ext(path))
		ctx, cancel := context.WithTimeout(context.Background(), Timeout)
		defer cancel()
		msg, err := exec.CommandContext(ctx, cc, append(append([]string{}, flags...), "-o", out, path)...).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("%s %s: %v\n%s", cc, path, err, msg)
			return
		}
		b.path = out
	})
	if b.err != nil {
		t.Fatalf("building the test program: %v", b.err)
	}
	return b.path
}
