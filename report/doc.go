// Package report turns a perf.data recording into symbolized call stacks:
// it follows each process's memory maps through the recording, unwinds every
// sample's user stack from its registers and stack snapshot, symbolizes the
// kernel and user frames, and hands the stacks to a writer in sample order.
//
// Data flow: a single reader goroutine decodes records in time order
// (perfdata.Sorter), applies mmap/fork/exec/exit to a procmaps.Tracker and
// turns each sample into a job holding a copy of its registers and stack and
// the maps snapshot in force (samples Options.Filter rejects are dropped
// here, before any work). Workers (one per CPU by default) unwind and
// symbolize jobs with their own unwinder.Cache; the results are handed to
// the caller's Emit function strictly in the order of the samples in the
// file. The maps are resolved into address spaces and the unwound frames
// symbolized by one resolve.Resolver per Run, which Run closes. A
// tracepoint sample's job carries its raw data and its event's format
// (tracefmt, from the recording's tracing data, parsed at the first such
// sample), and the worker formats its fields (Sample.TraceFields). Writers
// (NewWriter) print the samples as perf script does (text, with its -F
// fields), JSON (docs/report.schema.json), folded stacks, pprof, a flame
// graph or a speedscope file.
package report
