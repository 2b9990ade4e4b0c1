package tracefmt

import (
	"iter"
	"strings"
)

// Fields returns the record's own fields (not the common_* ones) by name,
// in format order, for structured output (JSON's "fields" object): signed
// integers as int64, unsigned ones and pointers as uint64, char arrays and
// __data_loc strings as string (up to the first NUL), other arrays as
// []int64 or []uint64 of their elements. raw is the sample's
// PERF_SAMPLE_RAW data; a field past its end reads as zero or empty.
func (f *Format) Fields(raw []byte) iter.Seq2[string, any] {
	return func(yield func(string, any) bool) {
		for i := range f.Own {
			if !yield(f.Own[i].Name, fieldValue(&f.Own[i], raw)) {
				return
			}
		}
	}
}

func fieldValue(fd *Field, raw []byte) any {
	if fd.String {
		return string(cstr(fieldBytes(fd, raw)))
	}
	if fd.Array {
		b := fieldBytes(fd, raw)
		es := fd.ElemSize
		if fd.Dynamic || es <= 0 || es > 8 || es&(es-1) != 0 {
			es = elemSize(fd.Type)
		}
		n := len(b) / es
		if fd.Signed {
			out := make([]int64, n)
			for i := range out {
				out[i] = signExtend(readNum(b, i*es, es), es)
			}
			return out
		}
		out := make([]uint64, n)
		for i := range out {
			out[i] = readNum(b, i*es, es)
		}
		return out
	}
	v := readField(fd, raw)
	if fd.Signed && !fd.Pointer {
		return signExtend(v, fd.Size)
	}
	return v
}

func signExtend(v uint64, size int) int64 {
	if size <= 0 || size >= 8 {
		return int64(v)
	}
	s := 64 - 8*uint(size)
	return int64(v<<s) >> s
}

// elemSize guesses a dynamic array's element size from its C type.
func elemSize(typ string) int {
	t := strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(typ, "__data_loc "), "__rel_loc ")), "[]")
	switch {
	case strings.Contains(t, "64") || strings.Contains(t, "long") || strings.Contains(t, "*"):
		return 8
	case strings.Contains(t, "32") || strings.Contains(t, "int"):
		return 4
	case strings.Contains(t, "16") || strings.Contains(t, "short"):
		return 2
	}
	return 1
}
