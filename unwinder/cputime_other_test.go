//go:build !unix

package unwinder_test

// processCPU is unknown here: benchmarks report the wall-clock time only.
func processCPU() (int64, bool) { return 0, false }
