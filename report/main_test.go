package report

import (
	"os"
	"testing"
	"time"

	"github.com/ustack/ustack/internal/testprog"
)

// TestMain gives the package's tests 40 minutes instead of go test's
// default 10 when no -timeout is given: they build, record and compare
// with perf and gdb, which on a machine busy with other work (a second
// test run on two cores) takes longer than 10 minutes.
func TestMain(m *testing.M) {
	testprog.ExtendDefaultTimeout(40 * time.Minute)
	os.Exit(m.Run())
}
