package tracefmt

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// exercise formats records with every parsed format: nothing may panic or
// read outside raw.
func exercise(f *Format, raw []byte) {
	f.Append(nil, raw)
	for _, v := range f.Fields(raw) {
		_ = v
	}
}

func FuzzParse(f *testing.F) {
	td := committedTracingData(f)
	f.Add(td)
	f.Add(td[:len(td)/3])
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, _ := Parse(data)
		if ev == nil {
			return
		}
		for _, fm := range ev.Formats {
			exercise(fm, data[:min(len(data), 96)])
		}
	})
}

func FuzzFormat(f *testing.F) {
	ev, err := Parse(committedTracingData(f))
	if err != nil {
		f.Fatal(err)
	}
	raw := testRaw()
	for _, fm := range ev.Formats {
		// The event's own format file, from the tracing data.
		f.Add(formatText(fm), raw)
	}
	for _, pf := range []string{
		`"%d %s %s %08lx %s %p", REC->neg, REC->comm, __get_str(name), REC->big, __print_flags(3, "|", {1, "A"}, {2, "B"}), REC->big`,
		`"%*d %.*s %pU %pS", 4, REC->neg, 2, REC->comm, REC->comm, REC->big`,
		`"%s", REC->neg ? __print_symbolic(REC->arr[2], {1, "a"}, {2, "b"}) : "z"`,
	} {
		f.Add([]byte(testFormat+pf+"\n"), raw)
	}
	f.Fuzz(func(t *testing.T, text, raw []byte) {
		fm, err := parseFormat("fuzz", text, &Events{LongSize: 8, printk: map[uint64]string{}})
		if err != nil {
			return
		}
		exercise(fm, raw)
	})
}

// formatText writes a Format back as a format file (a fuzz seed).
func formatText(fm *Format) []byte {
	b := []byte("name: " + fm.Name + "\nID: 1\nformat:\n")
	for _, fd := range append(append([]Field(nil), fm.Common...), fm.Own...) {
		decl := fd.Type + " " + fd.Name
		if fd.ArrayLen > 0 {
			decl = strings.TrimSuffix(fd.Type, "[]") + " " + fd.Name + "[" + strconv.Itoa(fd.ArrayLen) + "]"
		}
		b = fmt.Appendf(b, "\tfield:%s;\toffset:%d;\tsize:%d;\tsigned:%d;\n", decl, fd.Offset, fd.Size, b2u(fd.Signed))
	}
	return append(b, "\nprint fmt: "+fm.PrintFmt+"\n"...)
}
