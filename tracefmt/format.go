package tracefmt

import (
	"strconv"
	"strings"
)

// Field is one field of a tracepoint's raw record, as its format file
// describes it.
type Field struct {
	Name string
	// Type is the C type as the format file writes it, without the name
	// and array size ("const char *", "char", "__data_loc char[]").
	Type string
	// Offset and Size locate the field in the raw record. A dynamic field
	// (__data_loc, __rel_loc) holds a u32: the data's offset in the low
	// 16 bits, its length in the high 16.
	Offset, Size int
	Signed       bool
	// ArrayLen is the number of elements of a fixed array (0 otherwise);
	// ElemSize the size of one element (Size for a scalar).
	ArrayLen, ElemSize int
	// Array is set for fixed and dynamic arrays.
	Array bool
	// Dynamic is set for __data_loc fields, Relative for __rel_loc ones
	// (offset counted from the end of the field).
	Dynamic, Relative bool
	// String is set for char (or u8) arrays: printed as C strings.
	String bool
	// Pointer is set when the type is a pointer; Long when it is a C long.
	Pointer, Long bool
}

// Format is one tracepoint's format file: its id, fields and print format.
type Format struct {
	System, Name string
	// ID is the tracepoint id: a tracepoint attr's config and the
	// common_type of each raw record.
	ID uint64
	// Common are the common_* fields every record starts with; Own the
	// event's own fields, the ones perf script prints.
	Common, Own []Field
	// PrintFmt is the print fmt line as written: the quoted format, then
	// the arguments.
	PrintFmt string
	// PrintErr says why the print fmt could not be interpreted (a construct
	// this package does not evaluate); then Append prints the fields as
	// name=value pairs instead. Nil when the print fmt is understood.
	PrintErr error

	events *Events
	parts  []part
}

// FullName returns "system:name", as perf names the event.
func (f *Format) FullName() string { return f.System + ":" + f.Name }

// Field returns the field (own or common) with the given name, or nil.
func (f *Format) Field(name string) *Field {
	for i := range f.Own {
		if f.Own[i].Name == name {
			return &f.Own[i]
		}
	}
	for i := range f.Common {
		if f.Common[i].Name == name {
			return &f.Common[i]
		}
	}
	return nil
}

// parseFormat parses one format file. Offsets in errors are relative to
// the file's start.
func parseFormat(system string, b []byte, ev *Events) (*Format, error) {
	f := &Format{System: system, events: ev}
	text := string(b)
	off := 0
	inFormat := false
	sawFmt := false
	for len(text) > 0 {
		line, rest, _ := strings.Cut(text, "\n")
		lineOff := off
		off += len(line) + 1
		text = rest
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(t, "name:") && !inFormat:
			f.Name = strings.TrimSpace(t[5:])
		case strings.HasPrefix(t, "ID:") && !inFormat:
			id, err := strconv.ParseUint(strings.TrimSpace(t[3:]), 10, 64)
			if err != nil {
				return nil, f.errAt(lineOff, "bad ID line %q", t)
			}
			f.ID = id
		case t == "format:":
			inFormat = true
		case strings.HasPrefix(t, "field:") && inFormat:
			fd, err := parseField(t)
			if err != nil {
				return nil, f.errAt(lineOff, "%v", err)
			}
			if fd.Offset+fd.Size > 1<<16 {
				return nil, f.errAt(lineOff, "field %s [%d, +%d) lies past any raw record", fd.Name, fd.Offset, fd.Size)
			}
			if strings.HasPrefix(fd.Name, "common_") && len(f.Own) == 0 {
				f.Common = append(f.Common, fd)
			} else {
				f.Own = append(f.Own, fd)
			}
		case strings.HasPrefix(t, "print fmt:"):
			f.PrintFmt = strings.TrimSpace(t[len("print fmt:"):])
			// The print fmt is the rest of the file (it never spans lines
			// in practice, but take what follows up to the end).
			if r := strings.TrimRight(text, "\n"); r != "" {
				f.PrintFmt += "\n" + r
			}
			text = ""
			sawFmt = true
		case t == "":
		default:
			if !inFormat {
				return nil, f.errAt(lineOff, "unexpected line %q", t)
			}
			return nil, f.errAt(lineOff, "unexpected line %q in the field list", t)
		}
	}
	if f.Name == "" {
		return nil, f.errAt(0, "format file has no name line")
	}
	if !inFormat {
		return nil, f.errAt(0, "format file has no format section")
	}
	if !sawFmt {
		f.PrintErr = f.errAt(0, "format file has no print fmt")
		return f, nil
	}
	parts, err := compilePrintFmt(f)
	if err != nil {
		f.PrintErr = f.errAt(0, "print fmt: %v", err)
	} else {
		f.parts = parts
	}
	return f, nil
}

func (f *Format) errAt(off int, format string, args ...any) error {
	e := errAt(off, format, args...).(*Error)
	if f.Name != "" {
		e.Event = f.FullName()
	}
	return e
}

// parseField parses "field:TYPE NAME[N];\toffset:N;\tsize:N;\tsigned:N;".
func parseField(line string) (Field, error) {
	var fd Field
	parts := strings.Split(line, ";")
	if len(parts) < 3 {
		return fd, errf("bad field line %q", line)
	}
	decl := strings.TrimSpace(strings.TrimPrefix(parts[0], "field:"))
	haveOff, haveSize := false, false
	for _, kv := range parts[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), ":")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return fd, errf("bad %s in field line %q", k, line)
		}
		switch k {
		case "offset":
			fd.Offset, haveOff = n, true
		case "size":
			fd.Size, haveSize = n, true
		case "signed":
			fd.Signed = n != 0
		}
	}
	if !haveOff || !haveSize {
		return fd, errf("field line %q lacks offset or size", line)
	}
	// The name is the last identifier of the declaration, before any [N].
	arr := ""
	if strings.HasSuffix(decl, "]") {
		if i := strings.LastIndexByte(decl, '['); i >= 0 {
			arr = decl[i:]
			decl = strings.TrimSpace(decl[:i])
		}
	}
	i := strings.LastIndexFunc(decl, func(r rune) bool { return !isIdent(byte(r)) })
	fd.Name = decl[i+1:]
	fd.Type = strings.TrimSpace(decl[:i+1])
	if fd.Name == "" || fd.Type == "" {
		return fd, errf("field declaration %q has no type or name", decl)
	}
	fd.ElemSize = fd.Size
	if arr != "" || strings.HasSuffix(fd.Type, "]") {
		fd.Array = true
	}
	if arr != "" {
		fd.Type += "[]"
		n := strings.TrimSuffix(strings.TrimPrefix(arr, "["), "]")
		if l, err := strconv.Atoi(n); err == nil && l > 0 {
			fd.ArrayLen = l
			fd.ElemSize = fd.Size / l
		}
	}
	if strings.HasPrefix(fd.Type, "__data_loc") {
		fd.Dynamic, fd.Array = true, true
	}
	if strings.HasPrefix(fd.Type, "__rel_loc") {
		fd.Dynamic, fd.Relative, fd.Array = true, true, true
	}
	if fd.Array && (strings.Contains(fd.Type, "char") || strings.Contains(fd.Type, "u8")) {
		fd.String = true
	}
	fd.Pointer = strings.Contains(fd.Type, "*")
	base := strings.TrimSpace(strings.TrimPrefix(fd.Type, "const "))
	fd.Long = base == "long" || base == "unsigned long"
	if fd.Dynamic && fd.Size != 4 && fd.Size != 2 {
		return fd, errf("dynamic field %s has size %d, want 4", fd.Name, fd.Size)
	}
	return fd, nil
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
