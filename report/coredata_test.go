package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

// mapDataSrc maps the data file $DATA read-only (as glibc maps locale
// archives and gconv's module cache) and crashes with it mapped.
const mapDataSrc = `#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
volatile const char *table;
__attribute__((noipa)) void boom(char *p) { strcpy(p, (const char *)table); }
__attribute__((noipa)) void load(const char *path) {
	int fd = open(path, O_RDONLY);
	if (fd < 0) abort();
	table = mmap(0, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
	if (table == MAP_FAILED) abort();
	boom(NULL);
}
int main(int c, char **v) { load(getenv("DATA")); return 0; }
`

// TestCoreDataFileMappingIsNotCode: gdb's core (like gcore's) has no
// segment for a file mapped read-only and not written, so the core does
// not say whether the mapping is code. A file that is not ELF is data: the
// report must not list it among the objects without unwind or symbol
// information, and the stack is gdb's.
func TestCoreDataFileMappingIsNotCode(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "table.dat")
	require.NoError(t, os.WriteFile(data, bytes.Repeat([]byte("a data file, not code\n"), 400), 0o644))
	bin := testprog.Build(t, dir, "mapdata.c", mapDataSrc, "-O1", "-g")
	gdbFrames, core := crashUnderGDB(t, dir, bin, "DATA="+data)

	opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}}
	c, err := OpenCore(core, opts)
	require.NoError(t, err)
	mapped := false
	for _, m := range c.Mappings {
		mapped = mapped || m.Path == data
	}
	c.Close()
	require.True(t, mapped, "the core's NT_FILE lists %s", data)

	_, sum := coreReport(t, core, "text", opts)
	assert.NotContains(t, sum.Missing, data, "a data file is not an object without unwind information")
	for p, why := range sum.Missing {
		assert.NotContains(t, why, "not a valid ELF file", "%s is not ELF: data, not a missing object", p)
	}
	got := reportFrames(t, core, opts)
	t.Logf("gdb:    %s", describeGDB(gdbFrames))
	t.Logf("ustack: %s", describeFrames(got))
	require.Len(t, got, len(gdbFrames), "frames against gdb's")
	for i, g := range gdbFrames {
		assert.Equal(t, g.name, plainName(got[i].Symbol), "frame %d", i)
	}

	var info strings.Builder
	c, err = OpenCore(core, opts)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, WriteCoreInfo(&info, c, opts))
	assert.Contains(t, info.String(), data+" at ", "--core-info lists the mapped file")
	assert.Contains(t, info.String(), "not used (a data file, not an ELF object)")
}
