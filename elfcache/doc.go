// Package elfcache opens the ELF objects (executables and shared libraries)
// that a profiled process had mapped and answers what ustack's unwinder and
// reports need from them: unwind rows for link-time addresses (FindRow),
// instruction bytes (ReadCode), the load bias of a runtime mapping (Bias),
// and function names (Symbolize).
//
// Data flow. Open maps the file read-only (or reads it, or uses the bytes or
// io.ReaderAt given to OpenBytes and OpenReader) and parses only the ELF
// header, program and section headers, the GNU build-id note and
// .gnu_debuglink. Each heavier piece is built once, on first use, under its
// own sync.Once:
//
//   - the separate debug file: searched by build-id
//     (<debugdir>/.build-id/xx/yyyy.debug), then by debug link (next to the
//     object, in its .debug subdirectory and under <debugdir>/<dir>), each
//     candidate checked against the object's build-id or the link's CRC-32;
//     last, Options.Fetcher (a debuginfod client) is asked by build-id;
//
//   - the CFI table: a cfi.Table over .eh_frame, .eh_frame_hdr and
//     .debug_frame (the object's own or else the debug file's), with
//     compressed sections (SHF_COMPRESSED zlib or zstd, and .zdebug_
//     "ZLIB" sections) decompressed into memory and the others used in
//     place;
//
//   - the symbol table: .symtab (the object's or else the debug file's)
//     merged with .dynsym, reduced to one preferred alias per address and to
//     disjoint address spans, with all names in one string so that
//     Symbolize allocates nothing.
//
//   - the Go function table: .gopclntab (Go 1.16 and later), which Go
//     binaries keep even when built with -ldflags='-s -w'; its pcsp tables
//     give unwind rows and its names a symbol table where the object has
//     no CFI and no .symtab (gopclntab.go); with the moduledata record
//     (runtime.text, go:func.*) found by the pointers it holds to the
//     table;
//
//   - the line index for SourceFrames (lines.go): the units of the DWARF
//     (the object's or the debug file's), with names shared through a dwz
//     supplementary file resolved in it (dwz.go) and the scopes of split
//     DWARF skeleton units, DWARF 5's and the GNU DWARF 4 form of
//     -gdwarf-4 -gsplit-dwarf, read from their .dwo file (as named, under
//     Options.SymFS, or next to the file the skeletons are in) or the
//     FILE.dwp package (index version 5 or 2) (splitdwarf.go); a unit
//     whose .dwo is missing or has another DWO id keeps its lines and is
//     reported by SplitDWARFError. Where DWARF has nothing for an address,
//     a Go function's pcfile and pcln tables give its file and line and
//     its inline tree (in go:func.*) the inlined calls, as Go's runtime
//     reads them for its tracebacks (golines.go); the function and file
//     name tables are copied into two strings on first use so that
//     lookups allocate nothing.
//
//   - the call sites (callsites.go): DW_TAG_call_site and DWARF 4's
//     DW_TAG_GNU_call_site entries by return address and, for tail calls,
//     by the function they are in, read from one compilation unit of the
//     line index's DWARF on the first query into it; the targets that
//     DWARF names only by a declaration are found by name in the symbol
//     tables, as gdb does. resolve follows them to the frames tail calls
//     left out.
//
// Sources says, for a summary, where each kind of information came from.
//
// FindRow asks the CFI table and, for addresses in PLT sections that no FDE
// covers, synthesizes the row of a PLT stub, and for Go functions without
// CFI the row of their pcsp table. An Object is immutable once
// opened and safe for concurrent use; Cache shares objects between callers,
// keyed by build-id or else by path, size and modification time.
//
// A long-lived Cache (a tracer's whole run) keeps to a memory budget
// (Cache.SetBudget): each Open takes a reference to the object and
// Release gives it back; the objects no one holds are closed, least
// recently released first, while the bytes the cache's objects hold
// (Object.HeldBytes: decompressed sections, symbol table, CFI index, line
// index and parsed units, headers) exceed the budget. An object in use is
// never closed; one closed and asked for again is opened again.
// Cache.Stats counts objects, bytes, evictions, misses and re-opens.
//
// Malformed files yield errors of type *Error naming the file, the section
// and the offset; panics inside debug/elf or package cfi on corrupt input
// are recovered and reported the same way. Mapped files must not be
// truncated while in use (as with any mmap, that would fault).
//
// Where to begin: NewCache and Cache.Open (and Release, with a budget) for
// objects shared between goroutines (Open for one), then Object.Symbolize, Object.SourceFrames and
// Object.FindRow.
package elfcache
