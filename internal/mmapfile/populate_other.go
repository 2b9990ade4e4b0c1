//go:build !linux

package mmapfile

// CanPopulate says whether Populate can work here.
const CanPopulate = false

// Populate does nothing here (see the Linux version).
func Populate(b []byte) bool { return false }
