package testprog

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// BuildGo builds the one-file Go program src into dir/name for goarch
// (linux) with the Go toolchain of version toolchain ("go1.21.13", taken
// from the module cache; "" for the local Go), cgo off, with ldflags (""
// for none), and returns its path. The source gets a go.mod of its own
// (go 1.21) so that an older toolchain accepts it. buildArgs go to go
// build before the package (-buildmode=pie). BuildGo skips t when go
// is not on PATH or the toolchain is not in the module cache (GOTOOLCHAIN=V
// go version fetches it through the module proxy), and fails it with the
// compiler's output when the build fails.
func BuildGo(t testing.TB, dir, name, src, toolchain, goarch, ldflags string, buildArgs ...string) string {
	t.Helper()
	return buildGo(t, dir, name, src, toolchain, goarch, ldflags, false, buildArgs...)
}

// BuildCgo is BuildGo with cgo on, for the machine's own architecture: it
// skips t when no C compiler (cc, or $CC) is on PATH.
func BuildCgo(t testing.TB, dir, name, src, toolchain, ldflags string, buildArgs ...string) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s) on PATH: cannot build the cgo test program", cc)
	}
	return buildGo(t, dir, name, src, toolchain, runtime.GOARCH, ldflags, true, buildArgs...)
}

func buildGo(t testing.TB, dir, name, src, toolchain, goarch, ldflags string, cgo bool, buildArgs ...string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH: cannot build the Go test program")
	}
	srcDir := filepath.Join(dir, name+".src")
	if err := os.MkdirAll(srcDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(srcDir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(srcDir, "go.mod"), []byte("module "+name+"\n\ngo 1.21\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cgoEnabled := "CGO_ENABLED=0"
	if cgo {
		cgoEnabled = "CGO_ENABLED=1"
	}
	env := append(os.Environ(), "GOFLAGS=", cgoEnabled, "GOOS=linux", "GOARCH="+goarch, "GOTOOLCHAIN=local")
	if toolchain != "" {
		env = append(env, "GOTOOLCHAIN="+toolchain, "GOPROXY=off")
		cmd := exec.Command(goTool, "version")
		cmd.Dir, cmd.Env = srcDir, env
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), toolchain+" ") {
			t.Skipf("Go toolchain %s not in the module cache (GOTOOLCHAIN=%s go version fetches it): %v %s", toolchain, toolchain, err, out)
		}
	}
	exe := filepath.Join(dir, name)
	args := []string{"build", "-o", exe}
	if ldflags != "" {
		args = append(args, "-ldflags="+ldflags)
	}
	args = append(args, buildArgs...)
	cmd := exec.Command(goTool, append(args, ".")...)
	cmd.Dir, cmd.Env = srcDir, env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", strings.Join(args[1:], " "), err, out)
	}
	return exe
}
