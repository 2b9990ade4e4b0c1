package tracefmt_test

import (
	"fmt"
	"io"

	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/tracefmt"
)

// Example formats the first tracepoint samples of a recording as perf
// script prints them (testdata/tp.script holds perf's own lines), and
// gives the fields as values for JSON.
func Example() {
	r, err := perfdata.Open("testdata/tp.data")
	if err != nil {
		panic(err)
	}
	defer r.Close()
	// File mode: the tracing data is a feature section, known at once.
	// In pipe mode it arrives in a record: parse it at the first sample.
	events, err := tracefmt.Parse(r.Session().Features.TracingData)
	if err != nil {
		fmt.Println("warning:", err) // some formats unusable; the others work
	}
	s := perfdata.NewSorter(r, 0)
	var line []byte
	for n := 0; n < 2; {
		rec, err := s.Next()
		if err == io.EOF {
			break
		}
		sample, ok := rec.(*perfdata.Sample)
		if !ok || sample.Attr.Type != perfdata.TypeTracepoint {
			continue
		}
		f := events.Lookup(sample.Attr.Config)
		line = f.Append(line[:0], sample.Raw)
		fmt.Printf("%s: %s\n", f.FullName(), line)
		for name, v := range f.Fields(sample.Raw) {
			fmt.Printf("  %s=%#v\n", name, v)
		}
		n++
	}
	// Output:
	// sched:sched_process_exec: filename=/usr/bin/sh pid=4302 old_pid=4302
	//   filename="/usr/bin/sh"
	//   pid=4302
	//   old_pid=4302
	// syscalls:sys_enter_openat: dfd: 0xffffff9c, filename: 0x7f22c78fa0b1, flags: 0x00080000, mode: 0x00000000
	//   __syscall_nr=257
	//   dfd=0xffffff9c
	//   filename=0x7f22c78fa0b1
	//   flags=0x80000
	//   mode=0x0
}
