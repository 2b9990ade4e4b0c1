// Package coredump reads Linux ELF core dumps (ET_CORE) of x86_64 and aarch64
// processes: the threads and their registers, the signal that killed the
// process, the process's name and auxiliary vector, the mapped files, and the
// process memory the core holds.
//
// Data flows in one direction. Open recognises a core by its content (ELF,
// or an ELF core compressed with zstd, xz or lz4 as systemd-coredump stores
// them), decompresses it with a size bound into an unlinked 0600 temporary
// file, and maps it; OpenReader does the same for a stream (a pipe from
// coredumpctl dump); Parse takes an uncompressed core already in memory. All
// decode the ELF header, the program headers and the PT_NOTE notes into a
// Core:
//
//   - Threads from NT_PRSTATUS (the general registers in arch.Regs, DWARF
//     numbering), with the notes that follow each NT_PRSTATUS attached to
//     that thread (NT_ARM_PAC_MASK, NT_ARM_TLS, a per-thread NT_SIGINFO as
//     gdb writes).
//     The thread that took the signal comes first.
//   - Signal from NT_SIGINFO (or the first thread's NT_PRSTATUS when a core
//     has no NT_SIGINFO, as qemu-user's do).
//   - Process from NT_PRPSINFO, Auxv from NT_AUXV, Mappings from NT_FILE.
//
// Memory serves reads of the process's address space from the PT_LOAD
// segments. The kernel leaves out read-only file-backed memory (program text,
// read-only data: p_filesz smaller than p_memsz) when coredump_filter says so;
// Memory reads those bytes from the mapped file named by NT_FILE, opened
// through Options (a symfs root or the caller's own opener), after checking
// the file's build-id against the one in the core's own memory. gdb's gcore
// writes no program header at all for such mappings; there NT_FILE alone
// says what is mapped, and only the file's read-only PT_LOAD bytes are
// served. Writable memory and memory without permissions (guard pages, the
// PROT_NONE gaps between an object's segments) are never read from files.
// Every other address fails with a *MemoryError saying why (ErrUnmapped,
// ErrNotDumped, ErrTruncated). Memory is an unwinder.Memory as it is: its
// ReadUint64 says MemOutside for an unmapped word and MemTruncated for one
// mapped but not in the core, so a thread unwinds with unwinder.Unwind over
// Core.Memory() directly.
//
// Objects lists each mapped ELF object with its load bias and the build-id
// read from the core's memory, from the note its program headers point to in
// the object's first page, as elfutils does; the vdso is found through
// AT_SYSINFO_EHDR.
//
// A damaged core (truncated, zeroed or bit-flipped) gives every thread and
// every byte that can still be read; what could not be read is listed in
// Core.Warnings, each naming the file and offset. Nothing a core says is
// trusted for sizes: counts and lengths are checked against the bytes that
// are there, so a hostile core cannot make the reader allocate without bound.
//
// Where to begin: Open (the package Example), then Core.Threads, Core.Memory
// (an unwinder.Memory) and Core.Objects; report.OpenCore and report.RunCore
// unwind and symbolize every thread.
package coredump
