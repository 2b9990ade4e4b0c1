package report

import (
	"bytes"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

// readelfBuildID returns the build-id readelf -n prints for file.
func readelfBuildID(t *testing.T, file string) string {
	t.Helper()
	out := testprog.Tool(t, "", "readelf", "-n", file)
	m := regexp.MustCompile(`Build ID: ([0-9a-f]+)`).FindStringSubmatch(out)
	require.NotNil(t, m, "readelf -n %s prints no build-id:\n%s", file, out)
	return m[1]
}

// warningsAbout returns the warnings that start with prefix.
func warningsAbout(warnings []string, prefix string) []string {
	var out []string
	for _, w := range warnings {
		if strings.HasPrefix(w, prefix) {
			out = append(out, w)
		}
	}
	return out
}

// chrootRoot lays out a root for bin: bin as /prog, and copies of the
// libraries ldd names at their paths, libc's with its build-id changed
// (another build of the same code, as a container's libc is). It returns
// the root and libc's path.
func chrootRoot(t *testing.T, bin string) (root, libc string) {
	t.Helper()
	root = filepath.Join(t.TempDir(), "root")
	require.NoError(t, os.MkdirAll(root, 0o755))
	copyFile := func(from, to string) {
		b, err := os.ReadFile(from)
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(to), 0o755))
		require.NoError(t, os.WriteFile(to, b, 0o755))
	}
	copyFile(bin, filepath.Join(root, "prog"))
	ldd := testprog.Tool(t, "", "ldd", bin)
	for _, m := range regexp.MustCompile(`(?m)(?:=> )?(/\S+) \(0x`).FindAllStringSubmatch(ldd, -1) {
		copyFile(m[1], filepath.Join(root, m[1]))
		if strings.HasPrefix(filepath.Base(m[1]), "libc.so") {
			libc = m[1]
		}
	}
	if libc == "" {
		t.Skipf("ldd names no libc.so for %s:\n%s", bin, ldd)
	}
	// Another build-id: the note's descriptor, its bytes inverted.
	id, err := hex.DecodeString(readelfBuildID(t, libc))
	require.NoError(t, err)
	file := filepath.Join(root, libc)
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, 1, bytes.Count(b, id), "%s holds its build-id once", libc)
	other := make([]byte, len(id))
	for i, c := range id {
		other[i] = ^c
	}
	require.NoError(t, os.WriteFile(file, bytes.Replace(b, id, other, 1), 0o755))
	return root, libc
}

// TestReportChroot: a process in a chroot whose libc is another build
// (other build-id) than the host's at the same path, recorded from the
// host with perf record. perf reads the build-ids of its list by path as
// the host sees them, so the recording names the host libc's build-id
// (checked against readelf -n) for the chroot's libc. ustack, the
// recording made here, sees from MMAP2's inode that the host's
// file is not the one mapped: without --symfs it refuses the host libc
// (and copies by its build-id) with one warning naming the file and both
// inodes and saying --symfs gives the root; with --symfs ROOT it uses the
// mapped copy, whose build-id readelf gives, with one warning naming both
// build-ids, and the close samples unwind through leaf, mid, top and main.
func TestReportChroot(t *testing.T) {
	requirePerf(t)
	if _, err := exec.LookPath("chroot"); err != nil {
		t.Skip("no chroot command")
	}
	dir := t.TempDir()
	bin := build(t, dir, "chain", chainSrc, "-O2", "-g", "-fomit-frame-pointer")
	root, libc := chrootRoot(t, bin)
	hostID, rootID := readelfBuildID(t, libc), readelfBuildID(t, filepath.Join(root, libc))
	require.NotEqual(t, hostID, rootID)
	home := t.TempDir()
	cmd := testprog.PerfCommand(t, "record", "-q", "-o", filepath.Join(dir, "chroot.data"), "-e", "syscalls:sys_enter_close",
		"-e", "cpu-clock", "-c", "100000", "--call-graph", "dwarf", "--", "chroot", root, "/prog")
	cmd.Env = append(os.Environ(), "HOME="+home)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("perf record of a chroot cannot run here: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "chroot.data")
	ids := testprog.Output(t, testprog.PerfCommand(t, "buildid-list", "-i", data))
	require.Contains(t, ids, hostID+" "+libc, "perf lists the host libc's build-id for the chroot's libc")

	t.Run("no_symfs", func(t *testing.T) {
		text, _, _, _, warnings := runAll(t, data, Options{BuildIDDir: filepath.Join(home, ".debug")})
		mine := warningsAbout(warnings, libc+":")
		require.Len(t, mine, 1, "one warning about %s: %q", libc, warnings)
		require.Contains(t, mine[0], "not the mapped file")
		require.Contains(t, mine[0], "--symfs")
		require.Contains(t, mine[0], hostID)
		// The chroot process's libc frames are unnamed; the chroot
		// command's own (the host libc, before its exec) are named.
		require.Contains(t, string(text), "[unknown] ("+libc+")")
	})

	t.Run("symfs", func(t *testing.T) {
		opts := Options{SymFS: root, BuildIDDir: filepath.Join(home, ".debug"), ObjectSources: true}
		r, names := openRecording(t, data)
		var buf bytes.Buffer
		tw := NewTextWriter(&buf, EventWidth(names), false)
		var warnings []string
		opts.Warn = func(m string) { warnings = append(warnings, m) }
		sum, err := Run(r, opts, tw.Write)
		require.NoError(t, err)
		tw.Flush()
		mine := warningsAbout(warnings, libc+":")
		require.Len(t, mine, 1, "one warning about %s: %q", libc, warnings)
		require.Contains(t, mine[0], hostID)
		require.Contains(t, mine[0], rootID)
		used := false
		for _, o := range sum.Objects {
			if o.Path == libc && hex.EncodeToString(o.BuildID) == rootID {
				used = true
			}
		}
		require.True(t, used, "the chroot's libc (build-id %s) was used: %+v", rootID, sum.Objects)
		n := testprog.ChainCount(buf.String(), "leaf", "mid", "top", "main")
		require.Greater(t, n, 150, "close samples unwound through leaf, mid, top, main in /prog:\n%.3000s", buf.String())
	})
}
