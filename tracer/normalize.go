package tracer

import (
	"debug/elf"
	"encoding/hex"
	"fmt"

	"github.com/ustack/ustack/procmaps"
	"github.com/ustack/ustack/resolve"
)

// Normalized is an address of a process made independent of it: the
// object mapped there, by path and build-id, and the offset in that file.
// It names the same code on any machine that has the object (or finds it
// by build-id).
type Normalized struct {
	// Path is the mapped file as the process saw it, or a pseudo-path
	// ("[vdso]"); "" for an address in no mapping or in anonymous memory
	// (JIT code), whose address is then FileOffset.
	Path string
	// BuildID is the object's GNU build-id, when it has one and its
	// object was found.
	BuildID []byte
	// FileOffset is the address's offset in the file (perf's
	// map-relative address).
	FileOffset uint64
}

// String returns "path build-id+0xOFFSET".
func (n Normalized) String() string {
	return fmt.Sprintf("%s %s+%#x", n.Path, hex.EncodeToString(n.BuildID), n.FileOffset)
}

// Normalize appends to dst the normalized form of each address of p and
// returns the extended slice. An address outside p's maps makes them be
// read again, once.
func (p *Process) Normalize(dst []Normalized, addrs ...uint64) []Normalized {
	for _, a := range addrs {
		s := p.space.Load()
		i := s.AddressSpace().Find(a)
		if i < 0 && p.refresh(a) {
			s = p.space.Load()
			i = s.AddressSpace().Find(a)
		}
		m, ok := s.Mapping(i)
		if !ok || resolve.IsAnonymous(m.File) {
			dst = append(dst, Normalized{FileOffset: a})
			continue
		}
		dst = append(dst, Normalized{Path: m.File, BuildID: m.BuildID, FileOffset: a - m.Start + m.Offset})
	}
	return dst
}

// objectSpace is an object of SymbolizeNormalized: an address space whose
// addresses are the object's file offsets.
type objectSpace struct {
	space *resolve.Space
}

// SymbolizeNormalized returns the frames of the code at a normalized
// address: the functions inlined there, innermost first, then the
// function, with source lines where debug info has them. The object is
// found by its build-id (the file at n.Path when its build-id is n's,
// else Options.BuildIDDirs, else Options.Fetcher); an address whose object
// cannot be found gets one frame with Module "" (Tracer.Missing says
// why). n.FileOffset is taken as an instruction's; for a return address
// pass the offset minus one. The frames are valid until the Walker's next
// call.
func (w *Walker) SymbolizeNormalized(n Normalized) []Frame {
	o := w.t.objectSpace(n)
	if o == nil {
		w.out = append(w.out[:0], Frame{Addr: n.FileOffset, PC: n.FileOffset, Offset: n.FileOffset, How: resolve.HowContext})
		return w.out
	}
	w.out = w.sym.AppendAddr(w.out[:0], o.space, n.FileOffset)
	return w.out
}

// objectSpace returns the address space of n's object, made the first
// time: one mapping per executable segment, at its file offsets.
func (t *Tracer) objectSpace(n Normalized) *objectSpace {
	if n.Path == "" {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	byPath := t.objects[string(n.BuildID)]
	if o, ok := byPath[n.Path]; ok {
		return o
	}
	if byPath == nil {
		byPath = map[string]*objectSpace{}
		t.objects[string(n.BuildID)] = byPath
	}
	var o *objectSpace
	defer func() { byPath[n.Path] = o }()
	obj := t.res.OpenObject(n.Path, n.BuildID)
	if obj == nil {
		return nil
	}
	var maps []resolve.Mapping
	for _, ph := range obj.LoadSegments() {
		if ph.Flags&elf.PF_X == 0 || ph.Filesz == 0 {
			continue
		}
		start := ph.Off &^ 0xfff
		maps = append(maps, resolve.Mapping{Map: procmaps.Map{Start: start, End: ph.Off + ph.Filesz, PgOff: start,
			Path: n.Path, BuildID: n.BuildID, Exec: true, Prot: procmaps.ProtRead | procmaps.ProtExec}})
	}
	o = &objectSpace{space: t.res.NewSpace(0, maps)}
	return o
}
