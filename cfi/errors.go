package cfi

import (
	"errors"
	"fmt"
)

// ErrNoFDE is returned by Table.Lookup when no FDE covers the program counter.
var ErrNoFDE = errors.New("cfi: no FDE covers the address")

// ErrStackSwitch is returned, wrapped, by an object whose function has
// switched stacks at the program counter (Go's runtime.systemstack,
// runtime.morestack and runtime.asmcgocall, once on the thread's g0 stack):
// its caller's frame is on the other stack, which no row can describe.
var ErrStackSwitch = errors.New("the function switched stacks: its caller is on the other stack")

// ErrInstallingHandler is returned, wrapped, by an object for the code of
// an exception unwinder that is installing a handler's frame (libgcc's
// __builtin_eh_return epilogues, from the return of their call of
// uw_install_context_1 on): its CFI then gives the handler as its caller, with the handler's
// registers but its own stack pointer, from which the handler's callers
// cannot be found. It matches ErrStackSwitch too (errors.Is): the walk ends
// there as at a stack switch.
var ErrInstallingHandler error = installingHandler{}

type installingHandler struct{}

func (installingHandler) Error() string {
	return "the exception unwinder is installing a handler's frame: its CFI gives the handler's registers with its own stack pointer"
}

func (installingHandler) Is(target error) bool { return target == ErrStackSwitch }

// A FormatError reports malformed call frame information: the section, the
// byte offset within it at which the problem was found, and what is wrong.
type FormatError struct {
	Section string // section name, as given in Section.Name
	Offset  int64  // byte offset within the section
	Msg     string // description of the problem
	Err     error  // underlying error, if any
}

// Error returns the message, naming the section and offset.
func (e *FormatError) Error() string {
	s := fmt.Sprintf("cfi: %s at offset %#x: %s", e.Section, e.Offset, e.Msg)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying error, if any.
func (e *FormatError) Unwrap() error { return e.Err }

// An ExprError reports a DWARF expression that could not be evaluated: the
// operation and its byte offset within the expression.
type ExprError struct {
	Op     byte   // the DW_OP_* opcode
	Offset int    // byte offset of the operation within the expression
	Msg    string // description of the problem
}

// Error returns the message, naming the operation and its offset.
func (e *ExprError) Error() string {
	return fmt.Sprintf("cfi: expression op %s (%#x) at offset %d: %s", opName(e.Op), e.Op, e.Offset, e.Msg)
}
