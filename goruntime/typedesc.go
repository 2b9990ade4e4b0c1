package goruntime

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// The runtime's type descriptors (internal/abi.Type and StructType, the
// same from Go 1.21 to 1.26):
//
//	Type       Size_ uintptr @0, PtrBytes @8, Hash uint32 @16, TFlag uint8 @20,
//	           Align_ @21, FieldAlign_ @22, Kind_ @23, Equal @24, GCData @32,
//	           Str NameOff int32 @40 (from moduledata.types), PtrToThis @44
//	StructType Type, PkgPath *byte @48, Fields []StructField @56
//	StructField Name *byte @0, Typ *Type @8, Offset uintptr @16
//
// A name is a flags byte, the length as a uvarint, the bytes. A named
// type's string carries a leading '*' that TFlagExtraStar says to drop.
const (
	typeSize        = 48
	typeStrOff      = 40
	typeKindOff     = 23
	typeTFlagOff    = 20
	structFieldsOff = 56
	structFieldSize = 24
	kindMask        = 0x1f
	kindStruct      = 25
	tflagExtraStar  = 1 << 1
	maxStructFields = 512
)

// typeDescriptors reads the structs' fields from the type descriptors in
// [types, etypes) (runtime addresses).
type typeDescriptors struct {
	mem          Memory
	types        uint64
	region       []byte
	structByName map[string]uint64
}

func newTypeDescriptors(mem Memory, types, etypes uint64) (*typeDescriptors, error) {
	if etypes <= types || etypes-types > 1<<30 {
		return nil, fmt.Errorf("type descriptors: bad range [%#x, %#x) in the moduledata", types, etypes)
	}
	region := make([]byte, etypes-types)
	if n, err := mem.ReadAt(region, types); n < len(region) {
		return nil, fmt.Errorf("type descriptors at %#x (%d bytes): %v", types, len(region), err)
	}
	return &typeDescriptors{mem: mem, types: types, region: region}, nil
}

// find returns the address of the struct type descriptor named name
// ("runtime.g").
func (t *typeDescriptors) find(name string) (uint64, error) {
	str := "*" + name
	var offs []int32
	pat := append([]byte{byte(len(str))}, str...)
	for i := 0; ; {
		k := bytes.Index(t.region[i:], pat)
		if k < 0 {
			break
		}
		at := i + k
		if at >= 1 {
			offs = append(offs, int32(at-1))
		}
		i = at + 1
	}
	if len(offs) == 0 {
		return 0, fmt.Errorf("type descriptors: no type name %q in [%#x, %#x)", str, t.types, t.types+uint64(len(t.region)))
	}
	var found []uint64
	for o := 0; o+structFieldsOff+24 <= len(t.region); o += 8 {
		r := t.region[o:]
		if r[typeKindOff]&kindMask != kindStruct || r[typeTFlagOff]&tflagExtraStar == 0 {
			continue
		}
		s := int32(binary.LittleEndian.Uint32(r[typeStrOff:]))
		for _, want := range offs {
			if s == want {
				found = append(found, t.types+uint64(o))
			}
		}
	}
	switch len(found) {
	case 0:
		return 0, fmt.Errorf("type descriptors: no struct type named %s", name)
	case 1:
		return found[0], nil
	}
	return 0, fmt.Errorf("type descriptors: %d struct types named %s (at %#x, %#x): not one", len(found), name, found[0], found[1])
}

// structAt reads the struct type descriptor at addr, with the fields of
// its struct-typed fields to depth levels.
func (t *typeDescriptors) structAt(addr uint64, name string, depth int) (*structFields, error) {
	var hdr [structFieldsOff + 24]byte
	if n, err := t.mem.ReadAt(hdr[:], addr); n < len(hdr) {
		return nil, fmt.Errorf("type descriptor of %s at %#x: %v", name, addr, err)
	}
	if hdr[typeKindOff]&kindMask != kindStruct {
		return nil, fmt.Errorf("type descriptor of %s at %#x: kind %d, not a struct", name, addr, hdr[typeKindOff]&kindMask)
	}
	s := &structFields{name: name, size: int64(binary.LittleEndian.Uint64(hdr[0:])), fields: map[string]field{}}
	ptr := binary.LittleEndian.Uint64(hdr[structFieldsOff:])
	n := binary.LittleEndian.Uint64(hdr[structFieldsOff+8:])
	if n > maxStructFields {
		return nil, fmt.Errorf("type descriptor of %s at %#x: %d fields", name, addr, n)
	}
	buf := make([]byte, n*structFieldSize)
	if k, err := t.mem.ReadAt(buf, ptr); k < len(buf) {
		return nil, fmt.Errorf("type descriptor of %s at %#x: fields at %#x: %v", name, addr, ptr, err)
	}
	for i := uint64(0); i < n; i++ {
		f := buf[i*structFieldSize:]
		fname, err := t.name(binary.LittleEndian.Uint64(f[0:]))
		if err != nil {
			return nil, fmt.Errorf("type descriptor of %s at %#x: field %d: %v", name, addr, i, err)
		}
		fl := field{off: int64(binary.LittleEndian.Uint64(f[16:]))}
		if fl.off < 0 || fl.off > s.size {
			return nil, fmt.Errorf("type descriptor of %s at %#x: field %s at offset %d of a %d-byte struct", name, addr, fname, fl.off, s.size)
		}
		if typ := binary.LittleEndian.Uint64(f[8:]); depth > 0 && typ != 0 {
			var kind [1]byte
			if k, _ := t.mem.ReadAt(kind[:], typ+typeKindOff); k == 1 && kind[0]&kindMask == kindStruct {
				sub, err := t.structAt(typ, name+"."+fname, depth-1)
				if err != nil {
					return nil, err
				}
				fl.sub = sub
			}
		}
		s.fields[fname] = fl
	}
	return s, nil
}

// name reads the name at addr.
func (t *typeDescriptors) name(addr uint64) (string, error) {
	var b [64]byte
	k, _ := t.mem.ReadAt(b[:], addr)
	if k < 2 {
		return "", fmt.Errorf("name at %#x: not in memory", addr)
	}
	n, w := binary.Uvarint(b[1:k])
	if w <= 0 || n == 0 || int(n) > k-1-w {
		return "", fmt.Errorf("name at %#x: bad length", addr)
	}
	return string(b[1+w : 1+w+int(n)]), nil
}

// typeLayout reads the layout from the type descriptors.
func typeLayout(mem Memory, types, etypes uint64) (Layout, error) {
	t, err := newTypeDescriptors(mem, types, etypes)
	if err != nil {
		return Layout{}, err
	}
	var s [2]*structFields
	for i, name := range []string{"runtime.g", "runtime.m"} {
		addr, err := t.find(name)
		if err != nil {
			return Layout{}, err
		}
		if s[i], err = t.structAt(addr, name, 1); err != nil {
			return Layout{}, err
		}
	}
	return layoutFrom("type descriptors", s[0], s[1])
}
