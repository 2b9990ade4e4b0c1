// Package tracer is ustack's front door for a program that traces other
// processes (an eBPF profiler, a ptrace-based sampler, a crash handler):
// unwind and symbolize a stack it captured in a live process, turn
// addresses into build-id and file offset to symbolize elsewhere, and
// symbolize such normalized addresses on another machine by build-id.
//
// Where to begin: New makes a Tracer, one for the whole run, shared by
// every goroutine; it owns the objects it opens (close it at the end).
// Tracer.Process(pid) reads a live process's maps (/proc/PID/maps; files
// a container mapped are opened through /proc/PID/root), and finds its
// objects, the vdso and JIT perf maps (/tmp/perf-PID.map). Each goroutine
// makes a Walker (Tracer.NewWalker), whose Unwind takes the registers and
// the stack bytes the tracer captured (from the stack pointer up) and
// returns the symbolized frames, inline frames included, innermost first.
// When the PC or a return address lies outside the maps read, the
// process's maps are read again (it mapped something new) and the stack
// is walked once more. Once its buffers have grown, a Walker allocates
// nothing for a stack in a process whose maps it knows.
//
// Addresses to symbolize later or elsewhere: Process.Normalize gives each
// address's object path, build-id and file offset (blazesym's
// normalize_user_addrs). Walker.SymbolizeNormalized names a normalized
// address where the objects are found by build-id: the file at the
// recorded path when its build-id matches, else Options.BuildIDDirs (perf's
// build-id cache layout, .build-id/XX/REST), else debuginfod
// (Options.Fetcher), with inline frames and source lines.
//
// A Tracer runs as long as the tracing does. With Options.CacheBudget
// the objects no process uses any more (their process exited and was
// forgotten, Tracer.Forget, or its maps were read again without them)
// are closed, least recently used first, while the objects hold more than
// the budget; those of the processes the Tracer serves stay open, and a
// Walker's stack in progress keeps its process's objects open until it
// ends. Tracer.CacheStats counts objects open, bytes held, evictions and
// re-opens, for a tracer's own metrics.
//
// Frames are resolve.Frame (Frame): one name per frame, with how it was
// recovered (resolve.How); Stack.Stop says why the walk ended
// (docs/GLOSSARY.md). For perf.data recordings and core dumps, use package
// report (report.Run, report.OpenCore and report.RunCore); for the
// lower layers, resolve and unwinder.
package tracer
