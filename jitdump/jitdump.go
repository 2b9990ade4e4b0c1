package jitdump

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
)

// Magic is the first word of a jitdump file, 'JiTD' as a 32-bit number in
// the writer's byte order.
const Magic = 0x4A695444

// FlagArchTimestamp in Header.Flags says the records' timestamps are the
// CPU's time-stamp counter rather than CLOCK_MONOTONIC.
const FlagArchTimestamp = 1

// HeaderSize is the size of the file header this package knows; a file's
// Header.Size may be larger (fields added by a later version).
const HeaderSize = 40

// recordHeaderSize is the id, total_size and timestamp every record starts with.
const recordHeaderSize = 16

// RecordType is a record's id.
type RecordType uint32

// The record ids of the specification.
const (
	CodeLoadType      RecordType = 0 // JIT_CODE_LOAD: a function was generated
	CodeMoveType      RecordType = 1 // JIT_CODE_MOVE: a function's code moved
	DebugInfoType     RecordType = 2 // JIT_CODE_DEBUG_INFO: source lines of the next load
	CodeCloseType     RecordType = 3 // JIT_CODE_CLOSE: the JIT closed the dump
	UnwindingInfoType RecordType = 4 // JIT_CODE_UNWINDING_INFO: CFI of the next load
)

// String returns the specification's name of the id.
func (t RecordType) String() string {
	switch t {
	case CodeLoadType:
		return "JIT_CODE_LOAD"
	case CodeMoveType:
		return "JIT_CODE_MOVE"
	case DebugInfoType:
		return "JIT_CODE_DEBUG_INFO"
	case CodeCloseType:
		return "JIT_CODE_CLOSE"
	case UnwindingInfoType:
		return "JIT_CODE_UNWINDING_INFO"
	}
	return "record id " + strconv.FormatUint(uint64(t), 10)
}

// Header is a jitdump file's header.
type Header struct {
	// ByteOrder is the writer's byte order, that of every field.
	ByteOrder binary.ByteOrder
	Version   uint32
	// Size is the header's total_size: where the first record starts.
	Size uint32
	// ElfMach is the ELF e_machine of the generated code (62 x86_64,
	// 183 aarch64).
	ElfMach uint32
	// PID is the process that wrote the dump.
	PID uint32
	// Timestamp is when the dump was created, in the records' clock.
	Timestamp uint64
	// Flags has FlagArchTimestamp or not.
	Flags uint64
}

// Record is one record of a dump. Exactly one of the payload pointers is
// set for the ids that carry one (none for CODE_CLOSE and unknown ids).
type Record struct {
	Type RecordType
	// Offset is the record's offset in the file; Size its total_size.
	Offset int64
	Size   uint32
	// Timestamp is when the JIT wrote the record (Header.Flags says in
	// which clock).
	Timestamp uint64

	Load   *CodeLoad
	Move   *CodeMove
	Debug  *DebugInfo
	Unwind *UnwindingInfo
}

// CodeLoad is a JIT_CODE_LOAD record: a function's code was generated at
// CodeAddr. Its code bytes are in the record.
type CodeLoad struct {
	PID, TID uint32
	// VMA is the function's virtual address (the specification lets it
	// differ from CodeAddr; every known JIT writes the same).
	VMA      uint64
	CodeAddr uint64
	CodeSize uint64
	// CodeIndex is unique per function; a CODE_MOVE refers to it.
	CodeIndex uint64
	Name      string
	// Code is the function's machine code, CodeSize bytes.
	Code []byte
}

// CodeMove is a JIT_CODE_MOVE record: the function loaded with CodeIndex
// moved from OldCodeAddr to NewCodeAddr.
type CodeMove struct {
	PID, TID    uint32
	VMA         uint64
	OldCodeAddr uint64
	NewCodeAddr uint64
	CodeSize    uint64
	CodeIndex   uint64
}

// DebugInfo is a JIT_CODE_DEBUG_INFO record: the source lines of the
// function loaded at CodeAddr by the next CODE_LOAD.
type DebugInfo struct {
	CodeAddr uint64
	// Entries are in the JIT's order (by address, for every known JIT).
	Entries []DebugEntry
}

// DebugEntry is one line of a DebugInfo: the code from Addr up to the next
// entry's Addr comes from File's Line.
type DebugEntry struct {
	Addr    uint64
	Line    uint32
	Discrim uint32
	// File is the source file; an entry the JIT wrote as "same file as
	// before" (0xff) has the previous entry's name.
	File string
}

// UnwindingInfo is a JIT_CODE_UNWINDING_INFO record: the CFI of the
// function of the next CODE_LOAD, as the .eh_frame and .eh_frame_hdr
// sections that perf inject would put after the code.
type UnwindingInfo struct {
	// UnwindingSize is the size of .eh_frame and .eh_frame_hdr together,
	// EHFrameHdrSize that of .eh_frame_hdr, which follows .eh_frame.
	UnwindingSize  uint64
	EHFrameHdrSize uint64
	// MappedSize is how much of the data the JIT mapped after the code
	// (0 when it did not map it).
	MappedSize uint64
	// Data is UnwindingSize bytes: .eh_frame then .eh_frame_hdr.
	Data []byte
}

// EHFrame returns the .eh_frame bytes.
func (u *UnwindingInfo) EHFrame() []byte { return u.Data[:len(u.Data)-int(u.EHFrameHdrSize)] }

// EHFrameHdr returns the .eh_frame_hdr bytes.
func (u *UnwindingInfo) EHFrameHdr() []byte { return u.Data[len(u.Data)-int(u.EHFrameHdrSize):] }

// EHFrameAddr returns where the .eh_frame of code loaded at codeAddr with
// codeSize bytes is taken to be (the .eh_frame_hdr follows it): after the
// code, aligned to 8, as perf inject lays it out and as JITs compute their
// pc-relative pointers.
func EHFrameAddr(codeAddr, codeSize uint64) uint64 { return codeAddr + (codeSize+7)&^7 }

// Error reports a damaged dump: the file, the offset of the damaged
// structure and what was wrong.
type Error struct {
	File   string
	Offset int64
	Msg    string
	// Err is the underlying read error, when there was one.
	Err error
}

// Error formats the error as "FILE: offset 0x…: message".
func (e *Error) Error() string {
	s := fmt.Sprintf("%s: offset %#x: %s", e.File, e.Offset, e.Msg)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying read error.
func (e *Error) Unwrap() error { return e.Err }

// ErrNotJITDump is what NewReader's error unwraps to when the file does not
// start with the jitdump magic.
var ErrNotJITDump = errors.New("not a jitdump file")

// Reader reads the records of one dump in file order.
type Reader struct {
	name   string
	r      io.ReaderAt
	size   int64
	off    int64
	hdr    Header
	err    error
	prefix [recordHeaderSize]byte
}

// NewReader reads the header of the dump of size bytes behind r; name is
// the file's name for errors.
func NewReader(name string, r io.ReaderAt, size int64) (*Reader, error) {
	d := &Reader{name: name, r: r, size: size}
	var b [HeaderSize]byte
	if size < 4 {
		return nil, &Error{File: name, Msg: fmt.Sprintf("%d bytes: no jitdump header", size), Err: ErrNotJITDump}
	}
	if size < HeaderSize {
		if n, _ := r.ReadAt(b[:4], 0); n == 4 && !isMagic(b[:4]) {
			return nil, &Error{File: name, Msg: "no 'JiTD' magic", Err: ErrNotJITDump}
		}
		return nil, &Error{File: name, Msg: fmt.Sprintf("%d bytes: header cut short (%d needed)", size, HeaderSize)}
	}
	if _, err := r.ReadAt(b[:], 0); err != nil {
		return nil, &Error{File: name, Msg: "cannot read the header", Err: err}
	}
	switch {
	case binary.LittleEndian.Uint32(b[:]) == Magic:
		d.hdr.ByteOrder = binary.LittleEndian
	case binary.BigEndian.Uint32(b[:]) == Magic:
		d.hdr.ByteOrder = binary.BigEndian
	default:
		return nil, &Error{File: name, Msg: fmt.Sprintf("magic %#x is not 'JiTD'", binary.LittleEndian.Uint32(b[:])), Err: ErrNotJITDump}
	}
	bo := d.hdr.ByteOrder
	d.hdr.Version = bo.Uint32(b[4:])
	d.hdr.Size = bo.Uint32(b[8:])
	d.hdr.ElfMach = bo.Uint32(b[12:])
	// b[16:20] is padding.
	d.hdr.PID = bo.Uint32(b[20:])
	d.hdr.Timestamp = bo.Uint64(b[24:])
	d.hdr.Flags = bo.Uint64(b[32:])
	if d.hdr.Size < HeaderSize {
		return nil, &Error{File: name, Offset: 8, Msg: fmt.Sprintf("header total_size %d is below the %d bytes of the header", d.hdr.Size, HeaderSize)}
	}
	if int64(d.hdr.Size) > size {
		return nil, &Error{File: name, Offset: 8, Msg: fmt.Sprintf("header total_size %d runs past the end of the file (%d bytes)", d.hdr.Size, size)}
	}
	d.off = int64(d.hdr.Size)
	return d, nil
}

func isMagic(b []byte) bool {
	return binary.LittleEndian.Uint32(b) == Magic || binary.BigEndian.Uint32(b) == Magic
}

// Header returns the file's header.
func (d *Reader) Header() Header { return d.hdr }

// Offset returns the offset of the next record.
func (d *Reader) Offset() int64 { return d.off }

// Next returns the next record, io.EOF after the last, or an *Error where
// the dump is damaged (and again on every later call).
func (d *Reader) Next() (Record, error) {
	if d.err != nil {
		return Record{}, d.err
	}
	rec, err := d.next()
	if err != nil {
		d.err = err
	}
	return rec, err
}

func (d *Reader) fail(off int64, err error, format string, args ...any) error {
	return &Error{File: d.name, Offset: off, Msg: fmt.Sprintf(format, args...), Err: err}
}

func (d *Reader) next() (Record, error) {
	off := d.off
	left := d.size - off
	if left == 0 {
		return Record{}, io.EOF
	}
	if left < recordHeaderSize {
		return Record{}, d.fail(off, nil, "record header cut short: %d bytes left, %d needed", left, recordHeaderSize)
	}
	if _, err := d.r.ReadAt(d.prefix[:], off); err != nil {
		return Record{}, d.fail(off, err, "cannot read the record header")
	}
	bo := d.hdr.ByteOrder
	rec := Record{Type: RecordType(bo.Uint32(d.prefix[0:])), Offset: off, Size: bo.Uint32(d.prefix[4:]),
		Timestamp: bo.Uint64(d.prefix[8:])}
	if rec.Size < recordHeaderSize {
		return Record{}, d.fail(off, nil, "%v: total_size %d is below the %d bytes of a record header", rec.Type, rec.Size, recordHeaderSize)
	}
	if int64(rec.Size) > left {
		return Record{}, d.fail(off, nil, "%v: total_size %d runs past the end of the file (%d bytes left)", rec.Type, rec.Size, left)
	}
	switch rec.Type {
	case CodeLoadType, CodeMoveType, DebugInfoType, UnwindingInfoType:
	default: // CODE_CLOSE and ids of later versions: skipped by their size
		d.off += int64(rec.Size)
		return rec, nil
	}
	body := make([]byte, rec.Size-recordHeaderSize)
	if _, err := d.r.ReadAt(body, off+recordHeaderSize); err != nil {
		return Record{}, d.fail(off, err, "%v: cannot read its %d bytes", rec.Type, rec.Size)
	}
	var err error
	switch rec.Type {
	case CodeLoadType:
		rec.Load, err = parseLoad(body, bo)
	case CodeMoveType:
		rec.Move, err = parseMove(body, bo)
	case DebugInfoType:
		rec.Debug, err = parseDebug(body, bo)
	case UnwindingInfoType:
		rec.Unwind, err = parseUnwind(body, bo)
	}
	if err != nil {
		return Record{}, d.fail(off, nil, "%v: %v", rec.Type, err)
	}
	d.off += int64(rec.Size)
	return rec, nil
}

const loadFixed = 4 + 4 + 8*4 // pid, tid, vma, code_addr, code_size, code_index

func parseLoad(b []byte, bo binary.ByteOrder) (*CodeLoad, error) {
	if len(b) < loadFixed+1 {
		return nil, fmt.Errorf("%d bytes after the record header; at least %d needed", len(b), loadFixed+1)
	}
	l := &CodeLoad{PID: bo.Uint32(b), TID: bo.Uint32(b[4:]), VMA: bo.Uint64(b[8:]), CodeAddr: bo.Uint64(b[16:]),
		CodeSize: bo.Uint64(b[24:]), CodeIndex: bo.Uint64(b[32:])}
	rest := b[loadFixed:]
	if l.CodeSize >= uint64(len(rest)) {
		return nil, fmt.Errorf("code_size %d does not fit in the record with the name (%d bytes)", l.CodeSize, len(rest))
	}
	if l.CodeAddr+l.CodeSize < l.CodeAddr {
		return nil, fmt.Errorf("code at %#x of %d bytes wraps around the address space", l.CodeAddr, l.CodeSize)
	}
	// The code is the record's last code_size bytes; the name comes
	// before it, NUL-terminated.
	names := rest[:uint64(len(rest))-l.CodeSize]
	i := bytes.IndexByte(names, 0)
	if i < 0 {
		return nil, fmt.Errorf("the function name has no terminating NUL before the code")
	}
	l.Name = string(names[:i])
	l.Code = rest[uint64(len(rest))-l.CodeSize:]
	return l, nil
}

func parseMove(b []byte, bo binary.ByteOrder) (*CodeMove, error) {
	const n = 4 + 4 + 8*5
	if len(b) < n {
		return nil, fmt.Errorf("%d bytes after the record header; %d needed", len(b), n)
	}
	return &CodeMove{PID: bo.Uint32(b), TID: bo.Uint32(b[4:]), VMA: bo.Uint64(b[8:]), OldCodeAddr: bo.Uint64(b[16:]),
		NewCodeAddr: bo.Uint64(b[24:]), CodeSize: bo.Uint64(b[32:]), CodeIndex: bo.Uint64(b[40:])}, nil
}

// debugEntryMin is the size of a debug entry with an empty file name.
const debugEntryMin = 8 + 4 + 4 + 1

func parseDebug(b []byte, bo binary.ByteOrder) (*DebugInfo, error) {
	if len(b) < 16 {
		return nil, fmt.Errorf("%d bytes after the record header; at least 16 needed", len(b))
	}
	d := &DebugInfo{CodeAddr: bo.Uint64(b)}
	n := bo.Uint64(b[8:])
	rest := b[16:]
	if n > uint64(len(rest)/debugEntryMin) {
		return nil, fmt.Errorf("nr_entry %d entries cannot fit in %d bytes", n, len(rest))
	}
	d.Entries = make([]DebugEntry, n)
	prev := ""
	for k := range d.Entries {
		if len(rest) < debugEntryMin {
			return nil, fmt.Errorf("entry %d of %d cut short", k, n)
		}
		e := &d.Entries[k]
		e.Addr, e.Line, e.Discrim = bo.Uint64(rest), bo.Uint32(rest[8:]), bo.Uint32(rest[12:])
		rest = rest[16:]
		i := bytes.IndexByte(rest, 0)
		if i < 0 {
			return nil, fmt.Errorf("entry %d of %d: the file name has no terminating NUL", k, n)
		}
		e.File = string(rest[:i])
		if i == 1 && rest[0] == 0xff {
			e.File = prev
		}
		prev = e.File
		rest = rest[i+1:]
	}
	return d, nil
}

func parseUnwind(b []byte, bo binary.ByteOrder) (*UnwindingInfo, error) {
	if len(b) < 24 {
		return nil, fmt.Errorf("%d bytes after the record header; at least 24 needed", len(b))
	}
	u := &UnwindingInfo{UnwindingSize: bo.Uint64(b), EHFrameHdrSize: bo.Uint64(b[8:]), MappedSize: bo.Uint64(b[16:])}
	data := b[24:]
	if u.UnwindingSize > uint64(len(data)) {
		return nil, fmt.Errorf("unwinding_size %d runs past the record (%d bytes of data)", u.UnwindingSize, len(data))
	}
	if u.EHFrameHdrSize > u.UnwindingSize {
		return nil, fmt.Errorf("eh_frame_hdr_size %d exceeds unwinding_size %d", u.EHFrameHdrSize, u.UnwindingSize)
	}
	u.Data = data[:u.UnwindingSize]
	return u, nil
}

// IsMarkerPath reports whether path names a jitdump file as perf
// recognizes its marker mapping: a base name jit-PID.dump. It returns the
// PID.
func IsMarkerPath(path string) (pid uint32, ok bool) {
	b := filepath.Base(path)
	if !strings.HasPrefix(b, "jit-") || !strings.HasSuffix(b, ".dump") {
		return 0, false
	}
	n, err := strconv.ParseUint(b[len("jit-"):len(b)-len(".dump")], 10, 32)
	if err != nil {
		return 0, false
	}
	return uint32(n), true
}
