package elfcache

import (
	"bytes"
	"cmp"
	"debug/elf"
	"encoding/binary"
	"slices"
	"strings"
)

// ntGNUBuildID is the note type of the GNU build-id.
const ntGNUBuildID = 3

// sttGNUIFunc is STT_GNU_IFUNC, an indirect function.
const sttGNUIFunc = 10

// Symbol is one function symbol of an object.
type Symbol struct {
	// Name is the symbol's name as in the string table (versioned names of
	// static binaries keep their @VERSION suffix).
	Name string
	// Addr is the link-time address of the symbol.
	Addr uint64
	// Size is the symbol's size; for symbols whose st_size is 0 it is the
	// distance to the next symbol (or the end of the section).
	Size uint64
	// Bind is the symbol's binding (STB_GLOBAL, STB_WEAK, STB_LOCAL).
	Bind elf.SymBind
	// Type is STT_FUNC, STT_GNU_IFUNC or STT_NOTYPE.
	Type elf.SymType
}

// symtab is the sorted function symbol table of an object. Names are
// substrings of one backing string so that lookups do not allocate.
type symtab struct {
	names string
	syms  []symEntry // sorted by addr, unique addresses
	spans []span     // disjoint, sorted: which symbol covers which addresses
}

type symEntry struct {
	addr, size uint64 // size is the effective size
	nameOff    uint32
	nameLen    uint32
	bind       uint8
	typ        uint8
	// roomed is 1 for a symbol without a size, given the room up to the
	// next symbol (buildSymtab): Symbolize names no address in it past
	// the target of a direct call after its start.
	roomed uint8
}

type span struct {
	start, end uint64
	sym        uint32
}

// candidate is a symbol table entry that may make it into the table.
type candidate struct {
	addr, size uint64 // size as in st_size
	secEnd     uint64
	name       []byte
	bind, typ  uint8
	vis        uint8
	order      uint32 // position in the symbol tables as read
}

// Symbolize returns the function symbol containing the link-time address
// addr and addr's offset from the symbol's start. The symbol table
// (.symtab, from the object or else its debug file, merged with .dynsym) is
// built on first use; later calls do not allocate. Among aliases at one
// address it names the one perf would (see candidate.better). Zero-size
// symbols extend to the next symbol.
func (o *Object) Symbolize(addr uint64) (name string, offset uint64, ok bool) {
	t := o.symbols()
	if t == nil {
		return "", 0, false
	}
	sp := t.spans
	lo, hi := 0, len(sp)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if sp[mid].start <= addr {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 || addr >= sp[lo-1].end {
		return "", 0, false
	}
	s := &t.syms[sp[lo-1].sym]
	if s.roomed != 0 && addr > s.addr {
		// A zero-size symbol (musl's assembly: memset, __clone) may
		// end long before the next symbol: code a direct call enters
		// after its start is a function the table leaves out (musl's
		// __syscall_cp_asm after memset), which is not to take its
		// name.
		if c, ok := o.callTargetBefore(addr); ok && c > s.addr {
			return "", 0, false
		}
	}
	return t.names[s.nameOff : s.nameOff+s.nameLen], addr - s.addr, true
}

// Symbols returns the object's function symbols sorted by address, one per
// address (the preferred alias), with effective sizes.
func (o *Object) Symbols() []Symbol {
	t := o.symbols()
	if t == nil {
		return nil
	}
	out := make([]Symbol, len(t.syms))
	for i := range t.syms {
		s := &t.syms[i]
		out[i] = Symbol{Name: t.names[s.nameOff : s.nameOff+s.nameLen], Addr: s.addr, Size: s.size,
			Bind: elf.SymBind(s.bind), Type: elf.SymType(s.typ)}
	}
	return out
}

// SymbolsError returns the error met while reading the symbol tables, if any.
func (o *Object) SymbolsError() error {
	o.symbols()
	return o.symErr
}

func (o *Object) symbols() *symtab {
	if o.closed.Load() {
		return nil
	}
	o.symOnce.Do(o.buildSymbols)
	return o.syms
}

func (o *Object) buildSymbols() {
	var cands []candidate
	owner := o
	if o.section(".symtab") == nil || o.section(".symtab").Type == elf.SHT_NOBITS {
		if d := o.DebugFile(); d != nil {
			owner = d
		}
	}
	mini := owner.section(".symtab") == nil || owner.section(".symtab").Type == elf.SHT_NOBITS
	var key []byte
	c := o.opts.SectionCache
	if c != nil && len(o.buildID) > 0 {
		key = o.symtabKey(owner, mini)
		var from Origin
		if o.loadDerived(symtabEntry, key, func(b []byte) (ok bool) { o.syms, from, ok = decodeSymtab(b); return ok }) {
			o.symFrom = from
			o.held.heap.Add(int64(len(o.syms.names)))
			return
		}
	}
	if mini {
		// No full symbol table anywhere: MiniDebugInfo has the local
		// functions .dynsym lacks.
		mini, err := o.miniDebugInfo()
		if err != nil {
			o.symErr = err
		}
		if mini != nil {
			owner = mini
		}
	}
	var err error
	cands, err = owner.readSymtab(".symtab", cands)
	if err != nil {
		o.symErr = err
	}
	if len(cands) > 0 {
		o.symFrom = owner.origin()
		if owner != o && owner != o.debug { // MiniDebugInfo
			o.symFrom = OriginMiniDebugInfo
		}
	}
	cands, err = o.readSymtab(".dynsym", cands)
	if err != nil && o.symErr == nil {
		o.symErr = err
	}
	if len(cands) > 0 && o.symFrom == OriginNone {
		o.symFrom = o.origin()
	}
	if len(cands) == 0 {
		// Go binaries built with -ldflags=-s: the runtime's function
		// table names every function.
		if cands = o.goSymbols(cands); len(cands) > 0 {
			o.symFrom = OriginGoPCLN
		}
	}
	cands = o.pltSymbols(cands)
	o.syms = buildSymtab(cands)
	if key != nil && o.symErr == nil {
		if t := o.storeSymtab(key, o.syms, o.symFrom); t != o.syms {
			o.syms = t
			o.held.heap.Add(int64(len(t.names))) // as when loaded
			o.dropSymtabs(owner)
			return
		}
	}
	o.held.heap.Add(o.syms.heldBytes())
}

// dropSymtabs lets the pages of o's .dynsym and owner's .symtab, with
// their strings, go from the resident set (source.drop): what is built
// from them is kept elsewhere.
func (o *Object) dropSymtabs(owner *Object) {
	o.dropSymbolPages(".dynsym")
	owner.dropSymbolPages(".symtab")
}

// dropSymbolPages is dropSymtabs for one symbol table of o.
func (o *Object) dropSymbolPages(name string) {
	s := o.section(name)
	if s == nil || s.Type != elf.SHT_SYMTAB && s.Type != elf.SHT_DYNSYM || s.Flags&elf.SHF_COMPRESSED != 0 {
		return
	}
	o.src.drop(s.Offset, s.FileSize)
	if int(s.Link) < len(o.ef.Sections) && s.Link != 0 {
		if str := o.ef.Sections[s.Link]; str.Type == elf.SHT_STRTAB && str.Flags&elf.SHF_COMPRESSED == 0 {
			o.src.drop(str.Offset, str.FileSize)
		}
	}
}

// readSymtab appends the function symbols of the named symbol table.
func (o *Object) readSymtab(name string, out []candidate) ([]candidate, error) {
	s := o.section(name)
	if s == nil || s.Type == elf.SHT_NOBITS || (s.Type != elf.SHT_SYMTAB && s.Type != elf.SHT_DYNSYM) {
		return out, nil
	}
	data, err := o.sectionData(s)
	if err != nil {
		return out, err
	}
	if int(s.Link) >= len(o.ef.Sections) || s.Link == 0 {
		return out, newErr(o.path, name, -1, errBadLink)
	}
	strSec := o.ef.Sections[s.Link]
	if strSec.Type != elf.SHT_STRTAB {
		return out, newErr(o.path, name, -1, errBadLink)
	}
	strs, err := o.sectionData(strSec)
	if err != nil {
		return out, err
	}
	secs := o.ef.Sections
	const symSize = 24
	// Room for every function-typed entry at once: growing a slice of a
	// large program's symbols (cc1: 100,000s) step by step copied it
	// over and over.
	n := 0
	for off := symSize + 4; off < len(data); off += symSize {
		if typ := data[off] & 0xf; typ == uint8(elf.STT_FUNC) || typ == sttGNUIFunc || typ == uint8(elf.STT_NOTYPE) {
			n++
		}
	}
	out = slices.Grow(out, n)
	for off := symSize; off+symSize <= len(data); off += symSize { // entry 0 is reserved
		e := data[off : off+symSize]
		nameOff := binary.LittleEndian.Uint32(e[0:])
		info := e[4]
		other := e[5]
		shndx := binary.LittleEndian.Uint16(e[6:])
		value := binary.LittleEndian.Uint64(e[8:])
		size := binary.LittleEndian.Uint64(e[16:])
		typ := info & 0xf
		if typ != uint8(elf.STT_FUNC) && typ != sttGNUIFunc && typ != uint8(elf.STT_NOTYPE) {
			continue
		}
		if shndx == 0 || shndx >= uint16(elf.SHN_LORESERVE) || int(shndx) >= len(secs) {
			continue
		}
		sec := secs[shndx]
		if sec.Flags&elf.SHF_EXECINSTR == 0 || sec.Flags&elf.SHF_ALLOC == 0 {
			continue
		}
		if uint64(nameOff) >= uint64(len(strs)) {
			continue
		}
		nm := strs[nameOff:]
		if i := indexByte0(nm); i >= 0 {
			nm = nm[:i]
		} else {
			continue // unterminated
		}
		if len(nm) == 0 || len(nm) > 1<<16 {
			continue
		}
		if typ == uint8(elf.STT_NOTYPE) && (isMappingSymbol(nm) || strings.HasPrefix(string(nm), ".L")) {
			continue
		}
		if value+size < value {
			size = ^uint64(0) - value
		}
		secEnd := sec.Addr + sec.Size
		if secEnd < sec.Addr {
			secEnd = ^uint64(0)
		}
		out = append(out, candidate{addr: value, size: size, secEnd: secEnd, name: nm,
			bind: info >> 4, typ: typ, vis: other & 3})
	}
	return out, nil
}

var errBadLink = &linkError{}

type linkError struct{}

func (*linkError) Error() string { return "symbol table's sh_link is not a string table" }

func indexByte0(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}

// isMappingSymbol reports whether name is an Arm mapping symbol ($x, $d,
// $a, $t, optionally followed by .suffix).
func isMappingSymbol(name []byte) bool {
	if len(name) < 2 || name[0] != '$' {
		return false
	}
	switch name[1] {
	case 'x', 'd', 'a', 't':
		return len(name) == 2 || name[2] == '.'
	}
	return false
}

// better orders aliases at one address, the way perf chooses among them so
// that reports name functions as perf does: sized before zero-size,
// functions before untyped labels, non-weak before weak, global before
// local, fewer leading underscores, the longer name, then the first in the
// symbol table.
func (c *candidate) better(d *candidate) bool {
	// Go's linker names each host object's text "PKG(.text)" (a sized
	// FUNC symbol at its first function: runtime/cgo(.text) at cgo's
	// crosscall1 and threadentry), a section, not a function.
	if cs, ds := bytes.HasSuffix(c.name, []byte("(.text)")), bytes.HasSuffix(d.name, []byte("(.text)")); cs != ds {
		return ds
	}
	if (c.size > 0) != (d.size > 0) {
		return c.size > 0
	}
	cf, df := c.typ != uint8(elf.STT_NOTYPE), d.typ != uint8(elf.STT_NOTYPE)
	if cf != df {
		return cf
	}
	cw, dw := elf.SymBind(c.bind) == elf.STB_WEAK, elf.SymBind(d.bind) == elf.STB_WEAK
	if cw != dw {
		return dw
	}
	if cg, dg := isGlobal(c.bind), isGlobal(d.bind); cg != dg {
		return cg
	}
	if cu, du := leadingUnderscores(c.name), leadingUnderscores(d.name); cu != du {
		return cu < du
	}
	// The longer name, not counting a symbol version (perf keeps the
	// first of fclose@GLIBC_2.2.5 and fclose@@GLIBC_2.34), then the one
	// that comes first in the symbol table.
	if cl, dl := unversionedLen(c.name), unversionedLen(d.name); cl != dl {
		return cl > dl
	}
	return c.order < d.order
}

func unversionedLen(name []byte) int {
	for i, b := range name {
		if b == '@' {
			return i
		}
	}
	return len(name)
}

func isGlobal(b uint8) bool {
	return elf.SymBind(b) == elf.STB_GLOBAL || b == 10 // STB_GNU_UNIQUE
}

func leadingUnderscores(b []byte) int {
	n := 0
	for n < len(b) && b[n] == '_' {
		n++
	}
	return n
}

// buildSymtab keeps the preferred alias at each address, gives zero-size
// symbols the room up to the next symbol (marked roomed), drops zero-size labels inside
// sized functions and computes which symbol covers each address.
func buildSymtab(cands []candidate) *symtab {
	for i := range cands {
		cands[i].order = uint32(i)
	}
	// By address, the better alias first (a total order: better ends on
	// the symbol table order), one per address. The sort moves 16-byte
	// keys without pointers, not the candidates: half the time.
	type key struct {
		addr uint64
		i    uint32
	}
	keys := make([]key, len(cands))
	for i := range cands {
		keys[i] = key{cands[i].addr, uint32(i)}
	}
	slices.SortFunc(keys, func(a, b key) int {
		switch {
		case a.addr != b.addr:
			return cmp.Compare(a.addr, b.addr)
		case a.i == b.i:
			return 0
		case cands[a.i].better(&cands[b.i]):
			return -1
		}
		return 1
	})
	uniq := make([]candidate, 0, len(keys))
	for _, k := range keys {
		if len(uniq) > 0 && uniq[len(uniq)-1].addr == k.addr {
			continue
		}
		uniq = append(uniq, cands[k.i])
	}
	t := &symtab{}
	var nameLen int
	for i := range uniq {
		nameLen += len(uniq[i].name)
	}
	var names strings.Builder
	names.Grow(nameLen)
	t.syms = make([]symEntry, 0, len(uniq))
	t.spans = make([]span, 0, len(uniq))

	type open struct {
		end uint64
		sym uint32
	}
	var stack []open
	var p uint64
	flush := func(upTo uint64) {
		for len(stack) > 0 && p < upTo {
			top := stack[len(stack)-1]
			if top.end <= p {
				stack = stack[:len(stack)-1]
				continue
			}
			e := min(top.end, upTo)
			if n := len(t.spans); n > 0 && t.spans[n-1].sym == top.sym && t.spans[n-1].end == p {
				t.spans[n-1].end = e
			} else {
				t.spans = append(t.spans, span{start: p, end: e, sym: top.sym})
			}
			p = e
			if top.end <= p {
				stack = stack[:len(stack)-1]
			}
		}
	}
	for i := range uniq {
		c := &uniq[i]
		flush(c.addr)
		p = c.addr
		size := c.size
		if size == 0 {
			covered := false
			for _, s := range stack {
				if s.end > c.addr {
					covered = true
					break
				}
			}
			if covered {
				continue // a label inside a sized function
			}
			end := c.secEnd
			if i+1 < len(uniq) && uniq[i+1].addr < end {
				end = uniq[i+1].addr
			}
			if end <= c.addr {
				continue
			}
			size = end - c.addr
		}
		idx := uint32(len(t.syms))
		e := symEntry{addr: c.addr, size: size, nameOff: uint32(names.Len()),
			nameLen: uint32(len(c.name)), bind: c.bind, typ: c.typ}
		if c.size == 0 {
			e.roomed = 1
		}
		t.syms = append(t.syms, e)
		names.Write(c.name)
		stack = append(stack, open{end: c.addr + size, sym: idx})
	}
	flush(^uint64(0))
	t.names = names.String()
	return t
}
