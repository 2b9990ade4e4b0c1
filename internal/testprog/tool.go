package testprog

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Timeout bounds every command this package runs (a compiler or perf): a
// hung tool fails the test instead of hanging the test binary.
const Timeout = 2 * time.Minute

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
