package coredump

import (
	"debug/elf"
	"fmt"
	"strings"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/unwinder"
)

// mapExecutable takes the program's executable at path (Options.Executable)
// as mapped where the auxiliary vector says, for a core that lists no
// mapped files: qemu-user's cores have no NT_FILE note, and without one no
// object is known at any address. As gdb does with the program it is
// given, the executable's PT_LOAD segments are placed at the bias that
// takes its entry point to AT_ENTRY; the file must be the core's program
// as far as the core can tell: its machine, its entry (for a fixed-address
// executable), AT_PHDR and AT_PHNUM where the core has them, and an
// executable segment of the core at AT_ENTRY. The mappings it adds are the
// file-backed parts of the segments, as NT_FILE would list them; the
// shared libraries are found next (mapLibraries, from the address of the
// dynamic section it returns: 0 for a static executable).
func (c *Core) mapExecutable(path string, segs []segment) (dynamic uint64, err error) {
	entry, ok := c.AuxvValue(AT_ENTRY)
	if !ok {
		return 0, fmt.Errorf("%s lists no mapped files (no NT_FILE note) and has no AT_ENTRY: where %s is mapped is unknown", c.File, path)
	}
	f, err := elf.Open(path)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	want := map[arch.Arch]elf.Machine{arch.AMD64: elf.EM_X86_64, arch.ARM64: elf.EM_AARCH64}[c.Arch]
	if f.Machine != want || f.Class != elf.ELFCLASS64 {
		return 0, fmt.Errorf("%s: %v %v, but %s is an %v core: not its program", path, f.Class, f.Machine, c.File, c.Arch)
	}
	var bias uint64
	switch f.Type {
	case elf.ET_EXEC:
		if entry != f.Entry {
			return 0, fmt.Errorf("%s: its entry point is %#x, but %s's AT_ENTRY is %#x: not its program", path, f.Entry, c.File, entry)
		}
	case elf.ET_DYN:
		bias = entry - f.Entry
		if bias%c.PageSize != 0 {
			return 0, fmt.Errorf("%s: its entry point %#x is not at a page offset of %s's AT_ENTRY %#x: not its program", path, f.Entry, c.File, entry)
		}
	default:
		return 0, fmt.Errorf("%s: an ELF file of type %v, not an executable", path, f.Type)
	}
	if n, ok := c.AuxvValue(AT_PHNUM); ok && n != uint64(len(f.Progs)) {
		return 0, fmt.Errorf("%s: %d program headers, but %s's AT_PHNUM is %d: not its program", path, len(f.Progs), c.File, n)
	}
	if at, ok := c.AuxvValue(AT_PHDR); ok {
		for _, p := range f.Progs {
			if p.Type == elf.PT_PHDR && p.Vaddr+bias != at {
				return 0, fmt.Errorf("%s: its program headers would be at %#x, but %s's AT_PHDR is %#x: not its program", path, p.Vaddr+bias, c.File, at)
			}
		}
	}
	held := false
	for i := range segs {
		if s := &segs[i]; entry-s.vaddr < s.memsz && s.flags&pfX != 0 {
			held = true
		}
	}
	if !held {
		return 0, fmt.Errorf("%s: no executable segment holds AT_ENTRY %#x: where %s is mapped is unknown", c.File, entry, path)
	}
	c.addSegments(f, bias, path)
	for _, p := range f.Progs {
		if p.Type == elf.PT_DYNAMIC {
			dynamic = p.Vaddr + bias
		}
	}
	return dynamic, nil
}

// addSegments adds the file-backed parts of f's PT_LOAD segments, mapped
// at bias, to c.Mappings, as NT_FILE would list them.
func (c *Core) addSegments(f *elf.File, bias uint64, path string) {
	page := c.PageSize
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Filesz == 0 {
			continue
		}
		start := (p.Vaddr + bias) &^ (page - 1)
		end := (p.Vaddr + bias + p.Filesz + page - 1) &^ (page - 1)
		c.Mappings = append(c.Mappings, Mapping{Start: start, End: end, FileOffset: p.Off &^ (page - 1), Path: path})
	}
}

// Library is a shared library the dynamic linker's list in a core's memory
// names (Core.Libraries).
type Library struct {
	// Path is the library's name in the list (the path it was loaded
	// from); Base is its load bias (l_addr).
	Path string
	Base uint64
	// Err says why its file's segments were not taken as mapped: the
	// file cannot be read (under Options.SymFS or through
	// Options.OpenMapped), or it is not the file the process loaded (its
	// dynamic section would not be where the list says).
	Err error
}

// Bounds of the walk of the dynamic linker's list.
const (
	maxDynamic   = 4096 // entries of the executable's dynamic section
	maxLibraries = 4096 // entries of the list
)

// mapLibraries finds the shared libraries of a core mapped by
// mapExecutable as gdb does: the executable's DT_DEBUG entry, which the
// dynamic linker points at its r_debug, whose r_map heads the list of
// loaded objects (link_map: l_addr, l_name, l_ld, l_next). Each library
// whose file's dynamic section lies where the list's l_ld says is taken as
// mapped at l_addr; the others are listed with why not. A relative name
// (dlopen("./x.so")) is relative to the process's working directory, which
// the core does not record: it is looked for as gdb does, relative to the
// symfs root or, without one, to ustack's own directory. Everything is
// read from the core's dumped memory, each read bounded.
func (c *Core) mapLibraries(dynamic uint64) {
	if dynamic == 0 {
		return // a static executable
	}
	var rdebug uint64
	for i := uint64(0); i < maxDynamic; i++ {
		tag, st1 := c.mem.ReadUint64(dynamic + 16*i)
		val, st2 := c.mem.ReadUint64(dynamic + 16*i + 8)
		if st1 != unwinder.MemOK || st2 != unwinder.MemOK || tag == uint64(elf.DT_NULL) {
			break
		}
		if tag == uint64(elf.DT_DEBUG) {
			rdebug = val
			break
		}
	}
	if rdebug == 0 {
		return // no dynamic linker ran, or it has not filled DT_DEBUG
	}
	lm, st := c.mem.ReadUint64(rdebug + 8) // r_map
	seen := map[uint64]bool{}
	for n := 0; st == unwinder.MemOK && lm != 0 && !seen[lm] && n < maxLibraries; n++ {
		seen[lm] = true
		base, s1 := c.mem.ReadUint64(lm)
		nameAt, s2 := c.mem.ReadUint64(lm + 8)
		ld, s3 := c.mem.ReadUint64(lm + 16)
		next, s4 := c.mem.ReadUint64(lm + 24)
		if s1 != unwinder.MemOK || s2 != unwinder.MemOK || s3 != unwinder.MemOK || s4 != unwinder.MemOK {
			break
		}
		lm = next
		name, err := c.mem.ReadCString(nameAt, 4096)
		if err != nil || !strings.Contains(name, "/") {
			continue // the executable (""), the vdso ("linux-vdso.so.1")
		}
		lib := Library{Path: name, Base: base}
		lib.Err = c.mapLibrary(name, base, ld)
		if lib.Err != nil && !strings.HasPrefix(name, "/") {
			// dlopen("./x.so"): the name is relative to the
			// process's working directory, which the core does not
			// record; it was looked for as gdb does, relative to
			// ustack's (or the symfs root).
			lib.Err = fmt.Errorf("a path relative to the process's working directory, which the core does not record: %w", lib.Err)
		}
		c.Libraries = append(c.Libraries, lib)
	}
}

// mapLibrary maps the library at path, loaded at bias base with its
// dynamic section at ld, or says why it cannot.
func (c *Core) mapLibrary(path string, base, ld uint64) error {
	r, err := c.mem.files.openFile(path)
	if err != nil {
		return err
	}
	defer closeReader(r)
	f, err := elf.NewFile(r)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_DYNAMIC {
			if p.Vaddr+base != ld {
				return fmt.Errorf("%s: its dynamic section would be at %#x, where the process's list says %#x: not the file it loaded", path, p.Vaddr+base, ld)
			}
			c.addSegments(f, base, path)
			return nil
		}
	}
	return fmt.Errorf("%s: no dynamic section: not the library the process loaded", path)
}
