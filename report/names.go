package report

import (
	"strings"

	"github.com/ustack/ustack/elfcache"
)

// names demangles symbol names for one writer, remembering the results (a
// report prints the same few thousand functions over and over). Not safe
// for concurrent use.
type names struct {
	short   map[string]string
	unnamed map[string]string // module path -> "[base name]"
	raw     bool
}

func newNames(raw bool) *names {
	return &names{short: map[string]string{}, unnamed: map[string]string{}, raw: raw}
}

// Short returns the name as perf prints it: demangled without parameter
// lists, so that C++ clones (.cold, .isra) read as their parent function.
func (n *names) Short(s string) string {
	if n.raw || !isMangled(s) {
		return s
	}
	if d, ok := n.short[s]; ok {
		return d
	}
	d := elfcache.DemangleShort(s)
	n.short[s] = d
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
