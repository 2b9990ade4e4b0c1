package elfcache

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// This file gives package goruntime what it needs of a Go executable to
// read the runtime's structures from a core: the Go version the binary was
// built with, function bounds by name from the pclntab, the moduledata's
// data and type ranges, data symbols and DWARF. Each works on a stripped
// binary as far as the binary allows.

// GoModule is what a Go executable's moduledata record (runtime.firstmoduledata)
// says of its layout, in link-time addresses.
type GoModule struct {
	// Addr is the record's own address.
	Addr uint64
	// Data and EData bound the initialized data holding pointers; Bss,
	// EBss, NoptrBss and ENoptrBss the zero-initialized data, with and
	// without pointers.
	Data, EData, Bss, EBss, NoptrBss, ENoptrBss uint64
	// Types and ETypes bound the type descriptors; the descriptors'
	// name offsets are relative to Types.
	Types, ETypes uint64
}

// GoModule returns the object's moduledata record, found as the record
// whose first word points to its .gopclntab; false when the object has no
// pclntab, no such record, or one of a Go before 1.20 (whose layout this
// does not read).
func (o *Object) GoModule() (GoModule, bool) {
	t := o.goTable()
	if t == nil || !t.hasModule || t.version < 120 {
		return GoModule{}, false
	}
	m := t.module
	return GoModule{Addr: m.addr, Data: m.data, EData: m.edata, Bss: m.bss, EBss: m.ebss, NoptrBss: m.noptrbss, ENoptrBss: m.enoptrbss,
		Types: m.types, ETypes: m.etypes}, true
}

// GoFunction returns the entry and end of the function the pclntab names
// name (runtime.forEachG); false when there is none.
func (o *Object) GoFunction(name string) (entry, end uint64, ok bool) {
	var r [1]Range
	if o.goFunctions([]string{name}, r[:]) == 0 {
		return 0, 0, false
	}
	return r[0].Start, r[0].End, true
}

// goFunctions sets out[i] to the bounds of the function the pclntab names
// names[i] (left as it is where there is none) in one pass over the table,
// which ends once all are found, and returns how many were.
func (o *Object) goFunctions(names []string, out []Range) int {
	t := o.goTable()
	if t == nil {
		return 0
	}
	var f goFunc
	found := 0
	for i := 0; i < t.nfunc && found < len(names); i++ {
		if !t.function(i, &f) {
			continue
		}
		name := t.funcName(&f)
		for k, n := range names {
			if string(name) == n && out[k] == (Range{}) {
				out[k] = Range{f.entry, f.end}
				found++
			}
		}
	}
	return found
}

// buildInfoMagic begins the .go.buildinfo section.
var buildInfoMagic = []byte("\xff Go buildinf:")

// GoVersion returns the version of Go the executable was built with
// ("go1.26.8"), from its .go.buildinfo section (present in stripped
// binaries too); "" and an error naming the file and offset when the
// section is missing or not of the form Go 1.18 and later write.
func (o *Object) GoVersion() (string, error) {
	s := o.section(".go.buildinfo")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return "", newErr(o.path, "", -1, fmt.Errorf("no .go.buildinfo section: not a Go executable, or one built before Go 1.13"))
	}
	data, err := o.sectionData(s)
	if err != nil {
		return "", err
	}
	const hdr = 32
	if len(data) < hdr || !bytes.HasPrefix(data, buildInfoMagic) {
		return "", newErr(o.path, s.Name, 0, fmt.Errorf("no Go build information magic"))
	}
	if data[15]&2 == 0 {
		return "", newErr(o.path, s.Name, 15, fmt.Errorf("build information with pointers (Go before 1.18): not read"))
	}
	n, k := binary.Uvarint(data[hdr:])
	if k <= 0 || n > 64 || uint64(len(data)-hdr-k) < n {
		return "", newErr(o.path, s.Name, hdr, fmt.Errorf("bad Go version string length"))
	}
	return string(data[hdr+k : hdr+k+int(n)]), nil
}

// DataSymbol returns the address and size of the data object symbol
// called name in the object's .symtab (or its debug file's); false when
// there is none (a binary built with -ldflags=-s).
func (o *Object) DataSymbol(name string) (addr, size uint64, ok bool) {
	for _, owner := range []*Object{o, o.DebugFile()} {
		if owner == nil || owner.closed.Load() {
			continue
		}
		syms, err := owner.ef.Symbols()
		if err != nil {
			continue
		}
		for _, s := range syms {
			if s.Name == name && elf.ST_TYPE(s.Info) == elf.STT_OBJECT {
				return s.Value, s.Size, true
			}
		}
	}
	return 0, 0, false
}

// DWARF returns the object's DWARF (its debug file's when it has none of
// its own); nil and no error when there is none.
func (o *Object) DWARF() (*dwarf.Data, error) {
	if o.closed.Load() {
		return nil, nil
	}
	d, err := o.dwarfData()
	if d != nil || err != nil {
		return d, err
	}
	if dbg := o.DebugFile(); dbg != nil {
		return dbg.dwarfData()
	}
	return nil, nil
}
