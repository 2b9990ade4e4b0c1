package testprog

import (
	"flag"
	"time"
)

// defaultTimeout is go test's -timeout when none is given.
const defaultTimeout = 10 * time.Minute

// ExtendDefaultTimeout raises the test binary's -test.timeout to d when it
// is go test's default (10m), for a package whose tests record, boot or
// build much and can take longer on a machine busy with other work (two
// test runs at once on two cores). A timeout given on the command line
// other than 10m is kept. Call it from TestMain before m.Run, which starts
// the alarm.
func ExtendDefaultTimeout(d time.Duration) {
	if !flag.Parsed() {
		flag.Parse()
	}
	f := flag.Lookup("test.timeout")
	if f == nil {
		return
	}
	if cur, err := time.ParseDuration(f.Value.String()); err == nil && cur == defaultTimeout && d > cur {
		f.Value.Set(d.String())
	}
}
