package coredump_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/coredump"
	"github.com/ustack/ustack/unwinder"
)

// TestThreadsMatchGDB: every thread gdb sees, with gdb's registers, and the
// thread gdb selects (the one that took the signal) first.
func TestThreadsMatchGDB(t *testing.T) {
	for _, tr := range fixtures(t) {
		t.Run(tr.Arch+"/"+tr.Name, func(t *testing.T) {
			c := tr.open(t)
			require.Equal(t, tr.Arch, c.Arch.String())
			require.Len(t, c.Threads, len(tr.GDB.Threads))
			assert.Equal(t, tr.GDB.SelectedLWP, c.Threads[0].TID, "signalled thread first")
			byTID := map[int]*coredump.Thread{}
			for i := range c.Threads {
				byTID[c.Threads[i].TID] = &c.Threads[i]
			}
			for _, g := range tr.GDB.Threads {
				th := byTID[g.LWP]
				require.NotNil(t, th, "gdb's thread %d (LWP %d) missing", g.Num, g.LWP)
				for n := 0; n < c.Arch.NumRegs(); n++ {
					name := c.Arch.RegName(n)
					want, ok := g.Regs[name]
					if !ok {
						continue
					}
					got, known := th.Regs.Get(n)
					require.True(t, known, "LWP %d %s unknown", g.LWP, name)
					assert.Equal(t, hex(t, want), got, "LWP %d %s", g.LWP, name)
				}
				if v, ok := g.Regs["eflags"]; ok {
					assert.Equal(t, hex(t, v), th.PState, "LWP %d eflags", g.LWP)
				}
				if v, ok := g.Regs["cpsr"]; ok {
					assert.Equal(t, hex(t, v)&0xffffffff, th.PState&0xffffffff, "LWP %d cpsr", g.LWP)
				}
				if v, ok := g.Regs["fs_base"]; ok {
					assert.Equal(t, hex(t, v), th.TLS, "LWP %d fs_base", g.LWP)
				}
			}
		})
	}
}

// TestNotesMatchReadelf: NT_PRSTATUS, NT_PRPSINFO, NT_SIGINFO and NT_FILE as
// eu-readelf -n decodes them.
func TestNotesMatchReadelf(t *testing.T) {
	for _, tr := range fixtures(t) {
		t.Run(tr.Arch+"/"+tr.Name, func(t *testing.T) {
			c := tr.open(t)
			re := tr.EuReadelf
			require.Len(t, c.Threads, len(re.Threads))
			byTID := map[int]*coredump.Thread{}
			for i := range c.Threads {
				byTID[c.Threads[i].TID] = &c.Threads[i]
			}
			for _, rt := range re.Threads {
				th := byTID[rt.PID]
				require.NotNil(t, th, "thread %d", rt.PID)
				assert.Equal(t, rt.Cursig, th.Signal, "thread %d cursig", rt.PID)
				if rt.Siginfo != nil {
					require.NotNil(t, th.Siginfo, "thread %d has its NT_SIGINFO", rt.PID)
					assert.Equal(t, []int{rt.Siginfo.Signo, rt.Siginfo.Code}, []int{th.Siginfo.Signo, th.Siginfo.Code}, "thread %d", rt.PID)
				}
				pc, _ := th.Regs.Get(c.Arch.PC())
				sp, _ := th.Regs.Get(c.Arch.SP())
				pcName, spName := "rip", "rsp"
				if c.Arch.String() == "aarch64" {
					pcName, spName = "pc", "sp"
				}
				assert.Equal(t, hex(t, rt.Regs[pcName]), pc)
				assert.Equal(t, hex(t, rt.Regs[spName]), sp)
			}
			if re.PRPSInfo.PID != 0 {
				require.True(t, c.Process.Known)
				assert.Equal(t, re.PRPSInfo.PID, c.Process.PID)
				assert.Equal(t, re.PRPSInfo.PPID, c.Process.PPID)
				assert.Equal(t, re.PRPSInfo.Fname, c.Process.Comm)
				assert.Equal(t, re.PRPSInfo.Psargs, c.Process.Args)
				for _, th := range c.Threads {
					assert.Equal(t, re.PRPSInfo.PID, th.PID)
					if th.TID == th.PID {
						assert.Equal(t, re.PRPSInfo.Fname, th.Name, "main thread's name is the comm")
					}
				}
			}
			if re.Siginfo != nil {
				require.NotNil(t, c.Signal)
				assert.Equal(t, re.Siginfo.Signo, c.Signal.Signo)
				assert.Equal(t, re.Siginfo.Code, c.Signal.Code)
				if re.Siginfo.Addr != "" {
					require.True(t, c.Signal.HasAddr)
					assert.Equal(t, hex(t, re.Siginfo.Addr), c.Signal.Addr)
				}
			}
			require.Len(t, c.Mappings, len(re.Files))
			for i, f := range re.Files {
				m := c.Mappings[i]
				assert.Equal(t, []any{hex(t, f.Start), hex(t, f.End), hex(t, f.Offset), f.Path},
					[]any{m.Start, m.End, m.FileOffset, m.Path}, "NT_FILE entry %d", i)
			}
		})
	}
}

// TestSignalMatchesGDB: $_siginfo.
func TestSignalMatchesGDB(t *testing.T) {
	for _, tr := range fixtures(t) {
		t.Run(tr.Arch+"/"+tr.Name, func(t *testing.T) {
			c := tr.open(t)
			g := tr.GDB.Siginfo
			if g == nil {
				// qemu's cores have no NT_SIGINFO (gdb: "Unable to read
				// siginfo"): the signal is pr_cursig, as eu-readelf shows.
				require.NotNil(t, c.Signal)
				assert.True(t, c.Signal.FromPRStatus)
				assert.False(t, c.Signal.HasAddr)
				assert.Equal(t, tr.EuReadelf.Threads[0].Cursig, c.Signal.Signo)
				return
			}
			require.NotNil(t, c.Signal)
			assert.Equal(t, g.Signo, c.Signal.Signo)
			assert.Equal(t, g.Code, c.Signal.Code)
			assert.Equal(t, g.Errno, c.Signal.Errno)
			if g.Addr != "" {
				require.True(t, c.Signal.HasAddr, "fault address")
				assert.Equal(t, hex(t, g.Addr), c.Signal.Addr)
			} else {
				assert.False(t, c.Signal.HasAddr, "%s (si_code %s) has no fault address", c.Signal.Name(), coredump.CodeName(g.Signo, g.Code))
			}
		})
	}
}

// TestMappingsAndAuxvMatchGDB: info proc mappings and info auxv.
func TestMappingsAndAuxvMatchGDB(t *testing.T) {
	for _, tr := range fixtures(t) {
		t.Run(tr.Arch+"/"+tr.Name, func(t *testing.T) {
			c := tr.open(t)
			require.Len(t, c.Mappings, len(tr.GDB.Mappings))
			for i, g := range tr.GDB.Mappings {
				m := c.Mappings[i]
				assert.Equal(t, []any{hex(t, g.Start), hex(t, g.End), hex(t, g.Offset), g.Path},
					[]any{m.Start, m.End, m.FileOffset, m.Path}, "mapping %d", i)
			}
			gauxv := tr.GDB.Auxv
			if n := len(gauxv); n > 0 && gauxv[n-1].Type == 0 {
				gauxv = gauxv[:n-1] // gdb lists AT_NULL; Auxv ends before it
			}
			require.Len(t, c.Auxv, len(gauxv))
			for i, g := range gauxv {
				assert.Equal(t, g.Type, c.Auxv[i].Type, "auxv %d (%s)", i, g.Name)
				assert.Equal(t, hex(t, g.Value), c.Auxv[i].Value, "auxv %d (%s)", i, g.Name)
			}
			// The generator ran every program as ./NAME, except where gdb
			// ran it (gcore, Go): gdb uses the full path.
			fn, err := c.ExecFn()
			require.NoError(t, err)
			want := "./" + path.Base(tr.Exe)
			if strings.HasPrefix(tr.Name, "gcore") || strings.HasPrefix(tr.Name, "go_") {
				want = tr.Exe
			}
			assert.Equal(t, want, fn)
		})
	}
}

// TestObjectsMatchEuUnstrip: each module elfutils finds in the core, at the
// same address with the same build-id read from the core's memory; gdb's
// shared libraries lie inside the object of the same name.
func TestObjectsMatchEuUnstrip(t *testing.T) {
	for _, tr := range fixtures(t) {
		t.Run(tr.Arch+"/"+tr.Name, func(t *testing.T) {
			c := tr.open(t)
			objs := c.Objects()
			for _, u := range tr.EuUnstrip {
				start := hex(t, u.Start)
				var o *coredump.Object
				for i := range objs {
					if objs[i].Start == start {
						o = &objs[i]
					}
				}
				require.NotNil(t, o, "eu-unstrip's module %s at %#x", u.Name, start)
				if u.Name == "linux-vdso.so.1" {
					assert.Equal(t, "[vdso]", o.Path)
				} else {
					assert.Equal(t, path.Base(u.Name), path.Base(o.Path))
				}
				require.NoError(t, o.Err, o.Path)
				assert.Equal(t, u.BuildID, hexString(o.BuildID), o.Path)
			}
			assert.Len(t, objs, len(tr.EuUnstrip), "objects")
			for _, lib := range tr.GDB.SharedLibrary {
				from := hex(t, lib.From)
				found := false
				for _, o := range objs {
					if o.Start <= from && from < o.End && path.Base(o.Path) == path.Base(lib.Path) {
						found = true
					}
				}
				assert.True(t, found, "gdb's %s .text at %#x is in no object of that name", lib.Path, from)
			}
		})
	}
}

func hexString(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// TestVDSOImage: the vdso read from the core's memory is an ELF object with
// the build-id elfutils reports for linux-vdso.so.1.
func TestVDSOImage(t *testing.T) {
	for _, tr := range fixtures(t) {
		var want string
		for _, u := range tr.EuUnstrip {
			if u.Name == "linux-vdso.so.1" {
				want = u.BuildID
			}
		}
		if want == "" {
			continue
		}
		t.Run(tr.Arch+"/"+tr.Name, func(t *testing.T) {
			c := tr.open(t)
			img, err := c.VDSOImage()
			require.NoError(t, err)
			f, err := elf.NewFile(bytes.NewReader(img))
			require.NoError(t, err)
			assert.Equal(t, want, hexString(elfBuildID(t, f)))
		})
	}
}

// TestMemoryMatchesGDB: every word gdb read (stack words, code at each
// frame's pc, each mapping's first word) reads the same, code included
// although the cores do not hold it (it comes from the mapped files); where
// gdb could not read, neither can the core.
//
// Correction: gdb reads zeros from a PT_LOAD with no permissions and no
// dumped bytes (in qemu cores: the PROT_NONE guard page below the guest's
// stack, where the aarch64 overflow fixture's SP points, and the PROT_NONE
// gaps between the segments of 64 KiB-aligned arm64 objects); the process
// could never read them, so the reader fails there with ErrNotDumped.
func TestMemoryMatchesGDB(t *testing.T) {
	for _, tr := range fixtures(t) {
		t.Run(tr.Arch+"/"+tr.Name, func(t *testing.T) {
			c := tr.open(t)
			mem := c.Memory()
			fromFile := 0
			for _, w := range tr.GDB.Memory {
				addr := hex(t, w.Addr)
				got, st := mem.ReadUint64(addr)
				ok := st == unwinder.MemOK
				if w.Value != nil && noAccess(c, addr) {
					require.Equal(t, "0x0", *w.Value, "gdb's reading of the guard page at %#x", addr)
					var b [8]byte
					_, err := mem.ReadAt(b[:], addr)
					require.ErrorIs(t, err, coredump.ErrNotDumped, "%#x", addr)
					continue
				}
				if w.Value == nil {
					assert.False(t, ok, "gdb could not read %#x, the core reader read %#x", addr, got)
					var b [8]byte
					_, err := mem.ReadAt(b[:], addr)
					var me *coredump.MemoryError
					require.ErrorAs(t, err, &me, "%#x", addr)
					assert.Contains(t, err.Error(), tr.corePath())
					continue
				}
				require.True(t, ok, "%#x unreadable", addr)
				assert.Equal(t, hex(t, *w.Value), got, "word at %#x", addr)
				var b [8]byte
				if _, err := mem.ReadDumped(b[:], addr); err != nil {
					fromFile++
				}
			}
			assert.Positive(t, fromFile, "no word came from a mapped file: the fixture does not test the fallback")
		})
	}
}

// noAccess reports whether addr is in a segment without permissions of
// which the core holds no bytes.
func noAccess(c *coredump.Core, addr uint64) bool {
	for _, s := range c.Memory().Segments() {
		if addr >= s.Addr && addr < s.Addr+s.Size {
			return !s.Read && !s.Write && !s.Exec && s.Dumped == 0
		}
	}
	return false
}

// TestMemoryWithoutFiles: with mapped files off, every word that came from
// a mapped file fails with ErrNotDumped, and dumped memory still reads.
func TestMemoryWithoutFiles(t *testing.T) {
	for _, tr := range fixtures(t) {
		t.Run(tr.Arch+"/"+tr.Name, func(t *testing.T) {
			c := tr.open(t)
			bare, err := coredump.Open(tr.corePath(), &coredump.Options{NoMappedFiles: true})
			require.NoError(t, err)
			defer bare.Close()
			var b [8]byte
			checked := 0
			for _, w := range tr.GDB.Memory {
				addr := hex(t, w.Addr)
				if w.Value == nil || noAccess(c, addr) {
					continue
				}
				_, errDumped := c.Memory().ReadDumped(b[:], addr)
				v, st := bare.Memory().ReadUint64(addr)
				ok := st == unwinder.MemOK
				if errDumped == nil {
					assert.True(t, ok, "dumped word at %#x", addr)
					assert.Equal(t, hex(t, *w.Value), v)
					continue
				}
				_, err := bare.Memory().ReadAt(b[:], addr)
				assert.ErrorIs(t, err, coredump.ErrNotDumped, "%#x", addr)
				checked++
			}
			assert.Positive(t, checked)
			_, err = bare.Memory().ReadAt(b[:], 8)
			assert.ErrorIs(t, err, coredump.ErrUnmapped)
		})
	}
}

// TestMappedFileBuildIDMismatch: a file whose build-id differs from the one
// in the core's memory is refused, naming both ids.
func TestMappedFileBuildIDMismatch(t *testing.T) {
	var tr *truth
	for _, x := range fixtures(t) {
		if x.Name == "crash_O2" {
			tr = x
		}
	}
	require.NotNil(t, tr)
	wrong := tr.Files[tr.Exe] // the program, offered for every path
	opts := &coredump.Options{SymFS: "/nonexistent", OpenMapped: func(p string) (coredump.ReaderAt, error) {
		return tr.options().OpenMapped(tr.Exe)
	}}
	_ = wrong
	c, err := coredump.Open(tr.corePath(), opts)
	require.NoError(t, err)
	defer c.Close()
	var libc *coredump.Object
	for i, o := range c.Objects() {
		if path.Base(o.Path) == "libc.so.6" {
			libc = &c.Objects()[i]
		}
	}
	require.NotNil(t, libc)
	var b [8]byte
	_, err = c.Memory().ReadAt(b[:], libc.Start+0x30000) // libc text, not dumped
	require.ErrorIs(t, err, coredump.ErrNotDumped)
	assert.Contains(t, err.Error(), hexString(libc.BuildID))
	assert.Contains(t, err.Error(), "libc.so.6")
	assert.Contains(t, err.Error(), "build-id")
}

// TestNotCore: other files get ErrNotCore naming the file.
func TestNotCore(t *testing.T) {
	tr := fixtures(t)[0]
	_, err := coredump.Open(testdataDir()+"/"+tr.Files[tr.Exe], nil)
	require.ErrorIs(t, err, coredump.ErrNotCore)
	assert.Contains(t, err.Error(), tr.Files[tr.Exe])
	_, err = coredump.Open(testdataDir()+"/cores/README.md", nil)
	require.ErrorIs(t, err, coredump.ErrNotCore)
	_, err = coredump.Parse(nil, "empty", nil)
	require.ErrorIs(t, err, coredump.ErrNotCore)
	assert.True(t, errors.Is(err, coredump.ErrNotCore))
}

// elfBuildID returns the NT_GNU_BUILD_ID among f's PT_NOTE notes.
func elfBuildID(t *testing.T, f *elf.File) []byte {
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		data := make([]byte, p.Filesz)
		_, err := p.ReadAt(data, 0)
		require.NoError(t, err)
		for len(data) >= 12 {
			le := binary.LittleEndian
			namesz, descsz, typ := int(le.Uint32(data)), int(le.Uint32(data[4:])), le.Uint32(data[8:])
			name := (namesz + 3) &^ 3
			desc := (descsz + 3) &^ 3
			if typ == 3 && string(data[12:12+namesz]) == "GNU\x00" {
				return data[12+name : 12+name+descsz]
			}
			data = data[12+name+desc:]
		}
	}
	t.Fatal("no build-id note")
	return nil
}

// TestConcurrentReads: goroutines reading dumped and file-backed memory at
// once (the mapped files are opened on first use) see gdb's words; run with
// -race.
func TestConcurrentReads(t *testing.T) {
	tr := fixtures(t)[len(fixtures(t))-1]
	c := tr.open(t)
	want := map[uint64]uint64{}
	for _, w := range tr.GDB.Memory {
		if a := hex(t, w.Addr); w.Value != nil && !noAccess(c, a) {
			want[a] = hex(t, *w.Value)
		}
	}
	done := make(chan error)
	for g := 0; g < 8; g++ {
		go func() {
			for a, val := range want {
				if v, st := c.Memory().ReadUint64(a); st != unwinder.MemOK || v != val {
					done <- fmt.Errorf("word at %#x: %#x, status %v", a, v, st)
					return
				}
			}
			done <- nil
		}()
	}
	for g := 0; g < 8; g++ {
		assert.NoError(t, <-done)
	}
}

// TestOpenReader reads each fixture's core from a stream (compressed, as
// committed, and decompressed) and finds the threads, registers and memory
// Open finds in the file; an empty stream and one that is no core are
// errors naming the stream.
func TestOpenReader(t *testing.T) {
	for _, tr := range fixtures(t) {
		t.Run(tr.Arch+"/"+tr.Name, func(t *testing.T) {
			c := tr.open(t)
			zst, err := os.ReadFile(tr.corePath())
			require.NoError(t, err)
			for _, data := range [][]byte{zst, rawCore(t, tr)} {
				s, err := coredump.OpenReader(bytes.NewReader(data), "stream", tr.options())
				require.NoError(t, err)
				require.Len(t, s.Threads, len(c.Threads))
				for i := range c.Threads {
					assert.Equal(t, c.Threads[i].TID, s.Threads[i].TID)
					assert.Equal(t, c.Threads[i].Regs, s.Threads[i].Regs)
				}
				assert.Equal(t, c.Memory().Segments(), s.Memory().Segments())
				require.NoError(t, s.Close())
			}
		})
	}
	_, err := coredump.OpenReader(bytes.NewReader(nil), "empty stream", nil)
	require.ErrorIs(t, err, coredump.ErrNotCore)
	assert.Contains(t, err.Error(), "empty stream")
	_, err = coredump.OpenReader(strings.NewReader("PERFILE2 and more bytes than an ELF header holds, to be sure of it"), "text", nil)
	require.ErrorIs(t, err, coredump.ErrNotCore)
}

// TestSegmentAt: the segment SegmentAt finds for an address is the one a
// walk over Segments finds, at every segment's first, middle and last
// byte and just outside it.
func TestSegmentAt(t *testing.T) {
	for _, tr := range fixtures(t) {
		t.Run(tr.Arch+"/"+tr.Name, func(t *testing.T) {
			c := tr.open(t)
			segs := c.Memory().Segments()
			require.NotEmpty(t, segs)
			walk := func(addr uint64) (coredump.Segment, bool) {
				for _, s := range segs {
					if addr >= s.Addr && addr < s.Addr+s.Size {
						return s, true
					}
				}
				return coredump.Segment{}, false
			}
			for _, s := range segs {
				for _, addr := range []uint64{s.Addr - 1, s.Addr, s.Addr + s.Size/2, s.Addr + s.Size - 1, s.Addr + s.Size} {
					want, wantOK := walk(addr)
					got, ok := c.Memory().SegmentAt(addr)
					assert.Equal(t, wantOK, ok, "%#x", addr)
					assert.Equal(t, want, got, "%#x", addr)
				}
			}
		})
	}
}
