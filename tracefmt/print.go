package tracefmt

import (
	"bytes"
	"encoding/binary"
	"strconv"
)

// Append appends the record's fields formatted as perf script prints them
// with no -F: the event's print fmt interpreted as libtraceevent does (for
// syscalls:sys_enter_openat "dfd: 0xffffff9c, filename: 0x7f..., flags:
// 0x00080000, mode: 0x00000000"). raw is the sample's PERF_SAMPLE_RAW data.
// When the print fmt uses a construct this package does not evaluate
// (PrintErr is set), it appends the own fields as "name=value" pairs
// separated by spaces instead, each value printed as libtraceevent prints a
// raw field. Append allocates nothing beyond growing dst.
func (f *Format) Append(dst, raw []byte) []byte {
	if f.parts == nil {
		return f.appendFields(dst, raw)
	}
	ev := evaluator{f: f, raw: raw}
	for i := range f.parts {
		pt := &f.parts[i]
		if pt.conv == nil {
			dst = append(dst, pt.text...)
			continue
		}
		sp := *pt.conv
		if pt.width != nil {
			w := int(int32(ev.num(pt.width)))
			switch {
			case sp.starPrec:
				sp.prec = min(w, 1<<12) // negative: no precision
				if w < 0 {
					sp.prec = -1
				}
			case w < 0:
				sp.minus, sp.width = true, min(-w, 1<<12)
			default:
				sp.width = min(w, 1<<12)
			}
		}
		switch sp.verb {
		case 's':
			dst = ev.str(dst, &sp, pt.arg)
		case 'p':
			dst = ev.pointer(dst, &sp, pt.arg)
		default:
			dst = appendInt(dst, &sp, ev.num(pt.arg))
		}
	}
	return dst
}

// appendFields is the fallback: " name=value" for each own field, as
// libtraceevent's tep_print_fields, without the leading space.
func (f *Format) appendFields(dst, raw []byte) []byte {
	for i := range f.Own {
		if i > 0 {
			dst = append(dst, ' ')
		}
		dst = append(dst, f.Own[i].Name...)
		dst = append(dst, '=')
		dst = appendRawField(dst, &f.Own[i], raw)
	}
	return dst
}

// appendRawField prints one field's value as libtraceevent's
// print_field_raw does.
func appendRawField(dst []byte, fd *Field, raw []byte) []byte {
	if fd.Array {
		b := fieldBytes(fd, raw)
		if fd.String && printable(b) {
			return append(dst, cstr(b)...)
		}
		dst = append(dst, "ARRAY["...)
		for i, c := range b {
			if i > 0 {
				dst = append(dst, ", "...)
			}
			dst = appendHex2(dst, c)
		}
		return append(dst, ']')
	}
	v := readField(fd, raw)
	switch {
	case fd.Pointer:
		dst = append(dst, "0x"...)
		return strconv.AppendUint(dst, v, 16)
	case fd.Signed:
		switch fd.Size {
		case 4:
			if fd.Long {
				dst = append(dst, "0x"...)
				return strconv.AppendUint(dst, uint64(uint32(v)), 16)
			}
			return strconv.AppendInt(dst, int64(int32(v)), 10)
		case 2:
			return appendInt(dst, &spec{width: 2, prec: -1, verb: 'd', ls: -1}, v)
		case 1:
			return strconv.AppendInt(dst, int64(int8(v)), 10)
		}
		return strconv.AppendInt(dst, int64(v), 10)
	case fd.Long:
		dst = append(dst, "0x"...)
		return strconv.AppendUint(dst, v, 16)
	}
	return strconv.AppendUint(dst, v, 10)
}

func appendHex2(dst []byte, c byte) []byte {
	const hex = "0123456789abcdef"
	return append(dst, hex[c>>4], hex[c&15])
}

// printable is libtraceevent's is_printable_array: up to the first NUL,
// only printable or space characters.
func printable(b []byte) bool {
	for _, c := range b {
		if c == 0 {
			break
		}
		if !(c >= 0x20 && c < 0x7f || c >= '\t' && c <= '\r') {
			return false
		}
	}
	return true
}

func cstr(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// readField reads a scalar field, zero-extended (libtraceevent reads every
// field unsigned). A field past the end of the record reads as 0.
func readField(fd *Field, raw []byte) uint64 {
	return readNum(raw, fd.Offset, fd.Size)
}

func readNum(raw []byte, off, size int) uint64 {
	if off < 0 || off > len(raw) || size > len(raw)-off {
		return 0
	}
	b := raw[off : off+size]
	switch size {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	case 8:
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// fieldBytes returns the bytes of an array field: a fixed array in place,
// a dynamic one where its u32 locator points (empty if out of bounds).
func fieldBytes(fd *Field, raw []byte) []byte {
	if fd.Offset < 0 || fd.Offset > len(raw) || fd.Size > len(raw)-fd.Offset {
		return nil
	}
	if !fd.Dynamic {
		n := fd.Size
		if n == 0 {
			n = len(raw) - fd.Offset // zero size: the rest of the record
		}
		return raw[fd.Offset : fd.Offset+n]
	}
	off, n := dynamicLoc(fd, raw)
	return raw[off : off+n]
}

// dynamicLoc decodes a __data_loc/__rel_loc locator, clamped as
// libtraceevent's dynamic_offset does.
func dynamicLoc(fd *Field, raw []byte) (off, n int) {
	v := readNum(raw, fd.Offset, fd.Size)
	o := int(v & 0xffff)
	l := int(v>>16) & 0xffff
	if fd.Size == 2 {
		l = len(raw) - o
	}
	if fd.Relative {
		o += fd.Offset + fd.Size
	}
	if o > len(raw) || o+l > len(raw) || l < 0 {
		return 0, 0
	}
	return o, l
}

// evaluator evaluates argument expressions over one record.
type evaluator struct {
	f   *Format
	raw []byte
}

func (ev *evaluator) num(n node) uint64 {
	switch x := n.(type) {
	case numLit:
		return x.v
	case fieldRf:
		return readField(x.f, ev.raw)
	case indexOf:
		i := ev.num(x.idx)
		if x.f.ElemSize <= 0 || i >= uint64(max(x.f.ArrayLen, 1)) {
			return 0
		}
		return readNum(ev.raw, x.f.Offset+int(i)*x.f.ElemSize, x.f.ElemSize)
	case castTo:
		v := ev.num(x.x)
		if x.mask != 0 {
			v &= x.mask
		}
		return v
	case unary:
		return evalUnary(x.op, ev.num(x.x))
	case binOp:
		return evalBinary(x.op, ev.num(x.l), ev.num(x.r))
	case ternary:
		if ev.num(x.c) != 0 {
			return ev.num(x.a)
		}
		return ev.num(x.b)
	case dynLen:
		_, n := dynamicLoc(x.f, ev.raw)
		return uint64(n)
	}
	return 0 // strings, __print_flags ...: 0, as libtraceevent
}

func evalUnary(op string, v uint64) uint64 {
	switch op {
	case "-":
		return -v
	case "~":
		return ^v
	case "!":
		return b2u(v == 0)
	}
	return v
}

func evalBinary(op string, l, r uint64) uint64 {
	switch op {
	case "||":
		return b2u(l != 0 || r != 0)
	case "&&":
		return b2u(l != 0 && r != 0)
	case "|":
		return l | r
	case "^":
		return l ^ r
	case "&":
		return l & r
	case "==":
		return b2u(l == r)
	case "!=":
		return b2u(l != r)
	case "<":
		return b2u(l < r)
	case ">":
		return b2u(l > r)
	case "<=":
		return b2u(l <= r)
	case ">=":
		return b2u(l >= r)
	case "<<":
		return l << (r & 63)
	case ">>":
		return l >> (r & 63)
	case "+":
		return l + r
	case "-":
		return l - r
	case "*":
		return l * r
	case "/":
		if r == 0 {
			return 0
		}
		return l / r
	case "%":
		if r == 0 {
			return 0
		}
		return l % r
	}
	return 0
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// str formats a %s argument as libtraceevent's print_str_arg does.
func (ev *evaluator) str(dst []byte, sp *spec, n node) []byte {
	switch x := n.(type) {
	case strLit:
		return appendStr(dst, sp, x.s)
	case atom:
		return appendStr(dst, sp, x.name)
	case numLit:
		// An atom prints as its text; numbers are what reach here.
		var b [20]byte
		return appendStr(dst, sp, strconv.AppendUint(b[:0], x.v, 10))
	case fieldRf:
		fd := x.f
		if !fd.Array && fd.Size == ev.f.events.LongSize {
			// A long-sized scalar printed with %s is a kernel string
			// pointer: the printk formats name it, else hex.
			addr := readField(fd, ev.raw)
			if s, ok := ev.f.events.printk[addr]; ok {
				return append(dst, s...)
			}
			return strconv.AppendUint(dst, addr, 16)
		}
		return appendStr(dst, sp, cstr(fieldBytes(fd, ev.raw)))
	case getStr:
		off, l := dynamicLoc(x.f, ev.raw)
		if l == 0 {
			return dst
		}
		return appendStr(dst, sp, cstr(ev.raw[off:]))
	case printFlags:
		v := ev.num(x.x)
		printed := false
		for _, s := range x.syms {
			if v == 0 && s.neg {
				return appendStr(dst, sp, s.s)
			}
			if !s.neg && int64(s.v) > 0 && v&s.v == s.v {
				if printed && x.delim != "" {
					dst = append(dst, x.delim...)
				}
				dst = appendStr(dst, sp, s.s)
				printed = true
				v &^= s.v
			}
		}
		if v != 0 {
			if printed && x.delim != "" {
				dst = append(dst, x.delim...)
			}
			dst = append(dst, "0x"...)
			dst = strconv.AppendUint(dst, v, 16)
		}
		return dst
	case printSymbolic:
		v := ev.num(x.x)
		for _, s := range x.syms {
			if !s.neg && v == s.v {
				return appendStr(dst, sp, s.s)
			}
		}
		dst = append(dst, "0x"...)
		return strconv.AppendUint(dst, v, 16)
	case ternary:
		if ev.num(x.c) != 0 {
			return ev.str(dst, sp, x.a)
		}
		return ev.str(dst, sp, x.b)
	}
	return dst // other operators and casts print nothing, as libtraceevent
}

// pointer formats %p (glibc's "%p": "(nil)" or 0x hex) and %pS/%pF/%ps/%pf
// (a kernel symbol when Events.Resolve names it, else 0x hex).
func (ev *evaluator) pointer(dst []byte, sp *spec, n node) []byte {
	if s, ok := n.(strLit); ok {
		return append(dst, s.s...)
	}
	if sp.pext == 'U' {
		return ev.uuid(dst, sp, n)
	}
	v := ev.num(n)
	if sp.pext != 0 {
		if r := ev.f.events.Resolve; r != nil {
			if name, off, ok := r(v); ok {
				dst = append(dst, name...)
				if sp.pext == 'S' || sp.pext == 'F' {
					dst = append(dst, "+0x"...)
					dst = strconv.AppendUint(dst, off, 16)
				}
				return dst
			}
		}
		dst = append(dst, "0x"...)
		return strconv.AppendUint(dst, v, 16)
	}
	if v == 0 {
		return append(dst, "(nil)"...)
	}
	dst = append(dst, "0x"...)
	return strconv.AppendUint(dst, v, 16)
}

// uuid formats %pU[bBlL] of a 16-byte field as libtraceevent's
// print_uuid_arg does.
func (ev *evaluator) uuid(dst []byte, sp *spec, n node) []byte {
	for {
		c, ok := n.(castTo)
		if !ok {
			break
		}
		n = c.x
	}
	fr, ok := n.(fieldRf)
	if !ok {
		return append(dst, "ARG TYPE NOT FIELD"...)
	}
	if fr.f.Size != 16 {
		return append(dst, "INVALIDUUID"...)
	}
	b := fieldBytes(fr.f, ev.raw)
	if len(b) < 16 {
		return append(dst, "INVALIDUUID"...)
	}
	index := [16]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	if sp.pext2 == 'l' || sp.pext2 == 'L' {
		index = [16]int{3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15}
	}
	upper := sp.pext2 == 'B' || sp.pext2 == 'L'
	for i := range 16 {
		h := len(dst)
		dst = appendHex2(dst, b[index[i]])
		if upper {
			for k := h; k < len(dst); k++ {
				if dst[k] >= 'a' {
					dst[k] -= 'a' - 'A'
				}
			}
		}
		if i == 3 || i == 5 || i == 7 || i == 9 {
			dst = append(dst, '-')
		}
	}
	return dst
}

// appendStr is printf's %s with width, '-' and precision.
func appendStr[T string | []byte](dst []byte, sp *spec, s T) []byte {
	if sp.prec >= 0 && len(s) > sp.prec {
		s = s[:sp.prec]
	}
	pad := sp.width - len(s)
	if !sp.minus {
		dst = appendRepeat(dst, ' ', pad)
	}
	dst = append(dst, s...)
	if sp.minus {
		dst = appendRepeat(dst, ' ', pad)
	}
	return dst
}

func appendRepeat(dst []byte, c byte, n int) []byte {
	for ; n > 0; n-- {
		dst = append(dst, c)
	}
	return dst
}

// appendInt is C printf for the integer conversions d i u x X o c, with
// the argument converted by the length modifier as libtraceevent's
// print_arg_number does ((char), (short), (int), (long), (long long)).
func appendInt(dst []byte, sp *spec, v uint64) []byte {
	bits := 32
	switch sp.ls {
	case -2:
		bits = 8
	case -1:
		bits = 16
	case 1, 2:
		bits = 64
	}
	if bits < 64 {
		v &= 1<<bits - 1
	}
	if sp.verb == 'c' {
		c := [1]byte{byte(v)}
		return appendStr(dst, &spec{width: sp.width, minus: sp.minus, prec: -1}, c[:])
	}
	neg := false
	if sp.verb == 'd' || sp.verb == 'i' {
		// Sign-extend from the converted width.
		sv := int64(v<<(64-bits)) >> (64 - bits)
		if sv < 0 {
			neg, v = true, uint64(-sv)
		}
	}
	base := 10
	switch sp.verb {
	case 'x', 'X':
		base = 16
	case 'o':
		base = 8
	}
	var digits [24]byte
	d := strconv.AppendUint(digits[:0], v, base)
	if sp.verb == 'X' {
		for i, c := range d {
			if c >= 'a' && c <= 'f' {
				d[i] = c - 'a' + 'A'
			}
		}
	}
	if sp.prec == 0 && v == 0 {
		d = d[:0]
	}
	zeros := 0
	if sp.prec > len(d) {
		zeros = sp.prec - len(d)
	}
	var pbuf [3]byte
	prefix := pbuf[:0]
	switch {
	case neg:
		prefix = append(prefix, '-')
	case sp.plus && (sp.verb == 'd' || sp.verb == 'i'):
		prefix = append(prefix, '+')
	case sp.space && (sp.verb == 'd' || sp.verb == 'i'):
		prefix = append(prefix, ' ')
	}
	if sp.hash && v != 0 {
		switch sp.verb {
		case 'x':
			prefix = append(prefix, '0', 'x')
		case 'X':
			prefix = append(prefix, '0', 'X')
		case 'o':
			if zeros == 0 {
				zeros = 1
			}
		}
	}
	n := len(prefix) + zeros + len(d)
	pad := sp.width - n
	if sp.zero && !sp.minus && sp.prec < 0 {
		zeros += max(pad, 0)
		pad = 0
	}
	if !sp.minus {
		dst = appendRepeat(dst, ' ', pad)
	}
	dst = append(dst, prefix...)
	dst = appendRepeat(dst, '0', zeros)
	dst = append(dst, d...)
	if sp.minus {
		dst = appendRepeat(dst, ' ', pad)
	}
	return dst
}
