// Package procmaps follows the memory maps of the processes in a recording
// over time, from the mmap, fork, exec and exit events that perf records,
// so that every sample's addresses resolve against the maps in force when it
// was taken.
//
// Feed events in time order with Mmap, Fork, Exec and Exit (or, for a
// thread's EXIT, ThreadExit, with Thread told of the threads a FORK, COMM
// or sample shows: the maps then outlive the leader while another thread
// runs); ask for a process's maps with Maps. Each change produces a new immutable Snapshot,
// so a snapshot handed to a worker goroutine stays valid while later events
// are applied; unchanged processes keep their snapshot and its Version,
// which callers use to cache what they derive from it.
//
// For a live process, Read parses /proc/PID/maps into the same Map type
// (Parse parses such text from elsewhere): the one maps parser of ustack.
//
// Where to begin: NewTracker and its Mmap, Fork, Exec, Exit and Maps for a
// recording; Read(pid) for a live process.
package procmaps
