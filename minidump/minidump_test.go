package minidump_test

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/coredump"
	"github.com/ustack/ustack/internal/coretruth"
	"github.com/ustack/ustack/internal/testfiles"
	"github.com/ustack/ustack/minidump"
)

func fixtures(t testing.TB) []*coretruth.Truth {
	t.Helper()
	d := testfiles.Dir()
	require.NoError(t, testfiles.Unpack(d))
	all, err := coretruth.Load(d)
	require.NoError(t, err)
	return all
}

// written returns a minidump of the fixture's core, as Write writes it
// from the core's own memory.
func written(t testing.TB, tr *coretruth.Truth) []byte {
	t.Helper()
	c, err := coredump.Open(filepath.Join(testfiles.Dir(), tr.Core), &coredump.Options{NoMappedFiles: true})
	require.NoError(t, err)
	defer c.Close()
	var b bytes.Buffer
	_, err = minidump.Write(&b, c, minidump.WriteOptions{})
	require.NoError(t, err)
	return b.Bytes()
}

func hex(t testing.TB, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	require.NoError(t, err, "hex %q", s)
	return v
}

// TestThreadsMatchGDB writes a minidump of each core fixture and reads it
// back: the threads (gdb's LWPs, the one gdb selected first), every
// general register gdb printed for each, the signal, and the modules'
// build-ids as eu-unstrip read them from the core.
func TestThreadsMatchGDB(t *testing.T) {
	for _, tr := range fixtures(t) {
		t.Run(tr.Arch+"/"+tr.Name, func(t *testing.T) {
			d, err := minidump.Parse(written(t, tr), tr.Name+".dmp")
			require.NoError(t, err)
			assert.Empty(t, d.Warnings)
			require.Len(t, d.Threads, len(tr.GDB.Threads))
			a := arch.AMD64
			if tr.Arch == "aarch64" {
				a = arch.ARM64
			}
			assert.Equal(t, a, d.Arch)
			byTid := map[uint32]*minidump.Thread{}
			for i := range d.Threads {
				byTid[d.Threads[i].ID] = &d.Threads[i]
			}
			for _, g := range tr.GDB.Threads {
				th := byTid[uint32(g.LWP)]
				require.NotNil(t, th, "LWP %d", g.LWP)
				for name, v := range g.Regs {
					n := regNumber(a, name)
					if n < 0 {
						continue
					}
					got, ok := th.Regs.Get(n)
					assert.True(t, ok)
					assert.Equal(t, hex(t, v), got, "LWP %d %s", g.LWP, name)
				}
				if len(th.Stack.Data) == 0 {
					t.Errorf("LWP %d: no stack memory", g.LWP)
				}
			}
			if si := tr.GDB.Siginfo; si != nil {
				require.NotNil(t, d.Exception)
				assert.Equal(t, uint32(tr.GDB.SelectedLWP), d.Exception.ThreadID)
				assert.Equal(t, uint32(si.Signo), d.Exception.Code)
				assert.Equal(t, int32(si.Code), int32(d.Exception.Flags))
			}
			ids := map[uint64]string{}
			for _, m := range d.Modules {
				assert.Equal(t, "BpEL", m.CodeView, m.Name)
				ids[m.Base] = string(hexBytes(m.BuildID))
			}
			n := 0
			for _, u := range tr.EuUnstrip {
				if len(u.BuildID) < 16 || u.BuildID[0] == '-' {
					continue
				}
				if got, ok := ids[hex(t, u.Start)]; ok {
					assert.Equal(t, strings.TrimSuffix(u.BuildID, "@"+u.Start), got, u.Name)
					n++
				}
			}
			assert.NotZero(t, n, "no module's build-id was compared with eu-unstrip's")
		})
	}
}

func hexBytes(b []byte) []byte {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return out
}

// regNumber maps gdb's register names to DWARF numbers; -1 for others.
func regNumber(a arch.Arch, name string) int {
	if a == arch.ARM64 {
		switch name {
		case "sp":
			return arch.ARM64_SP
		case "pc":
			return arch.ARM64_PC
		}
		if n, err := strconv.Atoi(strings.TrimPrefix(name, "x")); err == nil && strings.HasPrefix(name, "x") && n <= 30 {
			return n
		}
		return -1
	}
	for n := 0; n <= arch.AMD64_RIP; n++ {
		if a.RegName(n) == name {
			return n
		}
	}
	return -1
}

// TestPDB70BuildID reads a module whose CodeView record is PDB70: the
// GUID's 16 bytes, as they lie in the file, are the build-id's first 16
// (Breakpad copies them so; lldb's GetModuleUUID reads them so), and the
// debug identifier shows the GUID's first three fields byte-swapped, as
// Breakpad's dump_syms prints it.
func TestPDB70BuildID(t *testing.T) {
	buildID := []byte{0x5f, 0x6e, 0x1a, 0x2b, 0x3c, 0x4d, 0x5e, 0x6f, 0x70, 0x81, 0x92, 0xa3, 0xb4, 0xc5, 0xd6, 0xe7, 0xf8, 0x09, 0x1a, 0x2b}
	b := minimal(t, func(mod []byte, cv func([]byte) uint32) {
		rec := binary.LittleEndian.AppendUint32(nil, 0x53445352)
		rec = append(rec, buildID[:16]...)
		rec = binary.LittleEndian.AppendUint32(rec, 0)
		rec = append(rec, "libx.so\x00"...)
		binary.LittleEndian.PutUint32(mod[76:], uint32(len(rec)))
		binary.LittleEndian.PutUint32(mod[80:], cv(rec))
	})
	d, err := minidump.Parse(b, "pdb70.dmp")
	require.NoError(t, err)
	require.Len(t, d.Modules, 1)
	m := d.Modules[0]
	assert.Equal(t, "RSDS", m.CodeView)
	assert.Equal(t, buildID[:16], m.BuildID)
	assert.True(t, m.BuildIDPrefix)
	assert.Equal(t, "2B1A6E5F4D3C6F5E708192A3B4C5D6E70", m.DebugID())
	assert.Equal(t, "/usr/lib/libx.so", m.Name)
}

// minimal builds a minidump of one x86_64 thread and one module, whose
// 108-byte entry edit fills; cv appends a record and returns its offset.
func minimal(t *testing.T, edit func(mod []byte, cv func([]byte) uint32)) []byte {
	t.Helper()
	le := binary.LittleEndian
	b := make([]byte, 32)
	var dir [][3]uint32
	appendAt := func(data []byte) uint32 {
		for len(b)%8 != 0 {
			b = append(b, 0)
		}
		off := uint32(len(b))
		b = append(b, data...)
		return off
	}
	name := le.AppendUint32(nil, uint32(2*len("/usr/lib/libx.so")))
	for _, c := range "/usr/lib/libx.so" {
		name = le.AppendUint16(name, uint16(c))
	}
	nameOff := appendAt(append(name, 0, 0))
	ctx := make([]byte, 1232)
	le.PutUint32(ctx[0x30:], 0x10000b)
	le.PutUint64(ctx[0x98:], 0x7ffc0000) // rsp
	le.PutUint64(ctx[0xf8:], 0x401000)   // rip
	ctxOff := appendAt(ctx)
	th := make([]byte, 48)
	le.PutUint32(th, 42)
	le.PutUint32(th[40:], 1232)
	le.PutUint32(th[44:], ctxOff)
	dir = append(dir, [3]uint32{3, 52, appendAt(append(le.AppendUint32(nil, 1), th...))})
	mod := make([]byte, 108)
	le.PutUint64(mod, 0x400000)
	le.PutUint32(mod[8:], 0x2000)
	le.PutUint32(mod[20:], nameOff)
	edit(mod, appendAt)
	dir = append(dir, [3]uint32{4, 112, appendAt(append(le.AppendUint32(nil, 1), mod...))})
	var db []byte
	for _, e := range dir {
		db = le.AppendUint32(db, e[0])
		db = le.AppendUint32(db, e[1])
		db = le.AppendUint32(db, e[2])
	}
	dirOff := appendAt(db)
	copy(b, "MDMP")
	le.PutUint32(b[4:], 0xa793)
	le.PutUint32(b[8:], uint32(len(dir)))
	le.PutUint32(b[12:], dirOff)
	return b
}

// TestWrittenCutShort: a minidump Write wrote, cut short (a full disk, a
// transfer or a writer stopped), keeps what comes first: its metadata
// (every thread's registers, the modules, the maps) before all memory,
// and the threads' stacks, in the threads' order, before the rest of it.
// Cut where the memory begins, every thread's registers and the modules
// are read, with a warning for each range past the end; cut after the
// stacks, every thread's stack is whole too. Before, the stream directory
// came last and any cut lost everything.
func TestWrittenCutShort(t *testing.T) {
	for _, tr := range fixtures(t) {
		t.Run(tr.Arch+"/"+tr.Name, func(t *testing.T) {
			b := written(t, tr)
			full, err := minidump.Parse(b, tr.Name+".dmp")
			require.NoError(t, err)
			require.Empty(t, full.Warnings)
			memStart, stacksEnd := int64(len(b)), int64(0)
			for _, r := range full.Memory {
				memStart = min(memStart, r.Offset)
			}
			for _, th := range full.Threads {
				if len(th.Stack.Data) > 0 {
					stacksEnd = max(stacksEnd, th.Stack.Offset+int64(len(th.Stack.Data)))
				}
			}
			require.Less(t, memStart, int64(len(b)))
			for _, cut := range []int64{memStart, stacksEnd, (stacksEnd + int64(len(b))) / 2} {
				if cut >= int64(len(b)) {
					continue
				}
				d, err := minidump.Parse(b[:cut], tr.Name+".dmp")
				require.NoError(t, err, "cut at %d of %d bytes", cut, len(b))
				assert.NotEmpty(t, d.Warnings, "cut at %d: what is missing is said", cut)
				require.Len(t, d.Threads, len(full.Threads))
				for i := range full.Threads {
					f, g := &full.Threads[i], &d.Threads[i]
					assert.Equal(t, f.ID, g.ID)
					assert.Equal(t, f.Regs, g.Regs, "cut at %d: thread %d's registers", cut, f.ID)
					if cut >= stacksEnd {
						assert.Equal(t, f.Stack.Data, g.Stack.Data, "cut at %d: thread %d's stack", cut, f.ID)
					}
				}
				assert.Equal(t, full.Modules, d.Modules)
				assert.Equal(t, full.Maps, d.Maps)
			}
		})
	}
}
