package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFlagErrorsFirst: a flag error prints the one error and where help
// is (not the whole usage text) and exits 2; -h prints the help on stdout
// and exits 0, for every subcommand, as does "ustack help CMD".
func TestFlagErrorsFirst(t *testing.T) {
	for _, cmd := range []string{"record", "report", "unwind"} {
		var out, errb bytes.Buffer
		code := run([]string{cmd, "-no-such-flag"}, &out, &errb)
		assert.Equal(t, 2, code, "%s: exit code", cmd)
		lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
		assert.LessOrEqual(t, len(lines), 2, "%s: flag error output:\n%s", cmd, errb.String())
		assert.Contains(t, lines[0], "-no-such-flag", cmd)
		assert.Contains(t, errb.String(), "ustack "+cmd+" -h", cmd)

		out.Reset()
		errb.Reset()
		assert.Equal(t, 0, run([]string{cmd, "-h"}, &out, &errb), "%s -h", cmd)
		assert.Contains(t, out.String(), "usage: ustack "+cmd, "%s -h prints its usage on stdout", cmd)

		out.Reset()
		assert.Equal(t, 0, run([]string{"help", cmd}, &out, &errb), "help %s", cmd)
		assert.Contains(t, out.String(), "usage: ustack "+cmd)
	}
	var out, errb bytes.Buffer
	assert.Equal(t, 0, run([]string{"version"}, &out, &errb))
	assert.True(t, strings.HasPrefix(out.String(), "ustack "), out.String())
	assert.Equal(t, 2, run([]string{"help", "nonsense"}, &out, &errb))
}

func TestParseCallGraph(t *testing.T) {
	for _, c := range []struct {
		in   string
		mode string
		size uint
		bad  bool
	}{
		{"", "", 0, false}, {"dwarf", "dwarf", 0, false}, {"dwarf,16384", "dwarf", 16384, false},
		{"dwarf,0x4000", "dwarf", 16384, false}, {"fp", "fp", 0, false},
		{"dwarf,70000", "", 0, true}, {"dwarf,x", "", 0, true}, {"fp,8", "", 0, true}, {"lbr", "", 0, true}, {"foo", "", 0, true},
	} {
		mode, size, err := parseCallGraph(c.in)
		if c.bad {
			assert.Error(t, err, c.in)
			continue
		}
		assert.NoError(t, err, c.in)
		assert.Equal(t, c.mode, mode, c.in)
		assert.Equal(t, c.size, size, c.in)
	}
}

// TestFlagErrorsAsTyped: a flag error names the flag as the user typed
// it, with two dashes or one.
func TestFlagErrorsAsTyped(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"record", "--bogus"}, "flag provided but not defined: --bogus\n"},
		{[]string{"record", "-bogus"}, "flag provided but not defined: -bogus\n"},
		{[]string{"record", "--freq=fast", "--", "true"}, "invalid value \"fast\" for flag --freq: "},
		{[]string{"record", "--output"}, "flag needs an argument: --output\n"},
		{[]string{"report", "--input"}, "flag needs an argument: --input\n"},
		{[]string{"report", "x.data", "--verbose=maybe"}, "invalid boolean value \"maybe\" for --verbose: "},
		{[]string{"report", "--pid", "1", "-bogus"}, "flag provided but not defined: -bogus\n"},
	} {
		var out, errb bytes.Buffer
		assert.Equal(t, 2, run(c.args, &out, &errb), "%v", c.args)
		assert.Contains(t, errb.String(), c.want, "%v", c.args)
	}
}

// TestLongInputFlag: --input is -i, as in perf report and perf script.
func TestLongInputFlag(t *testing.T) {
	rc, short, errs := runReport("-i", dwarfData)
	assert.Equal(t, exitOK, rc, errs)
	rc, long, errs := runReport("--input", dwarfData)
	assert.Equal(t, exitOK, rc, errs)
	assert.Equal(t, short, long)
	rc, long, errs = runReport("--input=" + dwarfData)
	assert.Equal(t, exitOK, rc, errs)
	assert.Equal(t, short, long)
}

// TestVersion builds the command and compares what `ustack version`
// prints with what `go version -m` reads from the binary: the module
// version, the VCS revision (with +dirty when the tree was modified;
// none outside a repository or in a git worktree, where Go records
// none) and the Go version.
func TestVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	exe := filepath.Join(t.TempDir(), "ustack")
	build := exec.Command("go", "build", "-o", exe, ".")
	// TestMain points XDG_CACHE_HOME, and with it Go's build cache, at
	// an empty directory: build with the user's cache.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "XDG_CACHE_HOME=") {
			build.Env = append(build.Env, kv)
		}
	}
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	meta, err := exec.Command("go", "version", "-m", exe).Output()
	require.NoError(t, err)
	goVersion, mod, rev, modified := "", "", "", ""
	for i, l := range strings.Split(string(meta), "\n") {
		f := strings.Fields(l)
		switch {
		case i == 0:
			goVersion = f[len(f)-1] // "PATH: go1.26.8"
		case len(f) >= 3 && f[0] == "mod":
			mod = f[2]
		case len(f) >= 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision="):
			rev = strings.TrimPrefix(f[1], "vcs.revision=")
		case len(f) >= 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.modified="):
			modified = strings.TrimPrefix(f[1], "vcs.modified=")
		}
	}
	require.NotEmpty(t, goVersion)
	require.NotEmpty(t, mod)
	want := "ustack " + mod
	if rev != "" {
		want += " " + rev
		if modified == "true" {
			want += "+dirty"
		}
	}
	want += " " + goVersion + "\n"
	got, err := exec.Command(exe, "version").Output()
	require.NoError(t, err)
	assert.Equal(t, want, string(got))
}

// TestHelpSaysWhatFlagsHold: every command's help describes it, gives its
// exit statuses, and names what each flag's value is, not its Go type.
func TestHelpSaysWhatFlagsHold(t *testing.T) {
	flagLine := regexp.MustCompile(`(?m)^  (-\S+(?:, --\S+)?)(?: (\S+))?$`)
	for _, cmd := range []string{"record", "report", "archive", "unwind"} {
		var out, errb bytes.Buffer
		require.Equal(t, 0, run([]string{"help", cmd}, &out, &errb), cmd)
		help := out.String()
		usage, rest, _ := strings.Cut(help, "\n\n")
		assert.True(t, strings.HasPrefix(usage, "usage: ustack "+cmd), cmd)
		desc, _, _ := strings.Cut(rest, "flags:")
		assert.Greater(t, len(strings.Fields(desc)), 10, "%s: no description:\n%s", cmd, help)
		assert.Contains(t, help, "Exit status: 0 ", cmd)
		lines := flagLine.FindAllStringSubmatch(help, -1)
		assert.NotEmpty(t, lines, cmd)
		for _, l := range lines {
			switch l[2] {
			case "string", "int", "uint", "uint64", "int64", "float", "value":
				t.Errorf("ustack %s %s: the placeholder %q says the Go type, not what the value is", cmd, l[1], l[2])
			}
		}
	}
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"report", "-h"}, &out, &errb))
	assert.Contains(t, out.String(), "JSON Lines")
}
