package coredump

import (
	"debug/elf"
	"fmt"

	"github.com/ustack/ustack/arch"
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
// file-backed parts of the segments, as NT_FILE would list them; shared
// libraries stay unknown.
func (c *Core) mapExecutable(path string, segs []segment) error {
	entry, ok := c.AuxvValue(AT_ENTRY)
	if !ok {
		return fmt.Errorf("%s lists no mapped files (no NT_FILE note) and has no AT_ENTRY: where %s is mapped is unknown", c.File, path)
	}
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	want := map[arch.Arch]elf.Machine{arch.AMD64: elf.EM_X86_64, arch.ARM64: elf.EM_AARCH64}[c.Arch]
	if f.Machine != want || f.Class != elf.ELFCLASS64 {
		return fmt.Errorf("%s: %v %v, but %s is an %v core: not its program", path, f.Class, f.Machine, c.File, c.Arch)
	}
	var bias uint64
	switch f.Type {
	case elf.ET_EXEC:
		if entry != f.Entry {
			return fmt.Errorf("%s: its entry point is %#x, but %s's AT_ENTRY is %#x: not its program", path, f.Entry, c.File, entry)
		}
	case elf.ET_DYN:
		bias = entry - f.Entry
		if bias%c.PageSize != 0 {
			return fmt.Errorf("%s: its entry point %#x is not at a page offset of %s's AT_ENTRY %#x: not its program", path, f.Entry, c.File, entry)
		}
	default:
		return fmt.Errorf("%s: an ELF file of type %v, not an executable", path, f.Type)
	}
	if n, ok := c.AuxvValue(AT_PHNUM); ok && n != uint64(len(f.Progs)) {
		return fmt.Errorf("%s: %d program headers, but %s's AT_PHNUM is %d: not its program", path, len(f.Progs), c.File, n)
	}
	if at, ok := c.AuxvValue(AT_PHDR); ok {
		for _, p := range f.Progs {
			if p.Type == elf.PT_PHDR && p.Vaddr+bias != at {
				return fmt.Errorf("%s: its program headers would be at %#x, but %s's AT_PHDR is %#x: not its program", path, p.Vaddr+bias, c.File, at)
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
		return fmt.Errorf("%s: no executable segment holds AT_ENTRY %#x: where %s is mapped is unknown", c.File, entry, path)
	}
	page := c.PageSize
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Filesz == 0 {
			continue
		}
		start := (p.Vaddr + bias) &^ (page - 1)
		end := (p.Vaddr + bias + p.Filesz + page - 1) &^ (page - 1)
		c.Mappings = append(c.Mappings, Mapping{Start: start, End: end, FileOffset: p.Off &^ (page - 1), Path: path})
	}
	return nil
}
