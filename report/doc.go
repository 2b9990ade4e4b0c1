// Package report turns a perf.data recording into symbolized call stacks:
// it follows each process's memory maps through the recording, unwinds every
// sample's user stack from its registers and stack snapshot, symbolizes the
// kernel and user frames, and hands the stacks to a writer in sample order.
//
// Data flow: a single reader goroutine decodes records in time order
// (perfdata.Sorter), applies mmap/fork/exec/exit to a procmaps.Tracker and
// turns each sample into a job holding a copy of its registers and stack and
// the maps snapshot in force (samples Options.Filter rejects are dropped
// here, before any work). The jobs go on in batches of 16 (one at a time
// from a pipe-mode stream). Workers (one per CPU by default) unwind and
// symbolize batches with their own unwinder.Cache; the results are handed
// to the caller's Emit function strictly in the order of the samples in the
// file. The maps are resolved into address spaces and the unwound frames
// symbolized by one resolve.Resolver per Run, which Run closes. With
// Options.Debuginfod the objects and debug files missing locally come by
// build-id from debuginfod servers or elfutils' client cache; when the
// client has servers, Run first opens every object of the recording's
// build-id list at once so that the downloads overlap, and a server that
// fails costs a warning, never the report. Summary.Objects says where each
// object's information came from (Options.ObjectSources). Writers
// (NewWriter) print the samples as perf script does (text, with its -F
// fields), JSON (docs/report.schema.json), folded stacks, pprof, a flame
// graph, a speedscope file or OpenTelemetry profiles (otlp.go: protobuf
// or OTLP/JSON).
//
// A core dump takes the same path from the resolver on (core.go): OpenCore
// and RunCore make one sample per thread, unwound through the core's whole
// memory, for the same writers.
//
// Where to begin: Run over a perfdata.Reader (perf.data) or OpenCore and
// RunCore (core dumps and minidumps), each calling back with a Sample per
// stack; NewWriter for perf script text, JSON, pprof, flame graphs and more;
// Summary.WriteSummary and WriteLine for the CLI's closing lines.
// examples/library has programs built on them.
package report
