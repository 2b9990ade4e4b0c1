package elfcache

import (
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// maxDemangleInput bounds the names Demangle tries: longer ones are
// returned as they are.
const maxDemangleInput = 1 << 14

// Demangle returns the display name of a symbol as addr2line -C and gdb
// show it: C++ (_Z) names demangled with their parameter lists, legacy Rust
// names (_ZN...17h<hash>E) without the hash, Rust v0 (_R) names without
// disambiguators. Names that are not mangled, or that fail to demangle,
// are returned unchanged. Demangle never panics and keeps no state.
func Demangle(name string) (out string) {
	if len(name) > maxDemangleInput || !strings.HasPrefix(name, "_Z") && !strings.HasPrefix(name, "_R") {
		return name
	}
	defer func() {
		if recover() != nil {
			out = name
		}
	}()
	s, err := demangle.ToString(name, demangle.MaxLength(20))
	if err != nil || s == "" {
		return name
	}
	return s
}

// SymbolizeDemangled is Symbolize with the name passed through Demangle.
// Unlike Symbolize it allocates for mangled names.
func (o *Object) SymbolizeDemangled(addr uint64) (name string, offset uint64, ok bool) {
	name, offset, ok = o.Symbolize(addr)
	if ok {
		name = Demangle(name)
	}
	return name, offset, ok
}
