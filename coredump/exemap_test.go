package coredump_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/coredump"
	"github.com/ustack/ustack/internal/fixture"
)

// auxvNote is an NT_AUXV note of the pairs (type, value), AT_NULL added.
func auxvNote(pairs ...uint64) []byte {
	var desc []byte
	for _, v := range append(pairs, 0, 0) {
		desc = binary.LittleEndian.AppendUint64(desc, v)
	}
	return note("CORE", 6, desc)
}

// TestExecutableWithoutFileNote: a core that lists no mapped files (as
// qemu-user writes them) has the executable given in Options.Executable
// mapped where AT_ENTRY puts its entry point: a PIE (a64_chain_O2_fp, as
// readelf gives its segments) at the bias AT_ENTRY - e_entry, its code read
// from the file. An executable the core's auxiliary vector or machine does
// not agree with is refused, naming both; without one, no mapping is made.
func TestExecutableWithoutFileNote(t *testing.T) {
	exe := filepath.Join(fixture.Dir(), "objects", "aarch64", "a64_chain_O2_fp")
	code, err := os.ReadFile(exe)
	require.NoError(t, err)
	f, err := elf.NewFile(bytes.NewReader(code))
	require.NoError(t, err)
	require.Equal(t, elf.ET_DYN, f.Type, "the fixture is a PIE")
	// readelf -hlW: entry 0x680, 9 program headers, PT_PHDR at 0x40;
	// LOAD 0x000000 vaddr 0x0 filesz 0x9d8 R E; LOAD 0x00fdc8 vaddr
	// 0x1fdc8 filesz 0x270 memsz 0x278 RW.
	const bias = 0xaaaaaaab0000
	stack := seg{0xfffff000, 0x1000, 6, bytes.Repeat([]byte{7}, 0x1000)}
	text := seg{bias, 0x1000, 5, nil} // r-x, not dumped
	core := func(machine uint16, entry, phdr, phnum uint64) []byte {
		notes := append(note("CORE", 1, arm64PRStatus(9, 6, [34]uint64{})), auxvNote(3, phdr, 5, phnum, 9, entry)...)
		return machineCore(machine, notes, nil, []seg{text, stack})
	}
	good := core(183, bias+0x680, bias+0x40, 9)

	c, err := coredump.Parse(good, "qemu.core", &coredump.Options{Executable: exe})
	require.NoError(t, err)
	assert.True(t, c.NoFileNote)
	assert.Equal(t, []coredump.Mapping{
		{Start: bias, End: bias + 0x1000, FileOffset: 0, Path: exe},
		{Start: bias + 0x1f000, End: bias + 0x21000, FileOffset: 0xf000, Path: exe},
	}, c.Mappings)
	buf := make([]byte, 16)
	_, err = c.Memory().ReadAt(buf, bias+0x680)
	require.NoError(t, err, "the entry point's code, from the file")
	assert.Equal(t, code[0x680:0x690], buf)
	assert.Empty(t, c.Warnings)

	c, err = coredump.Parse(good, "qemu.core", nil)
	require.NoError(t, err, "no executable given")
	assert.True(t, c.NoFileNote)
	assert.Empty(t, c.Mappings)

	for _, bad := range []struct {
		name string
		core []byte
		want string
	}{
		{"entry off a page", core(183, bias+0x684, bias+0x44, 9), "not at a page offset"},
		{"phnum", core(183, bias+0x680, bias+0x40, 8), "9 program headers, but qemu.core's AT_PHNUM is 8"},
		{"phdr", core(183, bias+0x10680, bias+0x40, 9), "program headers would be at"},
		{"machine", core(62, bias+0x680, bias+0x40, 9), "EM_AARCH64, but qemu.core is an x86_64 core"},
		{"entry not in code", core(183, bias+0x100680, bias+0x100040, 9), "no executable segment holds AT_ENTRY"},
	} {
		_, err := coredump.Parse(bad.core, "qemu.core", &coredump.Options{Executable: exe})
		if assert.Error(t, err, bad.name) {
			assert.Contains(t, err.Error(), bad.want, bad.name)
			assert.Contains(t, err.Error(), exe, bad.name)
		}
	}
}
