package testprog

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

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
	return Compile(t, compilerFor(t, file), dir, file, src, flags...)
}

// compilerFor returns the compiler of file's language, failing t for an
// extension it does not know.
func compilerFor(t testing.TB, file string) string {
	t.Helper()
	cc, ok := compilers[filepath.Ext(file)]
	if !ok {
		t.Fatalf("testprog: %s: no compiler for %q files", file, filepath.Ext(file))
	}
	return cc
}

// Compile is Build with the compiler named (clang, clang++,
// aarch64-linux-gnu-gcc...).
func Compile(t testing.TB, cc, dir, file, src string, flags ...string) string {
	t.Helper()
	need(t, cc)
	out, err := compile(cc, filepath.Join(dir, file), src, flags)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// compile writes src to path and compiles it with cc and flags, under
// Timeout and the C locale, into path without its extension.
func compile(cc, path, src string, flags []string) (string, error) {
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		return "", err
	}
	out := strings.TrimSuffix(path, filepath.Ext(path))
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cc, append(append([]string{}, flags...), "-o", out, path)...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s %s: %v\n%s", cc, strings.Join(cmd.Args[1:], " "), err, msg)
	}
	return out, nil
}
