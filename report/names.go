package report

import (
	"strings"
	"unsafe"

	"github.com/ustack/ustack/elfcache"
)

// names demangles symbol names for one writer, remembering the results (a
// report prints the same few thousand functions over and over). Not safe
// for concurrent use.
type names struct {
	short   map[string]string
	unnamed map[string]string // module path -> "[base name]"
	raw     bool
	// recent holds the names asked last, direct-mapped by where their
	// bytes lie: a frame's name is a string of its object's symbol or
	// debug tables, the same bytes each time the frame comes again, and
	// comparing a string with itself is a pointer comparison, where
	// the map hashes every byte of a long C++ name (1.6% of a large
	// report's CPU). An entry whose bytes were let go and reused for
	// another name compares its bytes and misses.
	recent *[recentNames]shortName
}

type shortName struct{ name, short string }

const (
	recentBits  = 10
	recentNames = 1 << recentBits
)

func newNames(raw bool) *names {
	return &names{short: map[string]string{}, unnamed: map[string]string{}, raw: raw}
}

// Short returns the name as perf prints it: demangled without parameter
// lists, so that C++ clones (.cold, .isra) read as their parent function.
func (n *names) Short(s string) string {
	if n.raw || !isMangled(s) {
		return s
	}
	if n.recent == nil {
		n.recent = new([recentNames]shortName)
	}
	e := &n.recent[uint64(uintptr(unsafe.Pointer(unsafe.StringData(s))))*0x9e3779b97f4a7c15>>(64-recentBits)]
	if e.name == s {
		return e.short
	}
	d, ok := n.short[s]
	if !ok {
		d = elfcache.DemangleShort(s)
		n.short[s] = d
	}
	*e = shortName{s, d}
	return d
}

// Frame returns the name a frame goes by in folded stacks and the pictures
// made from them (flame graph, speedscope): the short demangled symbol, or
// "[module]" for an unnamed address in a known object, else "[unknown]".
func (n *names) Frame(fr *Frame) string {
	if name := n.Short(fr.Symbol); name != "" {
		return name
	}
	if fr.Module == "" {
		return "[unknown]"
	}
	name, ok := n.unnamed[fr.Module]
	if !ok {
		name = "[" + baseName(fr.Module) + "]"
		n.unnamed[fr.Module] = name
	}
	return name
}

func isMangled(s string) bool { return strings.HasPrefix(s, "_Z") || strings.HasPrefix(s, "_R") }
