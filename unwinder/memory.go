package unwinder

import "encoding/binary"

// Region is a block of captured user memory starting at Addr.
type Region struct {
	Addr uint64
	Data []byte
}

// Stack is the user memory captured with a sample: the stack snapshot that
// starts at the stack pointer, and optionally further regions (for example
// the thread stack interrupted by a signal delivered on a sigaltstack). The
// unwinder reads nothing outside these regions.
type Stack struct {
	// Addr is the address of Data[0], normally the captured stack pointer.
	Addr uint64
	// Data is the snapshot.
	Data []byte
	// Extra holds further captured regions; usually empty.
	Extra []Region
}

// memStatus says why a read failed.
type memStatus uint8

const (
	memOK memStatus = iota
	memTruncated
	memOutside
)

// read8 reads a little-endian 8-byte word from the captured memory. The
// common case, a word inside the main snapshot, is small enough to inline.
func (s *Stack) read8(addr uint64) (uint64, memStatus) {
	// off wraps around for addresses below the snapshot; off+8 <= off
	// catches the few that wrap back into range.
	if off := addr - s.Addr; off+8 <= uint64(len(s.Data)) && off+8 > off {
		return binary.LittleEndian.Uint64(s.Data[off:]), memOK
	}
	return s.read8Slow(addr)
}

//go:noinline
func (s *Stack) read8Slow(addr uint64) (uint64, memStatus) {
	for i := range s.Extra {
		if v, ok := readRegion(s.Extra[i].Addr, s.Extra[i].Data, addr); ok {
			return v, memOK
		}
	}
	// An address at or above the snapshot's end lies in the part of the
	// stack that was not captured; one below the snapshot's start is not
	// stack at all (the stack pointer bounds the live stack).
	if addr >= s.Addr {
		return 0, memTruncated
	}
	return 0, memOutside
}

func readRegion(base uint64, data []byte, addr uint64) (uint64, bool) {
	if addr < base {
		return 0, false
	}
	off := addr - base
	if off > uint64(len(data)) || uint64(len(data))-off < 8 {
		return 0, false
	}
	return binary.LittleEndian.Uint64(data[off:]), true
}

// ReadUint64 implements cfi.Memory for DWARF expressions, reading only the
// captured memory.
func (s *Stack) ReadUint64(addr uint64) (uint64, bool) {
	v, st := s.read8(addr)
	return v, st == memOK
}
