package unwinder

import (
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

// TestSetFromCopiesEveryField fills every byte of two fastRows with
// different values and checks that setFrom copies each field, and the rules
// in use, of one into the other: a field added to fastRow and not to setFrom
// fails here (the second level would hand back rows without it).
func TestSetFromCopiesEveryField(t *testing.T) {
	fill := func(f *fastRow, seed byte) {
		b := unsafe.Slice((*byte)(unsafe.Pointer(f)), unsafe.Sizeof(*f))
		for i := range b {
			b[i] = seed + byte(i)*7
		}
	}
	for _, n := range []uint8{0, 3, maxFastRules} {
		var src, dst fastRow
		fill(&src, 1)
		fill(&dst, 100)
		src.nrules = n
		dst.setFrom(&src)
		want := src
		// The rules past nrules are never read: dst keeps its own.
		copy(want.rules[n:], dst.rules[n:])
		if dst != want {
			t.Errorf("nrules %d: setFrom gave\n%+v\nwant\n%+v", n, dst, want)
		}
	}
}
