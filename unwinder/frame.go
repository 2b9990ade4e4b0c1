package unwinder

import "fmt"

// Method says how a frame's registers were recovered.
type Method uint8

const (
	// MethodContext: frame 0, taken from the captured registers.
	MethodContext Method = iota
	// MethodCFI: recovered by replaying the callee's DWARF CFI row.
	MethodCFI
	// MethodFramePointer: recovered by following the callee's frame pointer
	// (rbp on x86_64, x29 on arm64) because it had no CFI.
	MethodFramePointer
	// MethodLinkRegister: the return address was taken from the callee's
	// link register (arm64 first frame without CFI).
	MethodLinkRegister
	// MethodSignal: every register was restored from the signal context
	// that the kernel saved on the stack; the PC is the interrupted
	// instruction, not a return address.
	MethodSignal
	// MethodSignalMarker: as MethodSignal, for a signal frame found by the
	// kernel's markers in it (arm64's fpsimd_context magic, x86_64's
	// xstate magic) because the sigreturn trampoline's code was not in the
	// capture.
	MethodSignalMarker
	// MethodBadCall: the frame below's exact PC lay in no code (a call
	// or a tail call's jump through a bad function pointer, such as
	// NULL), and this frame's return address is the one the call left
	// (x86_64: at the SP; arm64: in x30), taken only where the
	// instruction before it is a call. Every other register is the frame
	// below's (arm64's x30 is unknown).
	MethodBadCall
	// MethodFrameless: the frame below had no CFI and had pushed nothing
	// (x86_64): its return address was the word at its SP, where the call
	// into its function left it, taken only where the instruction before
	// it is a call to that function's first instruction (a direct call,
	// one to a jump to it, or one through a register that still holds
	// it).
	MethodFrameless
	// MethodPrologue: the frame below had no CFI and no frame pointer set
	// up: its function's instructions from its start to its PC were
	// decoded (x86_64: the code as laid out, following branches, whose
	// pushes and stack adjustments give the CFA and the callee-saved
	// registers' slots, prologueStep; a return address after a call not
	// shown to be to the function makes the stack StopFramePointerGuess;
	// arm64: constant SP adjustments and stores of x19-x30
	// relative to the SP up to the PC or the first branch,
	// arm64PrologueStep); the return address is taken only where the
	// instruction before it is a call to that function's first
	// instruction (arm64: or a blr).
	MethodPrologue
	// MethodScan: the frame below was in a file's code the capture
	// cannot show (a mapping of a file without an object: a missing or
	// mismatched library; not a JIT's anonymous memory) and had no usable
	// frame pointer; its caller's return address is the first word above its
	// SP, within 8 KiB, that points just after a call in code with CFI,
	// as breakpad's and rust-minidump's stack scanning find it. Every
	// register but the PC and the SP (the word's address plus one word)
	// is unknown. Callers in between, in the unknown code, are missing,
	// and a word left by an earlier call may be taken: the stack is
	// StopFramePointerGuess, never complete.
	MethodScan
)

var methodNames = [...]string{"context", "cfi", "fp", "lr", "signal", "signal_marker", "bad_call", "frameless", "prologue", "scan"}

// String returns the short name used in reports: context, cfi, fp, lr,
// signal, signal_marker, bad_call, frameless, prologue, scan.
func (m Method) String() string {
	if int(m) < len(methodNames) {
		return methodNames[m]
	}
	return fmt.Sprintf("method(%d)", uint8(m))
}

// StopReason says why an unwind ended.
type StopReason uint8

const (
	// StopOutermost: the outermost frame was reached: its CFI marks the
	// return address undefined (as in _start or clone), or gives a zero
	// return address in a function its object says begins a stack
	// (OutermostObject; elsewhere a zero return address is an overwritten
	// stack: StopNoMapping at PC 0); or, without CFI, the frame pointer or
	// the return address is zero in such a function; or a frame returns
	// into such a function and its caller's return address lies in no
	// code or past the captured stack (baseFrame). A zero frame pointer
	// elsewhere, or in a mapping without an object, is StopNoUnwindInfo.
	StopOutermost StopReason = iota
	// StopTruncated: a value needed for the next frame lies beyond the end
	// of the captured stack snapshot.
	StopTruncated
	// StopNoMapping: a return address is in no mapping, or in one that is
	// neither executable nor an object file's (the stack, the heap), or
	// the first frame's PC is in no mapping at all. Such a return address
	// is not reported as a frame; Result.Err is a *NoMappingError holding
	// it.
	StopNoMapping
	// StopNoUnwindInfo: no CFI covers the PC and no fallback applied (or
	// the fallback ended its chain where nothing proves the outermost
	// frame); Result.Err says which.
	StopNoUnwindInfo
	// StopLoop: the stack did not move (the CFA did not grow) or a
	// (CFA, PC) pair repeated.
	StopLoop
	// StopDepth: the frame buffer or the configured depth limit is full.
	StopDepth
	// StopBadCFI: the CFI for the PC is malformed or could not be evaluated.
	StopBadCFI
	// StopUnknownRegister: a register the rules need was not captured or
	// could not be recovered (the kernel did not save it).
	StopUnknownRegister
	// StopBadMemory: a rule asked for memory below the snapshot or outside
	// every captured region (not a truncation: the address is wrong).
	StopBadMemory
	// StopFramePointerGuess: the walk reached a frame that ends a stack,
	// as for StopOutermost, but on the way it left a frame without CFI
	// by its frame pointer where nothing shows that the frame's function
	// set one up (framePointerSetUp: no symbols, or no instruction that
	// sets it up before the PC): following the caller's frame pointer
	// instead skips the caller. The frames are kept; the stack is not
	// called complete. Result.Err is a *FramePointerGuessError naming
	// the first such frame.
	StopFramePointerGuess
	// StopStackSwitch: the walk reached a function that had switched
	// stacks and called from the other one (Go's runtime.systemstack,
	// runtime.morestack and runtime.asmcgocall on a thread's g0 stack:
	// the object's rows answer cfi.ErrStackSwitch): its callers are on
	// the stack it left, which its rows cannot reach. Result.Err names
	// the function. Also a row marked OtherStack (Go's vDSO calls, which
	// move SP onto the g0 stack and find their caller from the frame
	// pointer) whose caller's frame lies outside the captured memory: a
	// recording's snapshot holds the g0 stack, not the goroutine's.
	// A Go core's reader goes on from the goroutine's saved
	// registers; a recording's, with the kernel's call chain where it
	// provably continues.
	StopStackSwitch
)

var stopNames = [...]string{"outermost", "truncated", "no_mapping", "no_unwind_info",
	"loop", "depth", "bad_cfi", "unknown_register", "bad_memory", "fp_guess", "stack_switch"}

// String returns the short name used in reports and fixtures, such as
// "outermost" or "truncated".
func (s StopReason) String() string {
	if int(s) < len(stopNames) {
		return stopNames[s]
	}
	return fmt.Sprintf("stop(%d)", uint8(s))
}

// ParseStopReason returns the StopReason whose String is name.
func ParseStopReason(name string) (StopReason, bool) {
	for i, n := range stopNames {
		if n == name {
			return StopReason(i), true
		}
	}
	return 0, false
}

// Frame is one frame of an unwound stack.
type Frame struct {
	// PC is the frame's program counter: for frame 0 and for a frame
	// interrupted by a signal the address of the next instruction to run,
	// otherwise the return address (with any pointer authentication code
	// removed).
	PC uint64
	// SP is the frame's stack pointer.
	SP uint64
	// CFA is the frame's canonical frame address, known once the unwinder
	// has stepped past the frame (0 for the last frame of a stack).
	CFA uint64
	// Mapping is the index of the mapping containing PC in the
	// AddressSpace, or -1.
	Mapping int32
	// Method says how this frame's registers were recovered.
	Method Method
	// Flags holds FrameReturnAddress, FrameSignalTrampoline and
	// FrameRestoredRegister.
	Flags FrameFlags
}

// FrameFlags describe a frame's PC.
type FrameFlags uint8

const (
	// FrameReturnAddress: PC is a return address. The call instruction is
	// just before it, so symbolize and look up PC-1.
	FrameReturnAddress FrameFlags = 1 << iota
	// FrameSignalTrampoline: the frame is the kernel's or libc's
	// sigreturn trampoline (gdb's "<signal handler called>"); the next frame
	// was interrupted by a signal.
	FrameSignalTrampoline
	// FrameRestoredRegister: some of the frame's registers are the values
	// its callee held, not words read from the callee's save slots: the
	// callee's CFI placed those slots below its stack pointer, so the
	// callee was in its epilogue (after "leave" or "pop %rbp", before
	// "ret") and had already restored them. The slots lie outside the
	// live stack, and so outside any snapshot that starts at SP.
	FrameRestoredRegister
)

// LookupPC returns the address to symbolize: PC-1 for return addresses, so
// that a call that ends a function is attributed to that function, and PC
// otherwise.
func (f *Frame) LookupPC() uint64 {
	if f.Flags&FrameReturnAddress != 0 && f.PC > 0 {
		return f.PC - 1
	}
	return f.PC
}

// Result is the outcome of one Unwind.
type Result struct {
	// Frames is the number of frames written into the caller's buffer.
	Frames int
	// Stop says why the unwind ended.
	Stop StopReason
	// Err gives detail for StopBadCFI, StopNoUnwindInfo and StopNoMapping
	// (a *NoMappingError), or nil.
	Err error
	// Beyond is, for StopTruncated, the address of the word beyond the
	// captured memory whose value the next frame needed (the last frame's
	// return address slot, or a register's save slot the rules need):
	// what a call chain recorded at the same instant holds there says
	// how the stack goes on (report's repair).
	Beyond uint64
}

// NoMappingError is the Err of a Result that ended with StopNoMapping: the
// address that lies in no executable mapping.
type NoMappingError struct {
	// PC is the return address (or, for the first frame, the PC).
	PC uint64
	// Mapped is true when PC lies in a mapping that is not executable
	// (and maps no object file).
	Mapped bool
}

func (e *NoMappingError) Error() string {
	if e.Mapped {
		return fmt.Sprintf("pc %#x is in a mapping that is not executable", e.PC)
	}
	return fmt.Sprintf("pc %#x is in no mapping", e.PC)
}
