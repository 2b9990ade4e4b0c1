package unwinder

import (
	"encoding/binary"
	"sort"
	"unsafe"

	"golang.org/x/arch/x86/x86asm"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/internal/x86dec"
)

// The sweep: prologueStep's decoding of x86_64 code without CFI, from a
// function's first instruction on, following the state of the frame
// (frameState) along the code as laid out. A conditional or direct jump
// forward records its target's state; arriving there, the state must
// agree with the one falling through (or is taken from it where none falls
// through; where they disagree it is unknown until a branch with a known
// one arrives). After a return or a jump, the code that follows has the
// state a recorded branch gave it; else, where a function is known to
// begin there (knownStart) or no recorded branch target lies ahead any
// more, it begins the next function (padding skipped): the entry's state;
// else, after a jump within the function, the state at the jump (a jump
// table's, where its table could not be read: its cases follow); after a
// return or a tail call, unknown until a branch tells. (LLDB carries the
// state from before the epilogue past a return. Measured on programs
// stripped of their CFI against the CFI, that gave a wrong frame in one
// stack of a few thousand: pops that drop a call's stack arguments, or
// blocks split off to a cold section, end in a return too.) A jump table
// of gcc's and clang's forms (sweeper.ripLea) gives its cases the state at
// its jump. A block taken for a function's entry that is a part of another
// function split off elsewhere (gcc's function.cold) has that function's
// frame at the jumps into it (Cache.coldFrame).
//
// The answer depends on the code alone, so a sweep is kept, per object
// and first address, with the state at each instruction where it changed
// (rows) and which addresses began instructions, and goes on from where
// it stopped when a later PC is asked for: a function's frames are
// answered by one pass over its code.

// Sweep limits: the bytes decoded from the first address, the forward
// branches whose targets are still ahead at once, the code read at once,
// and the sweeps a Cache keeps.
const (
	sweepMax     = 64 << 10
	sweepTargets = 1024
	sweepChunk   = 4096
	sweepKept    = 512
	// sweepRowBudget bounds the rows all kept sweeps hold (96 bytes
	// each): past it, the sweeps asked least recently are dropped.
	sweepRowBudget = 1 << 18
)

// frameState is what a sweep knows at an instruction: the bytes pushed or
// allocated below the return address, each DWARF register's slot (delta
// just after its push; 0 for none) and the registers written before they
// were pushed.
type frameState struct {
	delta   int32
	slot    [16]int32
	written uint16
	known   bool
	// rbp: %rbp points at the frame record (push %rbp, then mov
	// %rsp,%rbp): the CFA is %rbp+8+slot[rbp], whatever the SP does
	// after (spLost: an allocation of a size the code computes, a
	// realignment), as in functions with variable-length arrays.
	rbp, spLost bool
	// called: a call was passed on a path from the function's first
	// instruction here (see prologueStep's recursion check).
	called bool
}

// sameFrame reports whether two paths' states at one instruction agree on the
// frame.
func sameFrame(a, b *frameState) bool {
	if a.rbp && b.rbp {
		return a.slot[arch.AMD64_RBP] == b.slot[arch.AMD64_RBP]
	}
	return a.delta == b.delta && !a.rbp && !b.rbp && !a.spLost && !b.spLost
}

// spUnknown notes a change of the SP by an amount the code does not show.
func (st *frameState) spUnknown() {
	if st.rbp {
		st.spLost = true
	} else {
		st.known = false
	}
}

// sweepTarget is a forward branch's target and the state the branch takes
// there (known false where two branches there disagree).
type sweepTarget struct {
	addr uint64
	st   frameState
}

// sweepRow is the state from an instruction on, and the first instruction
// of the function it is in.
type sweepRow struct {
	addr, start uint64
	st          frameState
}

// sweeper is the sweep of obj's code from link-time address from.
type sweeper struct {
	obj  Object
	from uint64
	used uint64 // when it was last asked (Cache.sweepClock)

	addr uint64 // the next address to decode
	done bool   // no further: sweepMax, or code that could not be followed

	start uint64 // the first instruction of the function being decoded
	// coldAt is where the split part being decoded begins (coldFrame),
	// start being its function's first instruction; 0 otherwise.
	coldAt     uint64
	cur, table frameState
	// What the registers hold toward a jump table's jump (gcc's and
	// clang's lea T(%rip),%rT; movslq (%rT,%rI,4),%rD; add %rT,%rD;
	// jmp *%rD): the address a lea from %rip gave, the table an entry was
	// loaded from, the table a target was computed from; and the bound
	// the last cmp of a constant compared with.
	ripLea, entryOf, targetOf [16]uint64
	bound                     int64
	gap                       bool // the last instruction was a return or a jump: nothing falls through
	afterCall                 bool
	inEpi                     bool          // since the last instruction that builds the frame, branches or calls, the frame was being torn down
	pending                   []sweepTarget // sorted by address

	rows []sweepRow
	insn []uint64 // bit i: an instruction begins at from+i
	// blocks are the addresses where decoding resumed after a return or
	// a jump (resume), in order.
	blocks []uint64

	set *sweepSet // for its code buffer
}

// sweepKey names a sweep: its object, by its interface words (as the row
// cache's second level), and its first address.
type sweepKey struct {
	obj  iface
	from uint64
}

// sweepSet is the sweeps a Cache keeps, and the code the last one read.
type sweepSet struct {
	kept  map[sweepKey]*sweeper
	clock uint64
	rows  int // the rows all kept sweeps hold
	// nested counts the coldFrame calls in progress, which ask for the
	// state at the jumps into a block, that may lie in another block of
	// the same split part: at most coldDepth.
	nested int

	buf    [sweepChunk]byte
	bufFor *sweeper // whose code buf holds
	bufAt  uint64   // the link-time address of buf[0]
	bufLen int
}

// sweepAt returns the function's first instruction and the frame's state
// at link-time address pc of obj, where lookup (pc, or a return address
// minus one) lies in the function, by the sweep from its symbol's start or,
// without one, from the nearest symbol or section start before it.
func (c *Cache) sweepAt(obj Object, lookup, pc uint64) (start uint64, st frameState, ok bool) {
	from, ok := c.startOf(obj, lookup)
	if !ok || pc < from || pc-from >= sweepMax {
		return 0, st, false
	}
	if c.sweeps == nil {
		c.sweeps = new(sweepSet)
	}
	w := c.sweeps.find(obj, from)
	w.advance(pc)
	if !w.isInsn(pc) {
		return 0, st, false // not an instruction as decoded, or not reached
	}
	start, st, ok = w.stateAt(pc)
	if start == 0 || c.sweeps.nested >= coldDepth {
		return start, st, ok
	}
	// (Read before coldFrame, whose sweeps may take w's place.)
	b := w.blockBefore(pc)
	if !knownStart(obj, start) {
		// The sweep took the block holding pc for a function's first
		// instruction (its state there known or not: a part's
		// epilogue frees more than an entry has): it may be a part
		// split off another function.
		if s2, st2, ok2 := c.coldFrame(obj, start, pc); ok2 {
			return s2, st2, true
		}
	}
	if !ok && b > start && !knownStart(obj, b) {
		// Not known at pc: the code after the last return or jump
		// before it, where the sweep carried a state it could not
		// tell, may be reached by jumps that tell it (a split part
		// laid out after another, whose frame the sweep carried on).
		if s2, st2, ok2 := c.coldFrame(obj, b, pc); ok2 {
			return s2, st2, true
		}
	}
	return start, st, ok
}

// blockBefore returns the last address at or before pc where decoding
// resumed after a return or a jump (0 for none).
func (w *sweeper) blockBefore(pc uint64) uint64 {
	i := sort.Search(len(w.blocks), func(i int) bool { return w.blocks[i] > pc })
	if i == 0 {
		return 0
	}
	return w.blocks[i-1]
}

// stateAt returns the function's first instruction and the frame's state
// at the instruction at pc, which the sweep decoded; ok is false where
// the state is not known or is a wrong reading (start is 0 only where no
// state was noted before pc).
func (w *sweeper) stateAt(pc uint64) (start uint64, st frameState, ok bool) {
	rows := w.rows
	k := sort.Search(len(rows), func(k int) bool { return rows[k].addr > pc }) - 1
	if k < 0 {
		return 0, st, false
	}
	r := &rows[k]
	// A stack pointer above the return address is a wrong reading.
	return r.start, r.st, r.st.known && (r.st.rbp || !r.st.spLost && r.st.delta >= 0 && r.st.delta <= 1<<20)
}

// JumpSourceObject is implemented by an Object that can list the direct
// jumps in its code to a link-time address.
type JumpSourceObject interface {
	JumpSources(addr uint64, out []uint64) []uint64
}

// coldFrame returns the state at pc of obj where the block at block, which
// the sweep took for a function's first instruction (no symbol or call
// says one begins there), is a part split off another function (gcc's
// function.cold, placed elsewhere, as .text.unlikely before .text): a
// block that jumps reach from other code, each an instruction of the sweep
// of its own function, all with one frame, with something pushed (a jump
// with nothing pushed may be a tail call: the block is then the entry it
// was taken for). The block is decoded again from the jumps' state (a
// sweep of its own, kept as the others), and its function is theirs, whose
// caller the frame's return address is checked against.
func (c *Cache) coldFrame(obj Object, block, pc uint64) (start uint64, st frameState, ok bool) {
	jo, isJO := obj.(JumpSourceObject)
	if !isJO {
		return 0, st, false
	}
	var srcBuf [8]uint64
	srcs := jo.JumpSources(block, srcBuf[:0])
	if len(srcs) == 0 || len(srcs) > len(srcBuf) {
		return 0, st, false
	}
	set := c.sweeps
	set.nested++
	var at frameState
	var parent uint64
	for i, src := range srcs {
		if src >= block && src <= pc {
			set.nested--
			return 0, st, false // a branch of the block's own code
		}
		s0, sst, ok := c.sweepAt(obj, src, src)
		if !ok || i > 0 && (s0 != parent || !sameFrame(&at, &sst)) {
			set.nested--
			return 0, st, false
		}
		at, parent = sst, s0
	}
	set.nested--
	if parent == block || at.delta == 0 && !at.rbp {
		return 0, st, false
	}
	w := set.findCold(obj, block)
	if w.addr == block && len(w.rows) == 0 {
		w.cur, w.start, w.coldAt = at, parent, block
	}
	w.advance(pc)
	if !w.isInsn(pc) {
		return 0, st, false
	}
	return w.stateAt(pc)
}

// functionOf returns where the sweep of the function holding link-time
// address addr of obj begins: its symbol's address, else the nearest
// symbol, direct call target or section start before it.
func functionOf(obj Object, addr uint64) (uint64, bool) {
	if fo, is := obj.(FunctionObject); is {
		if from, ok := fo.FunctionStart(addr); ok {
			return from, true
		}
	}
	if so, is := obj.(StartBeforeObject); is {
		return so.StartBefore(addr)
	}
	return 0, false
}

// startOf is functionOf, checked where only a direct call's target says a
// function begins there (a stripped library's hidden functions): the
// target must be an instruction of the sweep of the code before it, else
// the call was no call (its e8 byte another instruction's operand: in
// liblzma, one such target inside a 6-byte mov started sweeps there, and
// every frame in the rest of its function stopped) and the start before
// it applies. Where that sweep cannot tell (it does not reach the target),
// the target stands.
func (c *Cache) startOf(obj Object, addr uint64) (uint64, bool) {
	from, ok := functionOf(obj, addr)
	ct, isCT := obj.(CallTargetObject)
	for range 4 {
		if !ok || !isCT || from == 0 || functionStart(obj, from) || !ct.CallTarget(from) {
			return from, ok
		}
		prev, ok2 := functionOf(obj, from-1)
		if !ok2 || prev >= from || from-prev >= sweepMax {
			return from, ok
		}
		if c.sweeps == nil {
			c.sweeps = new(sweepSet)
		}
		w := c.sweeps.find(obj, prev)
		w.advance(from)
		if w.addr <= from || w.isInsn(from) {
			return from, ok // an instruction there, or not reached
		}
		from = prev
	}
	return from, ok
}

// isInsn reports whether the sweep decoded an instruction at addr.
func (w *sweeper) isInsn(addr uint64) bool {
	i := addr - w.from
	return addr >= w.from && i/64 < uint64(len(w.insn)) && w.insn[i/64]&(1<<(i%64)) != 0
}

// returnsInto reports whether return address ra, in m, returns into the
// function that begins at link-time address start (startOf): a
// recursion's return address, which an earlier call of it may have left
// below its frame.
func (c *Cache) returnsInto(m *Mapping, ra, start uint64) bool {
	if ra <= m.Start || ra > m.End || ra-1 < m.Bias {
		return false
	}
	s, ok := c.startOf(m.Object, ra-1-m.Bias)
	return ok && s == start
}

// find returns the sweep of obj from from, a new one where none is kept
// (in place of the one asked least recently where sweepKept are).
func (s *sweepSet) find(obj Object, from uint64) *sweeper {
	return s.findKey(obj, from, from)
}

// coldDepth bounds the blocks of one split part coldFrame follows back to
// the jumps from its function.
const coldDepth = 4

// coldKey marks the key of a sweep of a split part (coldFrame), which
// begins with another state than a sweep from the same address.
const coldKey = 1 << 63

// findCold is find for the sweep of the split part at from.
func (s *sweepSet) findCold(obj Object, from uint64) *sweeper {
	return s.findKey(obj, from, from|coldKey)
}

func (s *sweepSet) findKey(obj Object, from, keyFrom uint64) *sweeper {
	s.clock++
	key := sweepKey{*(*iface)(unsafe.Pointer(&obj)), keyFrom}
	if w := s.kept[key]; w != nil {
		w.used = s.clock
		return w
	}
	if s.kept == nil {
		s.kept = make(map[sweepKey]*sweeper)
	}
	var w *sweeper
	for len(s.kept) > 0 && (len(s.kept) >= sweepKept || s.rows > sweepRowBudget) {
		var old *sweeper
		var oldKey sweepKey
		for k, o := range s.kept {
			if old == nil || o.used < old.used {
				old, oldKey = o, k
			}
		}
		delete(s.kept, oldKey)
		s.rows -= len(old.rows)
		w = old
	}
	if w == nil {
		w = &sweeper{set: s}
	} else {
		w.rows = nil // (its memory may be a large one's)
	}
	w.reset(obj, from)
	w.used = s.clock
	s.kept[key] = w
	return w
}

func (w *sweeper) reset(obj Object, from uint64) {
	w.obj, w.from, w.addr, w.done = obj, from, from, false
	w.start, w.coldAt = from, 0
	w.cur = frameState{known: true}
	w.table = frameState{}
	w.ripLea, w.entryOf, w.targetOf, w.bound = [16]uint64{}, [16]uint64{}, [16]uint64{}, -1
	w.gap, w.afterCall, w.inEpi = false, false, false
	w.pending, w.rows, w.insn, w.blocks = w.pending[:0], w.rows[:0], w.insn[:0], w.blocks[:0]
	if w.set.bufFor == w {
		w.set.bufFor = nil
	}
}

// advance decodes on until the instruction at pc has its state.
func (w *sweeper) advance(pc uint64) {
	for !w.done && w.addr <= pc {
		if !w.step() {
			w.done = true
		}
	}
}

// step takes the instruction (or padding) at w.addr: the state there, then
// what it does to it. It reports false where the sweep cannot go on.
func (w *sweeper) step() bool {
	addr := w.addr
	if addr-w.from >= sweepMax {
		return false
	}
	// The state the branches here take.
	if t, arrived := w.arrive(addr); arrived {
		called := t.called || w.cur.called && !w.gap
		switch {
		case w.gap || !w.cur.known:
			w.cur = t
		case !t.known || !sameFrame(&w.cur, &t):
			w.cur.known = false // the paths disagree
		default:
			w.cur.spLost = w.cur.spLost || t.spLost
		}
		w.cur.called = called
		w.gap, w.afterCall, w.inEpi = false, false, false
	}
	b := w.set
	if b.bufFor != w || addr < b.bufAt || addr+16 > b.bufAt+uint64(b.bufLen) {
		b.bufFor, b.bufAt = w, addr
		b.bufLen = w.obj.ReadCode(addr, b.buf[:])
		if b.bufLen == 0 {
			return false
		}
	}
	code := b.buf[addr-b.bufAt : b.bufLen]
	size, pad := 0, false
	var in x86asm.Inst
	if endbr(code) {
		size = 4
	} else {
		var err error
		in, err = x86dec.Decode(code)
		if err != nil || in.Op == 0 || in.Len > len(code) {
			return false
		}
		pad = padding(&in)
	}
	if pad {
		if w.afterCall && addr%16 != 0 {
			w.gap = true // a call that does not return, then the next function's alignment
		}
		if !w.gap {
			w.note(addr) // a nop executed in a function (a loop's alignment)
		}
		w.addr += uint64(in.Len)
		return true
	}
	if w.gap {
		w.resume(addr)
	}
	wasCall := w.afterCall // the instruction before was a call
	w.gap, w.afterCall = false, false
	w.note(addr)
	if size > 0 { // endbr64: a no-op
		w.inEpi = false
		w.addr += uint64(size)
		return true
	}
	in, err := x86dec.Decode(code)
	if err != nil || in.Op == 0 || in.Len > len(code) {
		return false
	}
	next := addr + uint64(in.Len)
	epi := false     // the instruction tears the frame down
	neutral := false // it leaves the stack as it is, and an epilogue goes on past it
	dst, isReg := in.Args[0].(x86asm.Reg)
	r := dwarfGPR(dst)
	w.trackTable(&in, next, isReg, r)
	switch op := in.Op; {
	case op == x86asm.PUSH || op == x86asm.PUSHFQ:
		w.cur.delta += 8
		if op == x86asm.PUSH && isReg && r >= 0 && w.cur.written&(1<<r) == 0 && w.cur.slot[r] == 0 && !w.cur.spLost {
			w.cur.slot[r] = w.cur.delta
		}
	case op == x86asm.POP || op == x86asm.POPFQ:
		own := op == x86asm.POP && r >= 0 && w.cur.slot[r] == w.cur.delta && !w.cur.spLost
		if own || op == x86asm.POP && r >= 0 && calleeSaved(r) {
			// A callee-saved register restored: the frame is being
			// torn down. Pops into others drop what was pushed for
			// a call (gcc's pop %rax; pop %rdx after a call with
			// stack arguments).
			epi = true
		} else {
			neutral = true
		}
		if r == arch.AMD64_RBP && w.cur.rbp {
			w.cur.rbp = false
			if w.cur.spLost {
				w.cur.known = false
			}
		}
		w.cur.delta -= 8
		if own {
			w.cur.slot[r] = 0
			w.cur.written &^= 1 << r // it holds the caller's value again
		} else if op == x86asm.POP && r >= 0 {
			w.cur.written |= 1 << r
		}
		dropSlotsBelow(&w.cur)
	case (op == x86asm.SUB || op == x86asm.ADD) && isReg && dst == x86asm.RSP:
		imm, isImm := in.Args[1].(x86asm.Imm)
		if !isImm || int64(imm) > 1<<20 || int64(imm) < -(1<<20) {
			w.cur.spUnknown()
			break
		}
		if op == x86asm.SUB {
			w.cur.delta += int32(imm)
		} else if wasCall && !w.epilogueNext(code[in.Len:]) {
			// The arguments pushed for the call, dropped: the
			// frame stays.
			w.cur.delta -= int32(imm)
		} else {
			epi = true
			w.cur.delta -= int32(imm)
		}
		dropSlotsBelow(&w.cur)
	case op == x86asm.LEA && isReg && dst == x86asm.RSP:
		mem, isMem := in.Args[1].(x86asm.Mem)
		if isMem && mem.Base == x86asm.RBP && mem.Index == 0 && w.cur.rbp && mem.Disp <= 0 && mem.Disp > -(1<<20) {
			// lea -N(%rbp),%rsp: back to the pushes under the record.
			epi = true
			w.cur.delta = w.cur.slot[arch.AMD64_RBP] - int32(mem.Disp)
			w.cur.spLost = false
			dropSlotsBelow(&w.cur)
			break
		}
		if !isMem || mem.Base != x86asm.RSP || mem.Index != 0 || mem.Disp > 1<<20 || mem.Disp < -(1<<20) {
			w.cur.spUnknown()
			break
		}
		if mem.Disp > 0 {
			epi = true
		}
		w.cur.delta -= int32(mem.Disp)
		dropSlotsBelow(&w.cur)
	case op == x86asm.LEAVE:
		epi = true
		if !w.cur.rbp {
			w.cur.known = false // a frame pointer not set up as the sweep saw
			break
		}
		w.cur.delta = w.cur.slot[arch.AMD64_RBP] - 8 // mov %rbp,%rsp; pop %rbp
		w.cur.slot[arch.AMD64_RBP] = 0
		w.cur.written &^= 1 << arch.AMD64_RBP
		w.cur.rbp, w.cur.spLost = false, false
		dropSlotsBelow(&w.cur)
	case op == x86asm.MOV && isReg && dst == x86asm.RBP && in.Args[1] == x86asm.RSP && w.cur.known && !w.cur.rbp && !w.cur.spLost &&
		w.cur.slot[arch.AMD64_RBP] != 0 && w.cur.slot[arch.AMD64_RBP] == w.cur.delta:
		w.cur.rbp = true // the frame record: the caller's %rbp, then the return address
	case op == x86asm.MOV && isReg && dst == x86asm.RSP && in.Args[1] == x86asm.RBP && w.cur.rbp:
		epi = true
		w.cur.delta = w.cur.slot[arch.AMD64_RBP]
		w.cur.spLost = false
		dropSlotsBelow(&w.cur)
	case op == x86asm.RET:
		w.cur.known = false
		w.gap = true
	case op == x86asm.JMP:
		if rel, isRel := in.Args[0].(x86asm.Rel); isRel && w.cur.known {
			// A tail call (from an epilogue, or to a known
			// function) leaves the function: its target is not
			// code of it.
			if t := next + uint64(int64(rel)); !w.inEpi && !knownStart(w.obj, t) && !w.record(t, addr, w.cur) {
				return false
			}
		}
		if w.inEpi {
			w.cur.known = false // a tail call: what follows only a branch tells
		} else if _, isRel := in.Args[0].(x86asm.Rel); !isRel && w.cur.known {
			if ok, full := w.jumpTable(&in, addr); !ok {
				w.table = w.cur // its cases follow: the state at the jump
			} else if !full {
				return false
			}
		}
		w.gap = true
	case isJcc(op) || op == x86asm.JRCXZ || op == x86asm.LOOP || op == x86asm.LOOPE || op == x86asm.LOOPNE:
		if rel, isRel := in.Args[0].(x86asm.Rel); isRel && w.cur.known {
			// (A conditional tail call, to a known function, is not a
			// branch of this one.)
			if t := next + uint64(int64(rel)); !knownStart(w.obj, t) && !w.record(t, addr, w.cur) {
				return false
			}
		}
	case op == x86asm.CALL:
		w.afterCall = true
		w.cur.called = true
	case op == x86asm.UD2 || op == x86asm.HLT:
		w.gap = true
	case op == x86asm.ENTER || op == x86asm.PUSHF || op == x86asm.POPF || op == x86asm.IRETQ:
		w.cur.known = false
	default:
		if isReg && (dst == x86asm.RSP || dst == x86asm.ESP || dst == x86asm.SP) && writes(op) {
			w.cur.spUnknown() // an SP change not known: and, mov into it
		} else {
			if r == arch.AMD64_RBP && w.cur.rbp && writes(op) {
				w.cur.rbp = false // the frame pointer reused
				if w.cur.spLost {
					w.cur.known = false
				}
			}
			neutral = true // (gcc moves the return value between the pops)
			if r >= 0 && writes(op) {
				w.cur.written |= 1 << r
			}
		}
	}
	if epi {
		w.inEpi = true
	} else if !neutral {
		w.inEpi = false
	}
	w.addr = next
	return true
}

// note records the state at the instruction at addr.
func (w *sweeper) note(addr uint64) {
	i := addr - w.from
	for uint64(len(w.insn)) <= i/64 {
		w.insn = append(w.insn, 0)
	}
	w.insn[i/64] |= 1 << (i % 64)
	if n := len(w.rows); n == 0 || w.rows[n-1].st != w.cur || w.rows[n-1].start != w.start {
		w.rows = append(w.rows, sweepRow{addr: addr, start: w.start, st: w.cur})
		w.set.rows++
	}
}

// record notes that a branch at addr to target t takes state st there: a
// forward branch only (a backward one's target was decoded already). Two
// branches to one target with different stack depths leave its state
// unknown. It reports false where there is no room.
func (w *sweeper) record(t, addr uint64, st frameState) bool {
	if t <= addr || w.coldAt != 0 && w.start > w.coldAt && t >= w.start {
		// (A split part's jump back into its function, laid out
		// after it, is no branch of the code that follows here.)
		return true
	}
	p := w.pending
	i := sort.Search(len(p), func(i int) bool { return p[i].addr >= t })
	if i < len(p) && p[i].addr == t {
		if !sameFrame(&p[i].st, &st) {
			p[i].st.known = false
		}
		p[i].st.called = p[i].st.called || st.called
		return true
	}
	if len(p) == sweepTargets {
		return false
	}
	w.pending = append(w.pending, sweepTarget{})
	copy(w.pending[i+1:], w.pending[i:])
	w.pending[i] = sweepTarget{addr: t, st: st}
	return true
}

// arrive removes the targets before addr (inside an instruction decoded:
// not code of this function as decoded) and at addr, and returns the
// state the branches to addr take there (ok false where none does).
func (w *sweeper) arrive(addr uint64) (st frameState, ok bool) {
	k := 0
	for k < len(w.pending) && w.pending[k].addr < addr {
		k++
	}
	if k < len(w.pending) && w.pending[k].addr == addr {
		st, ok = w.pending[k].st, true
		k++
	}
	if k > 0 {
		w.pending = w.pending[:copy(w.pending, w.pending[k:])]
	}
	return st, ok
}

// trackTable follows the registers toward a jump table's jump (see
// sweeper.ripLea), for the instruction in, which ends at next and writes
// DWARF register r when isReg.
func (w *sweeper) trackTable(in *x86asm.Inst, next uint64, isReg bool, r int) {
	if in.Op == x86asm.CMP {
		if imm, ok := in.Args[1].(x86asm.Imm); ok {
			w.bound = int64(imm)
		}
		return
	}
	if !isReg || r < 0 || !writes(in.Op) || in.Op == x86asm.JMP || in.Op == x86asm.CALL || in.Op == x86asm.PUSH {
		return // (the jump reads its register)
	}
	var lea, entry, target uint64
	mem, isMem := in.Args[1].(x86asm.Mem)
	switch in.Op {
	case x86asm.LEA:
		if isMem && mem.Base == x86asm.RIP && mem.Index == 0 {
			lea = next + uint64(mem.Disp)
		}
	case x86asm.MOVSXD:
		if b := dwarfGPR(mem.Base); isMem && b >= 0 && w.ripLea[b] != 0 && mem.Scale == 4 && mem.Index != 0 && mem.Disp == 0 {
			entry = w.ripLea[b]
		}
	case x86asm.ADD:
		if src, ok := in.Args[1].(x86asm.Reg); ok {
			if b := dwarfGPR(src); b >= 0 && w.ripLea[b] != 0 && w.entryOf[r] == w.ripLea[b] {
				target = w.ripLea[b]
			}
		}
	}
	w.ripLea[r], w.entryOf[r], w.targetOf[r] = lea, entry, target
}

// jumpTable records the cases of the jump through a table at addr (in),
// each with the state at the jump: a table of 32-bit offsets from its
// start (position-independent code) or of 64-bit addresses, whose last
// index the cmp before the jump's bound check gave. ok says whether the
// jump was known for one; full, whether every case could be recorded.
func (w *sweeper) jumpTable(in *x86asm.Inst, addr uint64) (ok, full bool) {
	if w.bound < 0 || w.bound >= sweepTargets/2 {
		return false, false
	}
	var table uint64
	size := 4
	switch a := in.Args[0].(type) {
	case x86asm.Reg:
		if r := dwarfGPR(a); r >= 0 {
			table = w.targetOf[r]
		}
	case x86asm.Mem:
		if a.Base == 0 && a.Index != 0 && a.Scale == 8 && a.Disp > 0 {
			table, size = uint64(a.Disp), 8
		}
	}
	if table == 0 {
		return false, false
	}
	var e [8]byte
	for i := int64(0); i <= w.bound; i++ {
		if w.obj.ReadCode(table+uint64(i)*uint64(size), e[:size]) != size {
			return false, false
		}
		t := binary.LittleEndian.Uint64(e[:])
		if size == 4 {
			t = table + uint64(int64(int32(binary.LittleEndian.Uint32(e[:4]))))
		}
		if !w.record(t, addr, w.cur) {
			return true, false
		}
	}
	return true, true
}

// epilogueNext reports whether code begins with an instruction of an
// epilogue's end: a pop into a callee-saved register, a return, a leave.
// An addition to the SP just after a call followed by one frees the
// frame; followed by anything else, it drops the call's arguments.
func (w *sweeper) epilogueNext(code []byte) bool {
	in, err := x86dec.Decode(code)
	if err != nil {
		return false
	}
	switch in.Op {
	case x86asm.RET, x86asm.LEAVE:
		return true
	case x86asm.POP:
		r, ok := in.Args[0].(x86asm.Reg)
		return ok && calleeSaved(dwarfGPR(r))
	}
	return false
}
