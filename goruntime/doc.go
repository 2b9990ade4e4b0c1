// Package goruntime reads a Go program's goroutines out of its memory (a
// core dump's): every goroutine of runtime.allgs with its id, status, wait
// reason, creator and the scheduling registers it was saved with
// (g.sched: sp, pc, bp, and lr on arm64; g.syscallsp/pc/bp while in a
// system call), or the M (thread) it runs on.
//
// What the runtime's structures look like comes from the executable:
//
//   - with DWARF, the types runtime.g, runtime.gobuf and runtime.m give
//     the field offsets, and the variables runtime.allgs and
//     runtime.waitReasonStrings their addresses;
//   - stripped (-ldflags=-s -w), the runtime's own type descriptors, which
//     the garbage collector needs and no linker flag removes, give the
//     same structs with their field names and offsets (found from the
//     moduledata record, which points to the pclntab); runtime.allgs is
//     found as the slice runtime.forEachG (or runtime.allgadd) loads, word
//     and length, from the runtime's zero-initialized data, and checked in
//     memory (the first goroutine must be goroutine 1); the wait reasons as
//     the runtime's array of strings that begins "", "GC assist marking".
//
// The type descriptor and moduledata layouts are those of Go 1.21 to 1.26
// (internal/abi); a binary of another Go, or one missing a field ustack
// needs, gets an error saying so rather than a guess.
//
// Data flows one way: elfcache's Object (pclntab, moduledata, symbols,
// DWARF, the file's bytes) and the process memory in, []Goroutine out;
// package report turns them into samples and unwinds them.
package goruntime
