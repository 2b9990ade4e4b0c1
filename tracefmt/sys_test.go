package tracefmt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemFormats parses every format file of this machine's tracefs:
// no field line may fail, and the print fmts this package does not
// evaluate are listed (they fall back to name=value).
func TestSystemFormats(t *testing.T) {
	files, _ := filepath.Glob("/sys/kernel/tracing/events/*/*/format")
	if len(files) == 0 {
		t.Skip("no tracefs format files here (mount -t tracefs nodev /sys/kernel/tracing)")
	}
	ev := &Events{LongSize: 8, printk: map[uint64]string{}}
	fails := map[string]int{}
	nerr := 0
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		sys := filepath.Base(filepath.Dir(filepath.Dir(p)))
		f, err := parseFormat(sys, b, ev)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if f.PrintErr != nil {
			nerr++
			msg := f.PrintErr.Error()
			if i := strings.Index(msg, "print fmt: "); i >= 0 {
				msg = msg[i+11:]
			}
			if len(msg) > 60 {
				msg = msg[:60]
			}
			fails[msg]++
			if testing.Verbose() && os.Getenv("SHOW") != "" {
				t.Logf("%s: %v", f.FullName(), f.PrintErr)
			}
		}
	}
	t.Logf("%d format files, %d print fmts not evaluated", len(files), nerr)
	// 51 of 2323 on the 6.18 kernel this was written on (%pI4/6, hex
	// dumps, statement expressions).
	if nerr*20 > len(files) {
		t.Errorf("%d of %d print fmts fall back to name=value", nerr, len(files))
	}
	for m, n := range fails {
		t.Logf("%4d %s", n, m)
	}
}
