package main

import (
	"encoding/binary"
	"fmt"

	"github.com/ustack/ustack/arch"
)

// The layout of struct event in bpf/tracer.c: a header of eventHeaderSize
// bytes, then the stack copy.
const (
	eventHeaderSize = 224
	numRegs         = 21 // struct pt_regs on x86_64
	offComm         = 40
	offRegs         = 56
	ptRegsSP        = 19 // index of sp in struct pt_regs
	ptRegsIP        = 16 // index of ip
)

// ptRegsDWARF gives the DWARF register number of each struct pt_regs slot
// (r15 r14 r13 r12 bp bx r11 r10 r9 r8 ax cx dx si di orig_ax ip cs flags
// sp ss), -1 for the slots that are no DWARF register the unwinder uses.
var ptRegsDWARF = [numRegs]int8{
	15, 14, 13, 12, arch.AMD64_RBP, arch.AMD64_RBX, 11, 10, 9, 8,
	arch.AMD64_RAX, arch.AMD64_RCX, arch.AMD64_RDX, arch.AMD64_RSI, arch.AMD64_RDI,
	-1, arch.AMD64_RIP, -1, -1, arch.AMD64_RSP, -1,
}

// event is one decoded ring buffer record. Comm and Stack point into the
// record's bytes.
type event struct {
	Pid, Tid  uint32
	Time      uint64 // CLOCK_MONOTONIC, nanoseconds
	Cookie    uint32 // index of the -e event
	CPU       uint32
	StackAddr uint64 // address of Stack[0]: SP rounded down to its page
	Comm      []byte
	Regs      [numRegs]uint64
	Stack     []byte
}

// decodeEvent decodes the record b into e. The error says what is wrong
// and at which offset; a record is never trusted beyond its length.
func decodeEvent(b []byte, e *event) error {
	if len(b) < eventHeaderSize {
		return fmt.Errorf("record of %d bytes is shorter than the %d-byte event header", len(b), eventHeaderSize)
	}
	le := binary.LittleEndian
	e.Pid = le.Uint32(b[0:])
	e.Tid = le.Uint32(b[4:])
	e.Time = le.Uint64(b[8:])
	e.Cookie = le.Uint32(b[16:])
	e.CPU = le.Uint32(b[20:])
	e.StackAddr = le.Uint64(b[24:])
	n := le.Uint32(b[32:])
	comm := b[offComm : offComm+16]
	for i, c := range comm {
		if c == 0 {
			comm = comm[:i]
			break
		}
	}
	e.Comm = comm
	for i := range e.Regs {
		e.Regs[i] = le.Uint64(b[offRegs+8*i:])
	}
	if uint64(n) > uint64(len(b)-eventHeaderSize) {
		return fmt.Errorf("stack length %d at offset 32 runs past the record's %d stack bytes", n, len(b)-eventHeaderSize)
	}
	e.Stack = b[eventHeaderSize : eventHeaderSize+int(n)]
	return nil
}

// loadRegs sets the registers the unwinder uses from the record's
// struct pt_regs.
func (e *event) loadRegs(r *arch.Regs) {
	r.Reset()
	for i, d := range ptRegsDWARF {
		if d >= 0 {
			r.Set(int(d), e.Regs[i])
		}
	}
}

// stackFromSP returns the stack copy from SP on, at most max bytes (the
// copy starts at SP's page, and --stack-size counts from SP, as perf's
// does). It is empty when the copy does not reach SP.
func (e *event) stackFromSP(max int) []byte {
	sp := e.Regs[ptRegsSP]
	if sp < e.StackAddr || sp-e.StackAddr >= uint64(len(e.Stack)) {
		return nil
	}
	s := e.Stack[sp-e.StackAddr:]
	if len(s) > max {
		s = s[:max]
	}
	return s
}
