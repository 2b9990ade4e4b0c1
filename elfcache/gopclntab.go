package elfcache

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
)

// Go's .gopclntab is the runtime's own table of functions: for every
// function its entry PC, name and several PC-value tables, among them pcsp,
// the SP adjustment at each PC relative to the SP at entry. The runtime
// unwinds with it, so it is present even in binaries built with
// -ldflags='-s -w', which have neither .symtab nor DWARF. This file reads
// the layouts of Go 1.16 and later (pcHeader magics 0xfffffffa, 0xfffffff0,
// 0xfffffff1); older tables are refused. Source lines and inline chains
// from the same table are in golines.go.

// Magic numbers of the pcHeader, one per layout.
const (
	goPCLN116 = 0xfffffffa
	goPCLN118 = 0xfffffff0
	goPCLN120 = 0xfffffff1
)

// goFlagTopFrame is abi.FuncFlagTopFrame: the function is the outermost of
// its stack (runtime.goexit, runtime.mstart, runtime.rt0_go...).
const goFlagTopFrame = 1 << 0

// errPCLN is the error of a malformed table; the *Error wrapping it names
// the offset.
var errPCLN = errors.New("malformed Go pclntab")

// pclnError is a problem at an offset of .gopclntab.
type pclnError struct {
	off int64
	msg string
}

func (e *pclnError) Error() string { return fmt.Sprintf("%v: %s", errPCLN, e.msg) }
func (e *pclnError) Unwrap() error { return errPCLN }

// goPCLN is a parsed .gopclntab. It holds slices of the section and
// decodes functions and PC-value tables on demand; lookups allocate
// nothing.
type goPCLN struct {
	version   int    // 116, 118 or 120
	quantum   uint64 // instruction size unit of pc deltas
	nfunc     int
	text      uint64       // runtime.text: the base of entry offsets (1.18+)
	funcnames []byte       // function names, NUL-terminated
	cutab     []byte       // per compilation unit, uint32 offsets into filetab
	filetab   []byte       // file names, NUL-terminated
	pctab     []byte       // PC-value tables
	funcdata  []byte       // the pclntable: ftab followed by the _func records
	pclnOff   int          // offset of funcdata in the table (1.16 aligns funcdata words by it)
	module    goModuleData // the runtime's moduledata record, when hasModule
	hasModule bool
	ftab      []byte // nfunc+1 (entry, funcoff) pairs, sorted by entry
	field     int    // size of one ftab field: 4 (1.18+) or 8 (1.16)
	pcsp      int    // offsets within a _func record
	name      int
	flag      int
	pcfile    int
	pcln      int
	npcdata   int
	cuOffset  int
	nfuncdata int
	funcSize  int // bytes of a _func record before its variable arrays

	// The inline trees (FUNCDATA_InlTree) are in go:func.*, outside the
	// table: gofunc holds the object's bytes from address gofuncAddr on
	// (moduledata.gofunc, the base of 1.18+ funcdata offsets; for 1.16,
	// whose funcdata are addresses, the section holding them). Nil when
	// they could not be found: lines then have no inline chains.
	gofunc     []byte
	gofuncAddr uint64
	gofuncErr  error // why gofunc is nil, for SourceError

	lines goLineStrings // names and files as strings, for SourceFrames
	held  *atomic.Int64 // the object's heldParts.heap, which counts lines

	// Where the table is, for errors: the file, the section and the
	// offsets of cutab and pctab in it.
	path, section      string
	cutabOff, pctabOff int64
	lineErr            atomic.Pointer[Error] // the first damage a line lookup met
}

// goFunc is one function of a goPCLN.
type goFunc struct {
	entry, end uint64 // [entry, end): the function's PCs
	rec        uint32 // offset of the _func record in funcdata
	nameOff    uint32 // offset of the name in funcnames
	pcsp       uint32 // offsets of the PC-value tables in pctab
	pcfile     uint32
	pcln       uint32
	npcdata    uint32 // entries of the pcdata array after the record
	cuOffset   uint32 // the function's first entry in cutab
	nfuncdata  uint8  // entries of the funcdata array after pcdata
	flag       uint8
}

// parseGoPCLN parses the pcHeader of the Go 1.16+ table data. text is the
// address of runtime.text, the base of the 1.18+ entry offsets (ignored for
// 1.16, whose entries are absolute).
func parseGoPCLN(data []byte, text uint64) (*goPCLN, error) {
	const ptrSize = 8
	if len(data) < 8 {
		return nil, &pclnError{0, "shorter than its header"}
	}
	t := &goPCLN{text: text}
	switch binary.LittleEndian.Uint32(data) {
	case goPCLN116:
		t.version = 116
	case goPCLN118:
		t.version = 118
	case goPCLN120:
		t.version = 120
	case 0xfffffffb:
		return nil, &pclnError{0, "Go 1.2-1.15 layout (magic 0xfffffffb) not supported"}
	default:
		return nil, &pclnError{0, fmt.Sprintf("unknown magic %#x", binary.LittleEndian.Uint32(data))}
	}
	if data[4] != 0 || data[5] != 0 {
		return nil, &pclnError{4, "padding bytes not zero"}
	}
	switch data[6] {
	case 1, 2, 4:
		t.quantum = uint64(data[6])
	default:
		return nil, &pclnError{6, fmt.Sprintf("instruction size quantum %d", data[6])}
	}
	if data[7] != ptrSize {
		return nil, &pclnError{7, fmt.Sprintf("pointer size %d, want 8", data[7])}
	}
	words := 8 // nfunc, nfiles, textStart, funcname, cu, file, pctab, pcln
	if t.version == 116 {
		words = 7 // no textStart
	}
	if len(data) < 8+words*ptrSize {
		return nil, &pclnError{8, "header truncated"}
	}
	word := func(i int) uint64 { return binary.LittleEndian.Uint64(data[8+i*ptrSize:]) }
	off := func(i int) ([]byte, error) {
		o := word(i)
		if o > uint64(len(data)) {
			return nil, &pclnError{int64(8 + i*ptrSize), fmt.Sprintf("table offset %#x past the end (%#x)", o, len(data))}
		}
		return data[o:], nil
	}
	// The _func record: entry (4 bytes, 8 in 1.16), nameOff, args,
	// deferreturn, pcsp, pcfile, pcln, npcdata, cuOffset, startLine
	// (1.20+), funcID, flag, a pad byte and nfuncdata.
	first := 3 // the word of funcnameOffset
	t.field, t.name, t.pcsp, t.pcfile, t.pcln, t.npcdata, t.cuOffset, t.flag, t.nfuncdata, t.funcSize = 4, 4, 16, 20, 24, 28, 32, 41, 43, 44
	switch t.version {
	case 116:
		first = 2
		t.field, t.name, t.pcsp, t.pcfile, t.pcln, t.npcdata, t.cuOffset, t.flag, t.nfuncdata, t.funcSize =
			ptrSize, 8, 20, 24, 28, 32, 36, 41, 43, 44 // flag: 1.17; padding (0) in 1.16
	case 118:
		t.flag, t.nfuncdata, t.funcSize = 37, 39, 40
	}
	// The tables follow each other in the order of their header words;
	// each ends where the next begins (the last at the end of the data).
	tables := make([][]byte, 5) // funcnames, cutab, filetab, pctab, pclntable
	for i := range tables {
		var err error
		if tables[i], err = off(first + i); err != nil {
			return nil, err
		}
		if i > 0 && word(first+i) >= word(first+i-1) {
			tables[i-1] = tables[i-1][:word(first+i)-word(first+i-1)]
		}
	}
	t.funcnames, t.cutab, t.filetab, t.pctab, t.funcdata = tables[0], tables[1], tables[2], tables[3], tables[4]
	t.pclnOff = int(word(first + 4))
	t.cutabOff, t.pctabOff = int64(word(first+1)), int64(word(first+3))
	n := word(0)
	if n == 0 || len(t.funcdata) < t.field || n > uint64(len(t.funcdata)-t.field)/uint64(2*t.field) {
		return nil, &pclnError{8, fmt.Sprintf("function count %d does not fit the table", n)}
	}
	t.nfunc = int(n)
	t.ftab = t.funcdata[:(2*t.nfunc+1)*t.field]
	return t, nil
}

// entry returns the entry PC of ftab slot i (i == nfunc: the end of the
// last function).
func (t *goPCLN) entry(i int) uint64 {
	p := t.ftab[2*i*t.field:]
	if t.field == 4 {
		return t.text + uint64(binary.LittleEndian.Uint32(p))
	}
	return binary.LittleEndian.Uint64(p)
}

// funcOff returns the offset in funcdata of function i's _func record.
func (t *goPCLN) funcOff(i int) uint64 {
	p := t.ftab[(2*i+1)*t.field:]
	if t.field == 4 {
		return uint64(binary.LittleEndian.Uint32(p))
	}
	return binary.LittleEndian.Uint64(p)
}

// find returns the function containing pc.
func (t *goPCLN) find(pc uint64, f *goFunc) bool {
	if pc < t.entry(0) || pc >= t.entry(t.nfunc) {
		return false
	}
	lo, hi := 0, t.nfunc // the answer is lo-1 after the search
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if t.entry(mid) <= pc {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo > 0 && t.function(lo-1, f) && pc < f.end
}

// function decodes function i; false when its record lies outside the
// table.
func (t *goPCLN) function(i int, f *goFunc) bool {
	off := t.funcOff(i)
	if off > uint64(len(t.funcdata)) || uint64(len(t.funcdata))-off < uint64(t.funcSize) {
		return false
	}
	rec := t.funcdata[off:]
	f.entry, f.end = t.entry(i), t.entry(i+1)
	if f.end < f.entry {
		return false
	}
	le := binary.LittleEndian
	f.rec = uint32(off)
	f.nameOff = le.Uint32(rec[t.name:])
	f.pcsp = le.Uint32(rec[t.pcsp:])
	f.pcfile = le.Uint32(rec[t.pcfile:])
	f.pcln = le.Uint32(rec[t.pcln:])
	f.npcdata = le.Uint32(rec[t.npcdata:])
	f.cuOffset = le.Uint32(rec[t.cuOffset:])
	f.nfuncdata = rec[t.nfuncdata]
	f.flag = rec[t.flag]
	return true
}

// funcName returns the name of f as bytes of the table (nil when the name
// offset is bad or the name is not terminated).
func (t *goPCLN) funcName(f *goFunc) []byte {
	if uint64(f.nameOff) >= uint64(len(t.funcnames)) {
		return nil
	}
	nm := t.funcnames[f.nameOff:]
	i := indexByte0(nm)
	if i <= 0 {
		return nil
	}
	return nm[:i]
}

// maxPCValueSteps bounds the decoding of one PC-value table.
const maxPCValueSteps = 1 << 20

// spDelta decodes f's pcsp table at pc: the number of bytes the function
// has pushed or allocated below its entry SP, and the range [start, end) of
// PCs where that value holds.
func (t *goPCLN) spDelta(f *goFunc, pc uint64) (delta int64, start, end uint64, ok bool) {
	return t.pcValue(f, f.pcsp, pc)
}

// pcValue decodes the PC-value table at offset tab of pctab (one of f's:
// pcsp, pcfile, pcln or a pcdata table) at pc: the value there and the
// range [start, end) of PCs where it holds. ok is false when the function
// has no such table (offset 0) or the table is damaged or ends before pc.
func (t *goPCLN) pcValue(f *goFunc, tab uint32, pc uint64) (val int64, start, end uint64, ok bool) {
	if tab == 0 || uint64(tab) >= uint64(len(t.pctab)) || pc < f.entry || pc >= f.end {
		return 0, 0, 0, false
	}
	p := t.pctab[tab:]
	val = -1
	at := f.entry
	for step := 0; step < maxPCValueSteps; step++ {
		uv, n := binary.Uvarint(p)
		if n <= 0 || (uv == 0 && step > 0) {
			return 0, 0, 0, false // end of table (or corrupt) before pc
		}
		p = p[n:]
		// Zig-zag encoded value delta.
		if uv&1 != 0 {
			val += ^int64(uv >> 1)
		} else {
			val += int64(uv >> 1)
		}
		pcd, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, 0, 0, false
		}
		p = p[n:]
		if pcd > (f.end-at)/t.quantum+1 {
			return 0, 0, 0, false // runs past the function
		}
		next := at + pcd*t.quantum
		if pc < next {
			return val, at, min(next, f.end), true
		}
		if at = next; at >= f.end {
			return 0, 0, 0, false
		}
	}
	return 0, 0, 0, false
}

// pcTableEnd reports whether the PC-value table at offset tab of pctab is
// well formed, and the PC where it ends: Go's tables end with the code,
// before the padding up to the next function.
func (t *goPCLN) pcTableEnd(f *goFunc, tab uint32) (end uint64, ok bool) {
	if tab == 0 || uint64(tab) >= uint64(len(t.pctab)) {
		return 0, false
	}
	p := t.pctab[tab:]
	at := f.entry
	for step := 0; step < maxPCValueSteps; step++ {
		uv, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, false
		}
		if uv == 0 && step > 0 {
			return at, true
		}
		p = p[n:]
		pcd, n := binary.Uvarint(p)
		if n <= 0 || pcd > (f.end-at)/t.quantum {
			return 0, false
		}
		p = p[n:]
		at += pcd * t.quantum
	}
	return 0, false
}

// goTable returns the object's parsed .gopclntab, reading it on first use,
// or nil when the object has none (GoPCLNError says why when it has one
// that could not be read).
func (o *Object) goTable() *goPCLN {
	if o.closed.Load() {
		return nil
	}
	o.goOnce.Do(o.buildGoTable)
	return o.gopcln
}

// GoPCLNError returns the error met reading the object's Go pclntab, if
// any; nil also when the object has none.
func (o *Object) GoPCLNError() error {
	o.goTable()
	return o.goErr
}

// HasGoPCLN reports whether the object has a readable Go pclntab, which
// gives unwind rows, function names, source lines and inline chains where
// CFI, symbol tables and DWARF are missing (Go binaries built with
// -ldflags='-s -w').
func (o *Object) HasGoPCLN() bool { return o.goTable() != nil }

func (o *Object) buildGoTable() {
	defer func() {
		if r := recover(); r != nil {
			o.gopcln, o.goErr = nil, newErr(o.path, ".gopclntab", -1, fmt.Errorf("%w: %v", errPCLN, r))
		}
	}()
	s := o.section(".gopclntab")
	if s == nil {
		s = o.section(".data.rel.ro.gopclntab")
	}
	if s == nil || s.Type == elf.SHT_NOBITS {
		return
	}
	data, err := o.sectionData(s)
	if err != nil {
		o.goErr = err
		return
	}
	t, err := parseGoPCLN(data, 0)
	if err != nil {
		var pe *pclnError
		if errors.As(err, &pe) {
			o.goErr = newErr(o.path, s.Name, pe.off, err)
		} else {
			o.goErr = newErr(o.path, s.Name, -1, err)
		}
		return
	}
	mod, found := o.goModule(s.Addr, data, t.version)
	if t.version >= 118 {
		text := mod.text
		if !found || text == 0 {
			// Without a moduledata, the start of .text is where Go's
			// linker puts runtime.text.
			if o.text == nil || o.text.Addr == 0 {
				o.goErr = newErr(o.path, s.Name, -1, fmt.Errorf("%w: runtime.text not found (no moduledata pointing to the table, no .text)", errPCLN))
				return
			}
			text = o.text.Addr
		}
		t.text = text
	}
	o.goFuncData(t, mod, found)
	t.module, t.hasModule = mod, found
	t.path, t.section = o.path, s.Name
	t.held = &o.held.heap
	o.gopcln = t
}

// goFuncData finds the bytes the table's funcdata refer to (go:func.*,
// where the inline trees are): from moduledata.gofunc for 1.18+, the
// .rodata section for 1.16 (whose funcdata are addresses in it).
func (o *Object) goFuncData(t *goPCLN, mod goModuleData, found bool) {
	base := mod.gofunc
	if t.version == 116 {
		if s := o.section(".rodata"); s != nil {
			base = s.Addr
		}
	} else if !found || base == 0 {
		t.gofuncErr = newErr(o.path, ".gopclntab", -1, fmt.Errorf("%w: no moduledata with go:func.* found: inline trees unread", errPCLN))
		return
	}
	for _, s := range o.ef.Sections {
		if s.Flags&elf.SHF_ALLOC == 0 || s.Type == elf.SHT_NOBITS || base < s.Addr || base-s.Addr >= s.Size {
			continue
		}
		data, err := o.sectionData(s)
		if err != nil {
			t.gofuncErr = err
			return
		}
		t.gofunc, t.gofuncAddr = data[base-s.Addr:], base
		return
	}
	t.gofuncErr = newErr(o.path, ".gopclntab", -1, fmt.Errorf("%w: go:func.* at %#x is in no section: inline trees unread", errPCLN, base))
}

// Word indexes in the runtime's moduledata (Go 1.16 and later): the
// pcHeader pointer, the funcnametab slice's data pointer, text, and gofunc
// (the base of the funcdata offsets: 1.18 and 1.19 lack the two words of
// covctrs, 1.16 has no gofunc).
const (
	modPCHeader = 0
	modFuncname = 1
	modText     = 22
	modData     = 26
	modBss      = 28
	modNoptrBss = 30
	modTypes    = 37 // 1.20 and later (after covctrs)
	modGofunc   = 40
	modGofunc18 = 38
	modWords    = 41
)

// goModuleData is what ustack reads of the runtime's moduledata.
type goModuleData struct {
	addr   uint64 // the record's own link-time address
	text   uint64 // runtime.text, the base of the 1.18+ entry offsets
	gofunc uint64 // go:func.*, the base of the 1.18+ funcdata offsets
	// The pointer-holding and pointer-free zero-initialized data and
	// the type descriptors (1.20 and later only; zero before).
	data, edata, bss, ebss, noptrbss, enoptrbss, types, etypes uint64
}

// goModule reads the moduledata record of the table (in .go.module since
// Go 1.26, in .noptrdata before), found as the record whose first word
// points to the pclntab and whose second points to its function name
// table.
func (o *Object) goModule(pclnAddr uint64, pcln []byte, version int) (goModuleData, bool) {
	if len(pcln) < 8+4*8 {
		return goModuleData{}, false
	}
	funcnames := pclnAddr + binary.LittleEndian.Uint64(pcln[8+3*8:])
	if version == 116 {
		funcnames = pclnAddr + binary.LittleEndian.Uint64(pcln[8+2*8:])
	}
	gofunc := modGofunc
	if version == 118 {
		gofunc = modGofunc18
	}
	for _, name := range []string{".go.module", ".noptrdata", ".data.rel.ro", ".data"} {
		s := o.section(name)
		if s == nil || s.Type == elf.SHT_NOBITS || s.Size > 64<<20 {
			continue
		}
		data, err := o.sectionData(s)
		if err != nil {
			continue
		}
		for off := 0; off+modWords*8 <= len(data); off += 8 {
			if binary.LittleEndian.Uint64(data[off+modPCHeader*8:]) != pclnAddr ||
				binary.LittleEndian.Uint64(data[off+modFuncname*8:]) != funcnames {
				continue
			}
			word := func(i int) uint64 { return binary.LittleEndian.Uint64(data[off+i*8:]) }
			m := goModuleData{addr: s.Addr + uint64(off), text: word(modText)}
			if version != 116 {
				m.gofunc = word(gofunc)
			}
			if version >= 120 {
				m.data, m.edata = word(modData), word(modData+1)
				m.bss, m.ebss, m.noptrbss, m.enoptrbss = word(modBss), word(modBss+1), word(modNoptrBss), word(modNoptrBss+1)
				m.types, m.etypes = word(modTypes), word(modTypes+1)
			}
			return m, true
		}
	}
	return goModuleData{}, false
}

// goRow synthesizes the unwind row at addr from the pcsp table of the Go
// function containing it, with the meaning Go's linker gives its own
// .debug_frame: amd64 CFA = RSP + delta + 8 with the return address at
// CFA-8; arm64 CFA = SP + delta, the return address in x30 while nothing
// is allocated and saved at SP+0 (CFA-delta) once the frame is, since Go's
// arm64 prologue stores x30 with the instruction that allocates the frame.
// Other registers are left unspecified, as in Go's .debug_frame. Outermost
// functions (FuncFlagTopFrame) get an undefined return address, except
// Go's signal handler entries (goSignalEntry).
func (o *Object) goRow(addr uint64, row *cfi.Row) bool {
	t := o.goTable()
	if t == nil {
		return false
	}
	var f goFunc
	if !t.find(addr, &f) {
		return false
	}
	delta, start, end, ok := t.spDelta(&f, addr)
	if !ok || delta < 0 || delta > 1<<31-1 { // pcsp values are int32
		return false
	}
	*row = cfi.Row{Start: start, End: end, FDEStart: f.entry, RA: uint16(o.arch.RA())}
	switch o.arch {
	case arch.AMD64:
		row.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.AMD64_RSP, Offset: delta + 8}
		row.Regs[arch.AMD64_RIP] = cfi.Rule{Kind: cfi.RuleOffset, Offset: -8}
	case arch.ARM64:
		row.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.ARM64_SP, Offset: delta}
		if delta > 0 {
			row.Regs[arch.ARM64_X30] = cfi.Rule{Kind: cfi.RuleOffset, Offset: -delta}
		} else {
			row.Regs[arch.ARM64_X30] = cfi.Rule{Kind: cfi.RuleSameValue}
		}
	default:
		return false
	}
	if f.flag&goFlagTopFrame != 0 && !goSignalEntry(t.funcName(&f)) {
		row.Regs[row.RA] = cfi.Rule{Kind: cfi.RuleUndefined}
	}
	return true
}

// goSignalEntry reports whether name is one of the runtime's signal handler
// entry points. Go marks them outermost (FuncFlagTopFrame) because its own
// traceback does not cross onto the signal stack, but their return address
// is the kernel's sa_restorer (runtime.sigreturn__sigaction), through which
// a native unwinder reaches the interrupted code, as the unstripped build's
// .debug_frame does.
func goSignalEntry(name []byte) bool {
	switch string(name) {
	case "runtime.sigtramp", "runtime.cgoSigtramp", "runtime.sigprofNonGoWrapper<>":
		return true
	}
	return false
}

// goSymbols appends the functions of the Go pclntab as symbol candidates,
// for objects without a symbol table.
func (o *Object) goSymbols(out []candidate) []candidate {
	t := o.goTable()
	if t == nil {
		return out
	}
	var f goFunc
	for i := 0; i < t.nfunc; i++ {
		if !t.function(i, &f) || f.end == f.entry {
			continue
		}
		nm := t.funcName(&f)
		if nm == nil || len(nm) > 1<<16 {
			continue
		}
		out = append(out, candidate{addr: f.entry, size: f.end - f.entry, secEnd: f.end, name: nm,
			bind: uint8(elf.STB_GLOBAL), typ: uint8(elf.STT_FUNC)})
	}
	return out
}
