package report

import (
	"bufio"
	"io"
	"sort"
	"strconv"
	"strings"
)

// Folder collects samples as collapsed stacks: one line per distinct stack,
// "comm;outermost;...;innermost count", the input format of FlameGraph's
// flamegraph.pl and of speedscope. Kernel frames get the "_[k]" suffix and
// inlined ones "_[i]", as stackcollapse-perf.pl writes them.
type Folder struct {
	counts map[string]uint64
	parts  []string
	names  *names
}

// NewFolder returns an empty Folder; names are demangled as perf prints
// them unless raw is set.
func NewFolder(raw bool) *Folder { return &Folder{counts: map[string]uint64{}, names: newNames(raw)} }

// Add counts one sample.
func (f *Folder) Add(s *Sample) {
	f.parts = append(f.parts[:0], s.Comm)
	for i := len(s.Frames) - 1; i >= 0; i-- {
		fr := &s.Frames[i]
		name := f.names.Frame(fr) + kindSuffix(fr)
		f.parts = append(f.parts, strings.ReplaceAll(name, ";", ":"))
	}
	f.counts[strings.Join(f.parts, ";")]++
}

// WriteTo prints the stacks sorted, as flamegraph.pl expects.
func (f *Folder) WriteTo(w io.Writer) (int64, error) {
	keys := make([]string, 0, len(f.counts))
	for k := range f.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	bw := bufio.NewWriter(w)
	var n int64
	for _, k := range keys {
		m, _ := bw.WriteString(k + " " + strconv.FormatUint(f.counts[k], 10) + "\n")
		n += int64(m)
	}
	return n, bw.Flush()
}

// kindSuffix is the annotation stackcollapse-perf.pl gives a frame's name:
// "_[k]" for kernel frames, "_[i]" for inlined ones.
func kindSuffix(fr *Frame) string {
	switch {
	case fr.Kernel:
		return "_[k]"
	case fr.Inlined:
		return "_[i]"
	}
	return ""
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}
