package report

import (
	"strings"

	"github.com/ustack/ustack/minidump"
	"github.com/ustack/ustack/resolve"
	"github.com/ustack/ustack/unwinder"
)

// locateModules names the file of each module of a minidump that dumped no
// /proc/PID/maps and names the module without a directory (Crashpad names
// libraries by soname: "libc.so.6"), where resolve.LibraryPaths finds one
// under symfs with the module's build-id: its mappings then name that
// file, as a core's do. The others keep their names, which the report
// lists as missing.
func locateModules(d *minidump.Dump, symfs string) {
	if len(d.Maps) > 0 {
		return // the maps name every file
	}
	var known []string
	var at []int
	var qs []resolve.LibraryQuery
	for i, m := range d.Modules {
		switch {
		case strings.HasPrefix(m.Name, "/"):
			known = append(known, m.Name)
		case m.Name != "" && !strings.ContainsAny(m.Name, "/[") && !minidump.IsVDSOName(m.Name):
			at = append(at, i)
			qs = append(qs, resolve.LibraryQuery{Name: m.Name, BuildID: m.BuildID, BuildIDPrefix: m.BuildIDPrefix})
		}
	}
	if len(qs) == 0 {
		return
	}
	for j, p := range resolve.LibraryPaths(d.Arch, symfs, known, qs) {
		if p != "" {
			d.Modules[at[j]].Name = p
		}
	}
}

// WriteMinidump writes a minidump of the core c to path
// (minidump.WriteFile): besides each thread's stack from its stack
// pointer, it keeps the stack of every frame an unwind of the core's
// threads reaches outside it (the stack a signal handler on another stack
// interrupted, a Go program's goroutine stack under its g0 and gsignal
// stacks, a stack pointer in the guard page of an overflowed stack), so
// that the minidump's report is the core's.
func WriteMinidump(path string, c *Core, opts CoreOptions, w minidump.WriteOptions) (minidump.WriteStats, error) {
	opts.unwound = func(frames []unwinder.Frame) {
		for i := range frames {
			if i == 0 {
				continue // the thread's own stack pointer: Write keeps it
			}
			w.Stacks = append(w.Stacks, frames[i].SP)
		}
	}
	if _, err := RunCore(c, opts, func(*Sample) error { return nil }); err != nil {
		return minidump.WriteStats{}, err
	}
	return minidump.WriteFile(path, c.Core, w)
}
