package goruntime

import (
	"debug/dwarf"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Layout is where the fields ustack reads sit in the runtime's g and m
// structs, in bytes from the struct's start; -1 for a field the binary's Go
// does not have (g.syscallbp before Go 1.23, g.sched.lr on amd64 is kept:
// gobuf has lr on every architecture).
type Layout struct {
	// Source says where the offsets came from: "DWARF" or "type
	// descriptors".
	Source string
	// GSize is the size of runtime.g.
	GSize int64
	// Offsets in runtime.g.
	StackLo, StackHi, M                  int64
	SchedSP, SchedPC, SchedBP, SchedLR   int64
	SyscallSP, SyscallPC, SyscallBP      int64
	Status, Goid, WaitReason, ParentGoid int64
	GoPC, StartPC                        int64
	// MSize is the size of runtime.m, MProcID the offset of m.procid
	// (the thread's id), MCurG of m.curg.
	MSize, MProcID, MCurG int64
}

// structFields is one struct's fields by name: offset and, for structs,
// the field's own fields.
type structFields struct {
	name   string
	size   int64
	fields map[string]field
}

type field struct {
	off int64
	sub *structFields // the field's struct type, when it is one
}

// errField is the error of a struct that lacks a field ustack needs.
var errField = errors.New("field not found")

// layoutFrom builds the Layout from the g and m structs, however read.
func layoutFrom(source string, g, m *structFields) (Layout, error) {
	l := Layout{Source: source, GSize: g.size, MSize: m.size}
	var err error
	get := func(s *structFields, path string, optional bool) int64 {
		off, cur := int64(0), s
		for part := range strings.SplitSeq(path, ".") {
			var f field
			ok := cur != nil
			if ok {
				f, ok = cur.fields[part]
			}
			if !ok {
				if !optional && err == nil {
					err = fmt.Errorf("%s: %s.%s: %w (a Go runtime layout ustack does not know)", source, s.name, path, errField)
				}
				return -1
			}
			off += f.off
			cur = f.sub
		}
		return off
	}
	l.StackLo, l.StackHi, l.M = get(g, "stack.lo", false), get(g, "stack.hi", false), get(g, "m", false)
	l.SchedSP, l.SchedPC, l.SchedBP = get(g, "sched.sp", false), get(g, "sched.pc", false), get(g, "sched.bp", false)
	l.SchedLR = get(g, "sched.lr", false)
	l.SyscallSP, l.SyscallPC, l.SyscallBP = get(g, "syscallsp", false), get(g, "syscallpc", false), get(g, "syscallbp", true)
	l.Status, l.Goid, l.WaitReason = get(g, "atomicstatus", false), get(g, "goid", false), get(g, "waitreason", false)
	l.ParentGoid = get(g, "parentGoid", true)
	l.GoPC, l.StartPC = get(g, "gopc", false), get(g, "startpc", false)
	l.MProcID, l.MCurG = get(m, "procid", false), get(m, "curg", false)
	if err != nil {
		return Layout{}, err
	}
	for _, o := range []struct {
		off, size, max int64
	}{{l.StackHi, 8, l.GSize}, {l.SchedLR, 8, l.GSize}, {l.SchedBP, 8, l.GSize}, {l.SyscallBP, 8, l.GSize},
		{l.Goid, 8, l.GSize}, {l.GoPC, 8, l.GSize}, {l.StartPC, 8, l.GSize}, {l.Status, 4, l.GSize},
		{l.WaitReason, 1, l.GSize}, {l.M, 8, l.GSize}, {l.MProcID, 8, l.MSize}, {l.MCurG, 8, l.MSize}} {
		if o.off >= 0 && o.off+o.size > o.max {
			return Layout{}, fmt.Errorf("%s: a field at offset %d past the end of its struct (%d bytes)", source, o.off, o.max)
		}
	}
	return l, nil
}

// dwarfLayout reads the layout from the DWARF types runtime.g and runtime.m.
func dwarfLayout(d *dwarf.Data) (Layout, error) {
	want := map[string]dwarf.Offset{"runtime.g": 0, "runtime.m": 0}
	found := 0
	err := eachGlobal(d, dwarf.TagStructType, func(e *dwarf.Entry) bool {
		name, _ := e.Val(dwarf.AttrName).(string)
		if off, ok := want[name]; ok && off == 0 {
			want[name] = e.Offset
			found++
		}
		return found < len(want)
	})
	if err != nil {
		return Layout{}, err
	}
	var structs [2]*structFields
	for i, name := range []string{"runtime.g", "runtime.m"} {
		if want[name] == 0 {
			return Layout{}, fmt.Errorf("DWARF: no type %s", name)
		}
		t, err := d.Type(want[name])
		if err != nil {
			return Layout{}, fmt.Errorf("DWARF: type %s: %w", name, err)
		}
		st, ok := t.(*dwarf.StructType)
		if !ok {
			return Layout{}, fmt.Errorf("DWARF: %s is a %T, not a struct", name, t)
		}
		structs[i] = dwarfStruct(st, 0)
	}
	return layoutFrom("DWARF", structs[0], structs[1])
}

func dwarfStruct(st *dwarf.StructType, depth int) *structFields {
	s := &structFields{name: st.StructName, size: st.ByteSize, fields: map[string]field{}}
	for _, f := range st.Field {
		fl := field{off: f.ByteOffset}
		t := f.Type
		for {
			td, ok := t.(*dwarf.TypedefType)
			if !ok {
				break
			}
			t = td.Type
		}
		if sub, ok := t.(*dwarf.StructType); ok && depth < 2 {
			fl.sub = dwarfStruct(sub, depth+1)
		}
		s.fields[f.Name] = fl
	}
	return s
}

// dwarfVariable returns the address of the global variable name (its
// DW_AT_location a DW_OP_addr) and its size in bytes (0 when unknown).
func dwarfVariable(d *dwarf.Data, names ...string) (map[string][2]uint64, error) {
	out := map[string][2]uint64{}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	err := eachGlobal(d, dwarf.TagVariable, func(e *dwarf.Entry) bool {
		name, _ := e.Val(dwarf.AttrName).(string)
		loc, _ := e.Val(dwarf.AttrLocation).([]byte)
		if !want[name] || len(loc) != 9 || loc[0] != 0x03 { // DW_OP_addr
			return true
		}
		v := [2]uint64{binary.LittleEndian.Uint64(loc[1:]), 0}
		if toff, ok := e.Val(dwarf.AttrType).(dwarf.Offset); ok {
			if t, err := d.Type(toff); err == nil && t.Size() > 0 {
				v[1] = uint64(t.Size())
			}
		}
		out[name] = v
		return len(out) < len(names)
	})
	if err != nil {
		return out, err
	}
	return out, nil
}

// eachGlobal calls fn with each entry of tag at the top level of a
// compilation unit, until fn returns false.
func eachGlobal(d *dwarf.Data, tag dwarf.Tag, fn func(*dwarf.Entry) bool) error {
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil {
			return fmt.Errorf("DWARF: %w", err)
		}
		if e == nil {
			return nil
		}
		if e.Tag == dwarf.TagCompileUnit {
			continue
		}
		if e.Tag == tag && !fn(e) {
			return nil
		}
		r.SkipChildren()
	}
}
