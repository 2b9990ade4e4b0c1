package coredump

import (
	"fmt"
	"sort"

	"github.com/ustack/ustack/arch"
)

// Parts are what another dump format (a minidump) says of a process:
// Assemble makes a Core of them, so that one report path serves both.
type Parts struct {
	// File names the dump in errors and warnings.
	File string
	Arch arch.Arch
	// Threads, the signalled one first or not: Assemble orders them as
	// Parse does.
	Threads  []Thread
	Signal   *Siginfo
	Process  Process
	Auxv     []AuxvEntry
	Mappings []Mapping
	// MappingsComplete says that Mappings lists every file-backed mapping
	// of the process (a minidump's /proc/PID/maps), so that executable
	// memory outside them is anonymous (Core.MappingsComplete).
	MappingsComplete bool
	// Memory is the dump's memory. Only these bytes are ever read: no
	// mapped file stands in for memory a minidump left out.
	Memory []MemoryRange
	// Objects are the mapped ELF objects the dump names (a minidump's
	// module list). An object without a BuildID gets the one its ELF
	// header in Memory points to, where Memory holds it (the vdso).
	Objects  []Object
	Warnings []error
}

// MemoryRange is a block of process memory a dump holds.
type MemoryRange struct {
	Addr uint64
	Data []byte
	// Read, Write and Exec are the memory's permissions where the dump
	// says (a minidump's /proc/PID/maps); all false where it does not.
	Read, Write, Exec bool
	// Offset is the file offset of Data in the dump, for Segments.
	Offset uint64
}

// Assemble returns the Core made of p. Overlapping memory ranges keep the
// first (a warning names the other); a Core without threads is an error,
// as it is for Parse.
func Assemble(p Parts) (*Core, error) {
	c := &Core{File: p.File, Arch: p.Arch, Threads: p.Threads, Signal: p.Signal, Process: p.Process,
		Auxv: p.Auxv, Mappings: p.Mappings, MappingsComplete: p.MappingsComplete, PageSize: 4096, Warnings: p.Warnings}
	if len(c.Threads) == 0 {
		return nil, fmt.Errorf("%s: no thread could be read", c.File)
	}
	var segs []segment
	for _, r := range p.Memory {
		if len(r.Data) == 0 {
			continue
		}
		if r.Addr+uint64(len(r.Data)) < r.Addr {
			c.warnf(int64(r.Offset), "memory at %#x of size %#x wraps around the address space; ignored", r.Addr, len(r.Data))
			continue
		}
		var flags uint32
		if r.Read {
			flags |= pfR
		}
		if r.Write {
			flags |= pfW
		}
		if r.Exec {
			flags |= pfX
		}
		n := uint64(len(r.Data))
		segs = append(segs, segment{vaddr: r.Addr, memsz: n, filesz: n, offset: r.Offset, flags: flags, data: r.Data})
	}
	sort.SliceStable(segs, func(i, j int) bool { return segs[i].vaddr < segs[j].vaddr })
	out := segs[:0]
	for _, s := range segs {
		if n := len(out); n > 0 && s.vaddr < out[n-1].vaddr+out[n-1].memsz {
			c.warnf(int64(s.offset), "memory at %#x overlaps the range at %#x; ignored", s.vaddr, out[n-1].vaddr)
			continue
		}
		out = append(out, s)
	}
	c.orderThreads()
	c.mem = newMemory(c, out, nil, &Options{NoMappedFiles: true})
	c.nameThreads()
	c.objects = make([]Object, 0, len(p.Objects))
	for _, o := range p.Objects {
		if o.BuildID == nil && o.Err == nil {
			bias, id, err := c.readELFIdentity(o.Start)
			if err == nil || id != nil {
				o.Bias, o.BuildID = bias, id
			} else {
				o.Err = err
			}
		}
		c.objects = append(c.objects, o)
	}
	sort.SliceStable(c.objects, func(i, j int) bool { return c.objects[i].Start < c.objects[j].Start })
	return c, nil
}
