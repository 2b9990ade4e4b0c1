package elfcache

import (
	"debug/elf"
	"testing"
)

// TestSymbolAliasGoSection: at cgo's crosscall1 and threadentry, Go's
// internal linker also writes runtime/cgo(.text), a sized FUNC naming the
// host object's text section; the function's own name is kept, sized or
// not, global or local (gdb names them so). Among other aliases a sized
// symbol still wins over a zero-size one.
func TestSymbolAliasGoSection(t *testing.T) {
	cands := []candidate{
		{addr: 0x401100, size: 31, name: []byte("runtime/cgo(.text)"), bind: uint8(elf.STB_LOCAL), typ: uint8(elf.STT_FUNC)},
		{addr: 0x401100, size: 0, secEnd: 0x410000, name: []byte("crosscall1"), bind: uint8(elf.STB_GLOBAL), typ: uint8(elf.STT_NOTYPE)},
		{addr: 0x401540, size: 373, name: []byte("runtime/cgo(.text)"), bind: uint8(elf.STB_LOCAL), typ: uint8(elf.STT_FUNC)},
		{addr: 0x401540, size: 45, name: []byte("threadentry"), bind: uint8(elf.STB_LOCAL), typ: uint8(elf.STT_FUNC)},
		{addr: 0x402000, size: 0, secEnd: 0x410000, name: []byte("label"), bind: uint8(elf.STB_GLOBAL), typ: uint8(elf.STT_NOTYPE)},
		{addr: 0x402000, size: 16, name: []byte("sized"), bind: uint8(elf.STB_LOCAL), typ: uint8(elf.STT_FUNC)},
	}
	tab := buildSymtab(cands)
	want := map[uint64]string{0x401100: "crosscall1", 0x401540: "threadentry", 0x402000: "sized"}
	for _, e := range tab.syms {
		name := tab.names[e.nameOff : e.nameOff+e.nameLen]
		if w, ok := want[e.addr]; ok && name != w {
			t.Errorf("%#x: %q, want %q", e.addr, name, w)
		}
		delete(want, e.addr)
	}
	if len(want) > 0 {
		t.Errorf("no symbol at %v", want)
	}
}
