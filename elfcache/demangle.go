package elfcache

import (
	"math/bits"
	"strings"
	"unicode"
	"unicode/utf8"

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
	if s, ok := demangleRustLegacy(name); ok {
		return s
	}
	defer func() {
		if recover() != nil {
			out = name
		}
	}()
	s, err := demangle.ToString(name, demangle.MaxLength(20))
	if err != nil || s == "" || !utf8.ValidString(s) && utf8.ValidString(name) {
		return name
	}
	return s
}

// DemangleShort is Demangle without C++ parameter lists (and so without
// the const of a member function and the [clone .cold] of a part), as perf
// prints names: the clones and parts of a function read as the function.
// Rust names are Demangle's.
func DemangleShort(name string) (out string) {
	if len(name) > maxDemangleInput || !strings.HasPrefix(name, "_Z") && !strings.HasPrefix(name, "_R") {
		return name
	}
	if s, ok := demangleRustLegacy(name); ok {
		return s
	}
	if strings.HasPrefix(name, "_R") {
		return Demangle(name)
	}
	defer func() {
		if recover() != nil {
			out = name
		}
	}()
	s, err := demangle.ToString(name, demangle.NoParams, demangle.MaxLength(20))
	// The demangle package can cut a name inside a character
	// (_Z3A0κ: "A0" and κ's first byte): such a name did not demangle.
	if err != nil || s == "" || !utf8.ValidString(s) && utf8.ValidString(name) {
		return name
	}
	return s
}

// demangleRustLegacy demangles a legacy Rust name (_ZN, length-prefixed
// identifiers, a last element h<16 hex digits>, E) by rustc-demangle's
// rules, which c++filt and gdb follow, and leaves the hash out. A length
// counts every byte of its identifier: __rust_begin_short_backtrace keeps
// both underscores (the Itanium-style reader of the demangle package takes
// one for a separator). Names that are not of this form are not ok.
func demangleRustLegacy(name string) (string, bool) {
	if !strings.HasPrefix(name, "_ZN") || !strings.HasSuffix(name, "E") {
		return "", false
	}
	inner := name[3 : len(name)-1]
	var elems []string
	for len(inner) > 0 {
		n, i := 0, 0
		for ; i < len(inner) && inner[i] >= '0' && inner[i] <= '9'; i++ {
			if n > len(inner) {
				return "", false
			}
			n = n*10 + int(inner[i]-'0')
		}
		if i == 0 || n == 0 || n > len(inner)-i {
			return "", false
		}
		elems = append(elems, inner[i:i+n])
		inner = inner[i+n:]
	}
	if len(elems) < 2 || !isRustHash(elems[len(elems)-1]) {
		return "", false
	}
	var b strings.Builder
	for k, id := range elems[:len(elems)-1] {
		for j := 0; j < len(id); j++ {
			if id[j] >= 0x80 {
				return "", false
			}
		}
		if k > 0 {
			b.WriteString("::")
		}
		b.WriteString(unescapeRustLegacy(id))
	}
	return b.String(), true
}

// isRustHash reports whether id is a legacy Rust name's hash element:
// h and 16 lower-case hex digits, at least 5 of them distinct (as the
// demangle package requires, so that a C++ name ending in such an
// identifier stays C++).
func isRustHash(id string) bool {
	if len(id) != 17 || id[0] != 'h' {
		return false
	}
	var seen uint16
	for _, c := range []byte(id[1:]) {
		switch {
		case c >= '0' && c <= '9':
			seen |= 1 << (c - '0')
		case c >= 'a' && c <= 'f':
			seen |= 1 << (c - 'a' + 10)
		default:
			return false
		}
	}
	return bits.OnesCount16(seen) >= 5
}

// rustLegacyEscapes are the $..$ escapes of legacy Rust identifiers other
// than $uXX$.
var rustLegacyEscapes = map[string]string{
	"SP": "@", "BP": "*", "RF": "&", "LT": "<", "GT": ">", "LP": "(", "RP": ")", "C": ",",
}

// unescapeRustLegacy writes a legacy Rust identifier as rustc-demangle
// does: a leading _ before $ dropped, .. as ::, $SP$ $BP$ $RF$ $LT$ $GT$
// $LP$ $RP$ $C$ and $uXX$ (a printable character in lower-case hex) as
// their characters; an escape it does not know ends the unescaping, the
// rest written as it is.
func unescapeRustLegacy(id string) string {
	if strings.HasPrefix(id, "_$") {
		id = id[1:]
	}
	if !strings.ContainsAny(id, "$.") {
		return id
	}
	var b strings.Builder
	for len(id) > 0 {
		switch {
		case strings.HasPrefix(id, ".."):
			b.WriteString("::")
			id = id[2:]
		case id[0] == '.':
			b.WriteByte('.')
			id = id[1:]
		case id[0] == '$':
			end := strings.IndexByte(id[1:], '$')
			if end < 0 {
				b.WriteString(id)
				return b.String()
			}
			esc := id[1 : 1+end]
			if r, ok := rustLegacyEscapes[esc]; ok {
				b.WriteString(r)
			} else if c, ok := rustLegacyChar(esc); ok {
				b.WriteRune(c)
			} else {
				b.WriteString(id)
				return b.String()
			}
			id = id[end+2:]
		default:
			i := strings.IndexAny(id, "$.")
			if i < 0 {
				i = len(id)
			}
			b.WriteString(id[:i])
			id = id[i:]
		}
	}
	return b.String()
}

// rustLegacyChar decodes a $uXX$ escape's body (u and lower-case hex
// digits) into its character when it is a printable one.
func rustLegacyChar(esc string) (rune, bool) {
	if len(esc) < 2 || len(esc) > 9 || esc[0] != 'u' {
		return 0, false
	}
	var c rune
	for _, d := range []byte(esc[1:]) {
		switch {
		case d >= '0' && d <= '9':
			c = c<<4 | rune(d-'0')
		case d >= 'a' && d <= 'f':
			c = c<<4 | rune(d-'a'+10)
		default:
			return 0, false
		}
	}
	if !utf8.ValidRune(c) || unicode.IsControl(c) {
		return 0, false
	}
	return c, true
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
