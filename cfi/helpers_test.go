package cfi

import (
	"encoding/binary"
)

// Test helpers that hand-assemble CIE and FDE bytes.

func uleb(v uint64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			c |= 0x80
		}
		b = append(b, c)
		if v == 0 {
			return b
		}
	}
}

func sleb(v int64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func u16(v uint16) []byte { return binary.LittleEndian.AppendUint16(nil, v) }
func u32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// testCIE describes a CIE to assemble.
type testCIE struct {
	version   byte   // default 1
	aug       string // augmentation string
	augData   []byte // augmentation data (length added when aug starts with 'z')
	preCode   []byte // bytes between the augmentation string and the code alignment factor (v4 sizes, "eh" pointer)
	codeAlign uint64 // default 1
	dataAlign int64  // default -8
	ra        uint64 // default 16
	insns     []byte
	is64      bool
}

// testFDE describes an FDE to assemble. loc holds the encoded initial
// location and range; when nil, start and length are written as 8-byte
// absolute values.
type testFDE struct {
	start, length uint64
	loc           []byte
	augData       []byte // written with a length when the CIE has 'z'
	insns         []byte
}

func entryBytes(is64 bool, id []byte, body []byte) []byte {
	if is64 {
		return cat(u32(0xffffffff), u64(uint64(len(id)+len(body))), id, body)
	}
	return cat(u32(uint32(len(id)+len(body))), id, body)
}

// buildFrame assembles a section holding one CIE at offset 0 followed by the
// FDEs. eh selects .eh_frame conventions. It returns the bytes and each
// FDE's offset.
func buildFrame(eh bool, c testCIE, fdes ...testFDE) ([]byte, []int) {
	if c.version == 0 {
		c.version = 1
	}
	if c.codeAlign == 0 {
		c.codeAlign = 1
	}
	if c.dataAlign == 0 {
		c.dataAlign = -8
	}
	if c.ra == 0 {
		c.ra = 16
	}
	body := cat([]byte{c.version}, []byte(c.aug), []byte{0}, c.preCode, uleb(c.codeAlign), sleb(c.dataAlign))
	if c.version == 1 {
		body = append(body, byte(c.ra))
	} else {
		body = append(body, uleb(c.ra)...)
	}
	hasZ := len(c.aug) > 0 && c.aug[0] == 'z'
	if hasZ {
		body = cat(body, uleb(uint64(len(c.augData))), c.augData)
	}
	body = append(body, c.insns...)
	var id []byte
	switch {
	case eh && c.is64:
		id = u64(0)
	case eh:
		id = u32(0)
	case c.is64:
		id = u64(^uint64(0))
	default:
		id = u32(0xffffffff)
	}
	out := entryBytes(c.is64, id, body)
	var offs []int
	for _, f := range fdes {
		off := len(out)
		offs = append(offs, off)
		loc := f.loc
		if loc == nil {
			loc = cat(u64(f.start), u64(f.length))
		}
		fb := loc
		if hasZ {
			fb = cat(fb, uleb(uint64(len(f.augData))), f.augData)
		}
		fb = cat(fb, f.insns)
		idOff := off + 4
		if c.is64 {
			idOff = off + 12
		}
		var ptr uint64
		if eh {
			ptr = uint64(idOff) // CIE at offset 0
		}
		if c.is64 {
			id = u64(ptr)
		} else {
			id = u32(uint32(ptr))
		}
		out = append(out, entryBytes(c.is64, id, fb)...)
	}
	return out, offs
}

// buildHdr assembles an .eh_frame_hdr at hdrAddr for .eh_frame at ehAddr with
// the usual encodings: eh_frame_ptr pcrel|sdata4, fde_count udata4, table
// datarel|sdata4. entries holds (initial location, FDE address) pairs.
func buildHdr(hdrAddr, ehAddr uint64, entries [][2]uint64) []byte {
	b := []byte{1, 0x1b, 0x03, 0x3b}
	b = append(b, u32(uint32(ehAddr-(hdrAddr+4)))...)
	b = append(b, u32(uint32(len(entries)))...)
	for _, e := range entries {
		b = append(b, u32(uint32(e[0]-hdrAddr))...)
		b = append(b, u32(uint32(e[1]-hdrAddr))...)
	}
	return b
}
