package unwinder

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
)

// rowsObject serves a row for every 16 bytes of text, whose CFA offset
// depends on the address and on the object's salt, and counts the rows it
// was asked for.
type rowsObject struct {
	salt  int64
	asked int
}

func (o *rowsObject) FindRow(addr uint64, row *cfi.Row) error {
	o.asked++
	start := addr &^ 15
	*row = x86Row(start, start+16, o.cfaOff(addr))
	return nil
}

func (o *rowsObject) ReadCode(uint64, []byte) int { return 0 }

func (o *rowsObject) cfaOff(addr uint64) int64 { return 8 + 8*((int64(addr>>4)+o.salt)%7) }

// valueObject is an Object of a type that cannot be compared or hashed (the
// documentation asks for pointer types; a tracer may still pass such a
// value).
type valueObject struct{ off []int64 }

func (o valueObject) FindRow(addr uint64, row *cfi.Row) error {
	start := addr &^ 15
	*row = x86Row(start, start+16, o.off[0])
	return nil
}

func (o valueObject) ReadCode(uint64, []byte) int { return 0 }

// TestSpillLevel checks the second level of the row cache: it is allocated
// only after many misses of the hot level, answers for the rows the hot
// level evicted (the objects are asked again only for the few rows that
// share a place in it), and never gives one object's row for another's.
func TestSpillLevel(t *testing.T) {
	const n = 5000 // distinct addresses: far more than the hot level holds
	a, b := &rowsObject{salt: 0}, &rowsObject{salt: 3}
	var c Cache
	check := func(pass string, obj *rowsObject, addr uint64) {
		t.Helper()
		e := c.row(arch.AMD64, obj, addr)
		if e.flags&fastOK == 0 || e.cfaOff != obj.cfaOff(addr) {
			t.Fatalf("%s: row at %#x of object %d: flags %#x, CFA offset %d; want %d",
				pass, addr, obj.salt, e.flags, e.cfaOff, obj.cfaOff(addr))
		}
	}
	addr := func(i int) uint64 { return 0x400000 + uint64(i)*16 }
	for i := range 200 {
		check("few", a, addr(i))
	}
	if c.spill != nil {
		t.Fatalf("second level allocated after %d misses", c.misses)
	}
	for pass := range 2 {
		for i := range n {
			check("first", a, addr(i))
		}
		if pass == 0 && c.spill == nil {
			t.Fatalf("no second level after %d misses", c.misses)
		}
	}
	a.asked = 0
	for i := range n {
		check("again", a, addr(i))
	}
	if a.asked > n/4 {
		t.Errorf("the object was asked for %d of %d rows the second level held", a.asked, n)
	}
	// The same addresses in another object: its own rows, every one asked
	// for; then the first object's again, from the cache.
	b.asked = 0
	for i := range n {
		check("other object", b, addr(i))
	}
	if b.asked != n {
		t.Errorf("the other object was asked for %d rows; want %d (none cached)", b.asked, n)
	}
	for i := range n {
		check("interleaved", a, addr(i))
		check("interleaved", b, addr(i))
	}

	// Reset empties both levels.
	c.Reset()
	a.asked = 0
	check("after Reset", a, addr(5))
	if a.asked != 1 {
		t.Errorf("after Reset: the object was asked %d times; want 1", a.asked)
	}

	// An Object that cannot be hashed: every row right, no panic.
	v := valueObject{off: []int64{24}}
	for i := range 2 * spillAfter {
		if e := c.row(arch.AMD64, v, addr(i)); e.flags&fastOK == 0 || e.cfaOff != 24 {
			t.Fatalf("value object: row at %#x: flags %#x, CFA offset %d; want 24", addr(i), e.flags, e.cfaOff)
		}
	}

	// More objects than maxKept: the second level starts afresh rather
	// than keep them all alive, and still answers right.
	for i := range maxKept + 10 {
		o := &rowsObject{salt: int64(i)}
		check("many objects", o, addr(i))
		if len(c.kept) > maxKept {
			t.Fatalf("%d objects kept; at most %d", len(c.kept), maxKept)
		}
	}
}

// TestSpillRowRoundTrip compiles rows of random rules, as CFI gives them,
// for both architectures, packs each into a spillRow and unpacks it over a
// fastRow filled with other bytes: what comes back must be the compiled
// row, every field of it (a field added to fastRow and not to spillRow
// fails here: the second level would hand back rows without it), the rules
// past nrules aside and a rule's source register where only RuleRegister
// reads it. Rows that cannot pack (too many rules, offsets too large) must
// say so and leave the spillRow as it was.
func TestSpillRowRoundTrip(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	kinds := []cfi.RuleKind{cfi.RuleOffset, cfi.RuleOffset, cfi.RuleOffset, cfi.RuleValOffset, cfi.RuleRegister, cfi.RuleUndefined}
	packed, refused, compact := 0, 0, 0
	for iter := range 20000 {
		a := arch.AMD64
		if iter%2 == 1 {
			a = arch.ARM64
		}
		var row cfi.Row
		row.RA = uint16(a.PC())
		if a == arch.ARM64 {
			row.RA = 30
		}
		row.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: uint16(a.SP()), Offset: int64(rnd.IntN(512)) * 8}
		if rnd.IntN(50) == 0 {
			row.CFA.Offset = 1 << 33 // too far for 32 bits
		}
		row.Regs[row.RA] = cfi.Rule{Kind: cfi.RuleOffset, Offset: -8}
		for range rnd.IntN(14) {
			r := rnd.IntN(arch.MaxRegs)
			k := kinds[rnd.IntN(len(kinds))]
			rule := cfi.Rule{Kind: k, Offset: -8 * int64(1+rnd.IntN(64))}
			if rnd.IntN(40) == 0 {
				rule.Offset = -1 << 20 // too far for 16 bits
			}
			if k == cfi.RuleRegister {
				rule.Reg = uint16(rnd.IntN(arch.MaxRegs + 4))
			}
			row.Regs[r] = rule
		}
		row.Signal = rnd.IntN(30) == 0
		var f fastRow
		f.compile(a, &row, explicitRules(&row))

		var s spillRow
		before := spillRow{cfaOff: 77, nrules: 99}
		s = before
		if !s.pack(&f) {
			refused++
			if s != before {
				t.Fatalf("row %d: a refused pack changed the spillRow", iter)
			}
			if f.flags&fastOK == 0 {
				t.Fatalf("row %d: a row without compact form refused", iter)
			}
			if int(f.nrules) <= maxSpillRules && int64(int32(f.cfaOff)) == f.cfaOff {
				fits := true
				for _, fr := range f.rules[:f.nrules] {
					if fr.kind != cfi.RuleRegister && int32(int16(fr.off)) != fr.off {
						fits = false
					}
				}
				if fits {
					t.Fatalf("row %d: %+v refused though it fits", iter, f)
				}
			}
			continue
		}
		packed++
		var got fastRow
		b := unsafe.Slice((*byte)(unsafe.Pointer(&got)), unsafe.Sizeof(got))
		for i := range b {
			b[i] = byte(i)*7 + 100
		}
		got.setFromSpill(&s)
		if f.flags&fastOK == 0 {
			// No compact form: only the flags are read.
			if got.flags != f.flags {
				t.Fatalf("row %d: flags %#x unpacked as %#x", iter, f.flags, got.flags)
			}
			continue
		}
		compact++
		want := f
		n := int(f.nrules)
		copy(want.rules[n:], got.rules[n:]) // never read
		for i := range want.rules[:n] {
			if want.rules[i].kind != cfi.RuleRegister {
				want.rules[i].reg = got.rules[i].reg // never read
			}
		}
		if got != want {
			t.Fatalf("row %d: unpacked\n%+v\nwant\n%+v", iter, got, want)
		}
	}
	t.Logf("%d rows packed and unpacked (%d with a compact form), %d refused", packed, compact, refused)
	if compact < 5000 || refused < 500 {
		t.Errorf("%d packed with a compact form, %d refused: the rows do not try both", compact, refused)
	}
}
