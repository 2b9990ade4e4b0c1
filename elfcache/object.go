package elfcache

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/ustack/ustack/internal/mmapfile"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
)

// DefaultDebugDir is where distributions install separate debug files.
const DefaultDebugDir = "/usr/lib/debug"

// DefaultMaxSectionSize bounds the decompressed size of a compressed section.
const DefaultMaxSectionSize = 1 << 30

// Options control how objects are opened and where their separate debug
// files are looked for. The zero Options is ready to use.
type Options struct {
	// DebugDirs are the global debug directories searched for separate
	// debug files, by build-id and by debug link. Nil means
	// []string{DefaultDebugDir}; an empty non-nil slice searches none.
	DebugDirs []string
	// SymFS, when set, is a directory that stands for the root of the
	// profiled machine: object paths and debug directories are looked up
	// beneath it (like perf's --symfs).
	SymFS string
	// NoDebugFile disables the search for separate debug files.
	NoDebugFile bool
	// NoMmap reads files into memory instead of mapping them.
	NoMmap bool
	// MaxSectionSize bounds the decompressed size of one compressed section
	// (0: DefaultMaxSectionSize). Larger sections are refused.
	MaxSectionSize uint64
	// CFI bounds the work of each CFI lookup.
	CFI cfi.Options
	// LineCacheCUs bounds how many parsed DWARF compilation units each
	// object keeps for SourceFrames (0: DefaultLineCacheCUs).
	LineCacheCUs int
	// DebugData, when set, is asked first for the separate debug file of
	// an object with a build-id (one carried by a recording's archive);
	// the debug file's build-id must match.
	DebugData func(buildID []byte) (data []byte, ok bool)
	// SectionCache, when set, keeps decompressed sections and the symbol
	// tables built from an object on disk between runs, keyed by build-id
	// (nil: decompress and build every time).
	SectionCache *SectionCache
	// Fetcher, when set, is asked by build-id for a separate debug file
	// that no local search found, and by Cache.OpenBuildID for a missing
	// object (a *debuginfod.Client). Nil fetches nothing.
	Fetcher Fetcher
}

// Fetcher gets files by GNU build-id from elsewhere, such as debuginfod
// servers. Kind is "debuginfo" (the separate debug file) or "executable"
// (the object itself), as in the debuginfod protocol. It returns the path
// of a local copy; the Object checks its build-id again.
type Fetcher interface {
	Fetch(ctx context.Context, buildID []byte, kind string) (path string, err error)
}

func (o *Options) debugDirs() []string {
	if o.DebugDirs == nil {
		return []string{DefaultDebugDir}
	}
	return o.DebugDirs
}

func (o *Options) maxSection() uint64 {
	if o.MaxSectionSize == 0 {
		return DefaultMaxSectionSize
	}
	return o.MaxSectionSize
}

// Range is a half-open range [Start, End) of link-time addresses.
type Range struct {
	Start, End uint64 // first address and one past the last
}

// Contains reports whether addr is in r.
func (r Range) Contains(addr uint64) bool { return addr >= r.Start && addr < r.End }

// Section describes one section header of an object.
type Section struct {
	Name   string          // section name, such as ".text"
	Type   elf.SectionType // sh_type
	Flags  elf.SectionFlag // sh_flags
	Addr   uint64          // sh_addr, the link-time address (0 when not allocated)
	Offset uint64          // sh_offset
	Size   uint64          // sh_size (the compressed size for SHF_COMPRESSED sections)
}

// Object is one ELF file opened for unwinding and symbolization. The
// headers, build-id and debug link are read by Open; the separate debug file,
// the CFI table and the symbol table are each found or built on first use.
// An Object is immutable once opened and safe for concurrent use; it
// implements unwinder.Object.
type Object struct {
	path    string // as given by the caller
	file    string // where it was read from
	opts    Options
	src     *source
	ef      *elf.File
	arch    arch.Arch
	typ     elf.Type
	isDebug bool // opened as a separate debug file
	fetched bool // came from Options.Fetcher
	archive bool // came from Options.DebugData

	buildID    []byte
	buildIDHex string
	debugLink  string
	debugCRC   uint32
	hasLink    bool

	loads []elf.ProgHeader // PT_LOAD headers, in file order
	plts  []pltRange
	text  *elf.Section

	closed atomic.Bool

	// held is what the object keeps in memory, for HeldBytes (memory.go).
	held heldParts

	debugOnce sync.Once
	debug     *Object
	debugErr  error

	cfiOnce    sync.Once
	table      *cfi.Table
	cfiErr     error
	cfiFrom    Origin      // of the sections the table was built from
	goSwitches []goSwitch  // Go runtime functions past their stack switch (goswitch.go)
	ehInstalls []ehInstall // libgcc_s's unwinder installing a handler's frame (ehinstall.go)

	symOnce sync.Once
	syms    *symtab
	symErr  error
	symFrom Origin // of the symbols

	altOnce sync.Once // the supplementary (dwz) file of a debug file
	alt     *Object
	altErr  error

	dwpOnce sync.Once // the split DWARF package FILE.dwp
	dwp     *dwpPackage
	dwpErr  error // why a FILE.dwp found could not be read

	// splitMu guards splitUsed: the .dwo files and .dwp package split
	// units were read from (Sources.SplitDWARF).
	splitMu   sync.Mutex
	splitUsed map[string]bool

	goOnce sync.Once
	gopcln *goPCLN
	goErr  error

	lineOnce sync.Once
	lines    *lineIndex
	lineErr  error

	callSite callSiteState // callsites.go

	targetOnce  sync.Once // calltargets.go
	callTargets []uint64
	// cloneSeen memoizes cloneChild's answers by return address: a musl
	// program's every thread ends at the same one, and each answer
	// decodes some 30 instructions (clonechild.go).
	cloneSeen sync.Map
	// cloneReturnSeen memoizes CloneReturn's answers by address (asked
	// for the first frame of walks that ended short with rax or x0 0).
	cloneReturnSeen sync.Map
	jumpOnce        sync.Once   // calltargets.go
	jumps           []jumpEntry // by target, as offsets from jumpBase
	jumpBase        uint64      // the lowest executable section's address

	// cachedMu guards cached: the unmap functions of sections mapped
	// from the SectionCache, released by Close; and cachedData, what
	// cachedSection mapped (dropMapped).
	cachedMu   sync.Mutex
	cached     []func() error
	cachedData [][]byte
}

// Open opens the ELF file at path (beneath opts.SymFS when that is set) and
// reads its headers, build-id and debug link. Everything else is read when
// first needed. The file is mapped into memory unless opts.NoMmap is set.
func Open(path string, opts Options) (*Object, error) {
	file, err := opts.symfsPath(path)
	if err != nil {
		return nil, newErr(path, "", -1, err)
	}
	src, _, err := openSource(file, opts.NoMmap)
	if err != nil {
		return nil, newErr(path, "", -1, err)
	}
	o, err := newObject(path, file, src, opts, false)
	if err != nil {
		src.close()
		return nil, err
	}
	return o, nil
}

// OpenReader is like Open for a file held by r, which is size bytes long;
// name is used in errors and returned by Path. Sections are read from r
// when needed, and ReadCode reads from r, so r must stay usable for as long
// as the Object is used. No separate debug file is searched unless
// opts.SymFS, opts.DebugDirs, opts.DebugData or opts.Fetcher say where
// (debug links are then resolved relative to name).
func OpenReader(name string, r io.ReaderAt, size int64, opts Options) (*Object, error) {
	if size <= 0 {
		return nil, newErr(name, "", -1, errors.New("empty file"))
	}
	src := &source{ra: r, size: size}
	if opts.SymFS == "" && opts.DebugDirs == nil && opts.DebugData == nil && opts.Fetcher == nil {
		opts.NoDebugFile = true
	}
	return newObject(name, name, src, opts, false)
}

// OpenBytes is like OpenReader for a file held in memory; data is used in
// place and must not be modified afterwards.
func OpenBytes(name string, data []byte, opts Options) (*Object, error) {
	if len(data) == 0 {
		return nil, newErr(name, "", -1, errors.New("empty file"))
	}
	src := &source{data: data, size: int64(len(data))}
	if opts.SymFS == "" && opts.DebugDirs == nil && opts.DebugData == nil && opts.Fetcher == nil {
		opts.NoDebugFile = true
	}
	return newObject(name, name, src, opts, false)
}

func newObject(path, file string, src *source, opts Options, isDebug bool) (o *Object, err error) {
	defer func() {
		if r := recover(); r != nil {
			o, err = nil, newErr(path, "", -1, fmt.Errorf("malformed ELF file: %v", r))
		}
	}()
	ef, err := elf.NewFile(src.readerAt())
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) {
			return nil, newErr(path, "", -1, fmt.Errorf("not a valid ELF file: %w", err))
		}
		return nil, newErr(path, "", -1, err)
	}
	o = &Object{path: path, file: file, opts: opts, src: src, ef: ef, typ: ef.Type, isDebug: isDebug}
	if ef.Class != elf.ELFCLASS64 || ef.Data != elf.ELFDATA2LSB {
		return nil, newErr(path, "", -1, fmt.Errorf("%w: %v %v", ErrUnsupported, ef.Class, ef.Data))
	}
	switch ef.Machine {
	case elf.EM_X86_64:
		o.arch = arch.AMD64
	case elf.EM_AARCH64:
		o.arch = arch.ARM64
	default:
		return nil, newErr(path, "", -1, fmt.Errorf("%w: machine %v", ErrUnsupported, ef.Machine))
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			o.loads = append(o.loads, p.ProgHeader)
		}
	}
	o.readNotes()
	if !isDebug {
		o.readDebugLink()
	}
	o.text = o.section(".text")
	o.findPLTs()
	return o, nil
}

// section returns the first section named name, or nil.
func (o *Object) section(name string) *elf.Section {
	for _, s := range o.ef.Sections {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// readNotes finds the GNU build-id in the note sections, or in the PT_NOTE
// segments of files without section headers.
func (o *Object) readNotes() {
	for _, s := range o.ef.Sections {
		if s.Type != elf.SHT_NOTE || s.Flags&elf.SHF_COMPRESSED != 0 || s.Size > 1<<20 {
			continue
		}
		data, err := o.src.bytes(s.Offset, s.Size)
		if err != nil {
			continue
		}
		if id := findBuildID(data); id != nil {
			o.setBuildID(id)
			return
		}
	}
	for _, p := range o.ef.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > 1<<20 {
			continue
		}
		data, err := o.src.bytes(p.Off, p.Filesz)
		if err != nil {
			continue
		}
		if id := findBuildID(data); id != nil {
			o.setBuildID(id)
			return
		}
	}
}

func (o *Object) setBuildID(id []byte) {
	o.buildID = append([]byte(nil), id...)
	o.buildIDHex = hex.EncodeToString(id)
}

// findBuildID returns the descriptor of the first NT_GNU_BUILD_ID note in a
// sequence of notes, or nil.
func findBuildID(data []byte) []byte {
	for len(data) >= 12 {
		namesz := uint64(binary.LittleEndian.Uint32(data[0:]))
		descsz := uint64(binary.LittleEndian.Uint32(data[4:]))
		typ := binary.LittleEndian.Uint32(data[8:])
		data = data[12:]
		nameEnd := (namesz + 3) &^ 3
		if nameEnd > uint64(len(data)) {
			return nil
		}
		name := data[:namesz]
		data = data[nameEnd:]
		descEnd := (descsz + 3) &^ 3
		if descsz > uint64(len(data)) {
			return nil
		}
		desc := data[:descsz]
		if descEnd > uint64(len(data)) {
			descEnd = uint64(len(data))
		}
		data = data[descEnd:]
		if typ == ntGNUBuildID && string(name) == "GNU\x00" && descsz > 0 {
			return desc
		}
	}
	return nil
}

// readDebugLink reads .gnu_debuglink: a NUL-terminated file name padded to
// four bytes and the CRC-32 of the debug file.
func (o *Object) readDebugLink() {
	s := o.section(".gnu_debuglink")
	if s == nil || s.Type == elf.SHT_NOBITS || s.Flags&elf.SHF_COMPRESSED != 0 || s.Size > 4096 {
		return
	}
	data, err := o.src.bytes(s.Offset, s.Size)
	if err != nil {
		return
	}
	i := 0
	for i < len(data) && data[i] != 0 {
		i++
	}
	if i == 0 || i == len(data) {
		return
	}
	name := string(data[:i])
	off := (i + 4) &^ 3
	if off+4 > len(data) || strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return
	}
	o.debugLink = name
	o.debugCRC = binary.LittleEndian.Uint32(data[off:])
	o.hasLink = true
}

// Path returns the path the object was opened with (without the SymFS
// prefix).
func (o *Object) Path() string { return o.path }

// File returns where the object was read from: Path under SymFS for a
// file, the name given for an object made from bytes (OpenBytes).
func (o *Object) File() string { return o.file }

// Arch returns the architecture from the ELF header's e_machine.
func (o *Object) Arch() arch.Arch { return o.arch }

// Type returns the ELF file type (ET_EXEC, ET_DYN, ...).
func (o *Object) Type() elf.Type { return o.typ }

// BuildID returns the GNU build-id, or nil when the object has none. The
// caller must not modify the returned slice.
func (o *Object) BuildID() []byte { return o.buildID }

// BuildIDHex returns the build-id as lower-case hex, or "".
func (o *Object) BuildIDHex() string { return o.buildIDHex }

// DebugLink returns the file name and CRC-32 recorded in .gnu_debuglink, and
// whether there is one.
func (o *Object) DebugLink() (name string, crc uint32, ok bool) {
	return o.debugLink, o.debugCRC, o.hasLink
}

// Sections returns the object's section headers, in file order.
func (o *Object) Sections() []Section {
	out := make([]Section, 0, len(o.ef.Sections))
	for _, s := range o.ef.Sections {
		size := s.Size
		if s.Flags&elf.SHF_COMPRESSED != 0 {
			size = s.FileSize
		}
		out = append(out, Section{Name: s.Name, Type: s.Type, Flags: s.Flags,
			Addr: s.Addr, Offset: s.Offset, Size: size})
	}
	return out
}

// Close releases the object's file mapping and that of its debug file. It
// must be called only when no goroutine uses the object any more, and no
// Row or byte slice obtained from it may be used afterwards: rows alias the
// mapped CFI sections. Objects owned by a Cache are closed by Cache.Close.
func (o *Object) Close() error {
	if o.closed.Swap(true) {
		return nil
	}
	var err error
	o.debugOnce.Do(func() { o.debugErr = ErrClosed }) // no search after close
	if o.debug != nil {
		err = o.debug.Close()
	}
	o.dwpOnce.Do(func() {})
	if o.dwp != nil {
		if e := o.dwp.o.Close(); e != nil && err == nil {
			err = e
		}
	}
	o.altOnce.Do(func() {}) // no search after close
	if o.alt != nil {
		if e := o.alt.Close(); e != nil && err == nil {
			err = e
		}
	}
	if e := o.src.close(); e != nil && err == nil {
		err = e
	}
	o.cachedMu.Lock()
	for _, unmap := range o.cached {
		if e := unmap(); e != nil && err == nil {
			err = e
		}
	}
	o.cached, o.cachedData = nil, nil
	o.cachedMu.Unlock()
	o.dropBuilt()
	return err
}

// sectionData returns the contents of section s, decompressed. Uncompressed
// sections of in-memory files are returned in place.
func (o *Object) sectionData(s *elf.Section) (data []byte, err error) {
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	defer func() {
		if r := recover(); r != nil {
			data, err = nil, newErr(o.path, s.Name, 0, fmt.Errorf("malformed section: %v", r))
		}
	}()
	max := o.opts.maxSection()
	switch {
	case s.Flags&elf.SHF_COMPRESSED != 0:
		if s.Size > max {
			// ch_size of the 64-bit compression header, at offset 8.
			return nil, newErr(o.path, s.Name, 8, fmt.Errorf("decompressed size %#x exceeds the limit %#x", s.Size, max))
		}
		if data, ok, err := o.inflateCompressed(s); ok {
			return data, err
		}
		return o.viaCache(s, s.Size, func() (io.Reader, error) { return s.Open(), nil })
	case strings.HasPrefix(s.Name, ".zdebug_"):
		raw, err := o.src.bytes(s.Offset, s.FileSize)
		if err != nil {
			return nil, newErr(o.path, "", int64(s.Offset), fmt.Errorf("section %s: %w", s.Name, err))
		}
		if len(raw) < 12 || string(raw[:4]) != "ZLIB" {
			return raw, nil // not compressed after all
		}
		size := binary.BigEndian.Uint64(raw[4:12])
		if size > max {
			return nil, newErr(o.path, s.Name, 4, fmt.Errorf("decompressed size %#x exceeds the limit %#x", size, max))
		}
		return o.viaCache(s, size, func() (io.Reader, error) {
			zr, err := newZlibReader(raw[12:])
			if err != nil {
				return nil, newErr(o.path, s.Name, 12, err)
			}
			return zr, nil
		})
	}
	data, err = o.src.bytes(s.Offset, s.Size)
	if err != nil {
		// The section header claims bytes the file does not have: name
		// the file offset it claims.
		return nil, newErr(o.path, "", int64(s.Offset), fmt.Errorf("section %s (%#x bytes): %w", s.Name, s.Size, err))
	}
	return data, nil
}

// inflateCompressed decompresses an SHF_COMPRESSED section whose
// compression header says zlib with the faster inflater (newZlibReader);
// ok is false for other compression types, which debug/elf handles.
func (o *Object) inflateCompressed(s *elf.Section) (data []byte, ok bool, err error) {
	hdr := 12 // Elf32_Chdr: type, size, addralign
	if o.ef.Class == elf.ELFCLASS64 {
		hdr = 24 // Elf64_Chdr: type, reserved, size, addralign
	}
	if s.FileSize < uint64(hdr) {
		return nil, false, nil
	}
	raw, err := o.src.bytes(s.Offset, s.FileSize)
	if err != nil {
		return nil, false, nil
	}
	if elf.CompressionType(o.ef.ByteOrder.Uint32(raw)) != elf.COMPRESS_ZLIB {
		return nil, false, nil
	}
	data, err = o.viaCache(s, s.Size, func() (io.Reader, error) {
		zr, err := newZlibReader(raw[hdr:])
		if err != nil {
			return nil, newErr(o.path, s.Name, int64(hdr), err)
		}
		return zr, nil
	})
	return data, true, err
}

// viaCache returns a compressed section's size decompressed bytes from the
// SectionCache when it has them for these compressed bytes, else
// decompresses them (open returns a reader of them) straight into a new
// entry and returns that, mapped: the section never lies whole in the
// heap. Without a cache, or when the entry cannot be written or the
// bytes are damaged, it decompresses them into memory (which says what
// is damaged).
func (o *Object) viaCache(s *elf.Section, size uint64, open func() (io.Reader, error)) ([]byte, error) {
	inflate := func() ([]byte, error) {
		r, err := open()
		if err != nil {
			return nil, err
		}
		return readAllLimit(r, size, o.path, s.Name)
	}
	c := o.opts.SectionCache
	if c == nil || len(o.buildID) == 0 || size == 0 {
		return o.inflateHeld(inflate)
	}
	src, err := o.src.bytes(s.Offset, s.FileSize)
	if err != nil {
		return o.inflateHeld(inflate)
	}
	if data, ok := o.cachedSection(c, s, src, size, true); ok {
		return data, nil
	}
	if r, err := open(); err == nil && c.putFrom(o.buildID, s.Name, src, r, size) {
		if data, ok := o.cachedSection(c, s, src, size, false); ok {
			o.src.drop(s.Offset, s.FileSize) // the compressed bytes, read once
			return data, nil
		}
	}
	return o.inflateHeld(inflate)
}

// cachedSection returns the SectionCache's entry for section s made from
// src, mapped, and keeps it mapped until the object is closed; checkData
// as for getEntry (false just after putFrom wrote it).
func (o *Object) cachedSection(c *SectionCache, s *elf.Section, src []byte, size uint64, checkData bool) ([]byte, bool) {
	data, unmap, ok := c.getEntry(o.buildID, s.Name, src, size, checkData)
	if !ok {
		return nil, false
	}
	o.cachedMu.Lock()
	o.cached = append(o.cached, unmap)
	o.cachedData = append(o.cachedData, data)
	o.cachedMu.Unlock()
	return data, true
}

// dropMapped lets the pages of b leave the resident set (source.drop) when
// b lies in the object's mapped file or in a section mapped from the
// SectionCache, read through once to build what is kept instead; bytes
// on the heap (a section decompressed into memory, a file read) are kept.
func (o *Object) dropMapped(b []byte) {
	if len(b) == 0 {
		return
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	within := func(m []byte) bool {
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(m)))
		return len(m) > 0 && p >= lo && p-lo <= uintptr(len(m)) && uintptr(len(b)) <= uintptr(len(m))-(p-lo)
	}
	if o.src.unmap != nil && within(o.src.data) {
		o.src.drop(uint64(p-uintptr(unsafe.Pointer(unsafe.SliceData(o.src.data)))), uint64(len(b)))
		return
	}
	o.cachedMu.Lock()
	defer o.cachedMu.Unlock()
	for _, m := range o.cachedData {
		if within(m) {
			mmapfile.DropPages(b)
			return
		}
	}
}

// readAllLimit reads exactly size bytes from r.
func readAllLimit(r io.Reader, size uint64, path, section string) ([]byte, error) {
	// Trust the declared size up to 64 MiB (a section that size is
	// ordinary: glibc's .debug_info is 6 MB), and grow as data arrives
	// beyond it, so a lying header costs at most that much memory.
	buf := make([]byte, 0, min(size, 64<<20))
	for uint64(len(buf)) < size {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
			if uint64(cap(buf)) > size {
				buf = buf[:len(buf):size]
			}
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			if err == io.EOF {
				break
			}
			return nil, newErr(path, section, int64(len(buf)), fmt.Errorf("decompressing: %w", err))
		}
	}
	if uint64(len(buf)) != size {
		return nil, newErr(path, section, int64(len(buf)), fmt.Errorf("decompressed %#x bytes, header says %#x", len(buf), size))
	}
	return buf, nil
}

// sameFile reports whether a and b, both known, describe the same file
// (device and inode).
func sameFile(a, b os.FileInfo) bool { return a != nil && b != nil && os.SameFile(a, b) }
