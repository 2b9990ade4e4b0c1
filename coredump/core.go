package coredump

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/ustack/ustack/arch"
)

// Core is a decoded core dump. Its fields are filled by Open or Parse and
// not changed afterwards; Memory and Objects may be used from several
// goroutines at once.
type Core struct {
	// File is the name of the core, used in every error and warning.
	File string
	// Arch is the architecture of the dumped process.
	Arch arch.Arch
	// Threads holds one entry per NT_PRSTATUS note; the thread that took
	// the signal comes first.
	Threads []Thread
	// Signal is the signal that made the process dump core, nil when the
	// core records none (a gcore of a running process).
	Signal *Siginfo
	// Process holds NT_PRPSINFO; Process.Known is false when the core has
	// no such note.
	Process Process
	// Auxv is the process's auxiliary vector from NT_AUXV, AT_NULL excluded.
	Auxv []AuxvEntry
	// Mappings are the file-backed mappings listed by NT_FILE, in the order
	// the core lists them (ascending addresses for the kernel and gdb).
	Mappings []Mapping
	// MappingsComplete reports whether Mappings holds every entry of the
	// core's NT_FILE note: false when the core has no NT_FILE (gdb's gcore
	// of old, cores of other tools, a note cut off by truncation) or its
	// note is damaged. Memory outside Mappings is anonymous only when it
	// is true.
	MappingsComplete bool
	// NoFileNote reports that the core has no NT_FILE note (qemu-user
	// writes none): Mappings then holds only the segments of
	// Options.Executable, if it was given, and of the shared libraries
	// the dynamic linker's list in the core's memory names (Libraries).
	NoFileNote bool
	// Libraries are the shared libraries of a core without NT_FILE read
	// with Options.Executable, from the dynamic linker's list in its
	// memory, each with why it was not mapped, if it was not.
	Libraries []Library
	// PageSize is NT_FILE's page size (the unit of its file offsets), or
	// 4096 when the core has no NT_FILE.
	PageSize uint64
	// Warnings lists what could not be read from a damaged or unusual core
	// without stopping the reading; each names the file and offset.
	Warnings []error

	mem      *Memory
	objects  []Object
	fileNote bool // the core has an NT_FILE note
	closer   func() error
}

// Thread is one thread of the dumped process, from its NT_PRSTATUS note and
// the notes that follow it.
type Thread struct {
	// TID is the thread id (pr_pid). PID is the process id from
	// NT_PRPSINFO (the TID when the core has none); PPID is pr_ppid.
	TID, PID, PPID int
	// Signal is pr_cursig: the signal the thread was handling, 0 for none.
	// The kernel writes the fatal signal for every thread; gdb's gcore the
	// signal each thread stopped with.
	Signal int
	// Siginfo is the NT_SIGINFO that follows the thread's NT_PRSTATUS: gdb
	// writes one per thread, the kernel and qemu one (or none) for the
	// first thread only; nil where there is none.
	Siginfo *Siginfo
	// Regs holds the general registers in DWARF numbering: x86_64 rax..r15
	// and rip; aarch64 x0..x30, sp and pc.
	Regs arch.Regs
	// PState is the aarch64 pstate, or the x86_64 eflags.
	PState uint64
	// TLS is the thread pointer: x86_64 fs_base (from NT_PRSTATUS), arm64
	// tpidr_el0 (from NT_ARM_TLS, which qemu's cores lack).
	TLS uint64
	// PAC holds the arm64 pointer authentication masks from NT_ARM_PAC_MASK.
	PAC PACMask
	// Name is the thread's name where the core records one: Linux cores
	// carry only the process's comm (NT_PRPSINFO), which is the name of the
	// main thread (TID == PID); other threads have none.
	Name string
	// NoteOffset is the file offset of the thread's NT_PRSTATUS note.
	NoteOffset int64
}

// PACMask is the content of NT_ARM_PAC_MASK: the bits of a data and of an
// instruction pointer that pointer authentication codes occupy.
type PACMask struct {
	Data, Insn uint64
	// Known is true when the core had the note.
	Known bool
}

// Siginfo is the part of a siginfo_t that says what signal arrived and why.
type Siginfo struct {
	// Signo, Errno and Code are si_signo, si_errno and si_code.
	Signo, Errno, Code int
	// Addr is si_addr, the faulting address, meaningful when HasAddr is
	// true (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP raised by the kernel).
	Addr    uint64
	HasAddr bool
	// SenderPID and SenderUID are si_pid and si_uid for a signal sent by a
	// process (kill, tgkill, raise, abort), meaningful when HasSender.
	SenderPID, SenderUID int
	HasSender            bool
	// FromPRStatus is true when the core had no NT_SIGINFO and only
	// si_signo (with si_code and si_errno as the note held them) comes
	// from the thread's NT_PRSTATUS.
	FromPRStatus bool
}

// Name returns the signal's name, such as "SIGSEGV".
func (s *Siginfo) Name() string { return SignalName(s.Signo) }

// Process is NT_PRPSINFO.
type Process struct {
	PID, PPID, PGRP, SID int
	UID, GID             uint32
	// Comm is pr_fname, the process's command name (at most 15 bytes).
	Comm string
	// Args is pr_psargs: the start of the command line, arguments separated
	// by spaces, at most 80 bytes.
	Args string
	// State is pr_sname, the process state letter ('R', 'S', ...).
	State byte
	// Known is true when the core had NT_PRPSINFO.
	Known bool
}

// AuxvEntry is one entry of the auxiliary vector.
type AuxvEntry struct {
	Type, Value uint64
}

// Auxiliary vector types the reader and its callers use.
const (
	AT_NULL         = 0
	AT_PHDR         = 3
	AT_PHNUM        = 5
	AT_PAGESZ       = 6
	AT_BASE         = 7
	AT_ENTRY        = 9
	AT_HWCAP        = 16
	AT_EXECFN       = 31
	AT_SYSINFO_EHDR = 33
)

// Mapping is one NT_FILE entry: the file at Path mapped at [Start, End)
// from byte FileOffset of the file.
type Mapping struct {
	Start, End uint64
	FileOffset uint64
	Path       string
	// Module says that the mapping stands for a whole object of a
	// minidump's module list, where the dump holds no /proc/PID/maps
	// (Crashpad's): [Start, End) is the object's image, its first byte
	// the start of its first segment, and which part of it is code only
	// its file says.
	Module bool
}

// FormatError reports bytes of a core that are not what the format
// requires, naming the file and the offset.
type FormatError struct {
	File   string
	Offset int64
	Msg    string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%s: offset %#x: %s", e.File, e.Offset, e.Msg)
}

// ErrNotCore says that a file is not an ELF core dump (nor a compressed one).
var ErrNotCore = errors.New("not an ELF core dump")

// Options control how a core is read. The zero value works: mapped files
// are opened at their recorded paths.
type Options struct {
	// SymFS is prepended to every mapped file's recorded path when a read
	// needs the file (like perf's --symfs).
	SymFS string
	// OpenMapped, when set, replaces SymFS: it opens the file recorded at
	// path for reads of memory the core did not dump. Returning an error
	// makes those reads fail with that error. If the result implements
	// io.Closer it is closed by Core.Close.
	OpenMapped func(path string) (ReaderAt, error)
	// NoMappedFiles disables reading memory from mapped files altogether.
	NoMappedFiles bool
	// Executable is the path of the program's executable, for a core that
	// lists no mapped files (no NT_FILE note: qemu-user's cores). Its
	// segments are then taken as mapped where the auxiliary vector puts
	// its entry point, once the core's machine, AT_ENTRY, AT_PHDR and
	// AT_PHNUM agree with it (Parse fails where they do not), and its
	// mappings carry this path. Ignored when the core has NT_FILE.
	Executable string
	// MaxDecompressed bounds the size of a decompressed core (default
	// 64 GiB); a larger one is refused.
	MaxDecompressed int64
	// TempDir is where a compressed core is decompressed to (default
	// os.TempDir()). The file is created 0600 and removed at once.
	TempDir string
}

// ReaderAt is io.ReaderAt; it is named here so that Options reads plainly.
type ReaderAt interface {
	ReadAt(p []byte, off int64) (int, error)
}

// ELF constants of the core format.
const (
	etCore      = 4
	emX86_64    = 62
	emAArch64   = 183
	ptLoad      = 1
	ptNote      = 4
	pnXNum      = 0xffff
	ehdrSize    = 64
	phdrSize    = 56
	shdrSize    = 64
	pfX         = 1
	pfW         = 2
	pfR         = 4
	maxSegments = 1 << 22 // far above any real process (vm.max_map_count is 65530)
)

// Parse decodes the core held in data (uncompressed); name is used in
// errors. data must stay unchanged while the Core is used.
func Parse(data []byte, name string, opts *Options) (*Core, error) {
	if opts == nil {
		opts = &Options{}
	}
	c := &Core{File: name, PageSize: 4096}
	if err := c.parseHeader(data); err != nil {
		return nil, err
	}
	segs, notes, err := c.parseProgramHeaders(data)
	if err != nil {
		return nil, err
	}
	for _, n := range notes {
		c.parseNotes(data, n)
	}
	if len(c.Threads) == 0 {
		// A core without threads has no stack to give: say so, with the
		// first problem met on the way.
		why := "it has no NT_PRSTATUS note"
		if len(c.Warnings) > 0 {
			why += " that could be read; first problem: " + c.Warnings[0].Error()
		}
		return nil, fmt.Errorf("%s: no thread could be read: %s", c.File, why)
	}
	c.orderThreads()
	c.mem = newMemory(c, segs, data, opts)
	if c.NoFileNote = !c.fileNote; c.NoFileNote && opts.Executable != "" {
		dynamic, err := c.mapExecutable(opts.Executable, segs)
		if err != nil {
			return nil, err
		}
		// The list's strings may lie in the executable's file (ld.so's
		// own name is its PT_INTERP string): read through the memory
		// with its mappings, then once more with the libraries'.
		c.remap(segs, data, opts)
		c.mapLibraries(dynamic)
		c.remap(segs, data, opts)
	}
	c.nameThreads()
	c.objects = c.findObjects()
	return c, nil
}

// remap makes c's Memory anew for the Mappings made since, closing the
// files the old one opened.
func (c *Core) remap(segs []segment, data []byte, opts *Options) {
	old := c.mem
	c.mem = newMemory(c, segs, data, opts)
	old.files.close()
}

func (c *Core) warnf(off int64, format string, args ...any) {
	if len(c.Warnings) >= 1000 {
		return // enough to see what is wrong; a fuzzed core must not grow this without bound
	}
	c.Warnings = append(c.Warnings, &FormatError{File: c.File, Offset: off, Msg: fmt.Sprintf(format, args...)})
}

func (c *Core) errorf(off int64, format string, args ...any) error {
	return &FormatError{File: c.File, Offset: off, Msg: fmt.Sprintf(format, args...)}
}

func (c *Core) parseHeader(data []byte) error {
	if len(data) < 4 || string(data[:4]) != "\x7fELF" {
		return fmt.Errorf("%s: %w (no ELF magic)", c.File, ErrNotCore)
	}
	if len(data) < ehdrSize {
		return c.errorf(int64(len(data)), "ELF header truncated (%d of %d bytes)", len(data), ehdrSize)
	}
	if data[4] != 2 {
		return c.errorf(4, "ELF class %d: only 64-bit cores are supported", data[4])
	}
	if data[5] != 1 {
		return c.errorf(5, "ELF data encoding %d: only little-endian cores are supported", data[5])
	}
	if t := binary.LittleEndian.Uint16(data[16:]); t != etCore {
		return fmt.Errorf("%s: %w (ELF type %d, not ET_CORE)", c.File, ErrNotCore, t)
	}
	switch m := binary.LittleEndian.Uint16(data[18:]); m {
	case emX86_64:
		c.Arch = arch.AMD64
	case emAArch64:
		c.Arch = arch.ARM64
	default:
		return c.errorf(18, "ELF machine %d: only x86_64 and aarch64 cores are supported", m)
	}
	return nil
}

// segment is one PT_LOAD program header.
type segment struct {
	vaddr, memsz uint64
	offset       uint64 // file offset of the dumped bytes
	filesz       uint64 // p_filesz: bytes the writer dumped
	flags        uint32
	data         []byte // the dumped bytes present in the file (shorter than filesz if truncated)
}

type noteSeg struct{ off, size uint64 }

func (c *Core) parseProgramHeaders(data []byte) ([]segment, []noteSeg, error) {
	le := binary.LittleEndian
	phoff := le.Uint64(data[32:])
	phentsize := uint64(le.Uint16(data[54:]))
	phnum := uint64(le.Uint16(data[56:]))
	if phnum == pnXNum {
		// Extended numbering: the count is in section header 0's sh_info.
		shoff := le.Uint64(data[40:])
		if shoff > uint64(len(data)) || uint64(len(data))-shoff < shdrSize {
			return nil, nil, c.errorf(40, "e_phnum is PN_XNUM but section header 0 at %#x is outside the file (%d bytes)", shoff, len(data))
		}
		phnum = uint64(le.Uint32(data[shoff+44:]))
	}
	if phnum == 0 {
		return nil, nil, c.errorf(56, "no program headers")
	}
	if phentsize != phdrSize {
		return nil, nil, c.errorf(54, "e_phentsize is %d, want %d", phentsize, phdrSize)
	}
	if phoff > uint64(len(data)) {
		return nil, nil, c.errorf(32, "program headers at %#x lie beyond the end of the file (%d bytes)", phoff, len(data))
	}
	if avail := (uint64(len(data)) - phoff) / phdrSize; avail == 0 {
		return nil, nil, c.errorf(int64(len(data)), "program header table at %#x truncated: the file ends before its first entry", phoff)
	} else if avail < phnum {
		c.warnf(int64(phoff+avail*phdrSize), "program header table truncated: %d of %d headers present", avail, phnum)
		phnum = avail
	}
	if phnum > maxSegments {
		c.warnf(56, "%d program headers; reading the first %d", phnum, maxSegments)
		phnum = maxSegments
	}
	var segs []segment
	var notes []noteSeg
	var cut truncatedSegments
	for i := uint64(0); i < phnum; i++ {
		off := phoff + i*phdrSize
		ph := data[off : off+phdrSize]
		typ := le.Uint32(ph[0:])
		s := segment{
			flags:  le.Uint32(ph[4:]),
			offset: le.Uint64(ph[8:]),
			vaddr:  le.Uint64(ph[16:]),
			filesz: le.Uint64(ph[32:]),
			memsz:  le.Uint64(ph[40:]),
		}
		switch typ {
		case ptNote:
			notes = append(notes, noteSeg{s.offset, s.filesz})
		case ptLoad:
			if s.vaddr+s.memsz < s.vaddr {
				c.warnf(int64(off), "PT_LOAD at %#x of size %#x wraps around the address space; ignored", s.vaddr, s.memsz)
				continue
			}
			if s.filesz > s.memsz {
				c.warnf(int64(off), "PT_LOAD at %#x: p_filesz %#x exceeds p_memsz %#x; using p_memsz", s.vaddr, s.filesz, s.memsz)
				s.filesz = s.memsz
			}
			s.data = fileBytes(data, s.offset, s.filesz)
			if uint64(len(s.data)) < s.filesz {
				cut.add(off, s)
			}
			segs = append(segs, s)
		}
	}
	cut.warn(c, len(data))
	sort.SliceStable(segs, func(i, j int) bool { return segs[i].vaddr < segs[j].vaddr })
	// Overlapping segments would make reads ambiguous: where the first
	// one's dumped bytes end before the next begins, only its size
	// (p_memsz, damaged: a segment spanning terabytes) runs over the
	// next, and it is cut there; else the next is ignored.
	out := segs[:0]
	for _, s := range segs {
		if n := len(out); n > 0 && s.vaddr < out[n-1].vaddr+out[n-1].memsz {
			prev := &out[n-1]
			if prev.vaddr+prev.filesz > s.vaddr {
				c.warnf(int64(s.offset), "PT_LOAD at %#x overlaps the segment at %#x; ignored", s.vaddr, prev.vaddr)
				continue
			}
			c.warnf(int64(prev.offset), "PT_LOAD at %#x claims %#x bytes, over the segment at %#x: cut there", prev.vaddr, prev.memsz, s.vaddr)
			prev.memsz = s.vaddr - prev.vaddr
		}
		out = append(out, s)
	}
	return out, notes, nil
}

// truncatedSegments sums up the PT_LOAD segments a truncated core cut
// short, for one warning however many there are.
type truncatedSegments struct {
	n               int
	phoff           uint64  // the first one's program header
	first           segment // the first one
	low, high       uint64  // the addresses they span
	missing, dumped uint64  // bytes
}

func (t *truncatedSegments) add(phoff uint64, s segment) {
	if t.n == 0 {
		t.phoff, t.first, t.low, t.high = phoff, s, s.vaddr, s.vaddr+s.memsz
	}
	t.n++
	t.low, t.high = min(t.low, s.vaddr), max(t.high, s.vaddr+s.memsz)
	t.missing += s.filesz - uint64(len(s.data))
	t.dumped += s.filesz
}

// warn gives the one warning: about the segment when one was cut, else
// at the end of the file, the number of segments and bytes missing.
func (t *truncatedSegments) warn(c *Core, size int) {
	switch {
	case t.n == 1:
		s := t.first
		c.warnf(int64(t.phoff), "PT_LOAD at %#x: %#x of its %#x dumped bytes (file offset %#x) are missing: core truncated",
			s.vaddr, s.filesz-uint64(len(s.data)), s.filesz, s.offset)
	case t.n > 1:
		c.warnf(int64(size), "core truncated: the file ends here, and %d PT_LOAD segments between %#x and %#x miss %#x of their %#x dumped bytes",
			t.n, t.low, t.high, t.missing, t.dumped)
	}
}

// fileBytes returns data[off:off+size] clipped to the file.
func fileBytes(data []byte, off, size uint64) []byte {
	if off >= uint64(len(data)) {
		return nil
	}
	end := uint64(len(data))
	if size < end-off {
		end = off + size
	}
	return data[off:end:end]
}

// orderThreads puts the signalled thread first. The kernel already writes
// the dumping thread first and gives every thread the fatal signal as
// pr_cursig; gdb writes the selected thread first and each thread's own
// stop signal. A stable partition on "has a signal" keeps both orders
// and moves a signalled thread ahead of unsignalled ones.
func (c *Core) orderThreads() {
	sort.SliceStable(c.Threads, func(i, j int) bool {
		return c.Threads[i].signalled() && !c.Threads[j].signalled()
	})
	if len(c.Threads) == 0 {
		return
	}
	switch t := &c.Threads[0]; {
	case t.Siginfo != nil && t.Siginfo.Signo != 0:
		c.Signal = t.Siginfo
	case c.Signal == nil && t.Signal != 0:
		c.Signal = &Siginfo{Signo: t.Signal, FromPRStatus: true}
	}
}

func (t *Thread) signalled() bool {
	if t.Siginfo != nil {
		return t.Siginfo.Signo != 0
	}
	return t.Signal != 0
}

// nameThreads gives each thread the process id and the main thread the
// process's comm, both from NT_PRPSINFO (which may follow the threads).
func (c *Core) nameThreads() {
	if !c.Process.Known {
		return
	}
	for i := range c.Threads {
		c.Threads[i].PID = c.Process.PID
		if c.Threads[i].TID == c.Process.PID && c.Threads[i].Name == "" {
			c.Threads[i].Name = c.Process.Comm
		}
	}
}

// Memory returns the core's view of the process's address space.
func (c *Core) Memory() *Memory { return c.mem }

// AuxvValue returns the value of the first auxiliary vector entry of type typ.
func (c *Core) AuxvValue(typ uint64) (uint64, bool) {
	for _, e := range c.Auxv {
		if e.Type == typ {
			return e.Value, true
		}
	}
	return 0, false
}

// ExecFn returns the executable's path as the process's exec call named it
// (the string AT_EXECFN points to, read from the core's memory).
func (c *Core) ExecFn() (string, error) {
	addr, ok := c.AuxvValue(AT_EXECFN)
	if !ok {
		return "", fmt.Errorf("%s: no AT_EXECFN in NT_AUXV", c.File)
	}
	return c.mem.ReadCString(addr, 4096)
}

// Close releases the core's mapping and the mapped files opened for it.
func (c *Core) Close() error {
	var err error
	if c.mem != nil {
		err = c.mem.files.close()
	}
	if c.closer != nil {
		if e := c.closer(); err == nil {
			err = e
		}
		c.closer = nil
	}
	return err
}

// OnClose adds f to what Close releases (the file a Core assembled from
// another format's bytes was read from).
func (c *Core) OnClose(f func() error) {
	prev := c.closer
	c.closer = func() error {
		var err error
		if prev != nil {
			err = prev()
		}
		if e := f(); err == nil {
			err = e
		}
		return err
	}
}
