package minidump

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf16"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/coredump"
)

// Signature is the minidump header's first four bytes, "MDMP".
const Signature = "MDMP"

// Stream types the reader decodes (MINIDUMP_STREAM_TYPE, and Breakpad's
// Linux extensions, 0x4767 being "Gg").
const (
	StreamThreadList     = 3
	StreamModuleList     = 4
	StreamMemoryList     = 5
	StreamException      = 6
	StreamSystemInfo     = 7
	StreamMemory64List   = 9
	StreamMiscInfo       = 15
	StreamThreadNameList = 24
	StreamLinuxCPUInfo   = 0x47670003
	StreamLinuxStatus    = 0x47670004
	StreamLinuxCmdLine   = 0x47670006
	StreamLinuxEnviron   = 0x47670007
	StreamLinuxAuxv      = 0x47670008
	StreamLinuxMaps      = 0x47670009
	StreamLinuxDSODebug  = 0x4767000a
)

// Processor architectures of the system information stream.
const (
	cpuAMD64    = 9
	cpuARM64    = 12
	cpuARM64Old = 0x8003 // Breakpad's value before Windows had one
	platLinux   = 0x8201
)

const (
	headerSize    = 32
	directorySize = 12
	threadSize    = 48
	moduleSize    = 108
	memDescSize   = 16
	maxCount      = 1 << 20 // entries of any list: far above any real process
)

// Dump is a decoded minidump. Byte slices point into the data given to
// Parse.
type Dump struct {
	// File names the minidump in errors and warnings.
	File string
	// Version is the header's version (its low 16 bits are 0xa793);
	// Flags the MINIDUMP_TYPE flags; Time the header's time stamp.
	Version uint32
	Flags   uint64
	Time    uint32
	// Streams lists the stream directory: type, size and offset.
	Streams []Stream
	// Arch is the dumped process's architecture, from the system
	// information stream or, without one, the thread contexts.
	Arch arch.Arch
	// System is the system information stream; nil where there is none.
	System *SystemInfo
	// Threads in the order of the thread list.
	Threads []Thread
	// Modules in the order of the module list.
	Modules []Module
	// Memory holds the memory list's and the 64-bit memory list's
	// ranges, and each thread's stack, in file order.
	Memory []Range
	// Exception is the exception stream; nil where there is none.
	Exception *Exception
	// Maps is the process's /proc/PID/maps (LinuxMaps stream).
	Maps []MapEntry
	// Auxv is the auxiliary vector (LinuxAuxv), AT_NULL excluded.
	Auxv []coredump.AuxvEntry
	// CmdLine is the command line's arguments (LinuxCmdLine).
	CmdLine []string
	// Environ is the environment (LinuxEnviron), where the writer kept it.
	Environ []string
	// Status is /proc/PID/status (LinuxProcStatus); Status.Known is false
	// without it.
	Status ProcStatus
	// ProcessID is the MiscInfo stream's process id (0 where it gives
	// none): the process's pid where no Status says it (Crashpad writes
	// no Linux streams).
	ProcessID uint32
	// DSODebug is the dynamic linker's list of loaded objects; nil where
	// the dump has none.
	DSODebug *DSODebug
	// Warnings lists what could not be read, each naming file and offset.
	Warnings []error

	data  []byte
	image *coredump.Image
}

// Stream is one entry of the stream directory.
type Stream struct {
	Type   uint32
	Size   uint32
	Offset uint32
}

// SystemInfo is the part of MINIDUMP_SYSTEM_INFO that says what ran.
type SystemInfo struct {
	// ProcessorArch is PROCESSOR_ARCHITECTURE_*; Platform the OS
	// (0x8201 for Linux); CPUs the number of processors.
	ProcessorArch uint16
	Platform      uint32
	CPUs          int
	// OS is the CSD version string: uname -srvmo on Linux.
	OS string
}

// Thread is one entry of the thread list.
type Thread struct {
	ID   uint32
	Name string
	// Regs holds the registers of its context in DWARF numbering.
	Regs arch.Regs
	// PState is the x86_64 eflags or the arm64 cpsr.
	PState uint64
	// ContextFlags are the context's flags as the file has them.
	ContextFlags uint64
	// Stack is the thread's stack memory from the thread list.
	Stack Range
	// ContextOffset is the file offset of the thread's context.
	ContextOffset int64
}

// Range is a block of the process's memory the dump holds.
type Range struct {
	Addr uint64
	Data []byte
	// Offset is Data's offset in the file.
	Offset int64
}

// Module is one entry of the module list.
type Module struct {
	Base, Size uint64
	// Name is the module's path as the writer recorded it.
	Name string
	// BuildID is the build-id from the CodeView record: whole for the
	// 'BpEL' form, its first 16 bytes (BuildIDPrefix) for the PDB70 form.
	BuildID       []byte
	BuildIDPrefix bool
	// CodeView is the record's signature: "BpEL", "RSDS" or "" for none.
	CodeView string
	// Age is the PDB70 record's age (0 from ELF writers).
	Age uint32
	// Offset is the module entry's file offset.
	Offset int64
}

// DebugID returns the PDB70 GUID and age as Breakpad's symbol files write
// them (the GUID's first three fields as little-endian numbers in hex,
// then the rest of its bytes and the age), or "" for other records.
func (m *Module) DebugID() string {
	if m.CodeView != "RSDS" || len(m.BuildID) != 16 {
		return ""
	}
	b := m.BuildID
	return fmt.Sprintf("%08X%04X%04X%X%X", binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint16(b[4:]),
		binary.LittleEndian.Uint16(b[6:]), b[8:16], m.Age)
}

// Exception is the exception stream. On Linux the code is the signal
// number, the flags si_code and the address si_addr.
type Exception struct {
	ThreadID uint32
	Code     uint32
	Flags    uint32
	Address  uint64
	// Regs is the crashing thread's context at the fault, where the
	// stream has one (HasContext).
	Regs       arch.Regs
	PState     uint64
	HasContext bool
	Offset     int64
}

// MapEntry is one line of /proc/PID/maps.
type MapEntry struct {
	Start, End, Offset uint64
	Read, Write, Exec  bool
	Shared             bool
	Dev                string
	Inode              uint64
	Path               string
}

// ProcStatus is what the reader takes from /proc/PID/status.
type ProcStatus struct {
	Name      string
	PID, PPID int
	State     byte
	UID, GID  uint32
	Known     bool
}

// DSODebug is the dynamic linker's r_debug and link map (MDRawDebug64).
type DSODebug struct {
	Version              uint32
	Brk, LDBase, Dynamic uint64
	Objects              []LinkMap
}

// LinkMap is one object of the dynamic linker's list: its load bias, name
// and dynamic section.
type LinkMap struct {
	Addr uint64
	Name string
	LD   uint64
}

// FormatError reports bytes of a minidump that are not what the format
// requires, naming the file and the offset: coredump's, which says the
// same of a core.
type FormatError = coredump.FormatError

// ErrNotMinidump says that a file does not start with the minidump
// signature.
var ErrNotMinidump = errors.New("not a minidump")

// Sniff reports whether head, a file's first bytes, is a minidump's.
func Sniff(head []byte) bool {
	return len(head) >= 4 && string(head[:4]) == Signature
}

func (d *Dump) warnf(off int64, format string, args ...any) {
	if len(d.Warnings) >= 1000 {
		return
	}
	d.Warnings = append(d.Warnings, &FormatError{File: d.File, Offset: off, Msg: fmt.Sprintf(format, args...)})
}

func (d *Dump) errorf(off int64, format string, args ...any) error {
	return &FormatError{File: d.File, Offset: off, Msg: fmt.Sprintf(format, args...)}
}

var le = binary.LittleEndian

// Parse decodes the minidump in data; name is used in errors. data must
// stay unchanged while the Dump is used. The error is nil whenever the
// header and directory could be read: damage further in is in Warnings.
func Parse(data []byte, name string) (*Dump, error) {
	d := &Dump{File: name, data: data}
	if !Sniff(data) {
		return nil, fmt.Errorf("%s: %w (no MDMP signature)", name, ErrNotMinidump)
	}
	if len(data) < headerSize {
		return nil, d.errorf(int64(len(data)), "header truncated (%d of %d bytes)", len(data), headerSize)
	}
	d.Version = le.Uint32(data[4:])
	if v := d.Version & 0xffff; v != 0xa793 {
		d.warnf(4, "header version %#x, not 0xa793", v)
	}
	count, rva := le.Uint32(data[8:]), le.Uint32(data[12:])
	d.Time, d.Flags = le.Uint32(data[20:]), le.Uint64(data[24:])
	if uint64(rva) > uint64(len(data)) {
		return nil, d.errorf(12, "stream directory at %#x lies beyond the end of the file (%d bytes)", rva, len(data))
	}
	if avail := (uint64(len(data)) - uint64(rva)) / directorySize; uint64(count) > avail {
		d.warnf(int64(rva)+int64(avail)*directorySize, "stream directory truncated: %d of %d entries present", avail, count)
		count = uint32(avail)
	}
	for i := uint32(0); i < count; i++ {
		e := data[rva+i*directorySize:]
		d.Streams = append(d.Streams, Stream{Type: le.Uint32(e), Size: le.Uint32(e[4:]), Offset: le.Uint32(e[8:])})
	}
	d.decodeStreams()
	return d, nil
}

// stream returns the bytes of the first stream of type t, clipped to the
// file (with a warning), and its offset; ok is false without one.
func (d *Dump) stream(t uint32) ([]byte, int64, bool) {
	for _, s := range d.Streams {
		if s.Type != t {
			continue
		}
		b, ok := d.bytes(int64(s.Offset), uint64(s.Size))
		if !ok {
			d.warnf(int64(s.Offset), "stream %s of %d bytes runs past the end of the file (%d bytes)", streamName(t), s.Size, len(d.data))
			b, _ = d.bytes(int64(s.Offset), uint64(len(d.data))-min(uint64(s.Offset), uint64(len(d.data))))
		}
		return b, int64(s.Offset), true
	}
	return nil, 0, false
}

// bytes returns data[off:off+n], or false when it is not all in the file.
func (d *Dump) bytes(off int64, n uint64) ([]byte, bool) {
	if off < 0 || uint64(off) > uint64(len(d.data)) || n > uint64(len(d.data))-uint64(off) {
		return nil, false
	}
	return d.data[off : uint64(off)+n : uint64(off)+n], true
}

func streamName(t uint32) string {
	switch t {
	case StreamThreadList:
		return "ThreadList"
	case StreamModuleList:
		return "ModuleList"
	case StreamMemoryList:
		return "MemoryList"
	case StreamException:
		return "Exception"
	case StreamSystemInfo:
		return "SystemInfo"
	case StreamMemory64List:
		return "Memory64List"
	case StreamMiscInfo:
		return "MiscInfo"
	case StreamThreadNameList:
		return "ThreadNameList"
	case StreamLinuxCPUInfo:
		return "LinuxCPUInfo"
	case StreamLinuxStatus:
		return "LinuxProcStatus"
	case StreamLinuxCmdLine:
		return "LinuxCmdLine"
	case StreamLinuxEnviron:
		return "LinuxEnviron"
	case StreamLinuxAuxv:
		return "LinuxAuxv"
	case StreamLinuxMaps:
		return "LinuxMaps"
	case StreamLinuxDSODebug:
		return "LinuxDSODebug"
	}
	return fmt.Sprintf("%#x", t)
}

// String reads the MINIDUMP_STRING (UTF-16) at off.
func (d *Dump) string(off int64) (string, error) {
	b, ok := d.bytes(off, 4)
	if !ok {
		return "", d.errorf(off, "string outside the file (%d bytes)", len(d.data))
	}
	n := uint64(le.Uint32(b))
	if n%2 != 0 || n > 1<<16 {
		return "", d.errorf(off, "string of implausible length %d bytes", n)
	}
	b, ok = d.bytes(off+4, n)
	if !ok {
		return "", d.errorf(off, "string of %d bytes runs past the end of the file", n)
	}
	u := make([]uint16, n/2)
	for i := range u {
		u[i] = le.Uint16(b[2*i:])
	}
	return string(utf16.Decode(u)), nil
}

// list returns the entries of a list stream (a 32-bit count, then
// entries of size each), allowing the 4 bytes of padding after the count
// some writers put there so that entries are 8-aligned.
func (d *Dump) list(b []byte, off int64, size int, what string) ([]byte, int64, int) {
	if len(b) < 4 {
		d.warnf(off, "%s stream of %d bytes has no count", what, len(b))
		return nil, off, 0
	}
	n := uint64(le.Uint32(b))
	start := 4
	if uint64(len(b)) == 8+n*uint64(size) {
		start = 8
	}
	body := b[start:]
	if avail := uint64(len(body)) / uint64(size); n > avail {
		d.warnf(off+int64(start)+int64(avail)*int64(size), "%s truncated: %d of %d entries present", what, avail, n)
		n = avail
	}
	if n > maxCount {
		d.warnf(off, "%s lists %d entries; reading the first %d", what, n, maxCount)
		n = maxCount
	}
	return body, off + int64(start), int(n)
}

func (d *Dump) decodeStreams() {
	d.decodeSystemInfo()
	d.decodeMemory()
	d.decodeThreads()
	d.decodeThreadNames()
	d.decodeModules()
	d.decodeException()
	d.decodeMiscInfo()
	d.decodeLinux()
	if d.Arch == arch.Unknown {
		d.warnf(0, "no architecture: neither the system information nor a thread context says x86_64 or arm64")
	}
}

// decodeMiscInfo reads the process id of MINIDUMP_MISC_INFO: SizeOfInfo,
// Flags1 (MINIDUMP_MISC1_PROCESS_ID, 1: ProcessId is set), ProcessId.
func (d *Dump) decodeMiscInfo() {
	b, _, ok := d.stream(StreamMiscInfo)
	if !ok || len(b) < 12 {
		return
	}
	if le.Uint32(b[4:])&1 != 0 {
		d.ProcessID = le.Uint32(b[8:])
	}
}

func (d *Dump) decodeSystemInfo() {
	b, off, ok := d.stream(StreamSystemInfo)
	if !ok {
		return
	}
	if len(b) < 32 {
		d.warnf(off, "SystemInfo stream has %d bytes, want at least 32", len(b))
		return
	}
	s := &SystemInfo{ProcessorArch: le.Uint16(b), CPUs: int(b[6]), Platform: le.Uint32(b[20:])}
	if rva := le.Uint32(b[24:]); rva != 0 {
		if str, err := d.string(int64(rva)); err == nil {
			s.OS = str
		} else {
			d.warnf(off+24, "SystemInfo's OS version: %v", err)
		}
	}
	d.System = s
	switch s.ProcessorArch {
	case cpuAMD64:
		d.Arch = arch.AMD64
	case cpuARM64, cpuARM64Old:
		d.Arch = arch.ARM64
	default:
		d.warnf(off, "processor architecture %#x: only x86_64 (9) and arm64 (12, 0x8003) are supported", s.ProcessorArch)
	}
	if s.Platform != platLinux && s.Platform != 0x8203 { // Linux, Android
		d.warnf(off+20, "platform %#x is not Linux (0x8201): the registers and modules are read as Linux's", s.Platform)
	}
}

func (d *Dump) decodeMemory() {
	if b, off, ok := d.stream(StreamMemoryList); ok {
		body, boff, n := d.list(b, off, memDescSize, "MemoryList")
		for i := 0; i < n; i++ {
			e := body[i*memDescSize:]
			if r, ok := d.memRange(le.Uint64(e), le.Uint32(e[8:]), le.Uint32(e[12:]), boff+int64(i*memDescSize)); ok {
				d.Memory = append(d.Memory, r)
			}
		}
	}
	if b, off, ok := d.stream(StreamMemory64List); ok {
		if len(b) < 16 {
			d.warnf(off, "Memory64List stream has %d bytes, want at least 16", len(b))
			return
		}
		n, base := le.Uint64(b), le.Uint64(b[8:])
		if avail := uint64(len(b)-16) / 16; n > avail {
			d.warnf(off+16+int64(avail)*16, "Memory64List truncated: %d of %d entries present", avail, n)
			n = avail
		}
		for i := uint64(0); i < n; i++ {
			e := b[16+i*16:]
			addr, size := le.Uint64(e), le.Uint64(e[8:])
			data, ok := d.bytes(int64(min(base, 1<<62)), size)
			if !ok {
				d.warnf(off+16+int64(i)*16, "memory at %#x: %#x bytes at file offset %#x run past the end of the file (%d bytes); the rest of the 64-bit memory list is lost",
					addr, size, base, len(d.data))
				if part, ok := d.bytes(int64(min(base, 1<<62)), uint64(len(d.data))-min(base, uint64(len(d.data)))); ok && len(part) > 0 {
					d.Memory = append(d.Memory, Range{Addr: addr, Data: part, Offset: int64(base)})
				}
				return
			}
			d.Memory = append(d.Memory, Range{Addr: addr, Data: data, Offset: int64(base)})
			base += size
		}
	}
}

// memRange reads a MINIDUMP_MEMORY_DESCRIPTOR's bytes; off is the
// descriptor's offset, for warnings.
func (d *Dump) memRange(addr uint64, size, rva uint32, off int64) (Range, bool) {
	if size == 0 {
		return Range{}, false
	}
	data, ok := d.bytes(int64(rva), uint64(size))
	if !ok {
		d.warnf(off, "memory at %#x: %#x bytes at file offset %#x run past the end of the file (%d bytes)", addr, size, rva, len(d.data))
		data, _ = d.bytes(int64(rva), uint64(len(d.data))-min(uint64(rva), uint64(len(d.data))))
		if len(data) == 0 {
			return Range{}, false
		}
	}
	return Range{Addr: addr, Data: data, Offset: int64(rva)}, true
}

func (d *Dump) decodeThreads() {
	b, off, ok := d.stream(StreamThreadList)
	if !ok {
		d.warnf(0, "no ThreadList stream")
		return
	}
	body, boff, n := d.list(b, off, threadSize, "ThreadList")
	for i := 0; i < n; i++ {
		e := body[i*threadSize:]
		eoff := boff + int64(i*threadSize)
		t := Thread{ID: le.Uint32(e)}
		if r, ok := d.memRange(le.Uint64(e[24:]), le.Uint32(e[32:]), le.Uint32(e[36:]), eoff+24); ok {
			t.Stack = r
		}
		csize, crva := le.Uint32(e[40:]), le.Uint32(e[44:])
		t.ContextOffset = int64(crva)
		ctx, ok := d.bytes(int64(crva), uint64(csize))
		if !ok {
			d.warnf(eoff+40, "thread %d: context of %d bytes at %#x runs past the end of the file; thread dropped", t.ID, csize, crva)
			continue
		}
		a, regs, pstate, flags, err := d.context(ctx, int64(crva))
		if err != nil {
			d.warnf(int64(crva), "thread %d: %v; thread dropped", t.ID, err)
			continue
		}
		if d.Arch == arch.Unknown {
			d.Arch = a
		}
		t.Regs, t.PState, t.ContextFlags = regs, pstate, flags
		d.Threads = append(d.Threads, t)
	}
}

func (d *Dump) decodeThreadNames() {
	b, off, ok := d.stream(StreamThreadNameList)
	if !ok {
		return
	}
	body, boff, n := d.list(b, off, 12, "ThreadNameList")
	for i := 0; i < n; i++ {
		e := body[i*12:]
		tid, rva := le.Uint32(e), le.Uint64(e[4:])
		if rva > uint64(len(d.data)) {
			d.warnf(boff+int64(i*12)+4, "thread %d: name at %#x lies beyond the end of the file", tid, rva)
			continue
		}
		name, err := d.string(int64(rva))
		if err != nil {
			d.warnf(boff+int64(i*12), "thread %d's name: %v", tid, err)
			continue
		}
		for k := range d.Threads {
			if d.Threads[k].ID == tid {
				d.Threads[k].Name = name
			}
		}
	}
}

func (d *Dump) decodeModules() {
	b, off, ok := d.stream(StreamModuleList)
	if !ok {
		return
	}
	body, boff, n := d.list(b, off, moduleSize, "ModuleList")
	for i := 0; i < n; i++ {
		e := body[i*moduleSize:]
		m := Module{Base: le.Uint64(e), Size: uint64(le.Uint32(e[8:])), Offset: boff + int64(i*moduleSize)}
		name, err := d.string(int64(le.Uint32(e[20:])))
		if err != nil {
			d.warnf(m.Offset+20, "module at %#x: name: %v", m.Base, err)
		}
		m.Name = name
		if cvSize, cvRVA := le.Uint32(e[76:]), le.Uint32(e[80:]); cvSize > 0 {
			d.codeView(&m, cvSize, cvRVA)
		}
		d.Modules = append(d.Modules, m)
	}
}

// codeView reads a module's CodeView record: its build-id.
func (d *Dump) codeView(m *Module, size, rva uint32) {
	cv, ok := d.bytes(int64(rva), uint64(size))
	if !ok || size < 4 {
		d.warnf(m.Offset+76, "module %s: CodeView record of %d bytes at %#x is not in the file", m.Name, size, rva)
		return
	}
	switch sig := le.Uint32(cv); sig {
	case 0x4270454c: // "LEpB" in the file: Breakpad's MDCVInfoELF
		m.CodeView = "BpEL"
		if len(cv) > 4 {
			m.BuildID = append([]byte(nil), cv[4:]...)
		}
	case 0x53445352: // "RSDS": PDB70
		m.CodeView = "RSDS"
		if len(cv) < 24 {
			d.warnf(int64(rva), "module %s: PDB70 CodeView record of %d bytes, want at least 24", m.Name, len(cv))
			return
		}
		m.BuildID = append([]byte(nil), cv[4:20]...)
		m.BuildIDPrefix = true
		m.Age = le.Uint32(cv[20:])
		if allZero(m.BuildID) {
			m.BuildID, m.BuildIDPrefix = nil, false
		}
	default:
		d.warnf(int64(rva), "module %s: CodeView signature %#x is neither BpEL nor RSDS; no build-id", m.Name, sig)
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func (d *Dump) decodeException() {
	b, off, ok := d.stream(StreamException)
	if !ok {
		return
	}
	if len(b) < 168 {
		d.warnf(off, "Exception stream has %d bytes, want 168", len(b))
		return
	}
	x := &Exception{ThreadID: le.Uint32(b), Code: le.Uint32(b[8:]), Flags: le.Uint32(b[12:]), Address: le.Uint64(b[24:]), Offset: off}
	if csize, crva := le.Uint32(b[160:]), le.Uint32(b[164:]); csize > 0 {
		if ctx, ok := d.bytes(int64(crva), uint64(csize)); !ok {
			d.warnf(off+160, "exception context of %d bytes at %#x runs past the end of the file", csize, crva)
		} else if _, regs, pstate, _, err := d.context(ctx, int64(crva)); err != nil {
			d.warnf(int64(crva), "exception context: %v", err)
		} else {
			x.Regs, x.PState, x.HasContext = regs, pstate, true
		}
	}
	d.Exception = x
}
