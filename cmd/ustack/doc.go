// Command ustack recovers complete user-space call stacks from captures taken
// at kernel events, by replaying DWARF CFI offline.
//
// Usage:
//
//	ustack record [flags] -- COMMAND ARGS   record stacks at kernel events
//	ustack report [flags] [FILE]             unwind and print a recording (default perf.data)
//	ustack archive [FILE]                    write a recording's objects in perf's build-id cache layout
//	ustack unwind [-json] FIXTURE.json...   unwind bundled gdb-checked captures
//
// The command only parses flags: each subcommand (record.go, report.go,
// archive.go, unwind.go) turns its flags into the options of the package
// that does the work (capture.Record, report.Run with a report.Writer
// chosen by format name and the recording's archive.Reader, archive,
// internal/fixture with resolve and unwinder) and maps its outcome to an
// exit status and messages naming the file.
package main
