// Package minidump reads and writes minidumps of Linux processes: the
// format of Breakpad, Crashpad (Chromium, Electron), Sentry's native SDK
// and lldb's process save-core --plugin-name=minidump.
//
// Parse decodes a minidump held in memory (Open and OpenReader find it in
// a file or a stream, also compressed with zstd, xz or lz4, through
// coredump.OpenImage) into a Dump: the header and stream directory, the
// system information (which architecture), the thread list with each
// thread's register context (CONTEXT_AMD64; arm64 in Breakpad's and
// Crashpad's layout, and Breakpad's older one) and the thread names, the
// memory list and the 64-bit memory list, the module list with each
// module's build-id from its CodeView record, the exception stream (the
// thread that crashed, the signal, code and address), and the Linux
// streams Breakpad defined: /proc/PID/maps, auxv, cmdline, status,
// environ and the dynamic linker's r_debug list (DSO debug).
//
// A module's build-id comes from its CodeView record in one of two forms.
// Breakpad's ELF form ('BpEL', MDCVInfoELF) holds the whole build-id. The
// PDB70 form ('RSDS'), which Windows uses for a PDB's GUID and age and
// older Breakpad and Crashpad wrote for ELF objects, holds only 16 bytes:
// the GUID's bytes, as they lie in the file, are the first 16 bytes of the
// build-id (Breakpad copies them into the GUID structure unchanged; lldb
// reads them back the same way). Module.BuildIDPrefix marks such an id:
// it identifies a file whose build-id begins with it. The GUID printed as
// text (Breakpad's debug identifier) shows its first three fields as
// little-endian numbers, so the bytes 0-3, 4-5 and 6-7 appear reversed;
// Module.DebugID gives that form, for symbol servers that use it.
//
// Dump.Core turns a Dump into a coredump.Core, so that a minidump's
// threads take the path of a core's (report.RunCore): the same address
// space from the maps (or, without them, the modules), the same objects
// found by build-id, the same samples. Only the dump's own memory is read.
//
// Write does the reverse for a core dump: a minidump of its threads, each
// one's stack from its stack pointer up to a bound and the memory around
// each thread's program counter, the vdso, the modules with their
// build-ids and paths, and the Linux streams.
//
// A module's path and extent come from LinuxMaps where a mapping starts
// at its base: lldb names modules as the dynamic linker does
// (/lib/x86_64-linux-gnu/libc.so.6 where the maps say /usr/lib/...) and
// sizes them as their first segment only, and the mappings take their
// build-id from the object of their path.
//
// What has been checked against other tools' files, and what has not.
// Checked: lldb 15's minidumps of live x86_64 processes (report's
// TestLLDBMinidump, testdata/minidumps/README.md: the thread list, lldb's
// 720-byte contexts, the memory list, 'BpEL' modules, the exception and
// the Linux streams lldb writes); lldb 15's reading of Write's minidumps
// (report's TestMinidumpLLDB); the 64-bit memory list's layout, as lldb
// 15 reads it (report's TestLLDBReadsMemory64List: no writer on hand
// makes one, lldb 15 writes style stack only, so the test moves an lldb
// minidump's memory list into one). Not checked against any real
// writer's file, only against the layouts in Breakpad's and Crashpad's
// headers: the DSO debug stream (MDRawDebug64 and its MDRawLinkMap64
// entries; read into Dump.DSODebug, used by nothing else), PDB70 CodeView
// records of ELF modules, the arm64 contexts (both layouts), the thread
// name list, and Breakpad's, Crashpad's and Sentry's minidumps as a whole.
//
// A damaged minidump yields what is intact: each stream is decoded on its
// own, and what could not be read is listed in Dump.Warnings, naming the
// file and offset. Counts and sizes are checked against the file, so a
// hostile minidump cannot make the reader allocate without bound.
//
// Where to begin: Open or Parse, then Dump.Core for a coredump.Core that
// report.RunCore unwinds; Write or WriteFile to make one of a core.
package minidump
