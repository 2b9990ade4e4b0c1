package resolve

import (
	"bytes"
	"strings"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
	"github.com/ustack/ustack/elfcache"
)

// Python 3.12's -X perf copies one small trampoline per Python function into
// anonymous memory and names each copy "py::FUNC:FILE" in /tmp/perf-PID.map.
// The copies have no CFI and keep no frame pointer, so neither perf nor a
// frame-pointer walk gets past the first one. Their code is libpython's
// _Py_trampoline_func_start..._end (Python/asm_trampoline.S), copied
// byte for byte; when the process's libpython holds exactly the x86-64
// template below, each py:: entry of the perf map gets that code's unwind
// rows. Any other template (another Python, arm64) is left to the frame
// pointer as before.

// pyTrampolineBody is the x86-64 trampoline after an optional endbr64:
// sub $8,%rsp; call *%rcx; add $8,%rsp; ret.
var pyTrampolineBody = []byte{0x48, 0x83, 0xec, 0x08, 0xff, 0xd1, 0x48, 0x83, 0xc4, 0x08, 0xc3}

var endbr64 = []byte{0xf3, 0x0f, 0x1e, 0xfa}

// pyTrampolines is the unwinder.Object of the anonymous mappings of a
// process whose perf map names Python trampolines.
type pyTrampolines struct {
	m    *perfMap
	code []byte // the template, as libpython holds it
	pre  uint64 // bytes before the sub: 4 with endbr64, else 0
}

// pyTrampolineTemplate returns the trampoline template of libpython obj,
// or nil when obj has none or it is not the known x86-64 code.
func pyTrampolineTemplate(obj *elfcache.Object) []byte {
	var start, end uint64
	for _, s := range obj.Symbols() {
		switch s.Name {
		case "_Py_trampoline_func_start":
			start = s.Addr
		case "_Py_trampoline_func_end":
			end = s.Addr
		}
	}
	if start == 0 || end <= start || end-start > 64 {
		return nil
	}
	code := make([]byte, end-start)
	if obj.ReadCode(start, code) != len(code) {
		return nil
	}
	if bytes.Equal(code, pyTrampolineBody) || bytes.Equal(code, append(append([]byte{}, endbr64...), pyTrampolineBody...)) {
		return code
	}
	return nil
}

// newPyTrampolines returns the object for a perf map with py:: entries
// whose code is template, or nil.
func newPyTrampolines(m *perfMap, template []byte) *pyTrampolines {
	if m == nil || template == nil || !m.hasPython() {
		return nil
	}
	return &pyTrampolines{m: m, code: template, pre: uint64(len(template) - len(pyTrampolineBody))}
}

// hasPython reports whether the map names Python trampolines (found once,
// when it is read).
func (m *perfMap) hasPython() bool { return m.python }

// entry returns the start of the trampoline copy at addr.
func (p *pyTrampolines) entry(addr uint64) (uint64, bool) {
	i := p.m.index(addr)
	if i < 0 {
		return 0, false
	}
	s := &p.m.syms[i]
	if !strings.HasPrefix(s.name, "py::") || s.end-s.start != uint64(len(p.code)) {
		return 0, false
	}
	return s.start, true
}

// FindRow gives the trampoline's rows: CFA = rsp+8 up to the sub and from
// the add on, rsp+16 between; the return address at CFA-8; every other
// register untouched.
func (p *pyTrampolines) FindRow(addr uint64, row *cfi.Row) error {
	start, ok := p.entry(addr)
	if !ok {
		return cfi.ErrNoFDE
	}
	sub, add := start+p.pre, start+p.pre+6 // add is the instruction after call
	*row = cfi.Row{RA: arch.AMD64_RIP, FDEStart: start}
	cfa := int64(8)
	switch {
	case addr < sub+4:
		row.Start, row.End = start, sub+4
	case addr < add+4:
		row.Start, row.End, cfa = sub+4, add+4, 16
	default:
		row.Start, row.End = add+4, start+uint64(len(p.code))
	}
	row.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: arch.AMD64_RSP, Offset: cfa}
	row.Regs[arch.AMD64_RIP] = cfi.Rule{Kind: cfi.RuleOffset, Offset: -8}
	return nil
}

// ReadCode copies the trampoline's bytes: the copy is libpython's template.
func (p *pyTrampolines) ReadCode(addr uint64, buf []byte) int {
	start, ok := p.entry(addr)
	if !ok {
		return 0
	}
	return copy(buf, p.code[addr-start:])
}
