// Command ustack recovers complete user-space call stacks from captures taken
// at kernel events, by replaying DWARF CFI offline.
//
// Usage:
//
//	ustack record [flags] -- COMMAND ARGS   record stacks at kernel events
//	ustack report [flags] [FILE]             unwind and print a recording (default perf.data)
//	ustack archive [FILE]                    write a recording's objects in perf's build-id cache layout
//	ustack unwind [-json] FIXTURE.json...   unwind test fixtures (testdata/fixtures), the fixture tool
//
// The command only parses flags: each subcommand (record.go, report.go,
// archive.go, unwind.go) turns its flags into the options of the package
// that does the work (capture.Record, report.Run with a report.Writer
// chosen by format name and the recording's archive.Reader, archive,
// internal/fixture with resolve and unwinder) and maps its outcome to an
// exit status and messages naming the file. Every report ends with a
// one-line summary on stderr counting how the stacks ended; the frame tags
// and stop reasons are explained in docs/GLOSSARY.md (glossary_test.go
// checks it covers every value the code emits), and readme_test.go runs the
// README's marked command blocks as written.
package main
