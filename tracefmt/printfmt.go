package tracefmt

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The print fmt line is `"format", arg, arg, ...`: a C format string and C
// expressions over the record (REC->field) and a few kernel helpers. It is
// compiled once into parts: literal text, and conversions each bound to
// one argument expression.

func errf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// spec is one printf conversion: %[flags][width][.prec][length]verb.
type spec struct {
	minus, plus, space, hash, zero bool
	width, prec                    int // -1: none
	starWidth, starPrec            bool
	ls                             int // length: -2 hh, -1 h, 0, 1 l/z, 2 ll/L
	verb                           byte
	// pext is the %p extension letter ('S', 'F', 's', 'f', 'U'), 0 for
	// plain %p; pext2 the %pU variant (b, B, l, L).
	pext, pext2 byte
}

// part is literal text or one conversion with its argument (and the '*'
// width argument).
type part struct {
	text  string
	conv  *spec
	arg   node
	width node
}

// node is a compiled argument expression.
type node interface{}

type (
	numLit struct{ v uint64 }
	// atom is an identifier the kernel left in the print fmt (an enum
	// constant): libtraceevent evaluates it to 0 (it is no function it
	// knows) and prints its name for %s.
	atom    struct{ name string }
	strLit  struct{ s string }
	fieldRf struct{ f *Field }
	indexOf struct {
		f   *Field
		idx node
	}
	castTo struct {
		mask    uint64 // 0: no masking
		pointer bool
		x       node
	}
	unary struct {
		op string
		x  node
	}
	binOp struct {
		op   string
		l, r node
	}
	ternary     struct{ c, a, b node }
	symbolEntry struct {
		v   uint64
		neg bool // value did not evaluate (libtraceevent's -1)
		s   string
	}
	printFlags struct {
		x     node
		delim string
		syms  []symbolEntry
	}
	printSymbolic struct {
		x    node
		syms []symbolEntry
	}
	getStr struct{ f *Field }
	dynLen struct{ f *Field }
)

// compilePrintFmt parses the Format's print fmt.
func compilePrintFmt(f *Format) ([]part, error) {
	lx := &lexer{s: f.PrintFmt}
	toks, err := lx.all()
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks, f: f}
	if p.peek().kind != tString {
		return nil, errors.New("does not start with a quoted format")
	}
	format := ""
	for p.peek().kind == tString {
		format += p.next().text
	}
	var args []node
	for p.peek().kind != tEOF {
		if !p.accept(",") {
			return nil, fmt.Errorf("expected ',' before %q", p.peek().text)
		}
		a, err := p.expr()
		if err != nil {
			return nil, err
		}
		args = append(args, a)
	}
	return splitFormat(format, args)
}

// splitFormat cuts the format string into parts, binding each conversion
// to the next argument, as libtraceevent does.
func splitFormat(format string, args []node) ([]part, error) {
	parts := []part{} // non-nil: an empty format prints nothing
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			parts = append(parts, part{text: lit.String()})
			lit.Reset()
		}
	}
	takeArg := func() (node, error) {
		if len(args) == 0 {
			return nil, errors.New("more conversions than arguments")
		}
		a := args[0]
		args = args[1:]
		return a, nil
	}
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			lit.WriteByte(c)
			continue
		}
		if i+1 < len(format) && format[i+1] == '%' {
			lit.WriteByte('%')
			i++
			continue
		}
		sp := &spec{width: -1, prec: -1}
		j := i + 1
	flags:
		for ; j < len(format); j++ {
			switch format[j] {
			case '-':
				sp.minus = true
			case '+':
				sp.plus = true
			case ' ':
				sp.space = true
			case '#':
				sp.hash = true
			case '0':
				sp.zero = true
			default:
				break flags
			}
		}
		if j < len(format) && format[j] == '*' {
			sp.starWidth = true
			j++
		}
		for ; j < len(format) && format[j] >= '0' && format[j] <= '9'; j++ {
			sp.width = max(sp.width, 0)*10 + int(format[j]-'0')
			if sp.width > 1<<12 {
				return nil, errors.New("absurd field width")
			}
		}
		if j < len(format) && format[j] == '.' {
			j++
			sp.prec = 0
			if j < len(format) && format[j] == '*' {
				if sp.starWidth || sp.starPrec {
					return nil, errors.New("two '*' in one conversion")
				}
				sp.starPrec = true
				j++
			}
			for ; j < len(format) && format[j] >= '0' && format[j] <= '9'; j++ {
				sp.prec = sp.prec*10 + int(format[j]-'0')
				if sp.prec > 1<<12 {
					return nil, errors.New("absurd precision")
				}
			}
		}
	length:
		for ; j < len(format); j++ {
			switch format[j] {
			case 'h':
				sp.ls--
			case 'l':
				sp.ls++
			case 'L':
				sp.ls = 2
			case 'z', 'Z':
				sp.ls = 1
			default:
				break length
			}
		}
		if j >= len(format) {
			return nil, fmt.Errorf("format ends inside a conversion %q", format[i:])
		}
		sp.verb = format[j]
		switch sp.verb {
		case 'd', 'i', 'u', 'x', 'X', 'o', 'c', 's':
		case 'p':
			if j+1 < len(format) && isIdent(format[j+1]) {
				switch format[j+1] {
				case 'S', 'F', 's', 'f':
					sp.pext = format[j+1]
					j++
				case 'U':
					sp.pext = 'U'
					j++
					if j+1 < len(format) && strings.IndexByte("bBlL", format[j+1]) >= 0 {
						sp.pext2 = format[j+1]
						j++
					}
				default:
					return nil, fmt.Errorf("pointer conversion %%p%c is not supported", format[j+1])
				}
			}
		default:
			return nil, fmt.Errorf("conversion %%%c is not supported", sp.verb)
		}
		if sp.ls < -2 || sp.ls > 2 {
			return nil, fmt.Errorf("bad length modifier in %q", format[i:j+1])
		}
		flush()
		pt := part{conv: sp}
		var err error
		if sp.starWidth || sp.starPrec {
			if pt.width, err = takeArg(); err != nil {
				return nil, err
			}
		}
		if pt.arg, err = takeArg(); err != nil {
			return nil, err
		}
		parts = append(parts, pt)
		i = j
	}
	flush()
	return parts, nil
}

// Tokens.

type tokKind int

const (
	tEOF tokKind = iota
	tString
	tChar
	tNum
	tIdent
	tOp
)

type token struct {
	kind tokKind
	text string
	num  uint64
}

type lexer struct {
	s string
	p int
}

var ops3 = []string{"<<=", ">>="}
var ops2 = []string{"->", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||"}

func (l *lexer) all() ([]token, error) {
	var toks []token
	for {
		t, err := l.next()
		if err != nil {
			return nil, err
		}
		toks = append(toks, t)
		if t.kind == tEOF {
			return toks, nil
		}
		if len(toks) > 1<<16 {
			return nil, errors.New("print fmt has too many tokens")
		}
	}
}

func (l *lexer) next() (token, error) {
	for l.p < len(l.s) && (l.s[l.p] == ' ' || l.s[l.p] == '\t' || l.s[l.p] == '\n' || l.s[l.p] == '\r') {
		l.p++
	}
	if l.p >= len(l.s) {
		return token{kind: tEOF}, nil
	}
	c := l.s[l.p]
	switch {
	case c == '"' || c == '\'':
		s, err := l.quoted(c)
		if err != nil {
			return token{}, err
		}
		if c == '\'' {
			if len(s) != 1 {
				return token{}, fmt.Errorf("character literal '%s'", s)
			}
			return token{kind: tChar, text: s, num: uint64(s[0])}, nil
		}
		return token{kind: tString, text: s}, nil
	case c >= '0' && c <= '9':
		start := l.p
		for l.p < len(l.s) && (isIdent(l.s[l.p])) {
			l.p++
		}
		lit := strings.TrimRight(l.s[start:l.p], "uUlL")
		v, err := strconv.ParseUint(lit, 0, 64)
		if err != nil {
			return token{}, fmt.Errorf("bad number %q", l.s[start:l.p])
		}
		return token{kind: tNum, text: l.s[start:l.p], num: v}, nil
	case isIdent(c):
		start := l.p
		for l.p < len(l.s) && isIdent(l.s[l.p]) {
			l.p++
		}
		return token{kind: tIdent, text: l.s[start:l.p]}, nil
	}
	for _, group := range [][]string{ops3, ops2} {
		for _, op := range group {
			if strings.HasPrefix(l.s[l.p:], op) {
				l.p += len(op)
				return token{kind: tOp, text: op}, nil
			}
		}
	}
	if strings.IndexByte("()[]{},?:+-*/%<>&|^!~.", c) >= 0 {
		l.p++
		return token{kind: tOp, text: string(c)}, nil
	}
	return token{}, fmt.Errorf("unexpected character %q", c)
}

// quoted reads a C string or character literal, decoding escapes as
// libtraceevent does (\n \t \r \\ and any other char as itself).
func (l *lexer) quoted(q byte) (string, error) {
	var b strings.Builder
	l.p++
	for l.p < len(l.s) {
		c := l.s[l.p]
		l.p++
		switch c {
		case q:
			return b.String(), nil
		case '\\':
			if l.p >= len(l.s) {
				return "", errors.New("string ends in a backslash")
			}
			e := l.s[l.p]
			l.p++
			switch e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			default:
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("unterminated string")
}

// parser is a precedence-climbing parser of the C expressions of print
// fmt arguments.
type parser struct {
	toks  []token
	p     int
	f     *Format
	depth int
}

func (p *parser) peek() token { return p.toks[p.p] }
func (p *parser) peekAt(i int) token {
	if p.p+i < len(p.toks) {
		return p.toks[p.p+i]
	}
	return token{kind: tEOF}
}
func (p *parser) next() token {
	t := p.toks[p.p]
	if t.kind != tEOF {
		p.p++
	}
	return t
}
func (p *parser) accept(op string) bool {
	if t := p.peek(); t.kind == tOp && t.text == op {
		p.p++
		return true
	}
	return false
}
func (p *parser) expect(op string) error {
	if !p.accept(op) {
		return fmt.Errorf("expected %q, found %q", op, p.peek().text)
	}
	return nil
}

// Binary operator precedence, C's (higher binds tighter).
var precedence = map[string]int{
	"||": 1, "&&": 2, "|": 3, "^": 4, "&": 5,
	"==": 6, "!=": 6, "<": 7, ">": 7, "<=": 7, ">=": 7,
	"<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10,
}

func (p *parser) expr() (node, error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > 200 {
		return nil, errors.New("expression nested too deeply")
	}
	c, err := p.binary(1)
	if err != nil {
		return nil, err
	}
	if p.accept("?") {
		a, err := p.expr()
		if err != nil {
			return nil, err
		}
		if err := p.expect(":"); err != nil {
			return nil, err
		}
		b, err := p.expr()
		if err != nil {
			return nil, err
		}
		return ternary{c, a, b}, nil
	}
	return c, nil
}

func (p *parser) binary(minPrec int) (node, error) {
	l, err := p.unary()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		prec, ok := precedence[t.text]
		if t.kind != tOp || !ok || prec < minPrec {
			return l, nil
		}
		p.next()
		r, err := p.binary(prec + 1)
		if err != nil {
			return nil, err
		}
		l = binOp{t.text, l, r}
	}
}

func (p *parser) unary() (node, error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > 200 {
		return nil, errors.New("expression nested too deeply")
	}
	t := p.peek()
	if t.kind == tOp {
		switch t.text {
		case "-", "~", "!", "+":
			p.next()
			x, err := p.unary()
			if err != nil {
				return nil, err
			}
			if t.text == "+" {
				return x, nil
			}
			return unary{t.text, x}, nil
		case "(":
			if c, ok := p.castType(); ok {
				x, err := p.unary()
				if err != nil {
					return nil, err
				}
				return castNode(c, x), nil
			}
		}
	}
	return p.postfix()
}

// castType recognizes "(type)" where type is identifiers and '*'s only,
// followed by something an operand can start with.
func (p *parser) castType() (string, bool) {
	i := 1
	var words []string
	for {
		t := p.peekAt(i)
		if t.kind == tIdent || t.kind == tOp && t.text == "*" {
			words = append(words, t.text)
			i++
			continue
		}
		if t.kind == tOp && t.text == ")" && len(words) > 0 && words[0] != "REC" {
			break
		}
		return "", false
	}
	after := p.peekAt(i + 1)
	switch after.kind {
	case tIdent, tNum, tString, tChar:
	case tOp:
		if after.text != "(" && after.text != "-" && after.text != "~" && after.text != "!" {
			return "", false
		}
	default:
		return "", false
	}
	p.p += i + 1
	return strings.Join(words, " "), true
}

// castNode applies libtraceevent's eval_type: casts to 8/16/32-bit types
// mask the value; pointers and 64-bit types keep it.
func castNode(typ string, x node) node {
	c := castTo{x: x, pointer: strings.Contains(typ, "*")}
	t := strings.TrimSpace(strings.TrimPrefix(typ, "const "))
	t = strings.TrimPrefix(t, "unsigned ")
	t = strings.TrimPrefix(t, "signed ")
	switch t {
	case "u8", "s8", "char", "unsigned char", "signed char":
		c.mask = 0xff
	case "u16", "s16", "short":
		c.mask = 0xffff
	case "u32", "s32", "int", "unsigned", "signed":
		c.mask = 0xffffffff
	}
	if c.pointer {
		c.mask = 0
	}
	return c
}

func (p *parser) postfix() (node, error) {
	x, err := p.primary()
	if err != nil {
		return nil, err
	}
	for p.accept("[") {
		idx, err := p.expr()
		if err != nil {
			return nil, err
		}
		if err := p.expect("]"); err != nil {
			return nil, err
		}
		fr, ok := x.(fieldRf)
		if !ok || !fr.f.Array || fr.f.Dynamic {
			return nil, errors.New("indexing of something other than a fixed array field")
		}
		x = indexOf{fr.f, idx}
	}
	return x, nil
}

func (p *parser) primary() (node, error) {
	t := p.next()
	switch t.kind {
	case tNum, tChar:
		return numLit{t.num}, nil
	case tString:
		s := t.text
		for p.peek().kind == tString {
			s += p.next().text
		}
		return strLit{s}, nil
	case tOp:
		if t.text == "(" {
			// (REC)->field, as some print fmts write it.
			if r, c, a := p.peekAt(0), p.peekAt(1), p.peekAt(2); r.text == "REC" && c.text == ")" && a.text == "->" {
				p.p += 3
				return p.fieldRef()
			}
			x, err := p.expr()
			if err != nil {
				return nil, err
			}
			return x, p.expect(")")
		}
	case tIdent:
		if t.text == "REC" {
			if err := p.expect("->"); err != nil {
				return nil, err
			}
			return p.fieldRef()
		}
		if p.peek().kind == tOp && p.peek().text == "(" {
			return p.call(t.text)
		}
		return atom{t.text}, nil
	case tEOF:
		return nil, errors.New("print fmt ends inside an expression")
	}
	return nil, fmt.Errorf("unexpected %q", t.text)
}

func (p *parser) fieldRef() (node, error) {
	name := p.next()
	if name.kind != tIdent {
		return nil, fmt.Errorf("REC-> followed by %q", name.text)
	}
	f := p.f.Field(name.text)
	if f == nil {
		return nil, fmt.Errorf("REC->%s: no such field", name.text)
	}
	return fieldRf{f}, nil
}

// fieldArg parses the single field argument of __get_str(field) and the
// like: a bare name, or REC->name.
func (p *parser) fieldArg(fn string) (*Field, error) {
	if err := p.expect("("); err != nil {
		return nil, err
	}
	t := p.next()
	if t.kind == tIdent && t.text == "REC" && p.accept("->") {
		t = p.next()
	}
	if t.kind != tIdent {
		return nil, fmt.Errorf("%s of %q", fn, t.text)
	}
	f := p.f.Field(t.text)
	if f == nil {
		return nil, fmt.Errorf("%s(%s): no such field", fn, t.text)
	}
	if !f.Dynamic {
		return nil, fmt.Errorf("%s(%s): not a dynamic field", fn, t.text)
	}
	return f, p.expect(")")
}

func (p *parser) call(fn string) (node, error) {
	switch fn {
	case "__get_str", "__get_rel_str":
		f, err := p.fieldArg(fn)
		return getStr{f}, err
	case "__get_dynamic_array_len", "__get_rel_dynamic_array_len":
		f, err := p.fieldArg(fn)
		return dynLen{f}, err
	case "__print_flags", "__print_flags_u64", "__print_symbolic", "__print_symbolic_u64":
		if err := p.expect("("); err != nil {
			return nil, err
		}
		x, err := p.expr()
		if err != nil {
			return nil, err
		}
		flags := strings.HasPrefix(fn, "__print_flags")
		delim := ""
		if err := p.expect(","); err != nil {
			return nil, err
		}
		if flags {
			d := p.next()
			if d.kind != tString {
				return nil, fmt.Errorf("%s: delimiter %q is not a string", fn, d.text)
			}
			delim = d.text
			if err := p.expect(","); err != nil {
				return nil, err
			}
		}
		syms, err := p.symbols(fn)
		if err != nil {
			return nil, err
		}
		if flags {
			return printFlags{x, delim, syms}, nil
		}
		return printSymbolic{x, syms}, nil
	}
	return nil, fmt.Errorf("function %s() is not supported", fn)
}

// symbols parses "{ value, "name" }, ..." up to the closing ')'.
func (p *parser) symbols(fn string) ([]symbolEntry, error) {
	var syms []symbolEntry
	for {
		if p.accept(")") {
			return syms, nil
		}
		if err := p.expect("{"); err != nil {
			return nil, err
		}
		v, err := p.expr()
		if err != nil {
			return nil, err
		}
		e := symbolEntry{}
		if a, ok := v.(atom); ok {
			e.v, e.neg = knownFlag(a.name)
		} else if n, ok := constValue(v); ok {
			e.v = n
		} else {
			e.neg = true
		}
		if err := p.expect(","); err != nil {
			return nil, err
		}
		if p.peek().kind == tString {
			for p.peek().kind == tString {
				e.s += p.next().text
			}
		} else {
			// { 0, NULL } ends some tables: libtraceevent keeps the
			// constant's value as the name.
			nv, err := p.expr()
			if err != nil {
				return nil, err
			}
			c, ok := constValue(nv)
			if !ok {
				return nil, fmt.Errorf("%s: symbol name is not a string", fn)
			}
			e.s = strconv.FormatUint(c, 10)
		}
		if err := p.expect("}"); err != nil {
			return nil, err
		}
		syms = append(syms, e)
		if len(syms) > 1<<12 {
			return nil, errors.New("too many symbols")
		}
		if !p.accept(",") {
			if err := p.expect(")"); err != nil {
				return nil, err
			}
			return syms, nil
		}
	}
}

// knownFlag is libtraceevent's eval_flag for names: the few it knows,
// else "unknown" (neg).
func knownFlag(name string) (v uint64, neg bool) {
	names := []string{"HI_SOFTIRQ", "TIMER_SOFTIRQ", "NET_TX_SOFTIRQ", "NET_RX_SOFTIRQ", "BLOCK_SOFTIRQ",
		"IRQ_POLL_SOFTIRQ", "TASKLET_SOFTIRQ", "SCHED_SOFTIRQ", "HRTIMER_SOFTIRQ", "RCU_SOFTIRQ"}
	for i, n := range names {
		if n == name {
			return uint64(i), false
		}
	}
	switch name {
	case "HRTIMER_NORESTART":
		return 0, false
	case "HRTIMER_RESTART":
		return 1, false
	}
	return 0, true
}

// constValue evaluates a symbol table value: a constant expression.
func constValue(n node) (uint64, bool) {
	switch x := n.(type) {
	case numLit:
		return x.v, true
	case atom:
		return 0, true
	case unary:
		v, ok := constValue(x.x)
		if !ok {
			return 0, false
		}
		return evalUnary(x.op, v), true
	case binOp:
		l, ok1 := constValue(x.l)
		r, ok2 := constValue(x.r)
		if !ok1 || !ok2 {
			return 0, false
		}
		return evalBinary(x.op, l, r), true
	case castTo:
		v, ok := constValue(x.x)
		if !ok {
			return 0, false
		}
		if x.mask != 0 {
			v &= x.mask
		}
		return v, true
	}
	return 0, false
}
