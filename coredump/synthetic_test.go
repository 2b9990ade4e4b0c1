package coredump_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/coredump"
	"github.com/ustack/ustack/unwinder"
)

// note encodes one ELF note.
func note(name string, typ uint32, desc []byte) []byte {
	le := binary.LittleEndian
	b := le.AppendUint32(nil, uint32(len(name)+1))
	b = le.AppendUint32(b, uint32(len(desc)))
	b = le.AppendUint32(b, typ)
	b = append(b, name...)
	b = append(b, 0)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	b = append(b, desc...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// syntheticCore builds an ET_CORE for machine with one PT_NOTE holding notes
// and one PT_LOAD of data at vaddr.
func syntheticCore(machine uint16, notes []byte, vaddr uint64, data []byte) []byte {
	le := binary.LittleEndian
	b := make([]byte, 64+2*56)
	copy(b, "\x7fELF\x02\x01\x01")
	le.PutUint16(b[16:], 4)
	le.PutUint16(b[18:], machine)
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[32:], 64)
	le.PutUint16(b[52:], 64)
	le.PutUint16(b[54:], 56)
	le.PutUint16(b[56:], 2)
	noteOff := uint64(len(b))
	b = append(b, notes...)
	dataOff := uint64(len(b))
	b = append(b, data...)
	ph := b[64:]
	le.PutUint32(ph[0:], 4)
	le.PutUint64(ph[8:], noteOff)
	le.PutUint64(ph[32:], uint64(len(notes)))
	ph = b[64+56:]
	le.PutUint32(ph[0:], 1)
	le.PutUint32(ph[4:], 6) // RW
	le.PutUint64(ph[8:], dataOff)
	le.PutUint64(ph[16:], vaddr)
	le.PutUint64(ph[32:], uint64(len(data)))
	le.PutUint64(ph[40:], uint64(len(data)))
	return b
}

// arm64PRStatus is a struct elf_prstatus for aarch64 with the given tid,
// signal and registers x0..x30, sp, pc, pstate.
func arm64PRStatus(tid int32, sig int16, regs [34]uint64) []byte {
	le := binary.LittleEndian
	b := make([]byte, 392)
	le.PutUint32(b[0:], uint32(sig))
	le.PutUint16(b[12:], uint16(sig))
	le.PutUint32(b[32:], uint32(tid))
	for i, r := range regs {
		le.PutUint64(b[112+8*i:], r)
	}
	return b
}

// TestARM64ThreadNotes: the notes qemu's cores lack (NT_ARM_PAC_MASK,
// NT_ARM_TLS) are read for the thread whose NT_PRSTATUS they follow; an
// unsignalled thread listed first is moved behind the signalled one.
func TestARM64ThreadNotes(t *testing.T) {
	var regs [34]uint64
	for i := range regs {
		regs[i] = 0x1000 + uint64(i)
	}
	le := binary.LittleEndian
	pac := le.AppendUint64(le.AppendUint64(nil, 0x007f000000000000), 0x007f000000000000)
	var notes []byte
	notes = append(notes, note("CORE", 1, arm64PRStatus(101, 0, regs))...)
	notes = append(notes, note("LINUX", 0x401, le.AppendUint64(nil, 0xdead0000))...)
	regs[32] = 0x400123
	notes = append(notes, note("CORE", 1, arm64PRStatus(102, 11, regs))...)
	notes = append(notes, note("LINUX", 0x406, pac)...)
	core := syntheticCore(183, notes, 0x1000, make([]byte, 64))

	c, err := coredump.Parse(core, "synthetic", nil)
	require.NoError(t, err)
	require.Len(t, c.Threads, 2)
	assert.Equal(t, 102, c.Threads[0].TID, "the signalled thread first")
	assert.Equal(t, 101, c.Threads[1].TID)
	pc, _ := c.Threads[0].Regs.Get(32)
	assert.Equal(t, uint64(0x400123), pc)
	x29, _ := c.Threads[0].Regs.Get(29)
	assert.Equal(t, uint64(0x1000+29), x29)
	assert.Equal(t, uint64(0x1000+33), c.Threads[0].PState)
	assert.Equal(t, coredump.PACMask{Data: 0x007f000000000000, Insn: 0x007f000000000000, Known: true}, c.Threads[0].PAC)
	assert.False(t, c.Threads[1].PAC.Known)
	assert.Equal(t, uint64(0xdead0000), c.Threads[1].TLS)
	require.NotNil(t, c.Signal)
	assert.Equal(t, "SIGSEGV", c.Signal.Name())
	assert.True(t, c.Signal.FromPRStatus)
	assert.False(t, c.Process.Known)
	assert.Empty(t, c.Warnings)
}

// TestNoteDamage: a short NT_PRSTATUS is skipped with a warning naming its
// offset, the others are kept.
func TestNoteDamage(t *testing.T) {
	var regs [34]uint64
	var notes []byte
	notes = append(notes, note("CORE", 1, arm64PRStatus(7, 6, regs))...)
	bad := len(notes)
	notes = append(notes, note("CORE", 1, make([]byte, 100))...)
	notes = append(notes, note("CORE", 1, arm64PRStatus(8, 6, regs))...)
	c, err := coredump.Parse(syntheticCore(183, notes, 0, nil), "damaged", nil)
	require.NoError(t, err)
	require.Len(t, c.Threads, 2)
	require.Len(t, c.Warnings, 1)
	var fe *coredump.FormatError
	require.ErrorAs(t, c.Warnings[0], &fe)
	assert.Equal(t, "damaged", fe.File)
	assert.Equal(t, int64(64+2*56+bad+20), fe.Offset, "offset of the short descriptor")
	assert.Contains(t, fe.Error(), "NT_PRSTATUS has 100 bytes")
}

// TestExtendedProgramHeaderCount: with e_phnum PN_XNUM (0xffff), the count
// is section header 0's sh_info, as in cores of processes with more than
// 65534 mappings.
func TestExtendedProgramHeaderCount(t *testing.T) {
	var regs [34]uint64
	regs[31] = 0x1008
	core := syntheticCore(183, note("CORE", 1, arm64PRStatus(5, 11, regs)), 0x1000, []byte("0123456789abcdef"))
	le := binary.LittleEndian
	le.PutUint16(core[56:], 0xffff)
	shoff := len(core)
	sh := make([]byte, 64)
	le.PutUint32(sh[44:], 2) // sh_info: the real count
	core = append(core, sh...)
	le.PutUint64(core[40:], uint64(shoff))
	le.PutUint16(core[58:], 64)
	le.PutUint16(core[60:], 1)

	c, err := coredump.Parse(core, "xnum", nil)
	require.NoError(t, err)
	require.Len(t, c.Threads, 1)
	v, st := c.Memory().ReadUint64(0x1008)
	ok := st == unwinder.MemOK
	require.True(t, ok)
	assert.Equal(t, le.Uint64([]byte("89abcdef")), v)

	le.PutUint64(core[40:], uint64(len(core))) // section header beyond the file
	_, err = coredump.Parse(core, "xnum", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "PN_XNUM")
}

// segCore builds an x86_64 core with one thread, an NT_FILE note and the
// given PT_LOADs (vaddr, memsz, flags, dumped bytes).
type seg struct {
	vaddr, memsz uint64
	flags        uint32
	data         []byte
}

func segCore(files []coredump.Mapping, segs []seg) []byte {
	le := binary.LittleEndian
	prstatus := make([]byte, 336)
	le.PutUint32(prstatus[32:], 9)
	return machineCore(62, note("CORE", 1, prstatus), files, segs)
}

// machineCore builds an ET_CORE for machine with notes, an NT_FILE note
// listing files unless files is nil, and a PT_LOAD for each of segs.
func machineCore(machine uint16, notes []byte, files []coredump.Mapping, segs []seg) []byte {
	le := binary.LittleEndian
	if files != nil {
		desc := le.AppendUint64(nil, uint64(len(files)))
		desc = le.AppendUint64(desc, 4096)
		for _, f := range files {
			desc = le.AppendUint64(le.AppendUint64(le.AppendUint64(desc, f.Start), f.End), f.FileOffset/4096)
		}
		for _, f := range files {
			desc = append(append(desc, f.Path...), 0)
		}
		notes = append(notes, note("CORE", 0x46494c45, desc)...)
	}
	n := 1 + len(segs)
	b := make([]byte, 64+56*n)
	copy(b, "\x7fELF\x02\x01\x01")
	le.PutUint16(b[16:], 4)
	le.PutUint16(b[18:], machine)
	le.PutUint64(b[32:], 64)
	le.PutUint16(b[54:], 56)
	le.PutUint16(b[56:], uint16(n))
	ph := b[64:]
	le.PutUint32(ph[0:], 4)
	le.PutUint64(ph[8:], uint64(len(b)))
	le.PutUint64(ph[32:], uint64(len(notes)))
	b = append(b, notes...)
	for i, s := range segs {
		ph := b[64+56*(i+1):]
		le.PutUint32(ph[0:], 1)
		le.PutUint32(ph[4:], s.flags)
		le.PutUint64(ph[8:], uint64(len(b)))
		le.PutUint64(ph[16:], s.vaddr)
		le.PutUint64(ph[32:], uint64(len(s.data)))
		le.PutUint64(ph[40:], s.memsz)
		b = append(b, s.data...)
	}
	return b
}

// TestReadAtAcrossSegments: a read spans adjacent segments, stops at the
// first byte it cannot read and says why and where; bytes the core did not
// dump come from the mapped file at the mapping's file offset.
func TestReadAtAcrossSegments(t *testing.T) {
	text := bytes.Repeat([]byte{0xAA}, 0x3000)
	copy(text[0x2000:], "FILEBYTES")
	files := []coredump.Mapping{{Start: 0x10000, End: 0x12000, FileOffset: 0x1000, Path: "/lib/libx.so"}}
	core := segCore(files, []seg{
		{0x10000, 0x2000, 5, []byte("HEAD")}, // r-x, 4 bytes dumped, rest in the file
		{0x12000, 0x1000, 6, bytes.Repeat([]byte{1}, 0x1000)},
		{0x13000, 0x1000, 6, nil}, // rw-, not dumped: never from a file
		{0x20000, 0x1000, 0, nil}, // ---: guard page
	})
	opened := 0
	c, err := coredump.Parse(core, "seg", &coredump.Options{OpenMapped: func(p string) (coredump.ReaderAt, error) {
		opened++
		require.Equal(t, "/lib/libx.so", p)
		return bytes.NewReader(text), nil
	}})
	require.NoError(t, err)
	mem := c.Memory()

	buf := make([]byte, 13)
	n, err := mem.ReadAt(buf, 0x10000)
	require.NoError(t, err)
	assert.Equal(t, "HEAD", string(buf[:4]))
	assert.Equal(t, bytes.Repeat([]byte{0xAA}, 9), buf[4:n], "from the file at offset 0x1004")
	n, err = mem.ReadAt(buf[:9], 0x11000)
	require.NoError(t, err)
	assert.Equal(t, "FILEBYTES", string(buf[:n]), "0x11000 is file offset 0x1000+0x1000")

	buf = make([]byte, 16)
	n, err = mem.ReadAt(buf, 0x12000-8) // file-backed into dumped
	require.NoError(t, err)
	assert.Equal(t, 16, n)
	assert.Equal(t, byte(1), buf[8])

	n, err = mem.ReadAt(buf, 0x13000-8) // dumped into writable, not dumped
	assert.Equal(t, 8, n)
	var me *coredump.MemoryError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, uint64(0x13000), me.Addr)
	assert.ErrorIs(t, err, coredump.ErrNotDumped)

	_, err = mem.ReadAt(buf, 0x14000)
	assert.ErrorIs(t, err, coredump.ErrUnmapped)
	_, err = mem.ReadAt(buf, 0x20000)
	assert.ErrorIs(t, err, coredump.ErrNotDumped, "guard page")
	// The unwinder's statuses say the same: unmapped memory is outside
	// the process (bad_memory), undumped memory a truncated capture.
	_, st := mem.ReadUint64(0x14000)
	assert.Equal(t, unwinder.MemOutside, st, "unmapped")
	_, st = mem.ReadUint64(0x13000)
	assert.Equal(t, unwinder.MemTruncated, st, "mapped, not dumped")
	_, st = mem.ReadUint64(0x20000)
	assert.Equal(t, unwinder.MemTruncated, st, "guard page")
	_, st = mem.ReadUint64(0xffff_ffff_ffff_fffc)
	assert.NotEqual(t, unwinder.MemOK, st)
	assert.Equal(t, 1, opened, "the file is opened once")
}
