// Package capture records user registers and user stacks at kernel events
// with perf_event_open, in pure Go: the engine of `ustack record`.
//
// # Recording
//
// NewRecorder parses the events (ParseEvent: software clocks and counters,
// tracepoints found in tracefs, uprobes through the uprobe PMU, kprobes
// through the kprobe PMU or, without it, tracefs kprobe_events lines that
// Run removes however it ends, hardware breakpoints and watchpoints, by
// address or by a global's name) and the target (a command started at a gate
// and enabled on exec, a running process and all its threads, or every
// CPU; with the last two a command, when given, is only run, and the
// recording lasts while it runs). Run opens each event on every online CPU with the sample_type of
// perf record --call-graph dwarf (IDENTIFIER, IP, TID, TIME, CPU, PERIOD,
// CALLCHAIN (the kernel's chain and, unlike perf's dwarf mode, the user part
// the kernel finds by frame pointers), REGS_USER with the architecture's
// full mask, STACK_USER, and RAW for tracepoints), one mmap'd ring buffer
// per CPU into which the CPU's other events are redirected. The first event
// also tracks the address spaces (mmap2, comm, comm_exec, task), and
// commands and processes are followed into new threads and children
// (inherit).
//
// Records are copied verbatim from the rings (data_head read with an
// atomic load, data_tail published after the records are consumed, records
// that wrap around the ring copied out) into a perf.data file written with
// perfdata.Writer, one FINISHED_ROUND per pass, flushed after each pass.
// The file starts with a valid header whose data size is 0, which readers
// take as "the data runs to the end of the file": a recorder killed with
// SIGKILL leaves a file from which every complete record is recovered.
// Ending normally (the command exits, Ctrl-C, SIGTERM, a duration) writes
// the feature sections (BUILD_ID, ARCH, OSRELEASE, NRCPUS, SAMPLE_TIME,
// EVENT_DESC ...) and the final header. LOST and LOST_SAMPLES records are
// kept in the file and counted in Stats.
//
// Processes that already run (-p, -a) are described first by synthesized
// COMM, FORK and MMAP2 records read from /proc, like perf's.
//
// A watchpoint by name (mem:BINARY:SYMBOL) watches the symbol's value plus
// the object's load bias in the process. For -p it is read from
// /proc/PID/maps before the events are opened. For a command the event is
// opened disabled at the link-time address; Run lets the command exec
// under ptrace (PTRACE_SEIZE, PTRACE_O_TRACEEXEC), steps it from syscall
// to syscall until the object is mapped, moves the watchpoint there
// (PERF_EVENT_IOC_MODIFY_ATTRIBUTES), enables it and detaches, before the
// file's header is written, so that its attr holds the address.
//
// # The companion archive
//
// Next to OUTPUT the recorder writes OUTPUT.ustack (archive.Writer,
// docs/DUMP_FORMAT.md): a tar of gzip-compressed members holding
// /proc/kallsyms, the vDSO image and every mapped executable object (and its
// separate debug file when installed), keyed by build-id, so that a report
// needs none of the recording machine's files. Package archive reads it
// back.
//
// # Unwinding at capture time
//
// With Options.Unwind each sample is unwound when it is read (package
// unwinder over elfcache objects of the live files, maps followed with
// procmaps) and written without registers and stack bytes, its user frames
// appended to the callchain after PERF_CONTEXT_USER, so the file holds no
// stack memory and perf script prints the frames as it does for
// frame-pointer call graphs.
//
// Where to begin: ParseEvent and Record (what ustack record runs); ReadVDSO
// for the running kernel's vdso.
package capture
