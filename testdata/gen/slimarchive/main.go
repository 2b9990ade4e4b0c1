// Command slimarchive rewrites a recording's .ustack archive without the
// recording machine's kallsyms (megabytes), for a bundled recording that
// has no kernel address: every sample's ip and call chain must be user
// space, which it checks first, refusing otherwise. Objects, debug files
// and the vdso are copied as they are.
//
// Usage: go run ./testdata/gen/slimarchive perf.data   (rewrites perf.data.ustack)
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/ustack/ustack/archive"
	"github.com/ustack/ustack/perfdata"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: slimarchive perf.data")
		os.Exit(2)
	}
	if err := slim(os.Args[1]); err != nil {
		fmt.Fprintf(os.Stderr, "slimarchive: %v\n", err)
		os.Exit(1)
	}
}

func slim(data string) error {
	if err := userOnly(data); err != nil {
		return err
	}
	return archive.Rewrite(data+".ustack", func(e archive.Entry) bool { return e.Kind != archive.KindKallsyms })
}

// userOnly fails unless every sample of the recording was taken in user
// space with no kernel frame in its call chain.
func userOnly(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := perfdata.NewReader(f)
	if err != nil {
		return err
	}
	n := 0
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		s, ok := rec.(*perfdata.Sample)
		if !ok {
			continue
		}
		n++
		if s.CPUMode() != perfdata.MiscUser {
			return fmt.Errorf("%s: sample %d was taken in the kernel: the kallsyms are needed", path, n)
		}
		for _, pc := range s.Callchain {
			if pc == perfdata.ContextKernel {
				return fmt.Errorf("%s: sample %d has kernel frames: the kallsyms are needed", path, n)
			}
		}
	}
	if n == 0 {
		return fmt.Errorf("%s: no samples", path)
	}
	return nil
}
