package minidump

import (
	"io"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ustack/ustack/coredump"
)

// Open reads the minidump at path: plain, or compressed with zstd, xz or
// lz4, or from a pipe, as coredump.Open reads a core. Close releases it.
func Open(path string, opts *coredump.Options) (*Dump, error) {
	im, err := coredump.OpenImage(path, opts)
	if err != nil {
		return nil, err
	}
	return fromImage(im, path)
}

// OpenReader reads a minidump from a stream; name stands for it in errors.
func OpenReader(r io.Reader, name string, opts *coredump.Options) (*Dump, error) {
	im, err := coredump.OpenImageReader(r, name, opts)
	if err != nil {
		return nil, err
	}
	return fromImage(im, name)
}

func fromImage(im *coredump.Image, name string) (*Dump, error) {
	d, err := Parse(im.Data, name)
	if err != nil {
		im.Close()
		return nil, err
	}
	d.image = im
	return d, nil
}

// Close releases the file Open mapped.
func (d *Dump) Close() error {
	if d.image == nil {
		return nil
	}
	err := d.image.Close()
	d.image = nil
	return err
}

// Core returns the process the minidump describes as a coredump.Core:
// its threads (the one that crashed first, with its context at the fault
// and the signal), the file-backed mappings of LinuxMaps (or, without
// them, one per module), the modules as objects with their build-ids,
// and the dump's memory, with permissions from LinuxMaps. Only the
// dump's memory is ever read. The Core's Close does not close d.
func (d *Dump) Core() (*coredump.Core, error) {
	p := coredump.Parts{File: d.File, Arch: d.Arch, Auxv: d.Auxv}
	for _, w := range d.Warnings {
		p.Warnings = append(p.Warnings, w)
	}
	pid := d.Status.PID
	if pid == 0 {
		pid = int(d.ProcessID)
	}
	if d.Status.Known || len(d.CmdLine) > 0 {
		p.Process = coredump.Process{PID: d.Status.PID, PPID: d.Status.PPID, Comm: d.Status.Name,
			UID: d.Status.UID, GID: d.Status.GID, State: d.Status.State, Args: strings.Join(d.CmdLine, " "), Known: true}
		if p.Process.Comm == "" && len(d.CmdLine) > 0 {
			p.Process.Comm = filepath.Base(d.CmdLine[0])
		}
	}
	for _, t := range d.Threads {
		ct := coredump.Thread{TID: int(t.ID), PID: pid, Regs: t.Regs, PState: t.PState, Name: t.Name, NoteOffset: t.ContextOffset}
		if ct.PID == 0 {
			ct.PID = int(t.ID)
		}
		if x := d.Exception; x != nil && x.ThreadID == t.ID {
			if x.HasContext {
				ct.Regs, ct.PState = x.Regs, x.PState
			}
			si := &coredump.Siginfo{Signo: int(x.Code), Code: int(int32(x.Flags))}
			if coredump.HasFaultAddress(si.Signo, si.Code) {
				si.Addr, si.HasAddr = x.Address, true
			}
			ct.Signal, ct.Siginfo = si.Signo, si
		}
		p.Threads = append(p.Threads, ct)
	}
	p.Mappings = d.mappings()
	p.MappingsComplete = len(d.Maps) > 0 // /proc/PID/maps, not only the module list
	p.Memory = d.memory()
	p.Objects = d.objects()
	return coredump.Assemble(p)
}

// IsVDSOName reports whether a module's name is the vdso's soname
// (linux-vdso.so.1, linux-gate.so.1), as Crashpad and Breakpad name it.
func IsVDSOName(name string) bool {
	return strings.Contains(name, "linux-vdso") || strings.Contains(name, "linux-gate")
}

// mappings are LinuxMaps' file-backed mappings, or, without them, one
// per module (Mapping.Module).
func (d *Dump) mappings() []coredump.Mapping {
	var out []coredump.Mapping
	for _, m := range d.Maps {
		if strings.HasPrefix(m.Path, "/") {
			out = append(out, coredump.Mapping{Start: m.Start, End: m.End, FileOffset: m.Offset, Path: m.Path})
		}
	}
	if len(d.Maps) > 0 {
		return out
	}
	vdso, _ := d.auxv(coredump.AT_SYSINFO_EHDR)
	for _, m := range d.Modules {
		if m.Size == 0 || m.Base+m.Size < m.Base || m.Base == vdso || m.Name == "" || strings.HasPrefix(m.Name, "[") || IsVDSOName(m.Name) {
			continue
		}
		// Crashpad names a library by its soname ("libc.so.6"), with
		// no directory: the name stays as it is, for the report to
		// find (or name as missing).
		out = append(out, coredump.Mapping{Start: m.Base, End: m.Base + m.Size, Path: m.Name, Module: true})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// mappedAt returns the path of the file LinuxMaps maps at addr from its
// first byte and the end of that file's mappings that follow without a
// gap (or with only anonymous memory between them: a segment's bss).
func (d *Dump) mappedAt(addr uint64) (path string, end uint64, ok bool) {
	for i, m := range d.Maps {
		if m.Start != addr || m.Offset != 0 || !strings.HasPrefix(m.Path, "/") {
			continue
		}
		end = m.End
		for _, n := range d.Maps[i+1:] {
			if n.Path != m.Path || n.Inode != m.Inode || n.Dev != m.Dev {
				break
			}
			end = n.End
		}
		return m.Path, end, true
	}
	return "", 0, false
}

func (d *Dump) auxv(t uint64) (uint64, bool) {
	for _, e := range d.Auxv {
		if e.Type == t {
			return e.Value, true
		}
	}
	return 0, false
}

// memory is the memory list's ranges and the thread stacks, once each,
// with LinuxMaps' permissions.
func (d *Dump) memory() []coredump.MemoryRange {
	type key struct{ addr, n uint64 }
	seen := map[key]bool{}
	var out []coredump.MemoryRange
	add := func(r Range) {
		k := key{r.Addr, uint64(len(r.Data))}
		if len(r.Data) == 0 || seen[k] {
			return
		}
		seen[k] = true
		mr := coredump.MemoryRange{Addr: r.Addr, Data: r.Data, Offset: uint64(r.Offset)}
		for _, m := range d.Maps {
			if r.Addr >= m.Start && r.Addr < m.End {
				mr.Read, mr.Write, mr.Exec = m.Read, m.Write, m.Exec
				break
			}
		}
		out = append(out, mr)
	}
	for _, r := range d.Memory {
		add(r)
	}
	for _, t := range d.Threads {
		add(t.Stack)
	}
	return out
}

// objects are the modules, the vdso named "[vdso]" as a core names it. A
// module that LinuxMaps maps from its base (file offset 0) takes the
// maps' path and the end of that file's last mapping: the module list
// may name the file as the dynamic linker did (lldb writes
// /lib/x86_64-linux-gnu/libc.so.6 where the maps say
// /usr/lib/x86_64-linux-gnu/libc.so.6) and size it as its first segment
// only (lldb), and the mappings find their object's build-id by path.
func (d *Dump) objects() []coredump.Object {
	vdso, hasVDSO := d.auxv(coredump.AT_SYSINFO_EHDR)
	var out []coredump.Object
	for _, m := range d.Modules {
		o := coredump.Object{Path: m.Name, Start: m.Base, End: m.Base + m.Size, BuildID: m.BuildID, BuildIDPrefix: m.BuildIDPrefix}
		if path, end, ok := d.mappedAt(m.Base); ok {
			o.Path, o.End = path, max(o.End, end)
		}
		if hasVDSO && m.Base == vdso || IsVDSOName(m.Name) {
			o.Path = "[vdso]"
			if hasVDSO && m.Base == vdso {
				hasVDSO = false
			}
		}
		out = append(out, o)
	}
	if hasVDSO {
		// No module names the vdso: its build-id comes from its image
		// in the dump's memory, where the dump holds it.
		end := vdso
		for _, m := range d.Maps {
			if m.Start == vdso {
				end = m.End
			}
		}
		for _, r := range d.Memory {
			if r.Addr == vdso {
				end = max(end, r.Addr+uint64(len(r.Data)))
			}
		}
		out = append(out, coredump.Object{Path: "[vdso]", Start: vdso, End: end})
	}
	return out
}
