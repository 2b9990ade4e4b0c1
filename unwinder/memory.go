package unwinder

import (
	"encoding/binary"
	"fmt"
	"io"
	"sort"
)

// MemStatus says whether a read of process memory succeeded and, if not, why.
// The unwinder turns a failed read of a value it needs into a stop reason, so
// the distinction matters: a snapshot that was cut short is expected, an
// address outside every region means a wrong rule or a corrupt stack.
type MemStatus uint8

const (
	// MemOK: the word was read.
	MemOK MemStatus = iota
	// MemTruncated: the address lies in memory the process had but the
	// capture did not keep, such as the stack above the end of a snapshot
	// or the part of a core dump segment that was not written. The unwind
	// ends with StopTruncated.
	MemTruncated
	// MemOutside: the address lies in no memory the capture describes
	// (below the stack pointer, or in no segment of a core). The unwind
	// ends with StopBadMemory.
	MemOutside
)

// Memory is the process memory that Unwind reads: saved registers, return
// addresses, signal frames and the operands of DW_OP_deref. The caller owns
// it and implements it for what it captured (a stack snapshot, a core dump's
// segments, a live process); the unwinder holds only rules and caches.
//
// Stack is the implementation for perf samples, and Unwind reads a *Stack's
// snapshot directly, without a call per word; Segments serves a sparse list
// of memory blocks such as a core dump's. An implementation may be called
// from several goroutines at once when the caller unwinds in parallel.
type Memory interface {
	// ReadUint64 returns the little-endian 8-byte word at addr, or a
	// status other than MemOK saying why it cannot.
	ReadUint64(addr uint64) (uint64, MemStatus)
}

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

// ReadUint64 implements Memory. An address at or above the snapshot's start
// that no region holds is MemTruncated (the stack goes on beyond what was
// captured); one below it is MemOutside (the stack pointer bounds the live
// stack).
func (s *Stack) ReadUint64(addr uint64) (uint64, MemStatus) {
	// off wraps around for addresses below the snapshot; off+8 <= off
	// catches the few that wrap back into range.
	if off := addr - s.Addr; off+8 <= uint64(len(s.Data)) && off+8 > off {
		return binary.LittleEndian.Uint64(s.Data[off:]), MemOK
	}
	return s.readSlow(addr)
}

//go:noinline
func (s *Stack) readSlow(addr uint64) (uint64, MemStatus) {
	for i := range s.Extra {
		if v, ok := readRegion(s.Extra[i].Addr, s.Extra[i].Data, addr); ok {
			return v, MemOK
		}
	}
	if addr >= s.Addr {
		return 0, MemTruncated
	}
	return 0, MemOutside
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

// Segment is one block of process memory in a Segments list.
type Segment struct {
	// Addr is the address of the segment's first byte.
	Addr uint64
	// Size is the segment's length in the process (a core's p_memsz).
	Size uint64
	// Data holds the captured bytes from Addr on (a core's p_filesz of
	// them). It may be shorter than Size: the rest was not captured.
	Data []byte
	// File, when not nil, supplies the bytes beyond Data when they are
	// first read: the byte at Addr+i, for i >= len(Data), is the byte at
	// offset FileOffset+i of File. A core reader sets it for file-backed
	// mappings whose pages the dump left out (read-only code and data, as
	// they are in the mapped file). Reading it allocates.
	File       io.ReaderAt
	FileOffset int64
}

// Segments is a Memory made of sparse, non-overlapping segments, such as the
// PT_LOAD segments of a core dump. An address in no segment is MemOutside;
// one in a segment but beyond its Data, with no File to read it from (or a
// File that cannot supply it), is MemTruncated. It is read-only once built
// and safe for concurrent use.
type Segments struct {
	segs []Segment // sorted by Addr, non-overlapping, Size > 0
}

// NewSegments returns the Segments holding a copy of segs, sorted by address.
// Empty segments are dropped. It fails when a segment's Data is longer than
// its Size, when a segment wraps past the end of the address space, or when
// two segments overlap.
func NewSegments(segs []Segment) (*Segments, error) {
	out := make([]Segment, 0, len(segs))
	for _, s := range segs {
		if s.Size == 0 {
			continue
		}
		if uint64(len(s.Data)) > s.Size {
			return nil, fmt.Errorf("unwinder: segment at %#x holds %#x bytes of data, more than its size %#x", s.Addr, len(s.Data), s.Size)
		}
		if s.Addr+s.Size < s.Addr {
			return nil, fmt.Errorf("unwinder: segment at %#x of size %#x wraps past the end of the address space", s.Addr, s.Size)
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	for i := 0; i+1 < len(out); i++ {
		if out[i].Addr+out[i].Size > out[i+1].Addr {
			return nil, fmt.Errorf("unwinder: segments at %#x (size %#x) and %#x overlap", out[i].Addr, out[i].Size, out[i+1].Addr)
		}
	}
	return &Segments{segs: out}, nil
}

// find returns the index of the segment containing addr, or -1.
func (m *Segments) find(addr uint64) int {
	// sort.Search, without its call per probe: the first segment that
	// ends above addr.
	lo, hi := 0, len(m.segs)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if m.segs[mid].Addr+m.segs[mid].Size <= addr {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < len(m.segs) && m.segs[lo].Addr <= addr {
		return lo
	}
	return -1
}

// ReadUint64 implements Memory.
func (m *Segments) ReadUint64(addr uint64) (uint64, MemStatus) {
	i := m.find(addr)
	if i < 0 {
		return 0, MemOutside
	}
	s := &m.segs[i]
	if off := addr - s.Addr; off+8 <= uint64(len(s.Data)) && off+8 > off {
		return binary.LittleEndian.Uint64(s.Data[off:]), MemOK
	}
	// The word reaches beyond the segment's data: read it byte range by
	// byte range, through the segment's File and the next segment.
	var buf [8]byte
	if st := m.read(i, addr, buf[:]); st != MemOK {
		return 0, st
	}
	return binary.LittleEndian.Uint64(buf[:]), MemOK
}

// read fills buf with the bytes at addr, which lies in segment i.
func (m *Segments) read(i int, addr uint64, buf []byte) MemStatus {
	for len(buf) > 0 {
		if i >= len(m.segs) || addr < m.segs[i].Addr {
			return MemOutside // a gap between segments
		}
		s := &m.segs[i]
		off := addr - s.Addr
		n := min(uint64(len(buf)), s.Size-off)
		if off < uint64(len(s.Data)) {
			n = min(n, uint64(len(s.Data))-off)
			copy(buf, s.Data[off:off+n])
		} else {
			if s.File == nil || off > uint64(1<<63-1)-uint64(s.FileOffset) {
				return MemTruncated
			}
			if k, _ := s.File.ReadAt(buf[:n], s.FileOffset+int64(off)); uint64(k) != n {
				return MemTruncated
			}
		}
		buf, addr = buf[n:], addr+n
		if off+n == s.Size {
			i++ // the word goes on in the next segment, if it is adjacent
		}
	}
	return MemOK
}

// around returns the segment data containing addr, as the window Unwind
// reads directly (nil when addr is in no segment's data).
func (m *Segments) around(addr uint64) (base uint64, data []byte) {
	if i := m.find(addr); i >= 0 && addr-m.segs[i].Addr < uint64(len(m.segs[i].Data)) {
		return m.segs[i].Addr, m.segs[i].Data
	}
	return 0, nil
}

// window is the memory an unwind reads: a block read directly (a *Stack's
// snapshot, or the core segment holding the stack pointer) and, for every
// other address, the caller's Memory.
type window struct {
	addr uint64
	data []byte
	more Memory
	// restored has bit r set by applyFast when it kept register r's
	// value because the row put its save slot below the frame's SP (see
	// FrameRestoredRegister); the unwind loop clears it.
	restored uint64
	// beyond is the address of the last word read beyond the captured
	// memory (MemTruncated): the one that ended a truncated walk
	// (Result.Beyond).
	beyond uint64
}

// set makes w read mem, directly where it can; sp is the first frame's stack
// pointer.
func (w *window) set(mem Memory, sp uint64) {
	switch m := mem.(type) {
	case nil:
		w.reset(0, nil, noMemory{})
	case *Stack:
		if m == nil {
			w.reset(0, nil, noMemory{})
			return
		}
		w.reset(m.Addr, m.Data, mem)
	case *Segments:
		if m == nil {
			w.reset(0, nil, noMemory{})
			return
		}
		base, data := m.around(sp)
		w.reset(base, data, mem)
	default:
		w.reset(0, nil, mem)
	}
}

// reset gives w a block and the Memory behind it, and clears the rest: field
// by field, as *w = window{...} built the literal aside and copied it
// whole, a store-forwarding stall on every Unwind of a core's memory (10%
// of the SegmentsX86SyscallGCC benchmark).
func (w *window) reset(addr uint64, data []byte, more Memory) {
	w.addr, w.data, w.more = addr, data, more
	w.restored, w.beyond = 0, 0
}

// read8 reads the word at addr. The common case, a word inside the window,
// is small enough to inline.
func (w *window) read8(addr uint64) (uint64, MemStatus) {
	if off := addr - w.addr; off+8 <= uint64(len(w.data)) && off+8 > off {
		return binary.LittleEndian.Uint64(w.data[off:]), MemOK
	}
	return w.readSlow(addr)
}

//go:noinline
func (w *window) readSlow(addr uint64) (uint64, MemStatus) {
	v, ms := w.more.ReadUint64(addr)
	if ms == MemTruncated {
		w.beyond = addr
	}
	return v, ms
}

// holds reports whether the captured memory holds the word at addr,
// without noting a read beyond it.
func (w *window) holds(addr uint64) bool {
	if off := addr - w.addr; off+8 <= uint64(len(w.data)) && off+8 > off {
		return true
	}
	_, ms := w.more.ReadUint64(addr)
	return ms == MemOK
}

// noMemory is the Memory of an unwind given none.
type noMemory struct{}

func (noMemory) ReadUint64(uint64) (uint64, MemStatus) { return 0, MemOutside }
