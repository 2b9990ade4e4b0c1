package coredump

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// Object is an ELF object mapped into the dumped process: a file listed by
// NT_FILE whose first page holds an ELF header, or the vdso.
type Object struct {
	// Path is the recorded path, or "[vdso]".
	Path string
	// Start is where the object's first page (file offset 0) is mapped;
	// End is the end of its last mapping.
	Start, End uint64
	// Bias is the load bias: runtime address minus link-time address.
	// Valid when Err is nil.
	Bias uint64
	// BuildID is the NT_GNU_BUILD_ID the object's program headers point to,
	// read from the core's memory; nil when it could not be read (Err says
	// why) or the object has none.
	BuildID []byte
	// BuildIDPrefix is true when BuildID holds only the first bytes of
	// the object's build-id (a minidump's PDB70 CodeView record keeps 16).
	BuildIDPrefix bool
	// Err says why the ELF header, program headers or build-id note could
	// not be read from the core's memory (typically: not dumped).
	Err error
}

// Objects returns the mapped ELF objects in address order, with the vdso.
func (c *Core) Objects() []Object { return c.objects }

// VDSO returns the address of the vdso's ELF header (AT_SYSINFO_EHDR).
func (c *Core) VDSO() (uint64, bool) { return c.AuxvValue(AT_SYSINFO_EHDR) }

// VDSOImage returns the vdso's bytes from the core's memory: the PT_LOAD
// segment that starts at AT_SYSINFO_EHDR.
func (c *Core) VDSOImage() ([]byte, error) {
	addr, ok := c.VDSO()
	if !ok {
		return nil, fmt.Errorf("%s: no AT_SYSINFO_EHDR in NT_AUXV: the process had no vdso", c.File)
	}
	i := c.mem.find(addr)
	if i < 0 {
		return nil, &MemoryError{File: c.File, Addr: addr, Err: ErrUnmapped}
	}
	s := &c.mem.segs[i]
	off := addr - s.vaddr
	if size := s.memsz - off; off >= uint64(len(s.data)) || size > uint64(len(s.data))-off {
		return nil, &MemoryError{File: c.File, Addr: addr, Err: fmt.Errorf("%w: the vdso segment at %#x (%#x bytes) is not wholly in the core", ErrNotDumped, s.vaddr, s.memsz)}
	}
	return bytes.Clone(s.data[off:]), nil
}

func (c *Core) buildIDOf(path string) []byte {
	for i := range c.objects {
		if c.objects[i].Path == path && c.objects[i].BuildID != nil {
			return c.objects[i].BuildID
		}
	}
	return nil
}

func (c *Core) findObjects() []Object {
	var objs []Object
	for _, m := range c.mem.maps {
		if m.FileOffset == 0 {
			objs = append(objs, Object{Path: m.Path, Start: m.Start, End: m.End})
			continue
		}
		// A later mapping of the same file extends the last object of it.
		for k := len(objs) - 1; k >= 0; k-- {
			if objs[k].Path == m.Path {
				if m.End > objs[k].End {
					objs[k].End = m.End
				}
				break
			}
		}
	}
	if v, ok := c.VDSO(); ok {
		end := v
		if i := c.mem.find(v); i >= 0 {
			end = c.mem.segs[i].vaddr + c.mem.segs[i].memsz
		}
		objs = append(objs, Object{Path: "[vdso]", Start: v, End: end})
	}
	sort.SliceStable(objs, func(i, j int) bool { return objs[i].Start < objs[j].Start })
	out := objs[:0]
	for _, o := range objs {
		o.Bias, o.BuildID, o.Err = c.readELFIdentity(o.Start)
		if errors.Is(o.Err, errNotELF) {
			continue // a mapped data file, not an object
		}
		out = append(out, o)
	}
	return out
}

var errNotELF = errors.New("no ELF header")

// readELFIdentity reads, from dumped memory only, the ELF header at base,
// its program headers, and the build-id note they point to, as elfutils'
// dwfl_segment_report_module does.
func (c *Core) readELFIdentity(base uint64) (bias uint64, id []byte, err error) {
	le := binary.LittleEndian
	var eh [ehdrSize]byte
	if _, err := c.mem.ReadDumped(eh[:], base); err != nil {
		if _, err4 := c.mem.ReadDumped(eh[:4], base); err4 == nil && string(eh[:4]) != "\x7fELF" {
			return 0, nil, errNotELF
		}
		return 0, nil, fmt.Errorf("ELF header: %w", err)
	}
	if string(eh[:4]) != "\x7fELF" {
		return 0, nil, errNotELF
	}
	if eh[4] != 2 || eh[5] != 1 {
		return 0, nil, fmt.Errorf("ELF object at %#x is not 64-bit little-endian", base)
	}
	phoff := le.Uint64(eh[32:])
	phentsize := le.Uint16(eh[54:])
	phnum := int(le.Uint16(eh[56:]))
	if phentsize != phdrSize || phnum == 0 || phnum > 256 || phoff > 1<<20 {
		return 0, nil, fmt.Errorf("ELF object at %#x: implausible program header table (offset %#x, %d entries of %d bytes)", base, phoff, phnum, phentsize)
	}
	ph := make([]byte, phnum*phdrSize)
	if _, err := c.mem.ReadDumped(ph, base+phoff); err != nil {
		return 0, nil, fmt.Errorf("program headers: %w", err)
	}
	var notes [][2]uint64
	haveLoad := false
	for i := 0; i < phnum; i++ {
		p := ph[i*phdrSize:]
		switch le.Uint32(p) {
		case ptLoad:
			if !haveLoad {
				// The first PT_LOAD maps the file's first page at base.
				off, vaddr := le.Uint64(p[8:]), le.Uint64(p[16:])
				bias = base - (vaddr - off)
				haveLoad = true
			}
		case ptNote:
			notes = append(notes, [2]uint64{le.Uint64(p[16:]), le.Uint64(p[32:])})
		}
	}
	if !haveLoad {
		return 0, nil, fmt.Errorf("ELF object at %#x has no PT_LOAD", base)
	}
	var lastErr error
	for _, n := range notes {
		if n[1] > 1<<16 {
			continue
		}
		// Go's linker puts .note.gnu.build-id right after the PT_NOTE
		// that covers only .note.go.buildid; elfutils finds it there, and
		// so does reading a little past p_filesz when those bytes are
		// dumped (they are: the first page).
		for _, extra := range []uint64{noteSlack, 0} {
			buf := make([]byte, n[1]+extra)
			if _, err := c.mem.ReadDumped(buf, bias+n[0]); err != nil {
				lastErr = fmt.Errorf("note segment: %w", err)
				continue
			}
			if id := gnuBuildID(buf); id != nil {
				return bias, id, nil
			}
			break
		}
	}
	return bias, nil, lastErr
}

// noteSlack is how far past a PT_NOTE's end notes are looked for.
const noteSlack = 64

// gnuBuildID returns the NT_GNU_BUILD_ID descriptor among the notes in buf.
func gnuBuildID(buf []byte) []byte {
	le := binary.LittleEndian
	for len(buf) >= 12 {
		namesz, descsz, typ := uint64(le.Uint32(buf)), uint64(le.Uint32(buf[4:])), le.Uint32(buf[8:])
		descOff := 12 + align4(namesz)
		end := descOff + align4(descsz)
		if descOff+descsz > uint64(len(buf)) {
			return nil
		}
		if typ == 3 && namesz == 4 && string(buf[12:15]) == "GNU" && descsz > 0 {
			return bytes.Clone(buf[descOff : descOff+descsz])
		}
		if end >= uint64(len(buf)) {
			return nil
		}
		buf = buf[end:]
	}
	return nil
}

// fileIdentity returns the build-id of the ELF file r (nil if it has none)
// and the file offset ranges of its read-only PT_LOAD segments: the bytes a
// mapping of the file shows unchanged.
func fileIdentity(r ReaderAt) (id []byte, readOnly [][2]uint64, err error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range f.Progs {
		switch {
		case p.Type == elf.PT_LOAD && p.Flags&elf.PF_W == 0:
			readOnly = append(readOnly, [2]uint64{p.Off, p.Off + p.Filesz})
		case p.Type == elf.PT_NOTE && p.Filesz <= 1<<16 && id == nil:
			buf := make([]byte, p.Filesz)
			if _, err := p.ReadAt(buf, 0); err == nil {
				id = gnuBuildID(buf)
			}
		}
	}
	if sec := f.Section(".note.gnu.build-id"); id == nil && sec != nil && sec.Size <= 1<<16 {
		// Go's linker leaves this section out of every PT_NOTE.
		if buf, err := sec.Data(); err == nil {
			id = gnuBuildID(buf)
		}
	}
	return id, readOnly, nil
}

// FileBuildID returns the build-id of the ELF file r, nil when it has none.
func FileBuildID(r ReaderAt) ([]byte, error) {
	id, _, err := fileIdentity(r)
	return id, err
}
