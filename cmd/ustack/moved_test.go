package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

// TestRecordChrootMoved: ustack record of a program run in a chroot whose
// libc is another build than the host's at the same path; then the root is
// deleted and the recording and its .ustack archive moved to a new
// directory, reported with no build-id cache. The archive must give the
// chroot's objects (libc with the build-id readelf -n gives for the
// chroot's copy, not the host's), and every close sample the chain leaf,
// mid, top, main of /prog.
func TestRecordChrootMoved(t *testing.T) {
	requirePerfRecord(t)
	if _, err := exec.LookPath("chroot"); err != nil {
		t.Skip("no chroot command")
	}
	dir := t.TempDir()
	// burnSrc lives long enough (a second) for the recorder to open its
	// files through /proc/PID/root before it exits; a process gone
	// sooner leaves them unarchived, each said so by ustack record.
	bin := testprog.Build(t, dir, "prog.c", burnSrc, "-O2", "-g")
	root, libc := testprog.ChrootRoot(t, bin)
	rootID, hostID := testprog.BuildID(t, filepath.Join(root, libc)), testprog.BuildID(t, libc)
	data := filepath.Join(dir, "rec.data")
	rc, _, errs := run3([]string{"record", "-e", "syscalls:sys_enter_close", "-o", data, "--", "chroot", root, "/prog"})
	if rc != 0 {
		t.Skipf("ustack record cannot record here (status %d): %s", rc, errs)
	}
	require.NotContains(t, errs, "cannot archive", "the process's files were all archived")
	require.NoError(t, os.RemoveAll(root))
	moved := t.TempDir()
	for _, f := range []string{"rec.data", "rec.data.ustack"} {
		require.NoError(t, os.Rename(filepath.Join(dir, f), filepath.Join(moved, f)))
	}
	empty := t.TempDir()
	args := []string{"report", "-i", filepath.Join(moved, "rec.data"), "--buildid-dir", empty, "--kallsyms", "-"}
	rc, out, errs := run3(args)
	require.Equal(t, exitOK, rc, errs)
	assert.Equal(t, 20, chainCount(out), "close samples unwound through leaf, mid, top, main of /prog:\n%s\n%s", head(out), errs)
	assert.NotContains(t, errs, "/prog: not found")

	rc, js, errs := run3(append(args, "--format", "json", "--verbose"))
	require.Equal(t, exitOK, rc, errs)
	_, sum := jsonSamples(t, js)
	require.NotNil(t, sum, "no summary record with --verbose")
	found := map[string]string{}
	for _, o := range sum["summary"].(map[string]any)["objects"].([]any) {
		m := o.(map[string]any)
		if m["path"] == libc {
			found[m["build_id"].(string)] = m["object"].(string)
		}
	}
	assert.Equal(t, "archive", found[rootID], "the chroot's libc %s (build-id %s) came from the archive: %v", libc, rootID, found)
	t.Logf("libc objects used: %v (the host's is %s, used by chroot(8) itself before its exec)", found, hostID)
}
