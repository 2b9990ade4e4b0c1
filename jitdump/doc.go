// Package jitdump reads the jitdump files that JIT compilers write for perf
// (tools/perf/Documentation/jitdump-specification.txt): V8/node with
// --perf-prof, the JVM's libperf-jvmti agent, .NET with
// DOTNET_PerfMapEnabled=1, wasmtime, LuaJIT, Julia. A JIT opens
// jit-PID.dump, maps a page of it executable (the "marker" mapping that a
// perf recording sees) and appends one record per generated function.
//
// # Data flow
//
//	NewReader(name, r, size)   the file header: magic 'JiTD' in either byte
//	  -> *Reader, Header       order, version, elf_mach, pid, timestamp,
//	                           flags; its total_size skips fields added later
//	Reader.Next() -> Record    one record at a time, in file order: its id,
//	                           offset, size, timestamp, and the payload of
//	                           a known id (CodeLoad, CodeMove, DebugInfo,
//	                           UnwindingInfo; CODE_CLOSE has none); an
//	                           unknown id comes back without a payload,
//	                           skipped by its size; io.EOF at the end
//
// The format's own rules that a reader applies: a DEBUG_INFO and an
// UNWINDING_INFO record describe the CODE_LOAD that follows them; a
// CODE_MOVE names, by code index, a function loaded before; timestamps are
// the JIT's CLOCK_MONOTONIC (perf record -k 1), or the CPU's time-stamp
// counter when Header.Flags has FlagArchTimestamp. Which function an address
// holds at a given time is the caller's business (package resolve).
//
// # Damage
//
// Every length in a record is checked against the record and every record
// against the file's size, so no allocation exceeds the file; a record is
// read into its own buffer, which the payload's byte slices and strings
// share. A truncated or damaged dump (a JIT still writing, a file cut short)
// yields every record before the damage and then an *Error naming the file,
// the offset and what was wrong; after an error Next returns it again.
//
// The package imports nothing of ustack.
//
// Where to begin: NewReader, then Reader.Next for each record.
package jitdump
