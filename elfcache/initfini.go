package elfcache

import "debug/elf"

// InitFiniEntry returns the link-time address the file holds in the 8-byte
// slot at link-time address addr of its .preinit_array, .init_array or
// .fini_array (the constructors and destructors the dynamic loader calls
// through them), and false where addr is no such slot or cannot be read.
// For a position-independent object the slot holds what its R_*_RELATIVE
// relocation adds to the load bias, as GNU ld writes it; where a linker
// left 0 there (lld's default), no function's address matches.
// It implements unwinder.InitFiniObject.
func (o *Object) InitFiniEntry(addr uint64) (uint64, bool) {
	if o.closed.Load() || o.ef == nil || o.ef.Class != elf.ELFCLASS64 || addr&7 != 0 {
		return 0, false
	}
	for _, s := range o.ef.Sections {
		if !initFiniSection(s) {
			continue
		}
		if addr < s.Addr || addr-s.Addr >= s.Size || s.Size-(addr-s.Addr) < 8 {
			continue
		}
		var b [8]byte
		if o.ReadCode(addr, b[:]) != len(b) {
			return 0, false
		}
		return o.ef.ByteOrder.Uint64(b[:]), true
	}
	return 0, false
}

// initFiniSection reports whether s is a .preinit_array, .init_array or
// .fini_array: an array of functions the dynamic loader calls.
func initFiniSection(s *elf.Section) bool {
	switch s.Type {
	case elf.SHT_INIT_ARRAY, elf.SHT_FINI_ARRAY, elf.SHT_PREINIT_ARRAY:
		return true
	}
	return false
}
