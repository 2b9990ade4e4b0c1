package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
)

// A program whose samples stand in glibc with inline frames: qsort calls
// the comparator from msort_with_tmp, which glibc 2.36's debug info
// (libc6-dbg) shows inlined into itself and into __GI___qsort_r.
const qsortSrc = `
#include <stdlib.h>
#include <unistd.h>
static int cmp(const void *a, const void *b) { close(-1); return *(const int *)a - *(const int *)b; }
int main(void) { int v[8] = {5, 3, 7, 1, 8, 2, 6, 4}; qsort(v, 8, sizeof v[0], cmp); return v[0] - 1; }
`

// TestReportSectionCache checks that the report is the same, byte for
// byte, in text and JSON, with the section cache off (--no-cache and
// USTACK_NO_CACHE), cold, warm, after its entries were truncated,
// bit-flipped or replaced by garbage, and when its directory cannot be
// made (a warning, not an error); and that the cache holds libc's
// sections after a run.
func TestReportSectionCache(t *testing.T) {
	requirePerfRecord(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "q.c")
	require.NoError(t, os.WriteFile(src, []byte(qsortSrc), 0o644))
	bin := filepath.Join(dir, "q")
	if out, err := exec.Command("gcc", "-O2", "-g", "-o", bin, src).CombinedOutput(); err != nil {
		t.Skipf("gcc: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "q.data")
	if out, err := exec.Command("perf", "record", "-q", "-e", "syscalls:sys_enter_close", "--call-graph", "dwarf", "-o", data, "--", bin).CombinedOutput(); err != nil {
		t.Skipf("perf record cannot record here: %v\n%s", err, out)
	}

	report := func(args ...string) (text, json, stderr string) {
		t.Helper()
		rc, text, errs := runReport(append([]string{"-i", data}, args...)...)
		require.Equal(t, exitOK, rc, errs)
		rc, json, errs2 := runReport(append([]string{"-i", data, "--format", "json"}, args...)...)
		require.Equal(t, exitOK, rc, errs2)
		return text, json, errs + errs2
	}
	cacheHome := filepath.Join(dir, "cache")
	t.Setenv("XDG_CACHE_HOME", cacheHome)
	sections := filepath.Join(cacheHome, "ustack", "sections")

	wantText, wantJSON, _ := report("--no-cache")
	_, err := os.Stat(sections)
	require.ErrorIs(t, err, fs.ErrNotExist, "--no-cache made the cache directory")
	if !strings.Contains(wantText, "(inlined)\n\t") || !strings.Contains(wantText, "__GI___qsort_r") {
		t.Skipf("no inline frames in glibc's qsort: is libc6-dbg installed?\n%s", wantText)
	}
	// glibc's qsort_r calls msort_with_tmp, inlined, which calls the
	// comparator (glibc 2.36 stdlib/msort.c).
	require.Regexp(t, `msort_with_tmp\+0x[0-9a-f]+ \(inlined\)\n\t +[0-9a-f]+ __GI___qsort_r\+`, wantText)

	t.Setenv("USTACK_NO_CACHE", "1")
	text, json, _ := report()
	require.Equal(t, wantText, text)
	require.Equal(t, wantJSON, json)
	_, err = os.Stat(sections)
	require.ErrorIs(t, err, fs.ErrNotExist, "USTACK_NO_CACHE=1 made the cache directory")
	t.Setenv("USTACK_NO_CACHE", "")

	// Cold, then warm.
	text, json, errs := report()
	require.Equal(t, wantText, text, "cold cache")
	require.Equal(t, wantJSON, json, "cold cache")
	require.NotContains(t, errs, "warning")
	entries := testprog.Files(sections)
	require.NotEmpty(t, entries, "no section cached")
	sizes := map[string]int64{}
	for _, e := range entries {
		st, err := os.Stat(e)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), e)
		sizes[e] = st.Size()
	}
	text, json, _ = report()
	require.Equal(t, wantText, text, "warm cache")
	require.Equal(t, wantJSON, json, "warm cache")

	// Damaged entries are rebuilt, never trusted.
	damage := map[string]func(path string){
		"truncated": func(p string) { require.NoError(t, os.Truncate(p, sizes[p]/2)) },
		"bit-flipped": func(p string) {
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			b[len(b)/2] ^= 0x40
			require.NoError(t, os.WriteFile(p, b, 0o600))
		},
		"garbage": func(p string) {
			require.NoError(t, os.WriteFile(p, []byte(strings.Repeat("not a section ", int(sizes[p]/14+1)))[:sizes[p]], 0o600))
		},
	}
	for _, how := range []string{"truncated", "bit-flipped", "garbage"} {
		for _, e := range entries {
			damage[how](e)
		}
		text, json, _ = report()
		require.Equal(t, wantText, text, how)
		require.Equal(t, wantJSON, json, how)
		for _, e := range entries {
			b, err := os.ReadFile(e)
			require.NoError(t, err, "%s entry not rebuilt", how)
			require.Equal(t, sizes[e], int64(len(b)), "%s entry %s not rebuilt", how, e)
			require.Equal(t, "USTKSEC2", string(b[:8]), "%s entry %s not rebuilt", how, e)
		}
	}

	// A cache directory that cannot be made costs a warning naming it.
	blocker := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o600))
	t.Setenv("XDG_CACHE_HOME", blocker)
	text, json, errs = report()
	require.Equal(t, wantText, text)
	require.Equal(t, wantJSON, json)
	require.Contains(t, errs, "warning: section cache: mkdir "+blocker)
	_, _, errs = report("--no-cache")
	require.NotContains(t, errs, "section cache")
}
