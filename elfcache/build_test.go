package elfcache

import (
	"bytes"
	"debug/elf"
	"errors"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
	"github.com/ustack/ustack/internal/testprog"
)

func mustCopy(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

// splitDebug builds cProgram with flags, then makes dir/bin/prog stripped
// with a debug link to prog.debug; it returns the unstripped binary and the
// debug file, which is left in dir/build.
func splitDebug(t *testing.T, dir string, flags ...string) (full, stripped, debug string) {
	build := filepath.Join(dir, "build")
	os.MkdirAll(build, 0o755)
	full = testprog.Build(t, build, "prog.c", cProgram, flags...)
	debug = filepath.Join(build, "prog.debug")
	run(t, "objcopy", "--only-keep-debug", full, debug)
	stripped = filepath.Join(dir, "bin", "prog")
	os.MkdirAll(filepath.Dir(stripped), 0o755)
	run(t, "objcopy", "--strip-all", "--add-gnu-debuglink="+debug, full, stripped)
	return full, stripped, debug
}

// TestDebugFileSearch places the debug file of a stripped gcc binary in
// each searched location in turn and checks that it is found, that its
// symbols are used, and that files with the wrong build-id or CRC are
// refused.
func TestDebugFileSearch(t *testing.T) {
	dir := t.TempDir()
	full, stripped, debug := splitDebug(t, dir, "-O1", "-g")
	bin := filepath.Dir(stripped)
	id := readelfBuildID(t, stripped)
	if id == "" {
		t.Skip("gcc does not emit build-ids here")
	}
	dbgDir := filepath.Join(dir, "debug")
	cases := []struct {
		name, where string
	}{
		{"build-id", filepath.Join(dbgDir, ".build-id", id[:2], id[2:]+".debug")},
		{"same dir", filepath.Join(bin, "prog.debug")},
		{".debug subdir", filepath.Join(bin, ".debug", "prog.debug")},
		{"global dir", filepath.Join(dbgDir, bin, "prog.debug")},
	}
	want := nmSyms(t, "nm", full)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mustCopy(t, debug, c.where)
			defer os.Remove(c.where)
			o := mustOpen(t, stripped, Options{DebugDirs: []string{dbgDir}})
			if o.BuildIDHex() != id {
				t.Errorf("build-id %s, readelf: %s", o.BuildIDHex(), id)
			}
			name, crc, ok := o.DebugLink()
			if !ok || name != "prog.debug" || crc != crc32.ChecksumIEEE(mustRead(t, debug)) {
				t.Errorf("DebugLink = %q %#x %v", name, crc, ok)
			}
			if o.DebugPath() != c.where {
				t.Fatalf("DebugPath = %q, want %q", o.DebugPath(), c.where)
			}
			checkSymbols(t, o, want)
			if _, _, ok := o.Symbolize(symAddr(t, want, "hidden_helper")); !ok {
				t.Error("local symbol from the debug file not found")
			}
		})
	}
	t.Run("no debug file", func(t *testing.T) {
		o := mustOpen(t, stripped, Options{DebugDirs: []string{dbgDir}})
		if o.DebugFile() != nil {
			t.Fatalf("found %s", o.DebugPath())
		}
		if _, _, ok := o.Symbolize(symAddr(t, want, "hidden_helper")); ok {
			t.Error("a local symbol without .symtab")
		}
	})
	t.Run("wrong build-id", func(t *testing.T) {
		other := testprog.Build(t, t.TempDir(), "other.c", cProgram+"int extra(void){return 7;}\n", "-O1", "-g")
		otherDbg := other + ".debug"
		run(t, "objcopy", "--only-keep-debug", other, otherDbg)
		for _, where := range []string{cases[0].where, cases[1].where} {
			mustCopy(t, otherDbg, where)
			o := mustOpen(t, stripped, Options{DebugDirs: []string{dbgDir}})
			if o.DebugFile() != nil {
				t.Errorf("accepted %s with another build-id", where)
			}
			os.Remove(where)
		}
	})
	t.Run("symfs", func(t *testing.T) {
		root := t.TempDir()
		mustCopy(t, stripped, filepath.Join(root, "usr/bin/prog"))
		where := filepath.Join(root, "usr/lib/debug/.build-id", id[:2], id[2:]+".debug")
		mustCopy(t, debug, where)
		o := mustOpen(t, "/usr/bin/prog", Options{SymFS: root})
		if o.Path() != "/usr/bin/prog" || o.DebugPath() != where {
			t.Errorf("Path %q DebugPath %q", o.Path(), o.DebugPath())
		}
	})
	// A debug directory named beside --symfs, outside the copied root
	// (gdb's debug-file-directory with a sysroot): looked in as it is,
	// by build-id and by debug link, after the root's own.
	t.Run("symfs and a debug dir outside it", func(t *testing.T) {
		root, outside := t.TempDir(), t.TempDir()
		mustCopy(t, stripped, filepath.Join(root, "usr/bin/prog"))
		where := filepath.Join(outside, ".build-id", id[:2], id[2:]+".debug")
		mustCopy(t, debug, where)
		o := mustOpen(t, "/usr/bin/prog", Options{SymFS: root, DebugDirs: []string{outside}})
		if o.DebugPath() != where {
			t.Errorf("by build-id: DebugPath %q, want %q", o.DebugPath(), where)
		}
		if o := mustOpen(t, "/usr/bin/prog", Options{SymFS: root}); o.DebugFile() != nil {
			t.Errorf("the default debug directory is the root's only, but %q was found", o.DebugPath())
		}
		os.Remove(where)
		link := filepath.Join(outside, filepath.Base(debug))
		mustCopy(t, debug, link)
		if o := mustOpen(t, "/usr/bin/prog", Options{SymFS: root, DebugDirs: []string{outside}}); o.DebugPath() != link {
			t.Errorf("by debug link: DebugPath %q, want %q", o.DebugPath(), link)
		}
	})
}

// TestDebugLinkCRC checks the CRC of debug links for binaries without a
// build-id: a debug file whose CRC differs is refused.
func TestDebugLinkCRC(t *testing.T) {
	dir := t.TempDir()
	_, stripped, debug := splitDebug(t, dir, "-O1", "-g", "-Wl,--build-id=none")
	where := filepath.Join(filepath.Dir(stripped), "prog.debug")
	mustCopy(t, debug, where)
	o := mustOpen(t, stripped, Options{DebugDirs: []string{}})
	if o.BuildID() != nil || o.DebugPath() != where {
		t.Fatalf("build-id %x, DebugPath %q", o.BuildID(), o.DebugPath())
	}
	data := append(mustRead(t, debug), 0)
	os.WriteFile(where, data, 0o644)
	o = mustOpen(t, stripped, Options{DebugDirs: []string{}})
	if o.DebugFile() != nil {
		t.Error("accepted a debug file with the wrong CRC")
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func symAddr(t *testing.T, syms []nmSym, name string) uint64 {
	t.Helper()
	for _, s := range syms {
		if s.name == name {
			return s.addr
		}
	}
	t.Fatalf("no symbol %s", name)
	return 0
}

// TestDebugFrameOnly uses a binary built with -fno-asynchronous-unwind-tables
// -g, whose functions are described only by .debug_frame, first with the
// section in the binary and then, stripped, in its debug file.
func TestDebugFrameOnly(t *testing.T) {
	dir := t.TempDir()
	full, stripped, debug := splitDebug(t, dir, "-O1", "-g", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables")
	mustCopy(t, debug, filepath.Join(filepath.Dir(stripped), "prog.debug"))
	syms := nmSyms(t, "nm", full)
	for _, p := range []string{full, stripped} {
		o := mustOpen(t, p, Options{DebugDirs: []string{}})
		secs, err := o.cfiSections()
		if err != nil {
			t.Fatal(err)
		}
		wantName := "prog:.debug_frame"
		if p == stripped {
			wantName = "prog.debug:.debug_frame"
		}
		if secs.DebugFrame.Name != wantName || len(secs.DebugFrame.Data) == 0 {
			t.Errorf("%s: .debug_frame from %q (%d bytes)", p, secs.DebugFrame.Name, len(secs.DebugFrame.Data))
		}
		ef, _ := elf.Open(full)
		if want, _ := ef.Section(".debug_frame").Data(); !bytes.Equal(want, secs.DebugFrame.Data) {
			t.Errorf("%s: .debug_frame bytes differ", p)
		}
		ef.Close()
		if secs.TextAddr != o.text.Addr || secs.DataAddr != o.section(".got").Addr {
			t.Errorf("TextAddr %#x DataAddr %#x", secs.TextAddr, secs.DataAddr)
		}
		checkFunctionEntries(t, o, syms, "leaf", "middle", "hidden_helper")
	}
}

// checkFunctionEntries checks FindRow at the entry of the named functions:
// on x86_64 the CFA is rsp+8 and the return address is at CFA-8.
func checkFunctionEntries(t *testing.T, o *Object, syms []nmSym, names ...string) {
	t.Helper()
	requireCFI(t)
	for _, n := range names {
		a := symAddr(t, syms, n)
		var row cfi.Row
		if err := o.FindRow(a, &row); err != nil {
			t.Errorf("%s: FindRow(%s) = %v", o.Path(), n, err)
			continue
		}
		if a < row.Start || a >= row.End {
			t.Errorf("%s: row [%#x, %#x) does not cover %#x", n, row.Start, row.End, a)
		}
		if o.Arch() == arch.AMD64 {
			if row.CFA != (cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.AMD64_RSP, Offset: 8}) {
				t.Errorf("%s: CFA %+v at entry", n, row.CFA)
			}
			if r := row.Regs[arch.AMD64_RIP]; r.Kind != cfi.RuleOffset || r.Offset != -8 {
				t.Errorf("%s: RA %+v at entry", n, r)
			}
		}
	}
	var row cfi.Row
	if err := o.FindRow(1<<60, &row); !errors.Is(err, cfi.ErrNoFDE) {
		t.Errorf("FindRow far away = %v, want ErrNoFDE", err)
	}
}

// TestGoBinary builds a Go program (whose .debug_frame the Go linker
// compresses), recompresses it with zstd and with the old .zdebug_ format,
// and checks that each decompresses to the bytes objcopy
// --decompress-debug-sections produces; it also checks the symbols against
// nm.
func TestGoBinary(t *testing.T) {
	needTool(t, "go")
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n\ngo 1.21\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "main.go"), []byte(`package main

import "fmt"

//go:noinline
func work(n int) int { s := 0; for i := 0; i < n; i++ { s += i * i }; return s }

func main() { fmt.Println(work(10)) }
`), 0o644)
	bin := filepath.Join(dir, "hello")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	plain := bin + ".plain"
	run(t, "objcopy", "--decompress-debug-sections", bin, plain)
	ef, err := elf.Open(plain)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ef.Section(".debug_frame").Data()
	ef.Close()
	if err != nil || len(want) == 0 {
		t.Fatalf("plain .debug_frame: %v", err)
	}
	variants := map[string]string{"go linker": bin}
	for _, c := range []string{"zstd", "zlib-gnu"} {
		p := bin + "." + c
		cmd := exec.Command("objcopy", "--compress-debug-sections="+c, plain, p)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Logf("objcopy cannot compress with %s: %v %s", c, err, out)
			continue
		}
		variants[c] = p
	}
	for name, p := range variants {
		t.Run(name, func(t *testing.T) {
			o := mustOpen(t, p, Options{NoDebugFile: true})
			df := o.section(".debug_frame")
			if df == nil {
				df = o.section(".zdebug_frame")
			}
			switch {
			case df == nil:
				t.Fatal("no .debug_frame")
			case name == "zlib-gnu" && df.Name != ".zdebug_frame":
				t.Errorf("objcopy made %s", df.Name)
			case name != "zlib-gnu" && df.Flags&elf.SHF_COMPRESSED == 0:
				t.Errorf(".debug_frame is not compressed")
			}
			secs, err := o.cfiSections()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(secs.DebugFrame.Data, want) {
				t.Errorf("decompressed .debug_frame (%d bytes) differs from objcopy's (%d bytes)", len(secs.DebugFrame.Data), len(want))
			}
			if o.Arch() != arch.AMD64 || o.Type() != elf.ET_EXEC {
				t.Errorf("arch %v type %v", o.Arch(), o.Type())
			}
			syms := nmSyms(t, "nm", p)
			checkSymbols(t, o, syms)
			name, off, ok := o.Symbolize(symAddr(t, syms, "main.work") + 3)
			if !ok || name != "main.work" || off != 3 {
				t.Errorf("Symbolize(main.work+3) = %s+%d %v", name, off, ok)
			}
			checkFunctionEntries(t, o, syms, "main.work", "main.main")
		})
	}
	// A limit below the section's size is enforced.
	o := mustOpen(t, bin, Options{NoDebugFile: true, MaxSectionSize: 16})
	if _, err := o.cfiSections(); err == nil || !strings.Contains(err.Error(), ".debug_frame") {
		t.Errorf("MaxSectionSize not enforced: %v", err)
	}
}
