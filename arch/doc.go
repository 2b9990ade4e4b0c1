// Package arch describes the user register sets that ustack unwinds: the DWARF
// register numbers that CFI refers to, the order in which perf's
// sample_regs_user delivers them, which registers hold the program counter,
// stack pointer, frame pointer and return address, and how arm64 pointer
// authentication codes are removed from return addresses, and the names of
// the registers both ways (RegName, RegByName for DWARF numbers;
// PerfRegName, PerfRegByName for perf's).
//
// It is the bottom of ustack's dependency graph: it imports nothing of ustack
// and knows nothing of files or formats.
//
// Data flows through it as register files: a perf sample carries its user
// registers in sample_regs_user order (PerfMask says which), Arch.LoadPerf
// turns them into a Regs indexed by DWARF number with a known-bit per
// register (package coredump fills a Regs from NT_PRSTATUS likewise), and
// the unwinder reads and writes that Regs frame by frame.
//
// Where to begin: Arch (AMD64, ARM64) and its PC, SP, FP and RA; Regs,
// filled by Arch.LoadPerf from a perf sample or by Regs.Set with RegByName's
// numbers from a tracer's own capture.
package arch
