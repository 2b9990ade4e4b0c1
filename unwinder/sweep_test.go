package unwinder

import (
	"bytes"
	"testing"
)

// TestSweepRowBudget: the sweeps a Cache keeps hold at most about
// sweepRowBudget rows: sweeps of 12 objects whose code changes the stack
// at every instruction (push, pop: 64k rows each) drop the ones asked least
// recently, and the count the set keeps is the rows it holds.
func TestSweepRowBudget(t *testing.T) {
	const fn = 0x1000
	code := bytes.Repeat([]byte{0x50, 0x58}, sweepMax/2-8) // push %rax; pop %rax: a row a byte
	var c Cache
	for i := range 12 {
		obj := &funcObject{fakeObject: fakeObject{code: map[uint64][]byte{fn: code}}, starts: []uint64{fn}}
		pc := uint64(fn + len(code) - 2)
		if _, st, ok := c.sweepAt(obj, pc, pc); !ok || st.delta != 0 {
			t.Fatalf("object %d: the state before its last push: %+v, %v", i, st, ok)
		}
		held := 0
		for _, w := range c.sweeps.kept {
			held += len(w.rows)
		}
		if held != c.sweeps.rows {
			t.Fatalf("object %d: the set counts %d rows, its sweeps hold %d", i, c.sweeps.rows, held)
		}
		if held > sweepRowBudget+len(code) {
			t.Fatalf("object %d: %d rows kept, past the budget of %d and one sweep", i, held, sweepRowBudget)
		}
	}
	if n := len(c.sweeps.kept); n >= 12 {
		t.Errorf("%d sweeps kept: none dropped", n)
	}
}
