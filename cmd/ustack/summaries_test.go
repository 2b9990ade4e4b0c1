package main

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOneWarningPerObject: an object of another build is named with its
// reason once, in the warning; the summary's list of missing objects
// counts it ("1 object", not "1 objects") in one short line. The bundled
// hello recording is reported without its archive, with a --symfs whose
// program is another ELF file at the recorded path.
func TestOneWarningPerObject(t *testing.T) {
	hello := filepath.Join("..", "..", "testdata", "recordings", "hello", "perf.data")
	symfs := t.TempDir()
	prog := filepath.Join(symfs, "tmp", "ustack-hello", "hello")
	require.NoError(t, os.MkdirAll(filepath.Dir(prog), 0o755))
	other, err := os.ReadFile(filepath.Join("..", "..", "testdata", "cores", "x86_64", "bin", "crash_O2"))
	if err != nil {
		other, err = os.ReadFile("/bin/true")
	}
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(prog, other, 0o755))

	rc, _, errs := run3([]string{"report", "--archive", "-", "--kallsyms", "-", "--no-debuginfod", "--symfs", symfs, hello})
	require.Equal(t, exitOK, rc, errs)
	t.Logf("stderr:\n%s", errs)
	mismatch := regexp.MustCompile(`(?m)^.*/tmp/ustack-hello/hello: build-id mismatch: .*78e88b6a91018a601072b5a6048008ad261bd2e6.*$`)
	assert.Len(t, mismatch.FindAllString(errs, -1), 1, "the program's build-id mismatch, with both ids, once")
	assert.Contains(t, errs, "  /tmp/ustack-hello/hello: build-id mismatch (warned above)\n")
	// The vdso is the running kernel's, of another build but on the
	// machine that recorded it: its reason once at most.
	assert.LessOrEqual(t, strings.Count(errs, "[vdso]: build-id mismatch: "), 1, "the vdso's mismatch, with both ids")
	n := strings.Count(errs, "\n  ")
	if n == 1 {
		assert.Contains(t, errs, "ustack: 1 object without unwind or symbol information:\n")
	} else {
		assert.Contains(t, errs, fmt.Sprintf("ustack: %d objects without unwind or symbol information:\n", n))
	}
}

// TestTruncatedCoreOneWarning: a core cut short loses the PT_LOAD
// segments past the cut; the report says so in one warning that counts
// them and the bytes missing as debug/elf reads the program headers, not
// one warning per segment.
func TestTruncatedCoreOneWarning(t *testing.T) {
	_, symfs, raw := coreFixture(t, "x86_64/threads")
	const size = 300000
	path := filepath.Join(t.TempDir(), "cut.core")
	require.NoError(t, os.WriteFile(path, raw[:size], 0o600))

	f, err := elf.NewFile(bytes.NewReader(raw))
	require.NoError(t, err)
	segs := 0
	var missing, dumped uint64
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Filesz > 0 && p.Off+p.Filesz > size {
			segs++
			missing += p.Off + p.Filesz - max(p.Off, size)
			dumped += p.Filesz
		}
	}
	require.Greater(t, segs, 1, "the cut should cut several segments")

	code, _, errs := runCore(t, "--symfs", symfs, path)
	assert.Equal(t, exitPartial, code, errs)
	assert.Equal(t, 1, strings.Count(errs, "core truncated"), errs)
	assert.Contains(t, errs, fmt.Sprintf("offset %#x: core truncated: the file ends here, and %d PT_LOAD segments", size, segs))
	assert.Contains(t, errs, fmt.Sprintf("miss %#x of their %#x dumped bytes", missing, dumped))
	assert.Contains(t, errs, "is damaged: 1 problem (above)")
	assert.NotContains(t, errs, "[vdso]: not found", "the vdso's reason is that the core lost it")
}
