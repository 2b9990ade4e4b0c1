package elfcache

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	assert.ErrorContains(t, o2.SplitDWARFError(), "a.dwo")

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

// TestSplitDWARF4 checks the GNU split DWARF of -gdwarf-4 -gsplit-dwarf
// (DW_AT_GNU_dwo_name skeletons, DW_FORM_GNU_addr_index and
// DW_FORM_GNU_str_index in the .dwo, range lists in the executable), from
// gcc and clang, read from the .dwo files and from a version 2 .dwp
// package (binutils' dwp for gcc's, llvm-dwp for clang's): the source
// frames at every address of the program's functions (inline chains of
// three levels in both units, files, lines) equal llvm-addr2line's, which
// reads the .dwo and .dwp itself, and the tail call site of hop is found
// in the .dwo (its target is work_b, as the source says and gdb shows).
func TestSplitDWARF4(t *testing.T) {
	needTool(t, "llvm-addr2line")
	for _, c := range []struct{ cc, pack string }{
		{"gcc", ""}, {"gcc", "dwp"}, {"clang", ""}, {"clang", "llvm-dwp"},
	} {
		name := c.cc + "_dwo"
		if c.pack != "" {
			name = c.cc + "_" + c.pack
		}
		t.Run(name, func(t *testing.T) {
			bin := testprog.BuildSplit(t, t.TempDir(), c.cc, 4, c.pack)
			o := mustOpen(t, bin, Options{NoDebugFile: true})
			syms := map[string]Symbol{}
			var addrs []uint64
			for _, s := range o.Symbols() {
				switch s.Name {
				case "main", "work_a", "work_b", "hop":
					syms[s.Name] = s
					for a := s.Addr; a < s.Addr+s.Size; a++ {
						addrs = append(addrs, a)
					}
				}
			}
			require.Len(t, syms, 4)
			compareTool(t, "llvm-addr2line", o, bin, addrs)
			require.NoError(t, o.SplitDWARFError())
			require.NoError(t, o.SourceError())
			// Both units' inline chains are read: leaf, middle,
			// outer and the function they are inlined into.
			for _, fn := range []string{"work_a", "work_b"} {
				s := syms[fn]
				depth := maxInlineDepth(o, []uint64{s.Addr, s.Addr + s.Size/4, s.Addr + s.Size/2, s.Addr + 3*s.Size/4})
				assert.GreaterOrEqual(t, depth, 4, "inline chain in %s", fn)
			}
			if c.pack != "" {
				p, err := o.dwpFile()
				require.NoError(t, err)
				require.NotNil(t, p)
				assert.EqualValues(t, 2, p.version, "%s writes a version 2 index for DWARF 4", c.pack)
			}
			hop := syms["hop"]
			tails := o.TailCallSites(hop.Addr)
			require.Len(t, tails, 1, "hop's tail call to work_b")
			assert.Equal(t, syms["work_b"].Addr, tails[0].Target)
			assert.Equal(t, hop.Addr+hop.Size, tails[0].ReturnPC, "hop ends with its jmp")
			require.NoError(t, o.CallSitesError())
		})
	}
}

// TestSplitDWARF4CXX checks GNU split DWARF of a C++ program (templates,
// member functions, names given by DW_AT_linkage_name as
// DW_FORM_GNU_str_index) from g++ and clang++, with the types in type
// units (-fdebug-types-section, .debug_types.dwo): its source frames equal
// addr2line's (llvm-addr2line's where binutils is wrong: compareTool) on
// the same code built without -gsplit-dwarf (objcopy shows the same
// .text), so that a C++ function clone (f(...) (.isra.0)) is named as
// for any C++ DWARF.
func TestSplitDWARF4CXX(t *testing.T) {
	needTool(t, "objcopy")
	for _, cxx := range []string{"g++", "clang++"} {
		t.Run(cxx, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "inl.cc"), []byte(cxxInline), 0o644))
			build := func(name string, flags ...string) string {
				require.NoError(t, os.MkdirAll(filepath.Join(dir, name), 0o755))
				obj := filepath.Join(name, "inl.o")
				testprog.Tool(t, dir, cxx, append([]string{"-O2", "-g", "-gdwarf-4", "-c", "-o", obj, "inl.cc"}, flags...)...)
				testprog.Tool(t, dir, cxx, "-o", filepath.Join(name, "inl"), obj)
				testprog.Tool(t, dir, "objcopy", "-O", "binary", "-j", ".text", filepath.Join(name, "inl"), filepath.Join(name, "text"))
				text, err := os.ReadFile(filepath.Join(dir, name, "text"))
				require.NoError(t, err)
				return string(text)
			}
			plainText := build("plain")
			splitText := build("split", "-gsplit-dwarf", "-fdebug-types-section")
			require.Equal(t, plainText, splitText, "-gsplit-dwarf changed the code")
			bin := filepath.Join(dir, "split", "inl")
			o := mustOpen(t, bin, Options{NoDebugFile: true})
			require.NotNil(t, o.section(".debug_info"))
			addrs := sampleAddrs(o, 600, nil)
			compareTool(t, "addr2line", o, filepath.Join(dir, "plain", "inl"), addrs)
			assert.GreaterOrEqual(t, maxInlineDepth(o, addrs), 3)
			require.NoError(t, o.SplitDWARFError())
		})
	}
}

// TestSplitDWARF4Missing checks what is said when a GNU split unit's .dwo
// cannot be used: not there, or rebuilt since the program was linked (its
// DWO id, as readelf prints it, differs from the skeleton's). The error
// names the object, the .dwo, the files looked at and the ids; the other
// unit keeps its inline chains and the lines still come from the
// skeleton.
func TestSplitDWARF4Missing(t *testing.T) {
	dir := t.TempDir()
	bin := testprog.BuildSplit(t, dir, "gcc", 4, "")
	id := func(file string) string {
		out := testprog.Tool(t, dir, "readelf", "--debug-dump=info", file)
		m := regexp.MustCompile(`DW_AT_GNU_dwo_id\s*:\s*(0x[0-9a-f]+)`).FindAllStringSubmatch(out, -1)
		require.NotEmpty(t, m, "readelf shows no DW_AT_GNU_dwo_id in %s", file)
		return m[len(m)-1][1]
	}
	want := id("prog")
	check := func(t *testing.T, msg ...string) {
		o := mustOpen(t, bin, Options{NoDebugFile: true})
		var workA, workB uint64
		for _, s := range o.Symbols() {
			switch s.Name {
			case "work_a":
				workA = s.Addr + s.Size/2
			case "work_b":
				workB = s.Addr + s.Size/2
			}
		}
		fr := o.SourceFrames(workB, nil)
		require.Len(t, fr, 1)
		assert.Equal(t, "work_b", fr[0].Function)
		assert.NotZero(t, fr[0].Line)
		assert.GreaterOrEqual(t, len(o.SourceFrames(workA, nil)), 2, "a.dwo is still read")
		err := o.SplitDWARFError()
		require.Error(t, err)
		t.Log(err)
		for _, m := range append(msg, bin, "b.dwo") {
			assert.Contains(t, err.Error(), m)
		}
		assert.Equal(t, err, o.SourceError())
	}
	require.NoError(t, os.Rename(filepath.Join(dir, "b.dwo"), filepath.Join(dir, "b.dwo.gone")))
	t.Run("not_found", func(t *testing.T) {
		check(t, "not found", "DWO id "+want, filepath.Join(dir, "b.dwo"))
	})
	// b.c changed and recompiled, the program not relinked.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b.c"), []byte(testprog.SplitSources["b.c"]+"int later(int x) { return hop(x) + 1; }\n"), 0o644))
	testprog.Tool(t, dir, "gcc", "-O2", "-g", "-gdwarf-4", "-gsplit-dwarf", "-c", "-o", "b.o", "b.c")
	got := id("b.dwo")
	require.NotEqual(t, want, got)
	t.Run("id_differs", func(t *testing.T) {
		check(t, "has DWO id "+got, "expects "+want)
	})
}

// TestSplitDWARF4Moved checks where a GNU split unit's .dwo is found when
// the build is not where the skeleton's DW_AT_comp_dir says: under
// Options.SymFS at that directory, and next to the program (a moved
// build, also under a SymFS), and next to the program's debug file (found
// by its debug link) when the program is stripped. In each case the inline chains of both
// units are there (llvm-addr2line gives four frames, leaf to work_a and
// work_b, at their close calls: TestSplitDWARF4) and nothing is reported.
func TestSplitDWARF4Moved(t *testing.T) {
	build := t.TempDir()
	testprog.BuildSplit(t, build, "gcc", 4, "")
	files := []string{"prog", "a.dwo", "b.dwo"}
	copyTo := func(dir string) {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for _, f := range files {
			data, err := os.ReadFile(filepath.Join(build, f))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, f), data, 0o755))
		}
	}
	root, root2 := t.TempDir(), t.TempDir()
	copyTo(filepath.Join(root, build))    // the build as it was, under a symfs
	copyTo(filepath.Join(root2, "moved")) // moved, under a symfs
	moved := filepath.Join(t.TempDir(), "x", "prog")
	copyTo(filepath.Dir(moved)) // moved
	// Stripped, its DWARF (the skeletons) in a debug file found by its
	// debug link in .debug/, with the .dwo files beside that.
	stripped := filepath.Join(t.TempDir(), "prog")
	debugDir := filepath.Join(filepath.Dir(stripped), ".debug")
	copyTo(debugDir)
	testprog.Tool(t, debugDir, "objcopy", "--only-keep-debug", "prog", "prog.debug")
	testprog.Tool(t, debugDir, "objcopy", "--strip-debug", "--add-gnu-debuglink=prog.debug", "prog", stripped)
	require.NoError(t, os.Remove(filepath.Join(debugDir, "prog")))
	for _, f := range files[1:] {
		require.NoError(t, os.Remove(filepath.Join(build, f)))
	}
	for _, c := range []struct {
		name, bin string
		opts      Options
	}{
		// With a SymFS, Open is given the profiled machine's path.
		{"symfs", filepath.Join(build, "prog"), Options{SymFS: root}},
		{"moved_symfs", "/moved/prog", Options{SymFS: root2}},
		{"moved", moved, Options{}},
		{"debug_file", stripped, Options{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.opts.NoDebugFile = c.name != "debug_file"
			c.opts.DebugDirs = []string{t.TempDir()}
			o := mustOpen(t, c.bin, c.opts)
			for _, s := range o.Symbols() {
				if s.Name != "work_a" && s.Name != "work_b" {
					continue
				}
				var deepest []SourceFrame
				for a := s.Addr; a < s.Addr+s.Size; a++ {
					if fr := o.SourceFrames(a, nil); len(fr) > len(deepest) {
						deepest = fr
					}
				}
				require.Len(t, deepest, 4, "%s: %s", s.Name, fmtFrames(deepest))
				assert.Equal(t, "leaf", deepest[0].Function)
				assert.Equal(t, s.Name, deepest[3].Function)
			}
			require.NoError(t, o.SplitDWARFError())
		})
	}
}

// FuzzSplitDWARF damages one split DWARF file of a -gsplit-dwarf build (a
// section, an offset and bytes to write there): gcc's DWARF 5 .dwo, a
// DWARF 4 (GNU) .dwo, or a DWARF 4 .dwp package (binutils' dwp, a version
// 2 index), and the skeleton's addr_base section through them. It checks
// that the source frames and the call sites neither panic nor hang, and
// that a split unit that could not be read is reported naming the program
// and the unit's offset.
func FuzzSplitDWARF(f *testing.F) {
	needTool(f, "gcc")
	type target struct {
		bin, file string
		data      []byte
		secs      []Section
		addrs     []uint64
	}
	var targets []target
	add := func(bin, file string) {
		data, err := os.ReadFile(file)
		require.NoError(f, err)
		tg := target{bin: bin, file: file, data: data}
		o := mustOpen(f, bin, Options{NoDebugFile: true})
		for _, s := range o.Symbols() {
			for a := s.Addr; a < s.Addr+s.Size; a += 2 {
				tg.addrs = append(tg.addrs, a)
			}
		}
		d := mustOpen(f, file, Options{NoDebugFile: true})
		for _, s := range d.Sections() {
			if strings.HasSuffix(s.Name, ".dwo") || strings.HasSuffix(s.Name, "_index") {
				tg.secs = append(tg.secs, s)
			}
		}
		require.NotEmpty(f, tg.secs, file)
		targets = append(targets, tg)
	}
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
	add(filepath.Join(dir, "a"), dwoPath)
	dir4 := f.TempDir()
	add(testprog.BuildSplit(f, dir4, "gcc", 4, ""), filepath.Join(dir4, "b.dwo"))
	if _, err := exec.LookPath("dwp"); err == nil {
		dirP := f.TempDir()
		bin := testprog.BuildSplit(f, dirP, "gcc", 4, "dwp")
		add(bin, bin+".dwp")
	} else {
		f.Log("dwp (binutils) not installed: .dwp packages not fuzzed")
	}
	for k := range targets {
		for j := 0; j < 8; j++ {
			f.Add(uint8(k), uint8(j), uint32(j*29), []byte{0xff, 0x7f, 0x80, 0})
		}
	}
	f.Fuzz(func(t *testing.T, which, secIdx uint8, off uint32, patch []byte) {
		defer failIfSlow(10 * time.Second)()
		tg := targets[int(which)%len(targets)]
		data := append([]byte(nil), tg.data...)
		s := tg.secs[int(secIdx)%len(tg.secs)]
		if s.Size > 0 {
			at := s.Offset + uint64(off)%s.Size
			copy(data[at:min(s.Offset+s.Size, at+uint64(len(patch)))], patch)
		}
		if err := os.WriteFile(tg.file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		o, err := Open(tg.bin, Options{NoDebugFile: true, MaxSectionSize: 1 << 24})
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		var buf []SourceFrame
		for _, a := range tg.addrs {
			buf = o.SourceFrames(a, buf[:0])
			o.CallSiteAt(a)
			o.TailCallSites(a)
		}
		o.SourceError()
		o.CallSitesError()
		if err := o.SplitDWARFError(); err != nil {
			msg := err.Error()
			if !strings.Contains(msg, tg.bin) || !strings.Contains(msg, "section .debug_info at offset 0x") {
				t.Errorf("split DWARF error does not name the program and the unit: %v", err)
			}
		}
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
	// The same as a version 2 (GNU DWARF 4) index.
	v2 := append([]byte(nil), seed...)
	le.PutUint16(v2, 2)
	f.Add(v2, uint64(0x1122334455667788))
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
			get("str_offsets")
			get("rnglists")
		}
	})
}
