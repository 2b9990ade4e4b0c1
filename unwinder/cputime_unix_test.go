//go:build unix

package unwinder_test

import "syscall"

// processCPU returns the CPU time (user and system) the process has used, in
// nanoseconds, and whether it is known. Benchmarks report it beside the
// wall-clock time because on a loaded machine the wall clock also counts the
// time the benchmark waited for a CPU.
func processCPU() (int64, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return ru.Utime.Nano() + ru.Stime.Nano(), true
}
