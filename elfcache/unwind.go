package elfcache

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
)

// pltRange is one PLT section.
type pltRange struct {
	Range
	name string
}

// pltNames are the sections that hold PLT stubs.
var pltNames = [...]string{".plt", ".plt.sec", ".plt.got", ".iplt"}

func (o *Object) findPLTs() {
	for _, name := range pltNames {
		s := o.section(name)
		if s == nil || s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_EXECINSTR == 0 ||
			s.Size == 0 || s.Addr+s.Size < s.Addr {
			continue
		}
		o.plts = append(o.plts, pltRange{Range{s.Addr, s.Addr + s.Size}, name})
	}
}

// PLTs returns the address ranges of the object's PLT sections (.plt,
// .plt.sec, .plt.got, .iplt), keyed by section name.
func (o *Object) PLTs() map[string]Range {
	m := make(map[string]Range, len(o.plts))
	for _, p := range o.plts {
		m[p.name] = p.Range
	}
	return m
}

// buildCFI prepares the CFI table from the sections cfiSections finds.
func (o *Object) buildCFI() {
	defer func() {
		if r := recover(); r != nil {
			o.table = nil
			o.cfiErr = newErr(o.path, "", -1, fmt.Errorf("building CFI table: %v", r))
		}
	}()
	defer o.findGoSwitches() // once the table is built (or not)
	defer o.findEHInstalls()
	secs, readErr := o.cfiSections()
	if secs.EHFrame.Data == nil && secs.DebugFrame.Data == nil {
		o.cfiErr = readErr
		return
	}
	t, err := cfi.NewTable(o.arch, secs, o.opts.CFI)
	if err != nil {
		o.cfiErr = newErr(o.path, "", -1, fmt.Errorf("CFI of %s: %w", filepath.Base(o.path), err))
		return
	}
	o.table = t
	o.held.table.Store(t)
	if o.cfiFrom == OriginNone {
		o.cfiFrom = OriginFile
	}
	o.cfiErr = readErr // a section that could not be read; the rest is used
}

// cfiSections collects .eh_frame, .eh_frame_hdr and .debug_frame (the
// object's own, else the debug file's; compressed ones decompressed) and
// the text and data bases. The error is the first section that could not be
// read; the others are returned all the same.
func (o *Object) cfiSections() (cfi.Sections, error) {
	var secs cfi.Sections
	var firstErr error
	load := func(owner *Object, name string, dst *cfi.Section) {
		if dst.Data != nil {
			return
		}
		s := owner.section(name)
		if s == nil || s.Type == elf.SHT_NOBITS {
			return
		}
		data, err := owner.sectionData(s)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			return
		}
		if len(data) == 0 {
			return
		}
		*dst = cfi.Section{Name: filepath.Base(owner.path) + ":" + name, Data: data, Addr: s.Addr}
		if o.cfiFrom == OriginNone || owner != o {
			o.cfiFrom = owner.origin()
		}
	}
	load(o, ".eh_frame", &secs.EHFrame)
	if secs.EHFrame.Data != nil {
		load(o, ".eh_frame_hdr", &secs.EHFrameHdr)
	}
	load(o, ".debug_frame", &secs.DebugFrame)
	load(o, ".zdebug_frame", &secs.DebugFrame)
	if secs.DebugFrame.Data == nil {
		if d := o.DebugFile(); d != nil {
			load(d, ".debug_frame", &secs.DebugFrame)
			load(d, ".zdebug_frame", &secs.DebugFrame)
		}
	}
	if o.text != nil {
		secs.TextAddr = o.text.Addr
	}
	if got := o.section(".got"); got != nil {
		secs.DataAddr = got.Addr
	}
	return secs, firstErr
}

// CFIError returns the error met while preparing the object's CFI, if any
// (building the table on first use). A non-nil error with a usable table
// means that one CFI section could not be read and the others are used.
func (o *Object) CFIError() error {
	o.cfiOnce.Do(o.buildCFI)
	return o.cfiErr
}

// FindRow fills row with the unwind row for the link-time address addr. It
// returns cfi.ErrNoFDE when the object has no unwind information for addr.
// On first use it builds the CFI table. Addresses in PLT sections that no FDE
// covers get a synthesized row (PLT stubs do not touch the stack, apart from
// the pushes of lazy-binding stubs, which are decoded). FindRow allocates
// nothing unless it returns an error other than cfi.ErrNoFDE.
func (o *Object) FindRow(addr uint64, row *cfi.Row) error {
	if o.closed.Load() {
		return newErr(o.path, "", -1, ErrClosed)
	}
	o.cfiOnce.Do(o.buildCFI)
	if len(o.ehInstalls) > 0 {
		if err := o.ehInstallErr(addr); err != nil {
			return err
		}
		if err := o.row(addr, row); err != nil {
			return o.rowErr(err)
		}
		o.clipToEHInstalls(addr, row)
		return nil
	}
	if len(o.goSwitches) > 0 {
		if err := o.goSwitchRow(addr, row); err != cfi.ErrNoFDE {
			return err
		}
	}
	err := o.row(addr, row)
	if err == nil {
		return nil
	}
	return o.rowErr(err)
}

// rowErr is FindRow's error for row's: cfi.ErrNoFDE itself, an *Error as
// it is, anything else wrapped in one naming the object.
func (o *Object) rowErr(err error) error {
	if err == cfi.ErrNoFDE || errors.Is(err, cfi.ErrNoFDE) {
		return cfi.ErrNoFDE
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return newErr(o.path, "", -1, err)
}

// row finds the row at addr in the CFI table, else synthesizes one for a
// PLT stub or from a Go pclntab. The CFI table must be built.
func (o *Object) row(addr uint64, row *cfi.Row) error {
	err := cfi.ErrNoFDE
	if o.table != nil {
		err = o.lookup(addr, row)
		if err == nil {
			return nil
		}
	} else if o.cfiErr != nil {
		err = o.cfiErr
	}
	if o.pltRow(addr, row) || o.goRow(addr, row) {
		return nil
	}
	return err
}

// lookup asks the CFI table, turning a panic on malformed CFI into an error.
func (o *Object) lookup(addr uint64, row *cfi.Row) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = newErr(o.path, "", -1, fmt.Errorf("CFI lookup at %#x: %v", addr, r))
		}
	}()
	return o.table.Lookup(addr, row)
}

// PLT stub instruction encodings that pltRow recognizes.
const (
	arm64STPx16x30 = 0xa9bf7bf0 // stp x16, x30, [sp, #-16]!
	arm64BTIc      = 0xd503245f // bti c
	amd64EntrySize = 16
	arm64PLT0Size  = 32
)

// pltRow synthesizes the unwind row for addr when it is in a PLT section.
func (o *Object) pltRow(addr uint64, row *cfi.Row) bool {
	var p *pltRange
	for i := range o.plts {
		if o.plts[i].Contains(addr) {
			p = &o.plts[i]
			break
		}
	}
	if p == nil {
		return false
	}
	*row = cfi.Row{}
	row.RA = uint16(o.arch.RA())
	row.FDEStart = p.Start
	switch o.arch {
	case arch.AMD64:
		start, end, pushed := o.amd64PLT(p, addr)
		row.Start, row.End = start, end
		row.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.AMD64_RSP, Offset: 8}
		if pushed {
			row.CFA.Offset = 16
		}
		row.Regs[arch.AMD64_RIP] = cfi.Rule{Kind: cfi.RuleOffset, Offset: -8}
	case arch.ARM64:
		start, end, pushed := o.arm64PLT(p, addr)
		row.Start, row.End = start, end
		row.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.ARM64_SP}
		if pushed {
			// PLT0 has run stp x16, x30, [sp, #-16]!.
			row.CFA.Offset = 16
			row.Regs[arch.ARM64_X30] = cfi.Rule{Kind: cfi.RuleOffset, Offset: -8}
			row.Regs[16] = cfi.Rule{Kind: cfi.RuleOffset, Offset: -16}
		} else {
			row.Regs[arch.ARM64_X30] = cfi.Rule{Kind: cfi.RuleRegister, Reg: arch.ARM64_X30}
		}
	default:
		return false
	}
	return true
}

// amd64PLT returns the range of PLT code around addr that shares one row
// and whether a lazy-binding push has run at addr. It recognizes PLT0
// (push GOT+8; jmp *GOT+16) and the lazy entries of the classic, IBT and
// BND layouts; anything else gets the section-wide row CFA=rsp+8.
func (o *Object) amd64PLT(p *pltRange, addr uint64) (start, end uint64, pushed bool) {
	if p.name != ".plt" || p.End-p.Start < amd64EntrySize {
		return p.Start, p.End, false
	}
	split := func(e, pushEnd uint64) (uint64, uint64, bool) {
		if addr < pushEnd {
			return e, pushEnd, false
		}
		return pushEnd, min(e+amd64EntrySize, p.End), true
	}
	var code [amd64EntrySize]byte
	e := p.Start + (addr-p.Start)/amd64EntrySize*amd64EntrySize
	if e+amd64EntrySize > p.End || o.ReadCode(e, code[:]) != amd64EntrySize {
		return p.Start, p.End, false
	}
	if e == p.Start {
		if code[0] == 0xff && code[1] == 0x35 { // push GOT+8(%rip)
			return split(e, e+6)
		}
		if code[0] == 0xf3 && code[1] == 0x0f && code[2] == 0x1e && code[3] == 0xfa &&
			code[4] == 0xff && code[5] == 0x35 { // endbr64; push GOT+8(%rip)
			return split(e, e+10)
		}
		return p.Start, p.End, false
	}
	switch {
	case code[0] == 0xff && code[1] == 0x25 && code[6] == 0x68: // jmp *; push $n; jmp PLT0
		return split(e, e+11)
	case code[0] == 0xf3 && code[1] == 0x0f && code[2] == 0x1e && code[3] == 0xfa && code[4] == 0x68:
		return split(e, e+9) // endbr64; push $n; bnd jmp PLT0
	case code[0] == 0x68: // push $n; bnd jmp PLT0 (-z bndplt)
		return split(e, e+5)
	}
	return e, e + amd64EntrySize, false
}

// arm64PLT is amd64PLT for arm64: PLT0 (the first 32 bytes of .plt) pushes
// x16 and x30 with stp x16, x30, [sp, #-16]!, possibly after a bti c; the
// other stubs do not touch the stack.
func (o *Object) arm64PLT(p *pltRange, addr uint64) (start, end uint64, pushed bool) {
	if p.name != ".plt" || p.End-p.Start < arm64PLT0Size {
		return p.Start, p.End, false
	}
	var code [8]byte
	if o.ReadCode(p.Start, code[:]) != len(code) {
		return p.Start, p.End, false
	}
	i0 := binary.LittleEndian.Uint32(code[0:])
	i1 := binary.LittleEndian.Uint32(code[4:])
	var stpEnd uint64
	switch {
	case i0 == arm64STPx16x30:
		stpEnd = p.Start + 4
	case i0 == arm64BTIc && i1 == arm64STPx16x30:
		stpEnd = p.Start + 8
	default:
		return p.Start, p.End, false
	}
	plt0End := p.Start + arm64PLT0Size
	switch {
	case addr < stpEnd:
		return p.Start, stpEnd, false
	case addr < plt0End:
		return stpEnd, plt0End, true
	}
	return plt0End, p.End, false
}

// ReadCode copies the bytes at link-time address addr into buf and returns
// how many it copied. It reads the PT_LOAD segment containing addr
// (executable segments first), or the allocated section when the file has
// no program headers; bytes past the end of the file data of a segment
// (.bss) read as zero. It stops at the end of the segment and returns 0 when
// addr is in none.
func (o *Object) ReadCode(addr uint64, buf []byte) int {
	if len(buf) == 0 || o.closed.Load() {
		return 0
	}
	if len(o.loads) > 0 {
		for pass := 0; pass < 2; pass++ {
			for i := range o.loads {
				p := &o.loads[i]
				if (p.Flags&elf.PF_X != 0) != (pass == 0) {
					continue
				}
				if addr >= p.Vaddr && addr-p.Vaddr < p.Memsz {
					return o.copyOut(buf, addr-p.Vaddr, p.Off, p.Filesz, p.Memsz)
				}
			}
		}
		return 0
	}
	for _, s := range o.ef.Sections {
		if s.Flags&elf.SHF_ALLOC == 0 || s.Flags&elf.SHF_COMPRESSED != 0 || addr < s.Addr || addr-s.Addr >= s.Size {
			continue
		}
		filesz := s.Size
		if s.Type == elf.SHT_NOBITS {
			filesz = 0
		}
		return o.copyOut(buf, addr-s.Addr, s.Offset, filesz, s.Size)
	}
	return 0
}

// copyOut copies from offset off of a region whose first filesz bytes are at
// file offset fileOff and that is memsz bytes long in memory.
func (o *Object) copyOut(buf []byte, off, fileOff, filesz, memsz uint64) int {
	n := uint64(len(buf))
	if rest := memsz - off; n > rest {
		n = rest
	}
	buf = buf[:n]
	var got uint64
	if off < filesz {
		m := min(n, filesz-off)
		if fileOff+off >= fileOff { // no overflow
			got = uint64(o.src.readAt(buf[:m], fileOff+off))
		}
		if got < m { // truncated file: the rest is not available
			return int(got)
		}
	}
	clear(buf[got:])
	return int(n)
}

// Bias returns the difference between runtime and link-time addresses for a
// mapping that maps the file at offset mapFileOffset to address mapStart,
// as read from /proc/PID/maps or a perf MMAP2 record. The PT_LOAD segment is
// the one that the mapping starts within the first page (up to 64 KiB) of
// or, failing that, one whose file range contains mapFileOffset; among
// equals, executable segments are preferred, as the bias matters for
// unwinding code. It returns false when no segment fits. Use BiasProt for
// data mappings.
func (o *Object) Bias(mapStart, mapFileOffset uint64) (uint64, bool) {
	return o.BiasProt(mapStart, mapFileOffset, elf.PF_R|elf.PF_X)
}

// BiasProt is Bias for a mapping whose permissions are prot (PF_R, PF_W,
// PF_X): among segments that fit equally well it prefers the one with the
// same permissions.
func (o *Object) BiasProt(mapStart, mapFileOffset uint64, prot elf.ProgFlag) (uint64, bool) {
	const maxPage = 1 << 16
	best, bestScore := -1, uint64(0)
	for i := range o.loads {
		p := &o.loads[i]
		if p.Filesz == 0 && p.Memsz == 0 {
			continue
		}
		var score uint64 // higher is better
		switch {
		case mapFileOffset <= p.Off && p.Off-mapFileOffset < maxPage:
			score = 4 << 32
			score |= maxPage - (p.Off - mapFileOffset) // nearer is better
		case mapFileOffset > p.Off && mapFileOffset-p.Off < p.Filesz:
			score = 2 << 32
		default:
			continue
		}
		rwx := elf.PF_R | elf.PF_W | elf.PF_X
		switch {
		case p.Flags&rwx == prot&rwx:
			score |= 1 << 30
		case p.Flags&prot&elf.PF_X != 0:
			score |= 1 << 29
		}
		if best < 0 || score > bestScore {
			best, bestScore = i, score
		}
	}
	if best < 0 {
		return 0, false
	}
	p := &o.loads[best]
	return mapStart - mapFileOffset - p.Vaddr + p.Off, true
}

// LoadSegments returns the object's PT_LOAD program headers in file order.
func (o *Object) LoadSegments() []elf.ProgHeader {
	return append([]elf.ProgHeader(nil), o.loads...)
}

// stackBases names the functions that begin a stack and may have no CFI:
// a program's entry (musl's and hand-written _start), glibc ld.so's
// _dl_start_user (its _start's code after _dl_start returns, which calls
// _dl_init, the shared libraries' constructors, with %rbp cleared "to mark
// outermost frame obviously even for constructors": named only by the
// debug file, which must not make ustack claim less than without it) and
// the child side of clone, where the kernel starts a thread (musl's
// __clone, bionic's __bionic_clone, Go's runtime.clone; glibc's have CFI
// that ends the stack). Each calls only where its stack begins: a frame
// returning into one is the stack's first (unwinder.OutermostObject).
var stackBases = map[string]bool{
	"_start": true, "__start": true, "_dl_start_user": true,
	"clone": true, "__clone": true, "clone3": true, "__clone3": true, "__bionic_clone": true,
	"runtime.clone": true, "runtime.clone.abi0": true, // Go's symbol table names assembly functions with their ABI
	// Go: the bottom of every goroutine's stack (newproc puts goexit's
	// return address there, above a zero word), and of the threads'
	// g0 stacks, whose CFI reads a zero return address above them.
	"runtime.goexit": true, "runtime.goexit.abi0": true,
	"runtime.mstart": true, "runtime.mstart.abi0": true,
	"runtime.rt0_go": true, "runtime.rt0_go.abi0": true,
	// Go's entry code: each system's entry point (_rt0_amd64_linux)
	// jumps to _rt0_amd64, which takes argc and argv from the stack the
	// kernel made and jumps to runtime.rt0_go; nothing calls it.
	"_rt0_amd64": true, "_rt0_arm64": true,
	// glibc's makecontext starts each context's function with its
	// return address at the first instruction of __start_context
	// (arm64: __startcontext), which sets the context uc_link names
	// or exits: the base of the coroutine's stack, returned into
	// rather than called (unwinder's enteredAt).
	"__start_context": true, "__startcontext": true,
}

// Outermost reports whether the link-time address addr lies in a function
// that begins a stack, by the symbol table: the function at the ELF entry
// point, or one of stackBases. It implements unwinder.OutermostObject: where
// such a function has no CFI, the zero frame pointer or return address its
// frame leaves is the end of the stack, not a lost caller.
func (o *Object) Outermost(addr uint64) bool {
	name, off, ok := o.Symbolize(addr)
	if ok && stackBases[name] {
		return true
	}
	if o.cloneChild(addr + 1) {
		return true // a clone's child side the symbols do not name (clonechild.go)
	}
	entry := o.ef.Entry
	if entry == 0 {
		return false
	}
	if !ok || addr-off <= entry {
		// No symbol names a function at addr, or the one that does begins
		// before the entry point: a stripped object (ld.so, a stripped
		// static program) whose entry code has no symbol. A call a few
		// instructions past the entry point, with no function beginning
		// between, is the entry code's own (ld.so's _start: mov %rsp,%rdi;
		// call _dl_start).
		return addr >= entry && addr-entry < entryCodeWindow
	}
	_, eoff, ok := o.Symbolize(entry)
	return ok && entry-eoff == addr-off
}

// FunctionStart returns the link-time address of the first instruction of
// the function holding link-time address addr, by the symbol table. It
// implements unwinder.FunctionObject.
func (o *Object) FunctionStart(addr uint64) (uint64, bool) {
	_, off, ok := o.Symbolize(addr)
	return addr - off, ok
}

// StartBefore returns the link-time address of the first instruction of
// the function symbol nearest before link-time address addr, which no
// symbol need cover (a function the symbol table leaves out, as a
// stripped library's hidden ones, lies between two that it names), or the
// start of the executable section holding addr where that is nearer (no
// symbol before it in the section), or the nearest target of a direct call
// (CallTarget) where that is nearer still: a program stripped of all its
// symbols names no function. It implements unwinder.StartBeforeObject.
func (o *Object) StartBefore(addr uint64) (uint64, bool) {
	start, ok := uint64(0), false
	for _, s := range o.ef.Sections {
		if s.Flags&elf.SHF_EXECINSTR != 0 && s.Flags&elf.SHF_ALLOC != 0 && s.Addr <= addr && addr-s.Addr < s.Size {
			start, ok = s.Addr, true
			break
		}
	}
	if t := o.symbols(); t != nil {
		sp := t.spans
		if i := sort.Search(len(sp), func(i int) bool { return sp[i].start > addr }); i > 0 {
			if a := t.syms[sp[i-1].sym].addr; !ok || a > start {
				start, ok = a, true
			}
		}
	}
	if a, found := o.callTargetBefore(addr); found && ok && a > start {
		start = a
	}
	return start, ok
}

// entryCodeWindow bounds how far past an unnamed entry point a return
// address may lie and still be the entry code's: its first call comes
// within a few instructions (7 bytes into ld.so's _start on x86_64, 8 on
// arm64).
const entryCodeWindow = 64
