// Package resolve is the one place where a process's memory maps become
// something the unwinder can walk and a reader can read: it finds the object
// behind every mapping, builds the unwinder.AddressSpace, and turns unwound
// frames into symbolized frames with their inline chains.
//
// Data flow: a front end (report for perf.data, capture --unwind for a live
// recording, internal/fixture for gdb-checked fixtures) hands a Resolver the
// mappings in force at a sample (procmaps.Map, with an optional object file
// or ready-made unwinder.Object per mapping). NewSpace opens each mapped
// object once per Resolver, by the build-id policy below, computes its load
// bias and returns a Space: the unwinder.AddressSpace plus the per-mapping
// details, found again through unwinder.Mapping.Tag. The front end unwinds
// with the Space's AddressSpace; a Symbolizer (one per goroutine) then
// appends, for each unwinder.Frame, the frames of the functions inlined at
// its address and the physical frame itself to a caller-owned []Frame,
// without allocating once its buffers have grown; it remembers the answers
// for the last addresses it saw (a profile's stacks repeat them). Before a
// caller, it appends the functions that tail-called between it and its
// callee (tailcall.go: DWARF call sites followed by gdb's rules); Reset
// begins each stack. Each frame says how it was recovered by a How
// (HowOf(unwinder.Method) for unwound frames). A bare address (a sampled
// PC with no stack, or one a tracer found elsewhere) is symbolized with
// Symbolizer.AppendAddr, inline chain included.
//
// Objects are chosen as perf does, never silently wrong: an object the user
// named for the path (a GivenSource, ustack report --exe) when its build-id
// matches; the file itself (under Options.SymFS, or the path without the
// kernel's " (deleted)" for a file deleted while mapped) when its build-id
// matches the one the recording gave;
// else the recording's archive copy (Options.Objects); else perf's build-id
// cache (Options.BuildIDDir, including [vdso]/ID/vdso); else, with
// Options.Fetcher (debuginfod), the object fetched by its build-id. Debug
// files no local search finds come through the Fetcher too. A file whose
// build-id differs is refused with a warning naming both ids. When the
// recording was made on this machine (Options.SameMachine), the device and
// inode (and inode generation) of perf's MMAP2 records say more: the file
// at a mapping's path (under SymFS) that is the very inode mapped is used
// whatever build-id the recording gives, with a warning when it differs
// (perf reads the build-ids of its list by path as the host sees them, so
// those of a process in a chroot or container are the host's files'); a
// file at the path (not under SymFS) that is another inode of the device
// mapped is not the mapped file: with the recording's build-id it is used
// as the same build, with a warning that for a chroot's or container's
// process that build-id is the host file's; without a recorded build-id
// (perf record lists only objects with sampled IPs) it is refused with a
// warning naming both inodes: a program rebuilt after the recording.
// Objects that
// could not be used are collected for the report's summary (Missing), and
// where each object found got its information (Objects); each warning is
// given once per path. An object whose split DWARF (a .dwo or .dwp, DWARF 5
// or GNU DWARF 4) a frame's lookup could not read is warned about once too,
// naming the object, the .dwo, the files looked at and the DWO ids:
// its inlined functions are missing then. Prepare opens an object ahead of its first sample,
// so that a front end can fetch a recording's objects in parallel. JIT code
// in anonymous memory is named from the JIT's /tmp/perf-PID.map (and, for
// Python's -X perf trampolines, the py:: entries of a process whose
// libpython holds the known x86-64 trampoline code get that code's unwind
// rows: pytrampoline.go; other JIT code is walked by frame pointers); a process
// that mapped a JIT's jitdump (a marker mapping of jit-PID.dump, found at
// its path under SymFS, in Options.JITDumpDirs or in the archive) gets each
// function the dump loaded as a mapping of its own, laid over the JIT's
// memory (jit.go): named by the dump, with its source lines, and unwound by
// the CFI of its UNWINDING_INFO. Which code an address held depends on the
// time: Space.At returns the Space of a sample's time, by the dump's load
// and move timestamps.
//
// A Resolver owns what it opens: Close releases its object cache (unless the
// caller supplied one), the objects it made from archive or vdso bytes, and
// its perf maps and jitdumps.
//
// A Resolver may serve a tracer's whole run: with Options.CacheBudget, each
// Space holds a reference to the objects it maps, Space.Close gives them
// back (a Space pinned for a walk, Space.Pin, gives them back at its last
// Unpin), and objects no Space holds are closed, least recently used
// first, while the objects hold more than the budget. Close the Spaces of
// processes that exited and ForgetPID them; CacheStats counts objects
// open, bytes held, evictions and re-opens.
//
// Where to begin: the package Example; New, Resolver.NewSpace, then a
// Symbolizer's Append (unwound frames, Reset before each stack) or
// AppendAddr (bare addresses). Package tracer wraps this for live processes
// and normalized addresses.
package resolve
