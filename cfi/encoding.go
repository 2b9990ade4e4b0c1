package cfi

import "encoding/binary"

// Pointer encodings (DW_EH_PE_*) of the LSB specification, used by
// .eh_frame, .eh_frame_hdr and CIE augmentations.
const (
	pePtr     = 0x00 // DW_EH_PE_absptr
	peULEB128 = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSigned  = 0x08 // DW_EH_PE_signed: native size, signed (sdata of pointer size)
	peSLEB128 = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c

	pePCRel   = 0x10
	peTextRel = 0x20
	peDataRel = 0x30
	peFuncRel = 0x40
	peAligned = 0x50

	peIndirect = 0x80
	peOmit     = 0xff
)

// reader reads little-endian DWARF data from a byte slice. It never panics:
// every read checks the remaining length and reports failure by returning
// ok == false, leaving the position unspecified.
type reader struct {
	data []byte
	off  int
}

func (r *reader) u8() (byte, bool) {
	if r.off >= len(r.data) || r.off < 0 {
		return 0, false
	}
	b := r.data[r.off]
	r.off++
	return b, true
}

func (r *reader) u16() (uint16, bool) {
	if r.off < 0 || len(r.data)-r.off < 2 {
		return 0, false
	}
	v := binary.LittleEndian.Uint16(r.data[r.off:])
	r.off += 2
	return v, true
}

func (r *reader) u32() (uint32, bool) {
	if r.off < 0 || len(r.data)-r.off < 4 {
		return 0, false
	}
	v := binary.LittleEndian.Uint32(r.data[r.off:])
	r.off += 4
	return v, true
}

func (r *reader) u64() (uint64, bool) {
	if r.off < 0 || len(r.data)-r.off < 8 {
		return 0, false
	}
	v := binary.LittleEndian.Uint64(r.data[r.off:])
	r.off += 8
	return v, true
}

// uN reads an n-byte unsigned value, n in 1, 2, 4, 8.
func (r *reader) uN(n int) (uint64, bool) {
	switch n {
	case 1:
		v, ok := r.u8()
		return uint64(v), ok
	case 2:
		v, ok := r.u16()
		return uint64(v), ok
	case 4:
		v, ok := r.u32()
		return uint64(v), ok
	case 8:
		return r.u64()
	}
	return 0, false
}

// uleb reads an unsigned LEB128 number. Bits beyond 64 are discarded; the
// encoding may be at most 10+ bytes long only in the sense that trailing
// continuation bytes are consumed up to the end of the data.
func (r *reader) uleb() (uint64, bool) {
	var v uint64
	var shift uint
	for {
		if r.off < 0 || r.off >= len(r.data) {
			return 0, false
		}
		b := r.data[r.off]
		r.off++
		if shift < 64 {
			v |= uint64(b&0x7f) << shift
		}
		shift += 7
		if b&0x80 == 0 {
			return v, true
		}
	}
}

// sleb reads a signed LEB128 number.
func (r *reader) sleb() (int64, bool) {
	var v uint64
	var shift uint
	for {
		if r.off < 0 || r.off >= len(r.data) {
			return 0, false
		}
		b := r.data[r.off]
		r.off++
		if shift < 64 {
			v |= uint64(b&0x7f) << shift
		}
		shift += 7
		if b&0x80 == 0 {
			if shift < 64 && b&0x40 != 0 {
				v |= ^uint64(0) << shift
			}
			return int64(v), true
		}
	}
}

// skip advances n bytes.
func (r *reader) skip(n uint64) bool {
	if r.off < 0 || n > uint64(len(r.data)-r.off) {
		return false
	}
	r.off += int(n)
	return true
}

// ptrBases are the bases against which relative pointer encodings apply.
type ptrBases struct {
	secAddr  uint64 // address of byte 0 of the data being read (pcrel, aligned)
	textAddr uint64 // DW_EH_PE_textrel
	dataAddr uint64 // DW_EH_PE_datarel
	funcAddr uint64 // DW_EH_PE_funcrel
	hasFunc  bool
}

// Reasons a pointer cannot be read; they index ptrErrMsgs.
const (
	ptrOK = iota
	ptrShort
	ptrBadFormat
	ptrBadApp
	ptrIndirect
	ptrOmit
	ptrNoFunc
)

var ptrErrMsgs = [...]string{
	ptrOK:        "",
	ptrShort:     "pointer runs past the end of the data",
	ptrBadFormat: "unknown pointer encoding format",
	ptrBadApp:    "unknown pointer encoding application",
	ptrIndirect:  "indirect pointer encoding cannot be resolved offline",
	ptrOmit:      "pointer encoding is DW_EH_PE_omit",
	ptrNoFunc:    "DW_EH_PE_funcrel without a function address",
}

// encodedPtr reads a pointer in encoding enc with pointer size ptrSize. When
// deref is false an indirect pointer is skipped and its (undereferenced)
// address returned; otherwise indirection is an error, since memory cannot be
// read offline. It returns a ptr* reason code.
func (r *reader) encodedPtr(enc byte, ptrSize int, b *ptrBases, deref bool) (uint64, int) {
	if enc == peOmit {
		return 0, ptrOmit
	}
	if enc&peIndirect != 0 && deref {
		return 0, ptrIndirect
	}
	app := enc & 0x70
	fieldAddr := b.secAddr + uint64(r.off)
	if app == peAligned {
		// Align the field to the pointer size in the address space.
		ps := uint64(ptrSize)
		pad := (ps - fieldAddr%ps) % ps
		if !r.skip(pad) {
			return 0, ptrShort
		}
		fieldAddr += pad
	}
	var v uint64
	var ok bool
	switch enc & 0x0f {
	case pePtr:
		v, ok = r.uN(ptrSize)
	case peULEB128:
		v, ok = r.uleb()
	case peUdata2:
		var x uint16
		x, ok = r.u16()
		v = uint64(x)
	case peUdata4:
		var x uint32
		x, ok = r.u32()
		v = uint64(x)
	case peUdata8:
		v, ok = r.u64()
	case peSigned:
		v, ok = r.uN(ptrSize)
		if ok && ptrSize < 8 {
			s := 64 - 8*uint(ptrSize)
			v = uint64(int64(v<<s) >> s)
		}
	case peSLEB128:
		var x int64
		x, ok = r.sleb()
		v = uint64(x)
	case peSdata2:
		var x uint16
		x, ok = r.u16()
		v = uint64(int64(int16(x)))
	case peSdata4:
		var x uint32
		x, ok = r.u32()
		v = uint64(int64(int32(x)))
	case peSdata8:
		v, ok = r.u64()
	default:
		return 0, ptrBadFormat
	}
	if !ok {
		return 0, ptrShort
	}
	switch app {
	case 0, peAligned:
	case pePCRel:
		v += fieldAddr
	case peTextRel:
		v += b.textAddr
	case peDataRel:
		v += b.dataAddr
	case peFuncRel:
		if !b.hasFunc {
			return 0, ptrNoFunc
		}
		v += b.funcAddr
	default:
		return 0, ptrBadApp
	}
	if ptrSize < 8 {
		v &= 1<<(8*uint(ptrSize)) - 1
	}
	return v, ptrOK
}

// validPtrSize reports whether n is a supported address size.
func validPtrSize(n int) bool { return n == 1 || n == 2 || n == 4 || n == 8 }
