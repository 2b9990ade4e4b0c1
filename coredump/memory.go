package coredump

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/ustack/ustack/unwinder"
)

// Why a read of core memory failed; a *MemoryError wraps one of these.
var (
	// ErrUnmapped: the address lies outside every PT_LOAD segment.
	ErrUnmapped = errors.New("not mapped in the core")
	// ErrNotDumped: the address is mapped, but the core does not hold its
	// bytes and no mapped file can give them (anonymous memory left out by
	// coredump_filter, writable memory, no NT_FILE entry).
	ErrNotDumped = errors.New("mapped but not dumped")
	// ErrTruncated: the core held these bytes, but the file ends before them.
	ErrTruncated = errors.New("core file truncated")
)

// MemoryError reports a failed read of core memory at Addr.
type MemoryError struct {
	File string // the core
	Addr uint64
	Err  error // ErrUnmapped, ErrNotDumped, ErrTruncated, or the mapped file's error
}

func (e *MemoryError) Error() string {
	return fmt.Sprintf("%s: address %#x: %v", e.File, e.Addr, e.Err)
}

func (e *MemoryError) Unwrap() error { return e.Err }

// Segment describes one PT_LOAD segment of the core.
type Segment struct {
	// Addr and Size give the segment's address range [Addr, Addr+Size).
	Addr, Size uint64
	// Dumped is how many bytes from Addr the core holds (p_filesz); the
	// rest is read from the mapped file or fails.
	Dumped uint64
	// Present is how many of the Dumped bytes the file really holds (less
	// than Dumped in a truncated core).
	Present uint64
	// Offset is the file offset of the dumped bytes.
	Offset uint64
	// Read, Write and Exec are the segment's permissions.
	Read, Write, Exec bool
}

// Memory is the address space of the dumped process. Reads are served from
// the core's PT_LOAD segments and, for read-only file-backed memory the core
// did not dump, from the mapped file. It is safe for concurrent use.
type Memory struct {
	file  string
	segs  []segment
	maps  []Mapping // NT_FILE, sorted by Start
	files *fileSet
}

func newMemory(c *Core, segs []segment, data []byte, opts *Options) *Memory {
	m := &Memory{file: c.File, segs: segs}
	m.maps = append([]Mapping(nil), c.Mappings...)
	sort.SliceStable(m.maps, func(i, j int) bool { return m.maps[i].Start < m.maps[j].Start })
	m.files = &fileSet{core: c, opts: opts, open: map[string]*mappedFile{}}
	return m
}

// Segments returns the core's PT_LOAD segments in address order.
func (m *Memory) Segments() []Segment {
	out := make([]Segment, len(m.segs))
	for i := range m.segs {
		out[i] = m.segs[i].public()
	}
	return out
}

// SegmentAt returns the PT_LOAD segment whose address range holds addr,
// without copying the others as Segments does.
func (m *Memory) SegmentAt(addr uint64) (Segment, bool) {
	i := m.find(addr)
	if i < 0 {
		return Segment{}, false
	}
	return m.segs[i].public(), true
}

// public is the segment as Segments describes it.
func (s *segment) public() Segment {
	return Segment{Addr: s.vaddr, Size: s.memsz, Dumped: s.filesz, Present: uint64(len(s.data)),
		Offset: s.offset, Read: s.flags&pfR != 0, Write: s.flags&pfW != 0, Exec: s.flags&pfX != 0}
}

// find returns the index of the segment holding addr, or -1.
func (m *Memory) find(addr uint64) int {
	segs := m.segs
	lo, hi := 0, len(segs)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if segs[mid].vaddr <= addr {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if i := lo - 1; i >= 0 && addr-segs[i].vaddr < segs[i].memsz {
		return i
	}
	return -1
}

// ReadUint64 reads the little-endian 64-bit word at addr, for the
// unwinder (it implements unwinder.Memory): a word in no segment is
// MemOutside (the unwind ends with bad_memory), one mapped but not in the
// core (not dumped, or cut off by a truncated file) and not readable from
// the mapped file is MemTruncated. A word inside dumped memory is read
// without allocating.
func (m *Memory) ReadUint64(addr uint64) (uint64, unwinder.MemStatus) {
	if i := m.find(addr); i >= 0 {
		s := &m.segs[i]
		if off := addr - s.vaddr; off+8 <= uint64(len(s.data)) && off+8 > off {
			return binary.LittleEndian.Uint64(s.data[off:]), unwinder.MemOK
		}
	}
	return m.readUint64Slow(addr)
}

//go:noinline
func (m *Memory) readUint64Slow(addr uint64) (uint64, unwinder.MemStatus) {
	var b [8]byte
	if _, err := m.ReadAt(b[:], addr); err != nil {
		if errors.Is(err, ErrUnmapped) {
			return 0, unwinder.MemOutside
		}
		return 0, unwinder.MemTruncated
	}
	return binary.LittleEndian.Uint64(b[:]), unwinder.MemOK
}

// ReadAt reads len(p) bytes of process memory starting at addr. It returns
// the number of bytes read and, when fewer than len(p), a *MemoryError
// saying why the first missing byte could not be read. A read may span
// adjacent segments.
func (m *Memory) ReadAt(p []byte, addr uint64) (int, error) {
	return m.read(p, addr, true)
}

// ReadDumped is ReadAt without falling back to mapped files: it returns only
// bytes the core itself holds.
func (m *Memory) ReadDumped(p []byte, addr uint64) (int, error) {
	return m.read(p, addr, false)
}

func (m *Memory) read(p []byte, addr uint64, useFiles bool) (int, error) {
	n := 0
	for n < len(p) {
		a := addr + uint64(n)
		if a < addr {
			return n, &MemoryError{File: m.file, Addr: a, Err: ErrUnmapped}
		}
		i := m.find(a)
		if i < 0 {
			// gdb's gcore leaves out the program headers of mappings it
			// does not dump; NT_FILE still lists them. Their read-only
			// ELF segments are served from the file, as gdb does.
			if m.fileMapping(a) == nil {
				return n, &MemoryError{File: m.file, Addr: a, Err: ErrUnmapped}
			}
			if !useFiles {
				return n, &MemoryError{File: m.file, Addr: a, Err: fmt.Errorf("%w (no PT_LOAD; the mapped file has it)", ErrNotDumped)}
			}
			want := uint64(len(p) - n)
			if next := m.nextSegment(a); next != 0 && next-a < want {
				want = next - a
			}
			k, err := m.readMapped(p[n:uint64(n)+want], a, true)
			n += k
			if err != nil {
				return n, &MemoryError{File: m.file, Addr: a + uint64(k), Err: err}
			}
			continue
		}
		s := &m.segs[i]
		off := a - s.vaddr
		want := uint64(len(p) - n)
		if rest := s.memsz - off; want > rest {
			want = rest
		}
		switch {
		case off < uint64(len(s.data)):
			k := copy(p[n:uint64(n)+want], s.data[off:])
			n += k
		case off < s.filesz:
			return n, &MemoryError{File: m.file, Addr: a, Err: fmt.Errorf("%w: segment at %#x is dumped at file offset %#x, but the file ends at %#x",
				ErrTruncated, s.vaddr, s.offset+off, s.offset+uint64(len(s.data)))}
		default:
			// Only memory the process could read and not write is
			// served from its file: writable memory may differ from it,
			// and a PROT_NONE mapping (a gap between an object's
			// segments, a guard page) could not be read at all.
			if !useFiles || s.flags&pfW != 0 || s.flags&(pfR|pfX) == 0 {
				return n, &MemoryError{File: m.file, Addr: a, Err: ErrNotDumped}
			}
			k, err := m.readMapped(p[n:uint64(n)+want], a, false)
			n += k
			if err != nil {
				return n, &MemoryError{File: m.file, Addr: a + uint64(k), Err: err}
			}
		}
	}
	return n, nil
}

// fileMapping returns the NT_FILE mapping holding addr, or nil.
func (m *Memory) fileMapping(addr uint64) *Mapping {
	j := sort.Search(len(m.maps), func(j int) bool { return m.maps[j].Start > addr }) - 1
	if j < 0 || addr >= m.maps[j].End {
		return nil
	}
	return &m.maps[j]
}

// nextSegment returns the start of the first segment above addr, or 0.
func (m *Memory) nextSegment(addr uint64) uint64 {
	i := sort.Search(len(m.segs), func(i int) bool { return m.segs[i].vaddr > addr })
	if i < len(m.segs) {
		return m.segs[i].vaddr
	}
	return 0
}

// readMapped reads p at addr from the file NT_FILE maps there, within one
// mapping. With imageOnly, only bytes of the file's read-only PT_LOAD
// segments are read (for addresses no PT_LOAD of the core describes).
func (m *Memory) readMapped(p []byte, addr uint64, imageOnly bool) (int, error) {
	mp := m.fileMapping(addr)
	if mp == nil {
		return 0, fmt.Errorf("%w (no NT_FILE mapping here)", ErrNotDumped)
	}
	if rest := mp.End - addr; uint64(len(p)) > rest {
		p = p[:rest]
	}
	f, err := m.files.get(mp.Path)
	if err != nil {
		return 0, err
	}
	r := f.r
	off := mp.FileOffset + (addr - mp.Start)
	if off > 1<<62 {
		return 0, fmt.Errorf("%w: file offset %#x of %s is out of range", ErrNotDumped, off, mp.Path)
	}
	if imageOnly {
		end, ok := uint64(0), false
		for _, l := range f.readOnly {
			if off >= l[0] && off < l[1] {
				end, ok = l[1], true
			}
		}
		if !ok {
			return 0, fmt.Errorf("%w: offset %#x of %s is in none of its read-only segments", ErrNotDumped, off, mp.Path)
		}
		if uint64(len(p)) > end-off {
			p = p[:end-off]
		}
	}
	k, err := r.ReadAt(p, int64(off))
	if k < len(p) {
		if err == nil || err == io.EOF {
			err = fmt.Errorf("%w: %s ends before offset %#x", ErrNotDumped, mp.Path, off+uint64(k))
		} else {
			err = fmt.Errorf("reading %s at offset %#x: %w", mp.Path, off+uint64(k), err)
		}
		return k, err
	}
	return k, nil
}

// ReadCString reads the NUL-terminated string at addr, at most max bytes.
func (m *Memory) ReadCString(addr uint64, max int) (string, error) {
	var buf []byte
	var chunk [64]byte
	for len(buf) < max {
		n, err := m.ReadAt(chunk[:], addr+uint64(len(buf)))
		for i := 0; i < n; i++ {
			if chunk[i] == 0 {
				return string(append(buf, chunk[:i]...)), nil
			}
		}
		buf = append(buf, chunk[:n]...)
		if err != nil {
			return string(buf), err
		}
	}
	return string(buf[:max]), fmt.Errorf("%s: string at %#x longer than %d bytes", m.file, addr, max)
}

// fileSet opens each mapped file once, on first need, and checks it against
// the build-id the core's memory gives for it.
type fileSet struct {
	core *Core
	opts *Options
	mu   sync.Mutex
	open map[string]*mappedFile
}

type mappedFile struct {
	once     sync.Once
	r        ReaderAt
	readOnly [][2]uint64 // file offset ranges of its read-only PT_LOADs
	err      error
}

func (fs *fileSet) get(path string) (*mappedFile, error) {
	fs.mu.Lock()
	f := fs.open[path]
	if f == nil {
		f = &mappedFile{}
		fs.open[path] = f
	}
	fs.mu.Unlock()
	f.once.Do(func() { f.err = fs.openChecked(path, f) })
	return f, f.err
}

func (fs *fileSet) openChecked(path string, mf *mappedFile) error {
	r, err := fs.openFile(path)
	if err != nil {
		return err
	}
	got, readOnly, err := fileIdentity(r)
	want := fs.core.buildIDOf(path)
	switch {
	case want != nil && err != nil:
		closeReader(r)
		return fmt.Errorf("%w: mapped file %s: no build-id to check against the core's %x: %v", ErrNotDumped, path, want, err)
	case want != nil && string(got) != string(want):
		closeReader(r)
		return fmt.Errorf("%w: mapped file %s has build-id %x, the core's memory says %x", ErrNotDumped, path, got, want)
	}
	// Without a build-id from the core there is nothing to check against.
	mf.r, mf.readOnly = r, readOnly
	return nil
}

func (fs *fileSet) openFile(path string) (ReaderAt, error) {
	if fs.opts.NoMappedFiles {
		return nil, fmt.Errorf("%w (reading mapped files is disabled; %s would hold it)", ErrNotDumped, path)
	}
	var r ReaderAt
	var err error
	if fs.opts.OpenMapped != nil {
		r, err = fs.opts.OpenMapped(path)
	} else {
		var f *os.File
		f, err = os.Open(filepath.Join(fs.opts.SymFS, path))
		if err == nil {
			r = f
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: mapped file %s: %v", ErrNotDumped, path, err)
	}
	return r, nil
}

func closeReader(r ReaderAt) {
	if c, ok := r.(io.Closer); ok {
		c.Close()
	}
}

func (fs *fileSet) close() error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var first error
	for _, f := range fs.open {
		if f.r != nil {
			if c, ok := f.r.(io.Closer); ok {
				if err := c.Close(); err != nil && first == nil {
					first = err
				}
			}
		}
	}
	fs.open = map[string]*mappedFile{}
	return first
}
