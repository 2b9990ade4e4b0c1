package testprog

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Rustc returns the path of rustc: the one on PATH, else rustup's
// ($CARGO_HOME/bin, ~/.cargo/bin), where it is installed without being on
// PATH. It skips t when there is none.
func Rustc(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("rustc"); err == nil {
		return p
	}
	var dirs []string
	if d := os.Getenv("CARGO_HOME"); d != "" {
		dirs = append(dirs, filepath.Join(d, "bin"))
	}
	if h, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(h, ".cargo", "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "rustc")
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	t.Skip("rustc not installed (on PATH or in ~/.cargo/bin; rustup or Debian package rustc): this test needs it")
	return ""
}

// BuildRust writes src to dir/file (a .rs file) and compiles it with rustc
// and flags (-C opt-level=2, -g, -C panic=abort...) into dir/file without
// its extension, whose path it returns; std only, no crates. It skips t
// when rustc is not installed and fails it, with rustc's output, when the
// source does not compile.
func BuildRust(t testing.TB, dir, file, src string, flags ...string) string {
	t.Helper()
	out, err := compile(Rustc(t), filepath.Join(dir, file), src, flags)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
