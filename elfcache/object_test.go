package elfcache

import (
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/unwinder"
)

var systemObjects = []struct {
	path string
	arch arch.Arch
}{
	{libcAMD64, arch.AMD64},
	{ldAMD64, arch.AMD64},
	{libcARM64, arch.ARM64},
}

// TestHeaders checks arch, build-id, sections, PLT ranges and program
// headers of system libraries against readelf.
func TestHeaders(t *testing.T) {
	for _, so := range systemObjects {
		t.Run(strings.ReplaceAll(so.path, "/", "_"), func(t *testing.T) {
			needFile(t, so.path)
			o := mustOpen(t, so.path, Options{})
			if o.Arch() != so.arch {
				t.Errorf("Arch = %v, want %v", o.Arch(), so.arch)
			}
			if o.Path() != so.path {
				t.Errorf("Path = %q", o.Path())
			}
			if want := readelfBuildID(t, so.path); o.BuildIDHex() != want || want == "" {
				t.Errorf("BuildIDHex = %q, readelf says %q", o.BuildIDHex(), want)
			}
			want := readelfSections(t, so.path)
			got := o.Sections()
			if len(got) != len(want) {
				t.Fatalf("%d sections, readelf lists %d", len(got), len(want))
			}
			plts := map[string]Range{}
			for i, w := range want {
				g := got[i]
				if w.typ == "NULL" {
					continue
				}
				if g.Name != w.name || g.Addr != w.addr || g.Offset != w.off || g.Size != w.size {
					t.Errorf("section %d = %+v, readelf: %+v", i, g, w)
				}
				switch w.name {
				case ".plt", ".plt.sec", ".plt.got", ".iplt":
					if w.size > 0 && strings.Contains(w.flags, "X") {
						plts[w.name] = Range{w.addr, w.addr + w.size}
					}
				}
			}
			gotPLT := o.PLTs()
			if len(gotPLT) != len(plts) || len(plts) == 0 {
				t.Errorf("PLTs = %v, readelf: %v", gotPLT, plts)
			}
			for n, r := range plts {
				if gotPLT[n] != r {
					t.Errorf("PLT %s = %v, readelf: %v", n, gotPLT[n], r)
				}
			}
			loads := readelfLoads(t, so.path)
			if len(loads) != len(o.LoadSegments()) {
				t.Errorf("%d PT_LOAD, readelf: %d", len(o.LoadSegments()), len(loads))
			}
		})
	}
}

// TestBias checks Bias for mappings laid out as ld.so maps each PT_LOAD
// segment listed by readelf -l, at a random-looking load base.
func TestBias(t *testing.T) {
	for _, so := range systemObjects {
		t.Run(strings.ReplaceAll(so.path, "/", "_"), func(t *testing.T) {
			needFile(t, so.path)
			o := mustOpen(t, so.path, Options{})
			const base = 0x7f3a12340000
			for _, page := range []uint64{0x1000, 0x10000} {
				for _, l := range readelfLoads(t, so.path) {
					mapOff := l.off &^ (page - 1)
					mapStart := (base + l.vaddr) &^ (page - 1)
					var prot elf.ProgFlag
					for _, c := range l.flags {
						switch c {
						case 'R':
							prot |= elf.PF_R
						case 'W':
							prot |= elf.PF_W
						case 'E':
							prot |= elf.PF_X
						}
					}
					b, ok := o.BiasProt(mapStart, mapOff, prot)
					if !ok || b != base {
						t.Errorf("page %#x: BiasProt(%#x, %#x, %v) = %#x, %v; want %#x (segment off %#x vaddr %#x)",
							page, mapStart, mapOff, prot, b, ok, uint64(base), l.off, l.vaddr)
					}
					if prot&elf.PF_X != 0 {
						if b, ok := o.Bias(mapStart, mapOff); !ok || b != base {
							t.Errorf("Bias(%#x, %#x) = %#x, %v; want %#x", mapStart, mapOff, b, ok, uint64(base))
						}
					}
				}
			}
			if _, ok := o.Bias(base, 1<<40); ok {
				t.Errorf("Bias for an offset beyond the file succeeded")
			}
		})
	}
}

// TestReadCode compares ReadCode with the file bytes at the offsets that
// readelf gives for .text, and checks that .bss reads as zeros.
func TestReadCode(t *testing.T) {
	for _, so := range systemObjects {
		t.Run(strings.ReplaceAll(so.path, "/", "_"), func(t *testing.T) {
			needFile(t, so.path)
			o := mustOpen(t, so.path, Options{})
			file, err := os.ReadFile(so.path)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range readelfSections(t, so.path) {
				switch s.name {
				case ".text", ".plt", ".init", ".fini":
					for _, d := range []uint64{0, 1, s.size / 2, s.size - 16} {
						buf := make([]byte, 16)
						n := o.ReadCode(s.addr+d, buf)
						if n != 16 || !bytes.Equal(buf, file[s.off+d:s.off+d+16]) {
							t.Errorf("ReadCode(%s+%#x) = %d %x, file has %x", s.name, d, n, buf[:n], file[s.off+d:s.off+d+16])
						}
					}
				case ".bss":
					buf := bytes.Repeat([]byte{0xaa}, 8)
					if n := o.ReadCode(s.addr, buf); n != 8 || !bytes.Equal(buf, make([]byte, 8)) {
						t.Errorf("ReadCode(.bss) = %d %x", n, buf)
					}
				}
			}
			if n := o.ReadCode(1<<62, make([]byte, 4)); n != 0 {
				t.Errorf("ReadCode outside the object = %d", n)
			}
			// A read that runs past the end of the last segment is cut.
			segs := o.LoadSegments()
			last := segs[len(segs)-1]
			if n := o.ReadCode(last.Vaddr+last.Memsz-3, make([]byte, 16)); n != 3 {
				t.Errorf("ReadCode at the end of the last segment = %d, want 3", n)
			}
		})
	}
}

// TestSymbolsVsNM checks that every dynamic function symbol nm -D lists is
// found by Symbolize at offset 0 under one of its aliases, and that the
// last byte of sized symbols resolves to the same symbol.
func TestSymbolsVsNM(t *testing.T) {
	for _, so := range systemObjects {
		t.Run(strings.ReplaceAll(so.path, "/", "_"), func(t *testing.T) {
			needFile(t, so.path)
			o := mustOpen(t, so.path, Options{NoDebugFile: true})
			checkSymbols(t, o, nmSyms(t, nmFor(so.arch), "-D", so.path))
		})
	}
}

// checkSymbols checks Symbolize against nm's view of the same symbols.
func checkSymbols(t *testing.T, o *Object, syms []nmSym) {
	t.Helper()
	// nm's W and w include weak symbols outside code.
	var exec []Range
	for _, s := range o.Sections() {
		if s.Flags&elf.SHF_EXECINSTR != 0 && s.Flags&elf.SHF_ALLOC != 0 {
			exec = append(exec, Range{s.Addr, s.Addr + s.Size})
		}
	}
	code := syms[:0:0]
	for _, s := range syms {
		for _, r := range exec {
			if r.Contains(s.addr) {
				code = append(code, s)
				break
			}
		}
	}
	syms = code
	if len(syms) == 0 {
		t.Fatal("nm listed no symbols")
	}
	aliases := map[uint64]map[string]bool{}
	starts := []uint64{}
	for _, s := range syms {
		if aliases[s.addr] == nil {
			aliases[s.addr] = map[string]bool{}
			starts = append(starts, s.addr)
		}
		aliases[s.addr][s.name] = true
	}
	bad := 0
	for _, s := range syms {
		name, off, ok := o.Symbolize(s.addr)
		full := name
		// Static glibc symbols carry .symver names ("fclose@@GLIBC_2.2.5")
		// in the string table; nm prints them without the version.
		if i := strings.IndexByte(name, '@'); i > 0 && !aliases[s.addr][name] {
			name = name[:i]
		}
		if !ok || off != 0 || !aliases[s.addr][name] {
			if bad++; bad < 10 {
				t.Errorf("Symbolize(%#x) = %q+%#x %v; nm: %q (aliases %v)", s.addr, name, off, ok, s.name, aliases[s.addr])
			}
			continue
		}
		if s.sized && s.size > 1 {
			// Skip symbols with another symbol starting inside them.
			inner := false
			for _, a := range starts {
				if a > s.addr && a < s.addr+s.size {
					inner = true
					break
				}
			}
			if inner {
				continue
			}
			name2, off2, ok2 := o.Symbolize(s.addr + s.size - 1)
			if !ok2 || name2 != full || off2 != s.size-1 {
				if bad++; bad < 10 {
					t.Errorf("Symbolize(%#x, end of %s) = %q+%#x %v", s.addr+s.size-1, name, name2, off2, ok2)
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d symbols wrong", bad, len(syms))
	}
	t.Logf("%d nm symbols checked, table has %d", len(syms), len(o.Symbols()))
}

// TestSymbolizeVsGDB symbolizes a sample of addresses inside libc's
// functions and compares with gdb's "info symbol" (gdb, like the object,
// reads the symbol table of the separate debug file when one is installed).
func TestSymbolizeVsGDB(t *testing.T) {
	needFile(t, libcAMD64)
	needTool(t, "gdb")
	lib := libcAMD64
	o := mustOpen(t, lib, Options{})
	syms := o.Symbols()
	args := []string{"-batch", "-nx", lib}
	var want []uint64
	for i := 0; i < len(syms); i += len(syms)/100 + 1 {
		s := syms[i]
		a := s.Addr + s.Size/3
		args = append(args, "-ex", "info symbol 0x"+strconvHex(a))
		want = append(want, a)
	}
	compareSymbolizer(t, o, want, strings.Split(strings.TrimSpace(run(t, "gdb", args...)), "\n"), gdbLine)
}

// gdbLine parses "NAME + OFF in section .text" or "NAME in section .text".
func gdbLine(line string) (string, uint64, bool) {
	f := strings.Fields(line)
	if len(f) >= 4 && f[1] == "in" {
		return f[0], 0, true
	}
	if len(f) >= 6 && f[1] == "+" {
		v, err := strconv.ParseUint(f[2], 10, 64)
		return f[0], v, err == nil
	}
	return "", 0, false
}

// compareSymbolizer compares Symbolize with another tool's name and offset
// for each address; a different name is accepted when it is an alias at the
// same start address.
func compareSymbolizer(t *testing.T, o *Object, addrs []uint64, lines []string, parse func(string) (string, uint64, bool)) {
	t.Helper()
	if len(lines) != len(addrs) {
		t.Fatalf("%d lines of output for %d addresses:\n%s", len(lines), len(addrs), strings.Join(lines, "\n"))
	}
	same, alias := 0, 0
	for i, a := range addrs {
		name, off, ok := o.Symbolize(a)
		tname, toff, tok := parse(lines[i])
		switch {
		case !ok || !tok:
			t.Errorf("%#x: Symbolize = %q+%#x %v; tool: %q", a, name, off, ok, lines[i])
		case name == tname && off == toff:
			same++
		case off == toff:
			alias++ // another alias at the same start address
		default:
			t.Errorf("%#x: Symbolize = %s+%#x; tool: %s+%#x", a, name, off, tname, toff)
		}
	}
	t.Logf("%d addresses: %d same name, %d an alias at the same address", len(addrs), same, alias)
}

// TestDebugFileSymbols checks the symbols read from libc's separate debug
// file (libc6-dbg) against nm on that file.
func TestDebugFileSymbols(t *testing.T) {
	needFile(t, libcAMD64)
	o := mustOpen(t, libcAMD64, Options{})
	id := o.BuildIDHex()
	dbg := "/usr/lib/debug/.build-id/" + id[:2] + "/" + id[2:] + ".debug"
	needFile(t, dbg)
	if o.DebugPath() != dbg {
		t.Fatalf("DebugPath = %q, want %q", o.DebugPath(), dbg)
	}
	checkSymbols(t, o, nmSyms(t, "nm", dbg))
	// Without the debug file only .dynsym is used: fewer symbols.
	o2 := mustOpen(t, libcAMD64, Options{NoDebugFile: true})
	if n1, n2 := len(o.Symbols()), len(o2.Symbols()); n1 <= n2 {
		t.Errorf("with debug file %d symbols, without %d", n1, n2)
	}
}

func strconvHex(v uint64) string {
	const digits = "0123456789abcdef"
	var b [16]byte
	i := len(b)
	for {
		i--
		b[i] = digits[v&15]
		v >>= 4
		if v == 0 {
			break
		}
	}
	return string(b[i:])
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	notELF := dir + "/notelf"
	os.WriteFile(notELF, []byte("#!/bin/sh\necho hello\n"), 0o644)
	empty := dir + "/empty"
	os.WriteFile(empty, nil, 0o644)
	for _, p := range []string{notELF, empty, dir + "/missing", dir} {
		_, err := Open(p, Options{})
		var e *Error
		if !errors.As(err, &e) || e.Path != p || !strings.Contains(err.Error(), p) {
			t.Errorf("Open(%s) = %v, want an *Error naming the file", p, err)
		}
	}
	needFile(t, libcAMD64)
	data, _ := os.ReadFile(libcAMD64)
	// 32-bit class.
	d32 := append([]byte(nil), data[:4096]...)
	d32[elf.EI_CLASS] = byte(elf.ELFCLASS32)
	if _, err := OpenBytes("x32", d32, Options{}); err == nil {
		t.Errorf("OpenBytes accepted a 32-bit header")
	}
	// Unsupported machine.
	dm := append([]byte(nil), data...)
	dm[18] = byte(elf.EM_RISCV)
	if _, err := OpenBytes("riscv", dm, Options{}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("OpenBytes(riscv) = %v, want ErrUnsupported", err)
	}
	// Truncated: the headers are there but the sections are not.
	tr := dir + "/trunc"
	os.WriteFile(tr, data[:len(data)/2], 0o644)
	if o, err := Open(tr, Options{}); err == nil {
		// Section headers are at the end of the file, so this normally
		// fails; if it opens, every method must still be safe.
		o.Symbolize(0x30000)
		o.Close()
	} else if !strings.Contains(err.Error(), tr) {
		t.Errorf("error %v does not name the file", err)
	}
}

// TestOpenReaderAndNoMmap checks that OpenReader and NoMmap see the same
// object as the mmap path.
func TestOpenReaderAndNoMmap(t *testing.T) {
	needFile(t, libcAMD64)
	a := mustOpen(t, libcAMD64, Options{NoDebugFile: true})
	b := mustOpen(t, libcAMD64, Options{NoDebugFile: true, NoMmap: true})
	f, err := os.Open(libcAMD64)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	c, err := OpenReader(libcAMD64, f, fi.Size(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []*Object{b, c} {
		if o.BuildIDHex() != a.BuildIDHex() {
			t.Errorf("build-id differs")
		}
		sa, so := a.Symbols(), o.Symbols()
		if len(sa) != len(so) {
			t.Fatalf("symbols: %d vs %d", len(sa), len(so))
		}
		for i := range sa {
			if sa[i] != so[i] {
				t.Fatalf("symbol %d: %+v vs %+v", i, sa[i], so[i])
			}
		}
		text := a.PLTs()[".plt"]
		b1, b2 := make([]byte, 64), make([]byte, 64)
		if a.ReadCode(text.Start, b1) != 64 || o.ReadCode(text.Start, b2) != 64 || !bytes.Equal(b1, b2) {
			t.Errorf("ReadCode differs")
		}
	}
}

func TestClosed(t *testing.T) {
	needFile(t, libcAMD64)
	o, err := Open(libcAMD64, Options{})
	if err != nil {
		t.Fatal(err)
	}
	o.Close()
	o.Close()
	if _, _, ok := o.Symbolize(0x30000); ok {
		t.Error("Symbolize after Close")
	}
	if n := o.ReadCode(0x30000, make([]byte, 4)); n != 0 {
		t.Error("ReadCode after Close")
	}
	if err := o.FindRow(0x30000, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("FindRow after Close = %v", err)
	}
}

// Object is what the unwinder needs.
var _ unwinder.Object = (*Object)(nil)
