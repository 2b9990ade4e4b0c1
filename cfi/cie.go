package cfi

import (
	"fmt"

	"github.com/ustack/ustack/arch"
)

// frameSection is a .eh_frame or .debug_frame section with what is needed to
// decode it.
type frameSection struct {
	name     string
	data     []byte
	addr     uint64
	eh       bool // .eh_frame (LSB) rather than .debug_frame (DWARF)
	textAddr uint64
	dataAddr uint64
	ptrSize  int // default address size (arch pointer size)
}

func (s *frameSection) err(off int, msg string) error {
	return &FormatError{Section: s.name, Offset: int64(off), Msg: msg}
}

func (s *frameSection) errf(off int, format string, args ...any) error {
	return &FormatError{Section: s.name, Offset: int64(off), Msg: fmt.Sprintf(format, args...)}
}

// entry is the header of a CIE or FDE: its length and CIE id or pointer.
type entry struct {
	off    int    // offset of the length field
	idOff  int    // offset of the CIE id / CIE pointer field
	body   int    // offset just after the id field
	end    int    // offset just past the entry
	id     uint64 // CIE id or CIE pointer value
	is64   bool   // 64-bit DWARF format
	isCIE  bool
	isTerm bool // zero terminator (length 0)
}

// readEntry decodes the entry header at off. The entry's extent is checked
// against the section.
func (s *frameSection) readEntry(off int) (entry, error) {
	var e entry
	e.off = off
	r := reader{data: s.data, off: off}
	l32, ok := r.u32()
	if !ok {
		return e, s.err(off, "truncated entry length")
	}
	length := uint64(l32)
	if l32 == 0xffffffff {
		e.is64 = true
		if length, ok = r.u64(); !ok {
			return e, s.err(off, "truncated 64-bit entry length")
		}
	} else if l32 >= 0xfffffff0 {
		return e, s.errf(off, "reserved entry length %#x", l32)
	}
	if length == 0 {
		e.isTerm = true
		e.idOff, e.body, e.end = r.off, r.off, r.off
		return e, nil
	}
	if length > uint64(len(s.data)-r.off) {
		return e, s.errf(off, "entry length %#x runs past the end of the section", length)
	}
	e.idOff = r.off
	e.end = r.off + int(length)
	r.data = s.data[:e.end]
	if e.is64 {
		e.id, ok = r.u64()
	} else {
		var v uint32
		v, ok = r.u32()
		e.id = uint64(v)
	}
	if !ok {
		return e, s.err(off, "entry too short for its CIE id")
	}
	e.body = r.off
	if s.eh {
		e.isCIE = e.id == 0
	} else {
		e.isCIE = (!e.is64 && e.id == 0xffffffff) || (e.is64 && e.id == ^uint64(0))
	}
	return e, nil
}

// cie is a decoded Common Information Entry.
type cie struct {
	off       int
	version   byte
	codeAlign uint64
	dataAlign int64
	ra        uint64
	addrSize  int
	segSize   int
	ptrEnc    byte // FDE pointer encoding ('R'), absptr by default
	lsdaEnc   byte // 'L', omit by default
	hasZ      bool // augmentation data present ('z')
	signal    bool // 'S'
	bkey      bool // 'B'
	insnStart int
	insnEnd   int
}

// parseCIE decodes the CIE at off.
func (s *frameSection) parseCIE(off int, c *cie) error {
	e, err := s.readEntry(off)
	if err != nil {
		return err
	}
	if e.isTerm || !e.isCIE {
		return s.err(off, "CIE pointer does not point to a CIE")
	}
	*c = cie{off: off, addrSize: s.ptrSize, ptrEnc: pePtr, lsdaEnc: peOmit, insnEnd: e.end}
	r := reader{data: s.data[:e.end], off: e.body}
	v, ok := r.u8()
	if !ok {
		return s.err(off, "truncated CIE")
	}
	c.version = v
	if v != 1 && v != 3 && v != 4 {
		return s.errf(off, "unsupported CIE version %d", v)
	}
	augStart := r.off
	augEnd := -1
	for i := r.off; i < len(r.data); i++ {
		if r.data[i] == 0 {
			augEnd = i
			break
		}
	}
	if augEnd < 0 {
		return s.err(off, "unterminated CIE augmentation string")
	}
	aug := r.data[augStart:augEnd]
	r.off = augEnd + 1
	if len(aug) >= 2 && aug[0] == 'e' && aug[1] == 'h' {
		// Old GCC: the address of the exception table follows.
		if !r.skip(uint64(s.ptrSize)) {
			return s.err(off, "truncated CIE (eh augmentation)")
		}
		aug = aug[2:]
	}
	if v == 4 {
		as, ok1 := r.u8()
		ss, ok2 := r.u8()
		if !ok1 || !ok2 {
			return s.err(off, "truncated CIE (address size)")
		}
		if !validPtrSize(int(as)) {
			return s.errf(off, "unsupported CIE address size %d", as)
		}
		if ss > 8 {
			return s.errf(off, "unsupported CIE segment selector size %d", ss)
		}
		c.addrSize, c.segSize = int(as), int(ss)
	}
	if c.codeAlign, ok = r.uleb(); !ok {
		return s.err(off, "truncated CIE (code alignment factor)")
	}
	if c.dataAlign, ok = r.sleb(); !ok {
		return s.err(off, "truncated CIE (data alignment factor)")
	}
	if v == 1 {
		b, ok := r.u8()
		if !ok {
			return s.err(off, "truncated CIE (return address register)")
		}
		c.ra = uint64(b)
	} else if c.ra, ok = r.uleb(); !ok {
		return s.err(off, "truncated CIE (return address register)")
	}
	if c.ra >= arch.MaxRegs {
		return s.errf(off, "return address column %d out of range", c.ra)
	}
	if len(aug) == 0 {
		c.insnStart = r.off
		return nil
	}
	if aug[0] != 'z' {
		return s.errf(off, "unsupported CIE augmentation %q", aug)
	}
	c.hasZ = true
	alen, ok := r.uleb()
	if !ok {
		return s.err(off, "truncated CIE (augmentation length)")
	}
	dataStart := r.off
	if alen > uint64(len(r.data)-r.off) {
		return s.err(off, "CIE augmentation data runs past the end of the CIE")
	}
	dataEnd := r.off + int(alen)
	ar := reader{data: r.data[:dataEnd], off: dataStart}
	b := ptrBases{secAddr: s.addr, textAddr: s.textAddr, dataAddr: s.dataAddr}
loop:
	for _, ch := range aug[1:] {
		switch ch {
		case 'R':
			if c.ptrEnc, ok = ar.u8(); !ok {
				return s.err(off, "truncated CIE augmentation data ('R')")
			}
		case 'L':
			if c.lsdaEnc, ok = ar.u8(); !ok {
				return s.err(off, "truncated CIE augmentation data ('L')")
			}
		case 'P':
			enc, ok := ar.u8()
			if !ok {
				return s.err(off, "truncated CIE augmentation data ('P')")
			}
			// The personality routine is not needed to unwind: skip it.
			if _, code := ar.encodedPtr(enc&^peIndirect, c.addrSize, &b, false); code != ptrOK {
				return s.errf(off, "CIE personality pointer: %s", ptrErrMsgs[code])
			}
		case 'S':
			c.signal = true
		case 'B':
			c.bkey = true
		case 'G':
			// arm64 memory tagging of stack frames: nothing to do.
		default:
			// Unknown augmentation: the 'z' length tells where the
			// instructions start; stop interpreting the rest (as libgcc).
			break loop
		}
	}
	c.insnStart = dataEnd
	return nil
}

// fde is a decoded Frame Description Entry.
type fde struct {
	off        int
	start, end uint64 // [start, end) covered
	insnStart  int
	insnEnd    int
}

// parseFDE decodes the FDE at off and its CIE.
func (s *frameSection) parseFDE(off int, f *fde, c *cie) error {
	e, err := s.readEntry(off)
	if err != nil {
		return err
	}
	if e.isTerm {
		return s.err(off, "expected an FDE, found a terminator")
	}
	if e.isCIE {
		return s.err(off, "expected an FDE, found a CIE")
	}
	var cieOff uint64
	if s.eh {
		// The CIE pointer is relative to the pointer field itself.
		if e.id > uint64(e.idOff) {
			return s.errf(off, "CIE pointer %#x out of range", e.id)
		}
		cieOff = uint64(e.idOff) - e.id
	} else {
		cieOff = e.id
	}
	if cieOff >= uint64(len(s.data)) {
		return s.errf(off, "CIE pointer %#x out of range", e.id)
	}
	if err := s.parseCIE(int(cieOff), c); err != nil {
		return err
	}
	r := reader{data: s.data[:e.end], off: e.body}
	if c.segSize > 0 && !r.skip(uint64(c.segSize)) {
		return s.err(off, "truncated FDE (segment selector)")
	}
	b := ptrBases{secAddr: s.addr, textAddr: s.textAddr, dataAddr: s.dataAddr}
	start, code := r.encodedPtr(c.ptrEnc, c.addrSize, &b, true)
	if code != ptrOK {
		return s.errf(off, "FDE initial location: %s", ptrErrMsgs[code])
	}
	// The address range uses only the format of the encoding.
	length, code := r.encodedPtr(c.ptrEnc&0x0f, c.addrSize, &b, true)
	if code != ptrOK {
		return s.errf(off, "FDE address range: %s", ptrErrMsgs[code])
	}
	if start+length < start {
		return s.errf(off, "FDE range [%#x, +%#x) overflows", start, length)
	}
	if c.hasZ {
		alen, ok := r.uleb()
		if !ok || !r.skip(alen) {
			return s.err(off, "truncated FDE augmentation data")
		}
	}
	*f = fde{off: off, start: start, end: start + length, insnStart: r.off, insnEnd: e.end}
	return nil
}

// fdeRange decodes only the initial location and range of the FDE at off,
// for building an index. It reports isFDE false for CIEs and terminators.
func (s *frameSection) fdeRange(e *entry, c *cie, lastCIE *int) (start, end uint64, err error) {
	var cieOff uint64
	if s.eh {
		if e.id > uint64(e.idOff) {
			return 0, 0, s.errf(e.off, "CIE pointer %#x out of range", e.id)
		}
		cieOff = uint64(e.idOff) - e.id
	} else {
		cieOff = e.id
	}
	if cieOff >= uint64(len(s.data)) {
		return 0, 0, s.errf(e.off, "CIE pointer %#x out of range", e.id)
	}
	if int(cieOff) != *lastCIE {
		*lastCIE = -1
		if err := s.parseCIE(int(cieOff), c); err != nil {
			return 0, 0, err
		}
		*lastCIE = int(cieOff)
	}
	r := reader{data: s.data[:e.end], off: e.body}
	if c.segSize > 0 && !r.skip(uint64(c.segSize)) {
		return 0, 0, s.err(e.off, "truncated FDE (segment selector)")
	}
	bs := ptrBases{secAddr: s.addr, textAddr: s.textAddr, dataAddr: s.dataAddr}
	start, code := r.encodedPtr(c.ptrEnc, c.addrSize, &bs, true)
	if code != ptrOK {
		return 0, 0, s.errf(e.off, "FDE initial location: %s", ptrErrMsgs[code])
	}
	length, code := r.encodedPtr(c.ptrEnc&0x0f, c.addrSize, &bs, true)
	if code != ptrOK {
		return 0, 0, s.errf(e.off, "FDE address range: %s", ptrErrMsgs[code])
	}
	if start+length < start {
		return 0, 0, s.errf(e.off, "FDE range overflows")
	}
	return start, start + length, nil
}
