package unwinder_test

import "github.com/ustack/ustack/internal/testfiles"

// The repository keeps its larger objects xz-packed: unpack them in place
// before the Example (which reads testdata with exported API only) runs
// on its own.
func init() { testfiles.Dir() }
