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

// TestReportChroot: a process in a chroot whose libc is another build
// (other build-id) than the host's at the same path, recorded from the
// host with perf record. perf reads the build-ids of its list by path as
// the host sees them, so the recording names the host libc's build-id
// (checked against readelf -n) for the chroot's libc. ustack, the
// recording made here, sees from MMAP2's inode that the host's
// file is not the one mapped: without --symfs it uses the host libc, which
// has the recording's build-id, as perf script does, with one warning that
// the build-id may be the host file's rather than the mapped one's and
// that --symfs gives the root; with --symfs ROOT it uses the
// mapped copy, whose build-id readelf gives, with one warning naming both
// build-ids, and the close samples unwind through leaf, mid, top and main.
func TestReportChroot(t *testing.T) {
	requirePerf(t)
	if _, err := exec.LookPath("chroot"); err != nil {
		t.Skip("no chroot command")
	}
	dir := t.TempDir()
	bin := build(t, dir, "chain", chainSrc, "-O2", "-g", "-fomit-frame-pointer")
	root, libc := testprog.ChrootRoot(t, bin)
	hostID, rootID := testprog.BuildID(t, libc), testprog.BuildID(t, filepath.Join(root, libc))
	require.NotEqual(t, hostID, rootID)
	home := t.TempDir()
	// --buildid-all: perf lists the build-id of every object mapped, not
	// only of those a sample's IP fell in. Without it the chroot's libc
	// was listed only when a cpu-clock tick caught the program in libc
	// (its time is mostly in close's system call): the full package's
	// tests on a busy machine once got none, and the check below failed.
	cmd := testprog.PerfCommand(t, "record", "-q", "--buildid-all", "-o", filepath.Join(dir, "chroot.data"), "-e", "syscalls:sys_enter_close",
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
		require.Contains(t, mine[0], "chroot or container")
		require.Contains(t, mine[0], "--symfs")
		require.Contains(t, mine[0], hostID)
		// The host's libc is the recording's build: used, as perf
		// script uses it (/prog is not on the host).
		require.Regexp(t, `close\S*\+0x[0-9a-f]+ \(`+regexp.QuoteMeta(libc)+`\)`, string(text))
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
