package main

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReportKallsymsCache checks that a report's kernel frames are the
// same, byte for byte, in text and JSON, with the cache of the running
// kernel's symbols off (--no-cache), cold, warm and after its entry was
// truncated or bit-flipped; that the entry is private to the user and
// rebuilt when damaged.
func TestReportKallsymsCache(t *testing.T) {
	requirePerfRecord(t)
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err != nil || len(bytes.TrimSpace(b)) == 0 {
		t.Skip("no boot id to key the cache by")
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "dd.data")
	// dd spends its time in read and write: samples with kernel frames.
	if out, err := exec.Command("perf", "record", "-q", "-e", "cpu-clock", "-F", "2000", "-g", "-o", data,
		"--", "dd", "if=/dev/zero", "of=/dev/null", "bs=512", "count=200000").CombinedOutput(); err != nil {
		t.Skipf("perf record cannot record here: %v\n%s", err, out)
	}
	report := func(args ...string) (text, json string) {
		t.Helper()
		var out, errb bytes.Buffer
		rc := run(append([]string{"report", "-archive", "-", "-i", data}, args...), &out, &errb)
		require.Equal(t, exitOK, rc, errb.String())
		text = out.String()
		out.Reset()
		rc = run(append([]string{"report", "-archive", "-", "-i", data, "--format", "json"}, args...), &out, &errb)
		require.Equal(t, exitOK, rc, errb.String())
		require.NotContains(t, errb.String(), "kernel frames")
		return text, out.String()
	}
	cacheHome := filepath.Join(dir, "cache")
	t.Setenv("XDG_CACHE_HOME", cacheHome)
	t.Setenv("USTACK_NO_CACHE", "")
	entries := filepath.Join(cacheHome, "ustack", "kallsyms")

	wantText, wantJSON := report("--no-cache")
	_, err := os.Stat(entries)
	require.ErrorIs(t, err, fs.ErrNotExist, "--no-cache made the cache directory")
	if !strings.Contains(wantText, "([kernel.kallsyms])") {
		t.Skipf("no kernel frames in the recording (kernel.perf_event_paranoid, kptr_restrict?):\n%.2000s", wantText)
	}

	same := func(text, json, how string) {
		t.Helper()
		for _, c := range [][2]string{{wantText, text}, {wantJSON, json}} {
			if c[0] != c[1] {
				w, g := strings.Split(c[0], "\n"), strings.Split(c[1], "\n")
				for i := range min(len(w), len(g)) {
					if w[i] != g[i] {
						j := 0
						for j < min(len(w[i]), len(g[i])) && w[i][j] == g[i][j] {
							j++
						}
						from := max(0, j-100)
						t.Fatalf("%s: line %d differs from --no-cache's at byte %d:\n...%.200s\nwant\n...%.200s", how, i+1, j, g[i][from:], w[i][from:])
					}
				}
				t.Fatalf("%s: %d lines, --no-cache %d", how, len(g), len(w))
			}
		}
	}
	text, json := report()
	same(text, json, "cold cache (text), then warm (JSON)")
	all, err := os.ReadDir(entries)
	require.NoError(t, err)
	// Beside the entry may lie its stamp (".ok-" and its name), when a
	// report loaded it more than filestamp.MinAge after it was written: a
	// busy machine's.
	var files []fs.DirEntry
	for _, f := range all {
		if !strings.HasPrefix(f.Name(), ".ok-") {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		t.Skip("this kernel's symbols interleave with modules': nothing cached")
	}
	require.Len(t, files, 1, "one entry per boot")
	entry := filepath.Join(entries, files[0].Name())
	st, err := os.Stat(entry)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "kernel addresses readable by others")
	good, err := os.ReadFile(entry)
	require.NoError(t, err)

	text, json = report()
	same(text, json, "warm cache")

	for how, damage := range map[string]func(b []byte) []byte{
		"truncated":   func(b []byte) []byte { return b[:len(b)/3] },
		"bit-flipped": func(b []byte) []byte { b[len(b)/2] ^= 0x40; return b },
	} {
		require.NoError(t, os.WriteFile(entry, damage(append([]byte(nil), good...)), 0o600))
		text, json = report()
		same(text, json, how)
		b, err := os.ReadFile(entry)
		require.NoError(t, err)
		require.True(t, bytes.Equal(good, b), "%s entry not rebuilt", how)
	}
}
