// Package testprog is what tests use to make and observe real programs:
// it compiles a C, C++ or Rust source with the system's compiler, runs perf
// (record, script, archive) under a timeout, and reads perf script's text
// back into samples and call chains, the independent truth many tests
// compare ustack with.
//
// Data flows one way: a test hands a source to [Build] (a fresh build in a
// directory the test owns) or [Shared] (one build per test binary run,
// which tests must not modify), runs the program under [Record] or its own
// recorder, then hands the recording to [Script] and the text to
// [ParseScript], [HasChain] or [ChainCount]. [PerfCommand] is the one way
// to run perf, for the cases (another HOME, another directory) the
// wrappers do not cover.
//
// Nothing here passes silently where a tool is missing: [Build] skips the
// test naming the compiler, [Perf] and [PerfCommand] skip naming perf,
// [NeedPerfEvents] skips when the kernel refuses perf_event_open,
// [NeedTracefs] when a tracepoint is not to be found, and [Record] skips with perf's own message when perf cannot record here.
// A compiler error or a failing perf script is a test failure, with the
// tool's output.
//
// [BuildRust] compiles a Rust source (std only) with rustc, found on PATH
// or in ~/.cargo/bin, skipping the test where there is none.
//
// [Tool] runs any other tool (objcopy, readelf, a cross compiler) the
// same way. [BuildSplit] builds [SplitSources], a program of two units
// with inlined calls and a tail call, as gcc's or clang's split DWARF
// (DWARF 4 or 5), its .dwo files beside it or packed into a .dwp.
//
// Users: the tests of capture, elfcache, perfdata, tracefmt, report
// (parity, pprof, nostack and through them browser), debuginfod's server
// test and cmd/ustack (main, archive, perfarchive, perfscript, input and
// tracefields tests).
package testprog
