package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/elfcache"
)

// TestReportDamagedArchive records a program, deletes it, and reports the
// recording with its archive missing, damaged, truncated and replaced by
// garbage: a missing --archive is an error; otherwise each damage is a
// warning naming the archive and an offset, and the report goes on with
// what survived (the program's own object, intact, still gives gdb's
// chain leaf, mid, top, main).
func TestReportDamagedArchive(t *testing.T) {
	if testing.Short() {
		t.Skip("records with perf_event_open")
	}
	bin, data := recordClose(t, "-O2", "-g")
	dir := filepath.Dir(data)
	os.Remove(bin)
	good, err := os.ReadFile(data + ".ustack")
	require.NoError(t, err)
	empty := t.TempDir()
	report := func(archive string) (int, string, string) {
		var out, errb bytes.Buffer
		rc := run([]string{"report", "-i", data, "--archive", archive, "--symfs", empty, "--debug-dir", empty,
			"--buildid-dir", empty}, &out, &errb)
		return rc, out.String(), errb.String()
	}

	rc, out, errs := report(filepath.Join(dir, "nonexistent.ustack"))
	assert.Equal(t, exitError, rc)
	assert.Contains(t, errs, "--archive "+filepath.Join(dir, "nonexistent.ustack")+": no such file")
	assert.Empty(t, out)

	// Damage: a flipped byte in the middle of kallsyms' compressed data, and
	// the zeroed header of the dynamic loader's member.
	damaged := bytes.Clone(good)
	k := bytes.Index(damaged, []byte("kallsyms.gz\x00"))
	require.Positive(t, k, "no kallsyms member")
	damaged[k+512+4000] ^= 0x10
	ldso := ""
	if o, err := elfcache.Open("/lib64/ld-linux-x86-64.so.2", elfcache.Options{NoDebugFile: true}); err == nil {
		ldso = fmt.Sprintf("objects/%x.gz", o.BuildID())
		o.Close()
		if h := bytes.Index(damaged, []byte(ldso+"\x00")); h > 0 {
			clear(damaged[h : h+512])
		} else {
			ldso = ""
		}
	}
	p := filepath.Join(dir, "damaged.ustack")
	require.NoError(t, os.WriteFile(p, damaged, 0o600))
	rc, out, errs = report(p)
	assert.Equal(t, exitOK, rc, errs)
	assert.Regexp(t, regexp.MustCompile(`warning: archive `+regexp.QuoteMeta(p)+`: offset 0x[0-9a-f]+: member kallsyms.gz: kallsyms /proc/kallsyms: gzip: .*; it is not used`), errs)
	if ldso != "" {
		// One line for the damage, naming the member it cost.
		assert.Regexp(t, regexp.MustCompile(`warning: archive `+regexp.QuoteMeta(p)+`: offset 0x[0-9a-f]+: unreadable member header .*; lost `+
			regexp.QuoteMeta(ldso)+` \(object /\S*ld-linux\S*, \d+ bytes\)\n`), errs)
	}
	assert.Equal(t, 2, strings.Count(errs, "warning: archive"), errs)
	assert.Equal(t, 20, chainCount(out), "the report from the damaged archive lost the program's frames:\n%s", head(out))

	// Truncated: the program and libc come first in the archive; cut in
	// the last quarter.
	p = filepath.Join(dir, "cut.ustack")
	require.NoError(t, os.WriteFile(p, good[:len(good)*3/4], 0o600))
	rc, out, errs = report(p)
	assert.Equal(t, exitOK, rc, errs)
	assert.Regexp(t, regexp.MustCompile(`warning: archive `+regexp.QuoteMeta(p)+`: offset 0x[0-9a-f]+: .*truncated`), errs)
	assert.NotEmpty(t, out)

	// Garbage: a warning, and the report goes on without the archive.
	p = filepath.Join(dir, "garbage.ustack")
	require.NoError(t, os.WriteFile(p, bytes.Repeat([]byte("not a tar file "), 1000), 0o600))
	rc, out, errs = report(p)
	assert.Equal(t, exitOK, rc, errs)
	assert.Contains(t, errs, "warning: archive "+p+": not a ustack archive: no intact member header in its 15000 bytes; reporting without it")
	assert.Equal(t, 1, strings.Count(errs, "warning: archive"), errs)
	assert.NotEmpty(t, out)
}
