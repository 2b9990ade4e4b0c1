package cfi

import (
	"encoding/binary"
	"fmt"

	"github.com/ustack/ustack/arch"
)

// Memory reads 8-byte little-endian words of the captured memory.
type Memory interface {
	ReadUint64(addr uint64) (uint64, bool)
}

// DW_OP_* opcodes used in call frame information.
const (
	opAddr       = 0x03
	opDeref      = 0x06
	opConst1u    = 0x08
	opConst1s    = 0x09
	opConst2u    = 0x0a
	opConst2s    = 0x0b
	opConst4u    = 0x0c
	opConst4s    = 0x0d
	opConst8u    = 0x0e
	opConst8s    = 0x0f
	opConstu     = 0x10
	opConsts     = 0x11
	opDup        = 0x12
	opDrop       = 0x13
	opOver       = 0x14
	opPick       = 0x15
	opSwap       = 0x16
	opRot        = 0x17
	opXderef     = 0x18
	opAbs        = 0x19
	opAnd        = 0x1a
	opDiv        = 0x1b
	opMinus      = 0x1c
	opMod        = 0x1d
	opMul        = 0x1e
	opNeg        = 0x1f
	opNot        = 0x20
	opOr         = 0x21
	opPlus       = 0x22
	opPlusUconst = 0x23
	opShl        = 0x24
	opShr        = 0x25
	opShra       = 0x26
	opXor        = 0x27
	opBra        = 0x28
	opEq         = 0x29
	opGe         = 0x2a
	opGt         = 0x2b
	opLe         = 0x2c
	opLt         = 0x2d
	opNe         = 0x2e
	opSkip       = 0x2f
	opLit0       = 0x30
	opLit31      = 0x4f
	opReg0       = 0x50
	opReg31      = 0x6f
	opBreg0      = 0x70
	opBreg31     = 0x8f
	opRegx       = 0x90
	opFbreg      = 0x91
	opBregx      = 0x92
	opPiece      = 0x93
	opDerefSize  = 0x94
	opNop        = 0x96
	opCallCFA    = 0x9c
	opStackValue = 0x9f
)

var opNames = map[byte]string{
	opAddr: "DW_OP_addr", opDeref: "DW_OP_deref", opConst1u: "DW_OP_const1u", opConst1s: "DW_OP_const1s",
	opConst2u: "DW_OP_const2u", opConst2s: "DW_OP_const2s", opConst4u: "DW_OP_const4u", opConst4s: "DW_OP_const4s",
	opConst8u: "DW_OP_const8u", opConst8s: "DW_OP_const8s", opConstu: "DW_OP_constu", opConsts: "DW_OP_consts",
	opDup: "DW_OP_dup", opDrop: "DW_OP_drop", opOver: "DW_OP_over", opPick: "DW_OP_pick", opSwap: "DW_OP_swap",
	opRot: "DW_OP_rot", opXderef: "DW_OP_xderef", opAbs: "DW_OP_abs", opAnd: "DW_OP_and", opDiv: "DW_OP_div",
	opMinus: "DW_OP_minus", opMod: "DW_OP_mod", opMul: "DW_OP_mul", opNeg: "DW_OP_neg", opNot: "DW_OP_not",
	opOr: "DW_OP_or", opPlus: "DW_OP_plus", opPlusUconst: "DW_OP_plus_uconst", opShl: "DW_OP_shl",
	opShr: "DW_OP_shr", opShra: "DW_OP_shra", opXor: "DW_OP_xor", opBra: "DW_OP_bra", opEq: "DW_OP_eq",
	opGe: "DW_OP_ge", opGt: "DW_OP_gt", opLe: "DW_OP_le", opLt: "DW_OP_lt", opNe: "DW_OP_ne",
	opSkip: "DW_OP_skip", opRegx: "DW_OP_regx", opFbreg: "DW_OP_fbreg", opBregx: "DW_OP_bregx",
	opPiece: "DW_OP_piece", opDerefSize: "DW_OP_deref_size", opNop: "DW_OP_nop",
	opCallCFA: "DW_OP_call_frame_cfa", opStackValue: "DW_OP_stack_value",
}

func opName(op byte) string {
	switch {
	case op >= opLit0 && op <= opLit31:
		return fmt.Sprintf("DW_OP_lit%d", op-opLit0)
	case op >= opReg0 && op <= opReg31:
		return fmt.Sprintf("DW_OP_reg%d", op-opReg0)
	case op >= opBreg0 && op <= opBreg31:
		return fmt.Sprintf("DW_OP_breg%d", op-opBreg0)
	}
	if n, ok := opNames[op]; ok {
		return n
	}
	return "DW_OP_unknown"
}

// Bounds of Eval.
const (
	// DefaultMaxSteps is the number of operations Eval runs when
	// ExprContext.MaxSteps is 0.
	DefaultMaxSteps = 1000
	// StackSize is the depth of Eval's value stack.
	StackSize = 64
)

// ExprContext is what Eval reads besides the expression's bytes. The zero
// value (with Arch set) evaluates an expression that needs no registers or
// memory.
type ExprContext struct {
	// Arch gives the address size (DW_OP_addr, DW_OP_deref) and the
	// register names in errors.
	Arch arch.Arch
	// Regs holds the frame's registers for DW_OP_breg*, DW_OP_bregx,
	// DW_OP_reg* and DW_OP_regx; nil when none is known.
	Regs *arch.Regs
	// Mem serves DW_OP_deref and DW_OP_deref_size; nil when there is no
	// memory to read.
	Mem Memory
	// CFA is pushed before the first operation when PushCFA is true, as
	// for DW_CFA_expression and DW_CFA_val_expression rules (not for
	// DW_CFA_def_cfa_expression).
	CFA     uint64
	PushCFA bool
	// MaxSteps bounds the operations run (0: DefaultMaxSteps).
	MaxSteps int
}

// Eval evaluates a DWARF expression as CFI uses it, in the context ctx, and
// returns the value on top of the stack.
//
// DW_OP_reg* and DW_OP_regx yield the value of the register. Operations that
// have no meaning in CFI (DW_OP_fbreg, DW_OP_call_frame_cfa, DW_OP_piece,
// DW_OP_stack_value, calls, TLS and typed operations) are errors. An error is
// an *ExprError naming the operation and its byte offset. Eval allocates
// nothing unless it fails.
func Eval(expr []byte, ctx *ExprContext) (uint64, error) {
	a, regs, mem, maxSteps := ctx.Arch, ctx.Regs, ctx.Mem, ctx.MaxSteps
	if maxSteps <= 0 {
		maxSteps = DefaultMaxSteps
	}
	var stack [StackSize]uint64
	sp := 0 // number of values on the stack
	if ctx.PushCFA {
		stack[0] = ctx.CFA
		sp = 1
	}
	ptrSize := a.PtrSize()
	r := reader{data: expr}
	steps := 0
	for r.off < len(expr) {
		opOff := r.off
		op := expr[r.off]
		r.off++
		fail := func(msg string) (uint64, error) {
			return 0, &ExprError{Op: op, Offset: opOff, Msg: msg}
		}
		if steps >= maxSteps {
			return fail(fmt.Sprintf("step limit %d exceeded", maxSteps))
		}
		steps++
		// Check stack requirements.
		need, pushes := opStackUse(op)
		if sp < need {
			return fail("stack underflow")
		}
		if sp-need+pushes > StackSize {
			return fail("stack overflow")
		}
		switch {
		case op >= opLit0 && op <= opLit31:
			stack[sp] = uint64(op - opLit0)
			sp++
			continue
		case op >= opReg0 && op <= opReg31, op == opRegx, op >= opBreg0 && op <= opBreg31, op == opBregx:
			var reg uint64
			var off int64
			var ok bool
			switch {
			case op >= opReg0 && op <= opReg31:
				reg, ok = uint64(op-opReg0), true
			case op == opRegx:
				reg, ok = r.uleb()
			case op >= opBreg0 && op <= opBreg31:
				reg = uint64(op - opBreg0)
				off, ok = r.sleb()
			default:
				reg, ok = r.uleb()
				if ok {
					off, ok = r.sleb()
				}
			}
			if !ok {
				return fail("truncated operand")
			}
			if regs == nil || reg >= arch.MaxRegs || !regs.Known(int(reg)) {
				return fail(fmt.Sprintf("register %s (%d) is unknown", a.RegName(int(min(reg, 1<<20))), reg))
			}
			v, _ := regs.Get(int(reg))
			stack[sp] = v + uint64(off)
			sp++
			continue
		}
		switch op {
		case opNop:
		case opAddr:
			v, ok := r.uN(ptrSize)
			if !ok {
				return fail("truncated operand")
			}
			stack[sp] = v
			sp++
		case opConst1u, opConst1s, opConst2u, opConst2s, opConst4u, opConst4s, opConst8u, opConst8s:
			n := 1 << ((op - opConst1u) / 2)
			v, ok := r.uN(n)
			if !ok {
				return fail("truncated operand")
			}
			if (op-opConst1u)%2 == 1 && n < 8 {
				s := 64 - 8*uint(n)
				v = uint64(int64(v<<s) >> s)
			}
			stack[sp] = v
			sp++
		case opConstu, opPlusUconst:
			v, ok := r.uleb()
			if !ok {
				return fail("truncated operand")
			}
			if op == opConstu {
				stack[sp] = v
				sp++
			} else {
				stack[sp-1] += v
			}
		case opConsts:
			v, ok := r.sleb()
			if !ok {
				return fail("truncated operand")
			}
			stack[sp] = uint64(v)
			sp++
		case opDup:
			stack[sp] = stack[sp-1]
			sp++
		case opDrop:
			sp--
		case opOver:
			stack[sp] = stack[sp-2]
			sp++
		case opPick:
			idx, ok := r.u8()
			if !ok {
				return fail("truncated operand")
			}
			if int(idx) >= sp {
				return fail(fmt.Sprintf("pick index %d beyond stack depth %d", idx, sp))
			}
			stack[sp] = stack[sp-1-int(idx)]
			sp++
		case opSwap:
			stack[sp-1], stack[sp-2] = stack[sp-2], stack[sp-1]
		case opRot:
			// The top entry becomes the third, the second the top, the
			// third the second.
			stack[sp-1], stack[sp-2], stack[sp-3] = stack[sp-2], stack[sp-3], stack[sp-1]
		case opDeref, opDerefSize:
			n := ptrSize
			if op == opDerefSize {
				b, ok := r.u8()
				if !ok {
					return fail("truncated operand")
				}
				if b == 0 || int(b) > ptrSize {
					return fail(fmt.Sprintf("invalid size %d", b))
				}
				n = int(b)
			}
			if mem == nil {
				return fail("no memory to read")
			}
			v, ok := readMem(mem, stack[sp-1], n)
			if !ok {
				return fail(fmt.Sprintf("cannot read %d bytes at %#x", n, stack[sp-1]))
			}
			stack[sp-1] = v
		case opAbs:
			if int64(stack[sp-1]) < 0 {
				stack[sp-1] = -stack[sp-1]
			}
		case opNeg:
			stack[sp-1] = -stack[sp-1]
		case opNot:
			stack[sp-1] = ^stack[sp-1]
		case opAnd, opDiv, opMinus, opMod, opMul, opOr, opPlus, opShl, opShr, opShra, opXor,
			opEq, opGe, opGt, opLe, opLt, opNe:
			b, x := stack[sp-1], stack[sp-2] // x is the second entry, b the top
			var v uint64
			switch op {
			case opAnd:
				v = x & b
			case opDiv:
				if b == 0 {
					return fail("division by zero")
				}
				v = uint64(int64(x) / int64(b))
			case opMinus:
				v = x - b
			case opMod:
				if b == 0 {
					return fail("division by zero")
				}
				v = x % b
			case opMul:
				v = x * b
			case opOr:
				v = x | b
			case opPlus:
				v = x + b
			case opShl:
				v = x << b
			case opShr:
				v = x >> b
			case opShra:
				v = uint64(int64(x) >> b)
			case opXor:
				v = x ^ b
			case opEq:
				v = b2u(x == b)
			case opNe:
				v = b2u(x != b)
			case opGe:
				v = b2u(int64(x) >= int64(b))
			case opGt:
				v = b2u(int64(x) > int64(b))
			case opLe:
				v = b2u(int64(x) <= int64(b))
			case opLt:
				v = b2u(int64(x) < int64(b))
			}
			sp--
			stack[sp-1] = v
		case opSkip, opBra:
			d, ok := r.u16()
			if !ok {
				return fail("truncated operand")
			}
			if op == opBra {
				sp--
				if stack[sp] == 0 {
					continue
				}
			}
			target := r.off + int(int16(d))
			if target < 0 || target > len(expr) {
				return fail(fmt.Sprintf("branch target %d outside the expression", target))
			}
			r.off = target
		case opFbreg:
			return fail("DW_OP_fbreg is not valid in CFI")
		case opCallCFA:
			return fail("DW_OP_call_frame_cfa is not valid in CFI")
		case opStackValue, opPiece:
			return fail("not valid in a CFI expression")
		default:
			return fail("unsupported operation")
		}
	}
	if sp == 0 {
		return 0, &ExprError{Op: 0, Offset: len(expr), Msg: "empty stack at end of expression"}
	}
	return stack[sp-1], nil
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// opStackUse returns how many values op needs on the stack and how many it
// leaves in their place.
func opStackUse(op byte) (need, leaves int) {
	switch {
	case op >= opLit0 && op <= opBreg31:
		return 0, 1
	}
	switch op {
	case opAddr, opConst1u, opConst1s, opConst2u, opConst2s, opConst4u, opConst4s, opConst8u, opConst8s,
		opConstu, opConsts, opRegx, opBregx:
		return 0, 1
	case opDup:
		return 1, 2
	case opDrop, opBra:
		return 1, 0
	case opOver:
		return 2, 3
	case opPick:
		return 0, 1
	case opSwap:
		return 2, 2
	case opRot:
		return 3, 3
	case opDeref, opDerefSize, opAbs, opNeg, opNot, opPlusUconst:
		return 1, 1
	case opAnd, opDiv, opMinus, opMod, opMul, opOr, opPlus, opShl, opShr, opShra, opXor,
		opEq, opGe, opGt, opLe, opLt, opNe:
		return 2, 1
	}
	return 0, 0
}

// readMem reads n (1..8) little-endian bytes at addr. It tries a word read at
// addr and, failing that, the aligned words that contain the bytes.
func readMem(mem Memory, addr uint64, n int) (uint64, bool) {
	mask := ^uint64(0)
	if n < 8 {
		mask = 1<<(8*uint(n)) - 1
	}
	if v, ok := mem.ReadUint64(addr); ok {
		return v & mask, true
	}
	base := addr &^ 7
	shift := (addr - base) * 8
	lo, ok := mem.ReadUint64(base)
	if !ok {
		return 0, false
	}
	var buf [16]byte
	binary.LittleEndian.PutUint64(buf[:], lo)
	if shift/8+uint64(n) > 8 {
		if base+8 < base {
			return 0, false
		}
		hi, ok := mem.ReadUint64(base + 8)
		if !ok {
			return 0, false
		}
		binary.LittleEndian.PutUint64(buf[8:], hi)
	}
	return binary.LittleEndian.Uint64(buf[shift/8:]) & mask, true
}

// RegOffset recognises the expressions that CFI most often holds, "register
// plus offset" and "the word at register plus offset": expr is exactly one
// DW_OP_breg<n> or DW_OP_bregx operation, optionally followed by
// DW_OP_deref. It returns the register, the offset and whether the value is
// dereferenced; Eval of such an expression yields reg+off, or the
// pointer-sized word at reg+off. (Pushed CFA or not, the result is the same:
// the operation's value ends on top of the stack.) Unwinders use it to turn
// expressions into plain rules once per row.
func RegOffset(expr []byte) (reg uint64, off int64, deref bool, ok bool) {
	if len(expr) == 0 {
		return 0, 0, false, false
	}
	r := reader{data: expr, off: 1}
	switch op := expr[0]; {
	case op >= opBreg0 && op <= opBreg31:
		reg = uint64(op - opBreg0)
	case op == opBregx:
		if reg, ok = r.uleb(); !ok {
			return 0, 0, false, false
		}
	default:
		return 0, 0, false, false
	}
	if off, ok = r.sleb(); !ok {
		return 0, 0, false, false
	}
	switch {
	case r.off == len(expr):
		return reg, off, false, true
	case r.off+1 == len(expr) && expr[r.off] == opDeref:
		return reg, off, true, true
	}
	return 0, 0, false, false
}
