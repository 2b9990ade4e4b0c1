package elfcache

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
)

// TestSplitDWARF checks gcc -gsplit-dwarf (DWARF 5 skeleton units and .dwo
// files): the source frames (inline chains, files, lines) at every address
// of the program's functions equal those of the same sources built
// without -gsplit-dwarf, and llvm-addr2line's (which reads the .dwo
// files itself), and from a .dwp package (llvm-dwp) as from the .dwo. A
// missing .dwo is reported by SourceError, and the lines still come from
// the skeleton.
func TestSplitDWARF(t *testing.T) {
	needTool(t, "gcc")
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "common.h"), []byte(dwzHeader), 0o644))
	for name, src := range dwzProgs {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".c"), []byte(src), 0o644))
	}
	build := func(out string, split bool) string {
		sub := filepath.Join(dir, out)
		require.NoError(t, os.MkdirAll(sub, 0o755))
		// Compile in place, so both builds name the same source files.
		args := []string{"-g", "-O2", "-c", "-o", filepath.Join(sub, "a.o"), "a.c"}
		if split {
			args = append(args, "-gsplit-dwarf")
		}
		testprog.Tool(t, dir, "gcc", args...)
		run(t, "gcc", "-o", filepath.Join(sub, "a"), filepath.Join(sub, "a.o"))
		return filepath.Join(sub, "a")
	}
	plain, split := build("plain", false), build("split", true)
	_, err := os.Stat(filepath.Join(dir, "split", "a.dwo"))
	require.NoError(t, err, "gcc wrote no .dwo")

	ref := mustOpen(t, plain, Options{NoDebugFile: true})
	o := mustOpen(t, split, Options{NoDebugFile: true})
	require.NotNil(t, o.section(".debug_info"))
	require.Nil(t, o.section(".debug_rnglists.dwo"))
	inlined, checked := 0, 0
	var addrs []uint64
	for _, s := range ref.Symbols() {
		if s.Name != "main" && s.Name != "work_a" && s.Name != "shared_helper" {
			continue // C runtime code, no DWARF
		}
		for a := s.Addr; a < s.Addr+s.Size; a++ {
			addrs = append(addrs, a)
		}
	}
	// Both builds have the same code.
	for _, a := range addrs {
		want := ref.SourceFrames(a, nil)
		got := o.SourceFrames(a, nil)
		if !assert.Equal(t, want, got, "at %#x", a) {
			break
		}
		checked++
		for _, f := range got {
			if f.Inlined {
				inlined++
			}
		}
	}
	require.NoError(t, o.SourceError())
	t.Logf("%d addresses, %d inlined frames alike", checked, inlined)
	require.Greater(t, inlined, 10)

	// llvm-addr2line reads the .dwo itself (binutils' addr2line does
	// not): independent truth.
	if _, err := exec.LookPath("llvm-addr2line"); err == nil {
		compareTool(t, "llvm-addr2line", o, split, addrs)
	} else {
		t.Log("llvm-addr2line not installed: compared with the plain build only")
	}

	// Without the .dwo: lines from the skeleton, names from .symtab, and
	// an error that names the missing file.
	require.NoError(t, os.Rename(filepath.Join(dir, "split", "a.dwo"), filepath.Join(dir, "a.dwo.gone")))
	o2 := mustOpen(t, split, Options{NoDebugFile: true})
	fr := o2.SourceFrames(addrs[len(addrs)/2], nil)
	require.Len(t, fr, 1)
	assert.NotZero(t, fr[0].Line)
	assert.ErrorContains(t, o2.SourceError(), "a.dwo")

	// A .dwp package next to the executable instead (binutils' dwp 2.40
	// drops DWARF 5 units; llvm-dwp keeps them).
	if _, err := exec.LookPath("llvm-dwp"); err != nil {
		t.Skip("llvm-dwp not installed: .dwp packages not tested")
	}
	run(t, "llvm-dwp", "-o", split+".dwp", filepath.Join(dir, "a.dwo.gone"))
	o3 := mustOpen(t, split, Options{NoDebugFile: true})
	for _, a := range addrs {
		if !assert.Equal(t, ref.SourceFrames(a, nil), o3.SourceFrames(a, nil), "from the .dwp at %#x", a) {
			break
		}
	}
	assert.NoError(t, o3.SourceError())
}

// TestSplitDWARF4Reported checks that a DWARF 4 (GNU) split unit, whose
// .dwo is not read, is reported rather than passed over silently, and
// that its lines still come from the skeleton.
func TestSplitDWARF4Reported(t *testing.T) {
	needTool(t, "gcc")
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "common.h"), []byte(dwzHeader), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.c"), []byte(dwzProgs["a"]), 0o644))
	testprog.Tool(t, dir, "gcc", "-g", "-O2", "-gdwarf-4", "-gsplit-dwarf", "-o", "a", "a.c")
	o := mustOpen(t, filepath.Join(dir, "a"), Options{NoDebugFile: true})
	var a uint64
	for _, s := range o.Symbols() {
		if s.Name == "work_a" {
			a = s.Addr
		}
	}
	require.NotZero(t, a)
	fr := o.SourceFrames(a, nil)
	require.Len(t, fr, 1)
	assert.Equal(t, "work_a", fr[0].Function)
	assert.NotZero(t, fr[0].Line)
	assert.ErrorContains(t, o.SourceError(), "DWARF 4")
}

// FuzzSplitDWARF damages the .dwo file of a -gsplit-dwarf build (a section,
// an offset and bytes to write there) and the skeleton's addr_base
// section, and checks that SourceFrames neither panics nor hangs.
func FuzzSplitDWARF(f *testing.F) {
	needTool(f, "gcc")
	dir := f.TempDir()
	require.NoError(f, os.WriteFile(filepath.Join(dir, "common.h"), []byte(dwzHeader), 0o644))
	require.NoError(f, os.WriteFile(filepath.Join(dir, "a.c"), []byte(dwzProgs["a"]), 0o644))
	testprog.Tool(f, dir, "gcc", "-g", "-O2", "-gsplit-dwarf", "-o", "a", "a.c")
	dwoPath := ""
	for _, p := range []string{"a-a.dwo", "a.dwo"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err == nil {
			dwoPath = filepath.Join(dir, p)
		}
	}
	require.NotEmpty(f, dwoPath, "gcc wrote no .dwo")
	dwo, err := os.ReadFile(dwoPath)
	require.NoError(f, err)
	o := mustOpen(f, filepath.Join(dir, "a"), Options{NoDebugFile: true})
	var addrs []uint64
	for _, s := range o.Symbols() {
		for a := s.Addr; a < s.Addr+s.Size; a += 2 {
			addrs = append(addrs, a)
		}
	}
	d := mustOpen(f, dwoPath, Options{NoDebugFile: true})
	var secs []Section
	for _, s := range d.Sections() {
		if strings.HasSuffix(s.Name, ".dwo") {
			secs = append(secs, s)
		}
	}
	require.NotEmpty(f, secs)
	for k := 0; k < 8; k++ {
		f.Add(uint8(k), uint32(k*29), []byte{0xff, 0x7f, 0x80, 0})
	}
	f.Fuzz(func(t *testing.T, secIdx uint8, off uint32, patch []byte) {
		defer failIfSlow(10 * time.Second)()
		data := append([]byte(nil), dwo...)
		s := secs[int(secIdx)%len(secs)]
		if s.Size > 0 {
			at := s.Offset + uint64(off)%s.Size
			copy(data[at:min(s.Offset+s.Size, at+uint64(len(patch)))], patch)
		}
		if err := os.WriteFile(dwoPath, data, 0o600); err != nil {
			t.Fatal(err)
		}
		o, err := Open(filepath.Join(dir, "a"), Options{NoDebugFile: true, MaxSectionSize: 1 << 24})
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		var buf []SourceFrame
		for _, a := range addrs {
			buf = o.SourceFrames(a, buf[:0])
		}
		o.SourceError()
	})
}

// FuzzDWPIndex parses arbitrary .debug_cu_index contents and looks ids up:
// nothing may panic or loop.
func FuzzDWPIndex(f *testing.F) {
	le := binary.LittleEndian
	// One unit, columns info and abbrev, 2 slots.
	seed := make([]byte, 16+2*12+2*4+2*2*4)
	le.PutUint16(seed, 5)
	le.PutUint32(seed[4:], 2)
	le.PutUint32(seed[8:], 1)
	le.PutUint32(seed[12:], 2)
	le.PutUint64(seed[16:], 0x1122334455667788)
	le.PutUint32(seed[32:], 1)
	le.PutUint32(seed[40:], dwSectInfo)
	le.PutUint32(seed[44:], dwSectAbbrev)
	f.Add(seed, uint64(0x1122334455667788))
	f.Fuzz(func(t *testing.T, index []byte, id uint64) {
		p, err := parseDWPIndex("fuzz.dwp", index)
		if err != nil {
			return
		}
		p.sections = map[uint32][]byte{dwSectInfo: make([]byte, 64), dwSectAbbrev: make([]byte, 64)}
		if row, ok := p.find(id); ok {
			get := p.sectionsOf(row)
			get("info")
			get("abbrev")
			get("line")
		}
	})
}
