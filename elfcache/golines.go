package elfcache

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
)

// Source lines and inline chains from Go's pclntab, for Go binaries without
// DWARF (-ldflags='-s -w'), read as Go's runtime reads them for its own
// tracebacks:
//
//   - a function's pcfile and pcln PC-value tables give, at each PC, the
//     index of the file in the function's compilation unit and the line;
//     the unit's entry in cutab (at the function's cuOffset) maps that
//     index to the offset of the file's name in filetab;
//   - PCDATA_InlTreeIndex (pcdata table 2) gives, at each PC, the entry of
//     the function's inline tree (FUNCDATA_InlTree, in go:func.*) of the
//     innermost inlined call there, or -1 outside inlined code. The
//     entry names the inlined function and gives parentPc, the offset from
//     the function's entry of an instruction whose position is the call
//     site: the caller's file and line, and its own inline tree index, are
//     those of that instruction, and so on out to the physical function.
//
// The file and line at a PC are those of the innermost inlined body, as in
// the DWARF line table Go's linker writes from the same positions.

// Indexes in a function's pcdata and funcdata arrays.
const (
	goPCDataInlTreeIndex = 2
	goFuncDataInlTree    = 3
)

// maxGoInlineDepth bounds the walk up an inline tree: each step goes to a
// caller, and a damaged tree must not make it loop (nor, with three
// table decodes per step, take long). Go's inliner nests calls a few
// levels deep (5 at most in the test programs).
const maxGoInlineDepth = 64

// goLineStrings holds copies of the table's function name and file name
// tables as strings, so that SourceFrames hands out substrings and
// allocates nothing per lookup (and nothing that aliases a mapping that
// Close unmaps).
type goLineStrings struct {
	once  sync.Once
	names string
	files string
}

func (t *goPCLN) lineStrings() *goLineStrings {
	l := &t.lines
	l.once.Do(func() {
		l.names, l.files = string(t.funcnames), string(t.filetab)
		if t.held != nil {
			t.held.Add(int64(len(l.names) + len(l.files)))
		}
	})
	return l
}

// nameAt returns the NUL-terminated name at off of the function name
// table; "" when off is outside it or the name is not terminated.
func (l *goLineStrings) nameAt(off uint32) string { return cString(l.names, off) }

func cString(s string, off uint32) string {
	if uint64(off) >= uint64(len(s)) {
		return ""
	}
	s = s[off:]
	i := strings.IndexByte(s, 0)
	if i < 0 {
		return ""
	}
	return s[:i]
}

// goInlinedCall is one entry of an inline tree.
type goInlinedCall struct {
	nameOff  uint32 // of the inlined function's name in funcnames
	parentPC uint32 // offset from the function's entry of a PC at the call site
}

// fileLine returns the source file and line of pc in f: the file's offset
// in filetab (ok false when pcfile, pcln or cutab do not say; damage is
// recorded). none says that the function has no lines at pc at all: pc
// is after the end of its code, in the padding up to the next function,
// or it has no line tables (linker-made markers such as
// go:textfipsstart); its DWARF does not cover such PCs either.
func (t *goPCLN) fileLine(f *goFunc, pc uint64) (fileOff uint32, line int, ok, none bool) {
	if f.pcfile == 0 || f.pcln == 0 {
		return 0, 0, false, true
	}
	fileno, _, _, ok := t.pcValue(f, f.pcfile, pc)
	if !ok || fileno < 0 || fileno > 1<<31-1 {
		return 0, 0, false, t.damagedUnlessPast(f, f.pcfile, ok, pc, "pcfile table gives no file at pc %#x", pc)
	}
	ln, _, _, ok := t.pcValue(f, f.pcln, pc)
	if !ok || ln < 0 || ln > 1<<31-1 {
		return 0, 0, false, t.damagedUnlessPast(f, f.pcln, ok, pc, "pcln table gives no line at pc %#x", pc)
	}
	i := uint64(f.cuOffset) + uint64(fileno)
	if i >= uint64(len(t.cutab))/4 {
		t.damaged(f, t.cutabOff, "file %d of the unit at cutab entry %d is past the end of cutab", fileno, f.cuOffset)
		return 0, 0, false, false
	}
	off := binary.LittleEndian.Uint32(t.cutab[i*4:])
	if off == ^uint32(0) || uint64(off) >= uint64(len(t.filetab)) || indexByte0(t.filetab[off:]) <= 0 {
		t.damaged(f, t.cutabOff+int64(i*4), "file name offset %#x: no name in the file table there", off)
		return 0, 0, false, false
	}
	return off, int(ln), true, false
}

// damagedUnlessPast records damage of f's PC-value table at offset tab
// that gave no usable value at pc (found tells whether it gave one at
// all), unless the table is well formed and ends before pc, which it
// reports: the padding after a function's code has no line.
func (t *goPCLN) damagedUnlessPast(f *goFunc, tab uint32, found bool, pc uint64, format string, args ...any) (past bool) {
	if !found {
		if end, ok := t.pcTableEnd(f, tab); ok && pc >= end {
			return true
		}
	}
	t.damaged(f, t.pctabOff+int64(tab), format, args...)
	return false
}

// damaged records the first damage a line lookup meets, at offset off of
// the section, in function f.
func (t *goPCLN) damaged(f *goFunc, off int64, format string, args ...any) {
	if t.lineErr.Load() != nil {
		return
	}
	msg := fmt.Sprintf(format, args...)
	err := newErr(t.path, t.section, off, fmt.Errorf("%w: function %q at %#x: %s", errPCLN, t.funcName(f), f.entry, msg))
	t.lineErr.CompareAndSwap(nil, err)
}

// pcdata returns the offset in pctab of f's pcdata table i; 0 when it has
// none.
func (t *goPCLN) pcdata(f *goFunc, i uint32) uint32 {
	if i >= f.npcdata {
		return 0
	}
	off := uint64(f.rec) + uint64(t.funcSize) + 4*uint64(i)
	if off+4 > uint64(len(t.funcdata)) {
		return 0
	}
	return binary.LittleEndian.Uint32(t.funcdata[off:])
}

// inlTree returns f's inline tree: the bytes of gofunc from its start on
// (nil when f has none or it lies outside the bytes ustack has).
func (t *goPCLN) inlTree(f *goFunc) []byte {
	if goFuncDataInlTree >= uint32(f.nfuncdata) || t.gofunc == nil {
		return nil
	}
	arr := uint64(f.rec) + uint64(t.funcSize) + 4*uint64(f.npcdata)
	var addr uint64
	if t.version == 116 {
		// Pointer-sized addresses, 8-aligned in memory (and the table
		// is 8-aligned).
		arr += (uint64(t.pclnOff) + arr) & 4
		at := arr + 8*goFuncDataInlTree
		if at+8 > uint64(len(t.funcdata)) {
			return nil
		}
		addr = binary.LittleEndian.Uint64(t.funcdata[at:])
	} else {
		at := arr + 4*goFuncDataInlTree
		if at+4 > uint64(len(t.funcdata)) {
			return nil
		}
		off := binary.LittleEndian.Uint32(t.funcdata[at:])
		if off == ^uint32(0) {
			return nil
		}
		addr = t.gofuncAddr + uint64(off)
	}
	if addr < t.gofuncAddr || addr-t.gofuncAddr >= uint64(len(t.gofunc)) {
		return nil
	}
	return t.gofunc[addr-t.gofuncAddr:]
}

// inlinedCall decodes entry ix of an inline tree: 16 bytes (funcID, 3
// padding bytes, nameOff, parentPc, startLine) since Go 1.20, 20 before
// (parent, funcID, a padding byte, file, line, nameOff, parentPc).
func (t *goPCLN) inlinedCall(tree []byte, ix int64) (goInlinedCall, bool) {
	size, name, parent := uint64(16), 4, 8
	if t.version < 120 {
		size, name, parent = 20, 12, 16
	}
	if ix < 0 || uint64(ix) >= uint64(len(tree))/size {
		return goInlinedCall{}, false
	}
	e := tree[uint64(ix)*size:]
	return goInlinedCall{nameOff: binary.LittleEndian.Uint32(e[name:]), parentPC: binary.LittleEndian.Uint32(e[parent:])}, true
}

// goSourceFrames appends the source frames of the Go function at addr,
// innermost first, with SourceFrames' meaning: each inlined call with the
// file and line of addr (the innermost) or of the call site into the frame
// before, then the physical function. Nothing is appended when addr is in
// no function of the table, or where the function has no lines (see
// fileLine).
func (o *Object) goSourceFrames(addr uint64, out []SourceFrame) []SourceFrame {
	t := o.goTable()
	if t == nil {
		return out
	}
	var f goFunc
	if !t.find(addr, &f) {
		return out
	}
	fileOff, line, hasLine, none := t.fileLine(&f, addr)
	if none {
		return out
	}
	l := t.lineStrings()
	frame := func(nameOff uint32, pc uint64, inlined bool) SourceFrame {
		sf := SourceFrame{Function: l.nameAt(nameOff), Inlined: inlined}
		if pc != addr {
			fileOff, line, hasLine, _ = t.fileLine(&f, pc)
		}
		if hasLine {
			sf.File, sf.Line = cString(l.files, fileOff), line
		}
		return sf
	}
	inl := t.pcdata(&f, goPCDataInlTreeIndex)
	var tree []byte
	pc := addr
	depth := 0
	for ; depth < maxGoInlineDepth && inl != 0; depth++ {
		ix, _, _, ok := t.pcValue(&f, inl, pc)
		if !ok {
			if t.damagedUnlessPast(&f, inl, false, pc, "inline tree index table gives no value at pc %#x", pc) && pc == addr {
				return out // the padding after the code
			}
			break
		}
		if ix < 0 {
			break
		}
		// Past here, pc is in inlined code: without its inline tree,
		// its line is an inlined body's, not the function's, and only
		// the function's name is known.
		if tree == nil {
			if tree = t.inlTree(&f); tree == nil {
				if t.gofunc != nil {
					t.damaged(&f, int64(t.pclnOff)+int64(f.rec), "inline tree (funcdata %d) outside go:func.*", goFuncDataInlTree)
				}
				return append(out, SourceFrame{Function: l.nameAt(f.nameOff)})
			}
		}
		call, ok := t.inlinedCall(tree, ix)
		if !ok || uint64(call.parentPC) >= f.end-f.entry {
			t.damaged(&f, int64(t.pclnOff)+int64(f.rec), "inline tree entry %d at pc %#x outside the tree or the function", ix, pc)
			return append(out, SourceFrame{Function: l.nameAt(f.nameOff)})
		}
		out = append(out, frame(call.nameOff, pc, true))
		pc = f.entry + uint64(call.parentPC)
	}
	if depth == maxGoInlineDepth {
		t.damaged(&f, int64(t.pclnOff)+int64(f.rec), "inline tree nests more than %d calls at pc %#x", maxGoInlineDepth, addr)
	}
	return append(out, frame(f.nameOff, pc, false))
}

// goLinesError says why a table's inline trees cannot be read, or else
// the first damage a line lookup met; nil when none (or the object has no
// table).
func (o *Object) goLinesError() error {
	t := o.goTable()
	if t == nil {
		return nil
	}
	if t.gofuncErr != nil {
		return t.gofuncErr
	}
	if e := t.lineErr.Load(); e != nil {
		return e
	}
	return nil
}
