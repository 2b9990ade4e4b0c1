// Package unwinder recovers a user-space call stack from the registers and
// the stack snapshot captured at a kernel event, by replaying DWARF call frame
// information offline.
//
// A sample flows through it like this. The caller describes the process with
// an AddressSpace (its mappings, each with the Object that supplies unwind
// rows and code bytes for it), passes the captured registers (arch.Regs) and
// the captured memory (a Memory: the Stack snapshot of a perf sample,
// Segments for a core dump, or its own), and owns the []Frame buffer that
// Unwind fills.
// Frame 0 comes from the registers. For every further frame Unwind finds the
// mapping of the PC, asks the Object for the CFI row that covers it (looking
// up PC-1 for return addresses, the PC itself after a signal frame), computes
// the CFA and the caller's registers, reading memory only through the
// Memory, and checks that the step made sense. Where an object has no CFI for a PC,
// a signal trampoline is recognised by its instruction bytes (read from the
// object, or from the Memory where no object holds them), or, where its code
// is not in the capture at all, the signal frame by the kernel's marker in
// it (MethodSignalMarker); otherwise
// the frame-pointer chain (or, for arm64's first frame, the link register) is
// followed; every Frame records which of these recovered it, and the Result
// says why the walk ended. A walk ends complete (StopOutermost) only where
// that is proven: CFI leaves the return address undefined, or it or a
// fallback's chain finds a zero return address or frame pointer in a
// function its object says begins a stack (OutermostObject), or the first
// frame is a new thread's where a clone system call returned to it, with
// the result register 0 (ThreadStartObject).
//
// Two rules correct what CFI says. A save slot below the frame's SP (gcc's
// rows at the ret of "leave; ret" and "pop %rbp; ret" epilogues still name
// CFA-16 for rbp) means the epilogue restored the register already: it keeps
// its value and the caller's frame gets FrameRestoredRegister. And on arm64
// the 16 bytes PLT0 pushes for lazy binding belong to neither frame, which
// glibc's CFI for the resolver leaves out of its CFA (plt.go). A return
// address in no mapping, or in one that is neither executable nor an
// object file's, ends the walk (StopNoMapping) without becoming a frame.
//
// The package knows nothing of file formats: ELF lookup lives in package
// elfcache, CFI decoding in package cfi, register conventions in package arch.
//
// Rows are applied in one of two ways. When a row enters the Cache it is
// compiled into a compact form (fast.go): the CFA as register plus offset
// (or the word at register plus offset) and plain offset, value and
// register rules, with DWARF expressions of the form "register plus
// offset" (glibc's signal trampolines) turned into such rules once. The
// loop applies that form with direct loads from a *Stack's snapshot (or
// the core segment holding the stack). Most frames take a tighter loop of
// their own (walk.go): a frame in one of the two mappings found last, with
// a cached row of the common shape (only save slots, the caller's SP the
// CFA, the CFA a register plus offset) whose slots lie inside that block;
// it hands any other frame to the general loop, and takes over again after
// it. Rows with other expressions, and addresses without CFI, take the general step
// (step.go), which evaluates expressions with cfi.Eval and runs the
// fallbacks (fallback.go).
//
// A second unwind, WalkFramePointers (fpwalk.go), follows frame records by
// the rules the kernel uses for a user stack (perf_callchain_user) on the
// same registers and Memory, without objects or CFI: the frames a
// frame-pointer profiler would have shown for the same sample, and why its
// chain ended (FPResult.Exact: whether the kernel's walk ends there too).
//
// An Unwinder holds only configuration and may be shared. A Cache holds the
// per-worker state (cache.go: a 2-way set-associative cache of compact rows,
// 128 KiB, and a small side cache of full rows for the general step); give
// each goroutine its own. With a warm Cache, Unwind allocates nothing.
//
// Where to begin: the package Example (exported API only); New,
// NewAddressSpace and Unwinder.Unwind. A tracer unwinding a live process
// starts higher, at package tracer; one reading perf.data or cores, at
// package report.
package unwinder
