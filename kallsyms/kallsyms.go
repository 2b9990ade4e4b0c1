package kallsyms

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"unsafe"
)

// Symbol is one kernel text symbol.
type Symbol struct {
	Addr   uint64
	Name   string
	Module string // "" for the kernel image
}

// Table is a sorted kernel symbol table. It is immutable and safe for
// concurrent use.
type Table struct {
	syms []Symbol
	// packed holds, instead of syms, the symbols of a cache entry as the
	// entry stores them (decodeEntry). No Symbol per name is made: a
	// lookup makes the one it returns, and the garbage collector has no
	// pointer to follow in a table of 100,000 symbols. LoadProc's store
	// moves a table built on the heap onto the entry it wrote, mapped,
	// while lookups go on (Store).
	packed atomic.Pointer[packedSyms]
	// partial: only the kernel image's symbols, from LoadProc's cache;
	// lookups of addresses in [lo, hi] are exact (Covers).
	partial bool
	lo, hi  uint64
	// refs are the kernel's reference symbols (_text, _stext), kept
	// apart: among aliases at one address syms keeps only the last.
	refs []Symbol
}

// isRef reports whether s is a reference symbol perf relocates kernel
// addresses by (its kernel map's "[kernel.kallsyms]_text").
func isRef(s Symbol) bool {
	return s.Module == "" && (s.Name == "_text" || s.Name == "_stext")
}

// Load reads a kallsyms file such as /proc/kallsyms.
func Load(path string) (*Table, error) {
	t, _, err := load(path)
	return t, err
}

// load reads and parses a kallsyms file, and returns its text too.
func load(path string) (*Table, []byte, error) {
	b, err := readTable(path)
	if err != nil {
		return nil, nil, err
	}
	// b is this function's own and never written again: the names can be
	// its substrings, without a copy of megabytes.
	t, err := parseText(unsafe.String(unsafe.SliceData(b), len(b)))
	if err != nil {
		return nil, nil, fmt.Errorf("kallsyms: %s: %w", path, err)
	}
	return t, b, nil
}

// maxTable bounds the kallsyms text Parse reads (the real table is a few
// MB; a larger input is not a kallsyms file).
const maxTable = 256 << 20

// Parse reads kallsyms lines. Only text symbols (types t, T, w, W) are kept;
// malformed lines are skipped. A table whose addresses are all zero (read
// without privilege, kptr_restrict) is an error, since it cannot symbolize.
func Parse(r io.Reader) (*Table, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxTable+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxTable {
		return nil, fmt.Errorf("larger than %d MB: not a kallsyms table", maxTable>>20)
	}
	return ParseBytes(b)
}

// ParseBytes is Parse on a table in memory. The names share one copy of
// the text, so a table of 100,000 symbols costs a few allocations, not one
// per symbol.
func ParseBytes(b []byte) (*Table, error) {
	return parseText(string(b))
}

// parseText parses a table whose names may be substrings of text.
func parseText(text string) (*Table, error) {
	// A symbol per line at most: growing the slice instead would copy
	// megabytes.
	syms := make([]Symbol, 0, strings.Count(text, "\n")+1)
	nonzero, sorted := false, true
	var refs []Symbol
	for len(text) > 0 {
		line := text
		if i := strings.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = ""
		}
		s, ok := parseLine(line)
		if !ok {
			continue
		}
		if s.Addr != 0 {
			nonzero = true
		}
		if isRef(s) {
			refs = append(refs, s)
		}
		if n := len(syms); n > 0 && syms[n-1].Addr > s.Addr {
			sorted = false
		}
		syms = append(syms, s)
	}
	if len(syms) > 0 && !nonzero {
		return nil, fmt.Errorf("all addresses are zero (read as root, or lower kernel.kptr_restrict)")
	}
	// /proc/kallsyms lists the kernel in address order and modules after
	// it, each in order: sort only what needs it.
	if !sorted {
		slices.SortStableFunc(syms, func(a, b Symbol) int { return cmp.Compare(a.Addr, b.Addr) })
	}
	// Among aliases at one address keep the last one listed: perf gives
	// kallsyms symbols the size up to the next symbol, so only the last
	// alias has a non-zero size, and perf prefers sized symbols.
	out := syms[:0]
	for _, s := range syms {
		if len(out) > 0 && out[len(out)-1].Addr == s.Addr {
			out[len(out)-1] = s
			continue
		}
		out = append(out, s)
	}
	return &Table{syms: slices.Clip(out), refs: refs}, nil
}

// parseLine parses "ADDRESS TYPE NAME [MODULE]" for a text symbol (types
// t, T, w, W). Fields are separated by spaces or tabs.
func parseLine(line string) (Symbol, bool) {
	// The kernel's own lines ("%px %c %s", a module's "\t[%s]" after)
	// have 16 digits, a space, the type and a space: taken apart in place,
	// a data symbol's line without looking at its name.
	if len(line) > 18 && line[16] == ' ' && line[18] == ' ' && !blank[line[17]] {
		var addr uint64
		for i := 0; i < 16; i++ {
			d := hexDigit[line[i]]
			if d > 15 {
				return parseFields(line)
			}
			addr = addr<<4 | uint64(d)
		}
		switch line[17] {
		case 't', 'T', 'w', 'W':
		default:
			return Symbol{}, false
		}
		name, rest := nextField(line[19:])
		if name == "" {
			return Symbol{}, false
		}
		s := Symbol{Addr: addr, Name: name}
		if mod, _ := nextField(rest); mod != "" {
			s.Module = strings.Trim(mod, "[]")
		}
		return s, true
	}
	return parseFields(line)
}

// parseFields is parseLine for any spacing and address width.
func parseFields(line string) (Symbol, bool) {
	addrText, rest := nextField(line)
	typ, rest := nextField(rest)
	name, rest := nextField(rest)
	if name == "" || len(typ) != 1 || len(addrText) == 0 || len(addrText) > 16 {
		return Symbol{}, false
	}
	switch typ[0] {
	case 't', 'T', 'w', 'W':
	default:
		return Symbol{}, false
	}
	var addr uint64
	for i := 0; i < len(addrText); i++ {
		d := hexDigit[addrText[i]]
		if d > 15 {
			return Symbol{}, false
		}
		addr = addr<<4 | uint64(d)
	}
	s := Symbol{Addr: addr, Name: name}
	if mod, _ := nextField(rest); mod != "" {
		s.Module = strings.Trim(mod, "[]")
	}
	return s, true
}

// nextField splits off the first field of s, skipping leading blanks.
func nextField(s string) (field, rest string) {
	i := 0
	for i < len(s) && blank[s[i]] {
		i++
	}
	j := i
	for j < len(s) && !blank[s[j]] {
		j++
	}
	return s[i:j], s[j:]
}

// blank marks the bytes that separate fields; hexDigit gives each byte's
// value as a hex digit, 0xff for a byte that is none.
var blank, hexDigit = func() (b [256]bool, h [256]byte) {
	for _, c := range " \t\r\v\f" {
		b[c] = true
	}
	for c := range h {
		switch {
		case c >= '0' && c <= '9':
			h[c] = byte(c - '0')
		case c >= 'a' && c <= 'f':
			h[c] = byte(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			h[c] = byte(c - 'A' + 10)
		default:
			h[c] = 0xff
		}
	}
	return b, h
}()

// packedSyms is a cache entry's symbols as it stores them: n addresses
// (u64) then n name ends (u32), little-endian, in b; the names in names.
type packedSyms struct {
	b     []byte
	names string
	n     int
}

// Len returns the number of symbols.
func (t *Table) Len() int {
	if p := t.packed.Load(); p != nil {
		return p.n
	}
	return len(t.syms)
}

// packedAddr returns the address of the packed table's symbol i.
func (t *Table) packedAddr(i int) uint64 { return t.packed.Load().addr(i) }

// packedName returns the name of the packed table's symbol i.
func (t *Table) packedName(i int) string { return t.packed.Load().name(i) }

// addr returns the address of symbol i.
func (p *packedSyms) addr(i int) uint64 { return binary.LittleEndian.Uint64(p.b[8*i:]) }

// name returns the name of symbol i ("" where the name offsets are out of
// order: a cache entry trusted by its stamp is not checked again, and
// damage below the filesystem must not crash).
func (p *packedSyms) name(i int) string {
	ends := p.b[8*p.n:]
	start := uint32(0)
	if i > 0 {
		start = binary.LittleEndian.Uint32(ends[4*(i-1):])
	}
	end := binary.LittleEndian.Uint32(ends[4*i:])
	if start > end || uint64(end) > uint64(len(p.names)) {
		return ""
	}
	return p.names[start:end]
}

// Covers reports whether Lookup answers addr as the whole kernel symbol
// table would: always, except for a table LoadProc read from its cache,
// which holds only the kernel image's symbols; for an address it does not
// cover (a module's, a BPF program's), load the whole table with Load.
// A nil Table covers nothing.
func (t *Table) Covers(addr uint64) bool {
	return t != nil && (!t.partial || t.lo <= addr && addr <= t.hi)
}

// Address returns the address of the first symbol named name (a
// reference symbol such as "_text"), for relocating the addresses of a
// recording made with the kernel loaded elsewhere (KASLR).
func (t *Table) Address(name string) (uint64, bool) {
	if t == nil {
		return 0, false
	}
	for _, s := range t.refs {
		if s.Name == name {
			return s.Addr, true
		}
	}
	if p := t.packed.Load(); p != nil {
		for i := range p.n {
			if p.name(i) == name {
				return p.addr(i), true
			}
		}
	}
	for i := range t.syms {
		if t.syms[i].Name == name && t.syms[i].Module == "" {
			return t.syms[i].Addr, true
		}
	}
	return 0, false
}

// Lookup returns the symbol containing addr (the last symbol at or below
// it) and addr's offset from it.
func (t *Table) Lookup(addr uint64) (sym Symbol, offset uint64, ok bool) {
	if t == nil {
		return Symbol{}, 0, false
	}
	if p := t.packed.Load(); p != nil {
		i := sort.Search(p.n, func(i int) bool { return p.addr(i) > addr }) - 1
		if i < 0 {
			return Symbol{}, 0, false
		}
		a := p.addr(i)
		return Symbol{Addr: a, Name: p.name(i)}, addr - a, true
	}
	i := sort.Search(len(t.syms), func(i int) bool { return t.syms[i].Addr > addr }) - 1
	if i < 0 {
		return Symbol{}, 0, false
	}
	return t.syms[i], addr - t.syms[i].Addr, true
}
