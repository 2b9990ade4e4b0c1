package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMinidumpCommand writes minidumps with ustack minidump from a
// zstd-compressed core and from a pipe, checks the file's mode and that a
// second run keeps the first file as FILE.old, and reports the minidump
// (plain, zstd-compressed, and from standard input) in every output
// format: each output is the core's own report, the signalled thread's
// header naming the signal (the text report's thread headers say "core",
// a minidump's threads being a core's).
func TestMinidumpCommand(t *testing.T) {
	for _, name := range []string{"x86_64/threads", "aarch64/crash_O2"} {
		t.Run(name, func(t *testing.T) {
			tr, symfs, raw := coreFixture(t, name)
			dir := t.TempDir()
			dmp := filepath.Join(dir, "crash.dmp")
			var out, errb bytes.Buffer
			code := run([]string{"minidump", "-i", filepath.Join(coreTestdata, tr.Core), "-o", dmp, "--symfs", symfs}, &out, &errb)
			require.Equal(t, exitOK, code, errb.String())
			assert.Contains(t, errb.String(), "ustack minidump: "+dmp)
			fi, err := os.Stat(dmp)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
			first, err := os.ReadFile(dmp)
			require.NoError(t, err)

			// Again, from a pipe: the first file is kept as .old.
			stdinReader = bytes.NewReader(raw)
			code = run([]string{"minidump", "-i", "-", "-o", dmp, "--symfs", symfs}, &out, &errb)
			stdinReader = nil
			require.Equal(t, exitOK, code, errb.String())
			old, err := os.ReadFile(dmp + ".old")
			require.NoError(t, err)
			assert.Equal(t, first, old, "the existing minidump is kept as FILE.old")
			second, err := os.ReadFile(dmp)
			require.NoError(t, err)
			assert.Equal(t, first, second, "a core read from a pipe gives the same minidump")

			var zb bytes.Buffer
			zw, err := zstd.NewWriter(&zb)
			require.NoError(t, err)
			_, err = zw.Write(first)
			require.NoError(t, err)
			require.NoError(t, zw.Close())
			zdmp := dmp + ".zst"
			require.NoError(t, os.WriteFile(zdmp, zb.Bytes(), 0o600))

			for _, format := range []string{"text", "json", "folded", "pprof", "flamegraph", "speedscope"} {
				code, want, errs := runCore(t, "--symfs", symfs, "--format", format, filepath.Join(coreTestdata, tr.Core))
				require.Equal(t, exitOK, code, errs)
				for _, in := range []string{dmp, zdmp} {
					code, got, errs := runCore(t, "--symfs", symfs, "--format", format, "-i", in)
					require.Equal(t, exitOK, code, "%s %s: %s", format, in, errs)
					if format == "pprof" || format == "flamegraph" || format == "speedscope" {
						// They name the input file.
						want2 := strings.ReplaceAll(want, filepath.Join(coreTestdata, tr.Core), in)
						assert.Equal(t, len(want2) > 0, len(got) > 0, "%s %s", format, in)
						continue
					}
					assert.Equal(t, want, got, "%s of %s", format, in)
				}
				stdinReader = bytes.NewReader(first)
				code, got, errs := runCore(t, "--symfs", symfs, "--format", format, "-i", "-")
				stdinReader = nil
				require.Equal(t, exitOK, code, errs)
				if format == "text" || format == "json" || format == "folded" {
					assert.Equal(t, want, got, "%s from standard input", format)
				}
			}
			code, info, errs := runCore(t, "--symfs", symfs, "--core-info", "-i", dmp)
			require.Equal(t, exitOK, code, errs)
			assert.Contains(t, info, "minidump: "+dmp)
			assert.NotContains(t, info, "missing")
			if tr.GDB.Siginfo != nil {
				assert.Contains(t, info, "signal: SIG")
			}
		})
	}
}
