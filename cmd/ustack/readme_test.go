package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The README's journeys are run as written: each fenced block after a
// "<!-- readme-test: NAME -->" line is a script this file runs (in bash,
// with the ustack the install block installs first on PATH, an empty
// home and cache, no debuginfod and no module proxy), then checks what it
// made against what the README says it makes. Commands that open a window
// are the only ones replaced: `xdg-open FILE` by a check that FILE is
// there, `go tool pprof -http=ADDR FILE` by `go tool pprof -top FILE`.

const readmePath = "../../README.md"

var readmeMarker = regexp.MustCompile("(?m)^<!-- readme-test: ([a-z-]+) -->\n```[a-z]*\n")

// readmeBlocks returns the marked blocks of README.md by name.
func readmeBlocks(t *testing.T) map[string]string {
	b, err := os.ReadFile(readmePath)
	require.NoError(t, err)
	doc := string(b)
	blocks := map[string]string{}
	for _, m := range readmeMarker.FindAllStringSubmatchIndex(doc, -1) {
		name := doc[m[2]:m[3]]
		body := doc[m[1]:]
		end := strings.Index(body, "\n```")
		require.GreaterOrEqual(t, end, 0, "README block %s is not closed", name)
		require.NotContains(t, blocks, name, "two README blocks named %s", name)
		blocks[name] = body[:end+1]
	}
	return blocks
}

// journey runs the README's scripts in one environment.
type journey struct {
	t      *testing.T
	root   string // the module's root
	bin    string // where the install block installs ustack
	env    []string
	blocks map[string]string
}

func newJourney(t *testing.T) *journey {
	if testing.Short() {
		t.Skip("the README's journeys build and run programs; not in -short")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	tmp := t.TempDir()
	j := &journey{t: t, root: root, bin: filepath.Join(tmp, "bin"), blocks: readmeBlocks(t)}
	// Go's own settings, caches and module proxy stay what they are (a
	// fresh home must not mean a fresh module download); everything of
	// ustack's starts empty. The proxy is not turned off: the library
	// journey's go mod tidy in a new module may need a go.mod ustack's
	// own build never read (json-iterator's go-spew on a fresh machine),
	// and checks sums through the proxy (sum.golang.org itself is not
	// reachable everywhere the proxy is).
	goVars := []string{"GOENV", "GOCACHE", "GOMODCACHE", "GOPATH"}
	goenv := map[string]string{}
	// TestMain points XDG_CACHE_HOME at a temporary directory, and with it
	// Go's build cache: ask go without it, for the user's own cache.
	goEnvCmd := exec.Command("go", append([]string{"env"}, goVars...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "XDG_CACHE_HOME=") {
			goEnvCmd.Env = append(goEnvCmd.Env, kv)
		}
	}
	out, err := goEnvCmd.Output()
	require.NoError(t, err)
	for i, v := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		goenv[goVars[i]] = v
	}
	home := filepath.Join(tmp, "home")
	require.NoError(t, os.MkdirAll(home, 0o755))
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "HOME", "XDG_CACHE_HOME", "DEBUGINFOD_URLS", "GOBIN", "PATH", "GOENV", "GOCACHE", "GOMODCACHE", "GOPATH", "TMPDIR":
			continue
		}
		j.env = append(j.env, kv)
	}
	// mktemp -d (the library journey) makes its directory in the test's.
	tmpdir := filepath.Join(tmp, "tmp")
	require.NoError(t, os.MkdirAll(tmpdir, 0o755))
	j.env = append(j.env, "TMPDIR="+tmpdir, "HOME="+home, "XDG_CACHE_HOME="+filepath.Join(home, ".cache"), "DEBUGINFOD_URLS=",
		"GOBIN="+j.bin, "PATH="+j.bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"GOENV="+goenv["GOENV"], "GOCACHE="+goenv["GOCACHE"], "GOMODCACHE="+goenv["GOMODCACHE"], "GOPATH="+goenv["GOPATH"])
	return j
}

// block returns the README block name, failing when it is gone.
func (j *journey) block(name string) string {
	b, ok := j.blocks[name]
	require.True(j.t, ok, "README.md has no block marked <!-- readme-test: %s -->", name)
	return b
}

// run runs script in bash in dir and returns its standard output and
// error; a failing script fails the test when mustPass.
func (j *journey) run(dir, script string, mustPass bool) (stdout, stderr string) {
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir, cmd.Env = dir, j.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if mustPass {
		require.NoError(j.t, err, "script:\n%s\nstdout:\n%s\nstderr:\n%s", script, out.String(), errb.String())
	}
	return out.String(), errb.String()
}

// install runs the README's install block in the module root.
func (j *journey) install() string {
	j.run(j.root, j.block("install"), true)
	exe := filepath.Join(j.bin, "ustack")
	require.FileExists(j.t, exe, "the install block installed no ustack in GOBIN")
	return exe
}

// replaceLine replaces the README command matching re (one, at least) by
// with, where $1 is re's first group.
func replaceLine(t *testing.T, script, re, with string) string {
	r := regexp.MustCompile("(?m)^" + re + "$")
	require.Regexp(t, r, script, "the README block lost its %q command", re)
	return r.ReplaceAllString(script, with)
}

// TestReadmeQuickstart runs the README's first command as written, from
// the module root with an empty home, and checks that it prints the four
// stacks of the bundled recording reaching main and the summary, nothing
// else on stderr. (The second command is `go test ./...`, this test's own
// suite.)
func TestReadmeQuickstart(t *testing.T) {
	j := newJourney(t)
	lines := strings.Split(strings.TrimSpace(j.block("quickstart")), "\n")
	require.Len(t, lines, 2)
	require.Equal(t, "go test ./...", lines[1])
	out, errs := j.run(j.root, lines[0], true)
	samples := strings.Split(strings.TrimSpace(out), "\n\n")
	require.Len(t, samples, 4, out)
	for _, s := range samples {
		assert.Regexp(t, `(?m)^\s+[0-9a-f]+ main\+0x[0-9a-f]+ \(/tmp/ustack-hello/hello\)$`, s)
		assert.Regexp(t, `(?m)^\s+[0-9a-f]+ say\+0x[0-9a-f]+ \(inlined\)$`, s)
		assert.Contains(t, s, "syscalls:sys_enter_write:")
	}
	assert.Equal(t, "ustack: 4 samples, 4 unwound to the outermost frame\n"+helloFPAudit, errs)
	// The README shows the first sample as it prints.
	doc, err := os.ReadFile(readmePath)
	require.NoError(t, err)
	first := strings.SplitN(samples[0], "\n", 2)[1]
	assert.Contains(t, string(doc), first, "the README's sample output is not what the command prints")
}

// TestReadmeProfile runs the "Profile a program" journey: install, build
// busy.c, record it, report, flame graph, pprof.
func TestReadmeProfile(t *testing.T) {
	j := newJourney(t)
	script := j.block("profile")
	if os.Geteuid() != 0 {
		t.Skip("the profile journey records as root here (an ordinary user gets user space only, or nothing at perf_event_paranoid > 2); not root")
	}
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("no cc to build the README's busy.c")
	}
	exe := j.install()
	script = replaceLine(t, script, `xdg-open (\S+)`, "test -s $1")
	script = replaceLine(t, script, `go tool pprof -http=\S+ (\S+)`, "go tool pprof -top $1")
	dir := t.TempDir()
	out, errs := j.run(dir, script, true)
	assert.Contains(t, out, "6.75e+08", "busy's own output")
	// report | head prints the first samples; on a loaded machine they
	// may all be in the program's start-up (exec, the dynamic loader), so
	// main is looked for in the whole report.
	assert.Regexp(t, `(?m)^busy +\d+ +\[\d+\] +\d+\.\d+: +\d+ cpu-clock: *$`, out, "report | head: a sample of busy")
	text, err := exec.Command(exe, "report", "-i", filepath.Join(dir, "rec.data")).Output()
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^\s+[0-9a-f]+ main\+0x[0-9a-f]+ \(`+regexp.QuoteMeta(filepath.Join(dir, "busy"))+`\)$`, string(text), "report: main")
	assert.Contains(t, errs, "[ ustack record: wrote rec.data")

	// Every stack reaches main through run and work (bar a sample or two
	// in the loader or exit).
	folded, err := exec.Command(exe, "report", "-i", filepath.Join(dir, "rec.data"), "--format", "folded").Output()
	require.NoError(t, err)
	total, viaMain := 0, 0
	for _, l := range strings.Split(strings.TrimSpace(string(folded)), "\n") {
		i := strings.LastIndexByte(l, ' ')
		require.Greater(t, i, 0, l)
		n, err := strconv.Atoi(l[i+1:])
		require.NoError(t, err, l)
		total += n
		if strings.Contains(l, ";main;run;work") {
			viaMain += n
		}
	}
	require.GreaterOrEqual(t, total, 20, "too few samples recorded:\n%s", folded)
	assert.GreaterOrEqual(t, viaMain*10, total*9, "stacks not reaching main;run;work:\n%s", folded)

	svg, err := os.ReadFile(filepath.Join(dir, "flame.svg"))
	require.NoError(t, err)
	assert.Contains(t, string(svg[:200]), "<svg")
	assert.Greater(t, strings.Count(string(svg), "<rect"), 5, "flame graph boxes")
	assert.Contains(t, string(svg), ">work<", "a box titled work")
	assert.Regexp(t, `(?m)^\s+\S+\s+\S+%\s+\S+%\s+\S+\s+\S+%\s+work$`, out, "go tool pprof -top lists work")
}

// TestReadmeCrash runs the "Post-mortem a crash" journey: build crash.c,
// let it dump core, take the core where core_pattern put it (the
// README's coredumpctl block under systemd-coredump), report it as text
// and as JSON through jq, and checks the crashing function and the JSON's
// how and stop.
func TestReadmeCrash(t *testing.T) {
	j := newJourney(t)
	crash, take, rep := j.block("crash"), j.block("crash-systemd"), j.block("crash-report")
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("no cc to build the README's crash.c")
	}
	pattern, err := os.ReadFile("/proc/sys/kernel/core_pattern")
	require.NoError(t, err)
	dir := t.TempDir()
	j.install()
	out, _ := j.run(dir, crash, false) // ./crash fails, as it must
	assert.Contains(t, out, strings.TrimSpace(string(pattern)), "cat core_pattern")
	switch p := strings.TrimSpace(string(pattern)); {
	case strings.HasPrefix(p, "|") && strings.Contains(p, "systemd-coredump"):
		if _, err := exec.LookPath("coredumpctl"); err != nil {
			t.Skip("core_pattern is systemd-coredump's but there is no coredumpctl")
		}
		j.run(dir, take, true)
	case p == "core":
		if _, err := os.Stat(filepath.Join(dir, "core")); err != nil {
			// kernel.core_uses_pid=1: core.PID, as the README says.
			cores, _ := filepath.Glob(filepath.Join(dir, "core.*"))
			require.Len(t, cores, 1, "no core written in %s (ulimit -c?)", dir)
			require.NoError(t, os.Rename(cores[0], filepath.Join(dir, "core")))
		}
	default:
		t.Skipf("core_pattern %q is neither the kernel's default nor systemd-coredump's: the README covers those two", p)
	}
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("no jq for the README's JSON command (Debian package jq)")
	}
	out, errs := j.run(dir, rep, true)
	assert.Regexp(t, `crash\s+\d+/\d+\s+core: SIGSEGV\n\s+[0-9a-f]+ store\+0x0 \(\S+/crash\)\n\s+[0-9a-f]+ parse\+0x[0-9a-f]+ \(\S+/crash\)\n\s+[0-9a-f]+ main\+0x[0-9a-f]+ \(\S+/crash\)\n`, out)
	assert.Contains(t, errs, "ustack: 1 thread, 1 unwound to the outermost frame")
	assert.Regexp(t, `"signal": "SIGSEGV",\s+"stop": "outermost",\s+"frames": \[\s+\{\s+"symbol": "store",\s+"line": 2,\s+"how": "context"\s+\},\s+\{\s+"symbol": "parse",\s+"line": 3,\s+"how": "cfi"`, out)
}

// TestReadmeLibrary runs the library journey as written, from the module
// root: a new module pointed at the checkout, its main.go built and run on
// the bundled recording, offline. Its frames must be gdb's (gdb-bt.txt)
// and the README's quoted line what it prints; and the Example the README
// points to must exist.
func TestReadmeLibrary(t *testing.T) {
	j := newJourney(t)
	doc, err := os.ReadFile(readmePath)
	require.NoError(t, err)
	// The archive is optional: the README's command on a perf record
	// file, run after the block in the same module.
	plainCmd := regexp.MustCompile("(?s)The archive is optional:.*?\\(`(go run \\. [^`]+)`\\)").FindSubmatch(doc)
	require.NotNil(t, plainCmd, "the README says how the library example reads a perf record file")
	const marker = "--- a perf record file ---"
	all, _ := j.run(j.root, j.block("library")+"echo '"+marker+"'\n"+string(plainCmd[1])+"\n", true)
	out, plain, ok := strings.Cut(all, marker+"\n")
	require.True(t, ok, all)
	assert.Equal(t, 24, strings.Count(plain, "stop: "), "one stack per sample of dwarf.data (24, perf script -i perfdata/testdata/dwarf.data | grep -c cpu-clock):\n%s", plain)
	want := gdbBacktraces(t, filepath.Join(filepath.Dir(helloData), "gdb-bt.txt"))
	var got [][]string
	var fns []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(l, "stop: ") {
			assert.Equal(t, "stop: outermost", l)
			got, fns = append(got, fns), nil
			continue
		}
		f := strings.Fields(l)
		require.GreaterOrEqual(t, len(f), 2, "line %q", l)
		fns = append(fns, f[0])
	}
	assert.Equal(t, want, got, "the library journey's frames against gdb's:\n%s", out)
	quoted := regexp.MustCompile("one frame a line\\s+\\(`([^`]+)`").FindSubmatch(doc)
	require.NotNil(t, quoted, "the README quotes the program's first line")
	assert.Equal(t, string(quoted[1]), strings.SplitN(out, "\n", 2)[0])
	require.FileExists(t, filepath.Join(j.root, "resolve", "example_test.go"))
	assert.Contains(t, string(doc), "go test -run '^Example$' -v ./resolve")
}

// TestReadmeLinksDocs checks that the README links every file in docs/.
func TestReadmeLinksDocs(t *testing.T) {
	doc, err := os.ReadFile(readmePath)
	require.NoError(t, err)
	files, err := filepath.Glob("../../docs/*")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		name := "docs/" + filepath.Base(f)
		assert.Contains(t, string(doc), "]("+name+")", "README.md does not link %s", name)
	}
}
