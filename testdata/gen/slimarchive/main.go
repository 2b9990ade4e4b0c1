// Command slimarchive rewrites a recording's .ustack archive without the
// recording machine's kallsyms (megabytes), for a bundled recording that
// has no kernel address: every sample's ip and call chain must be user
// space, which it checks first, refusing otherwise. Objects, debug files
// and the vdso are copied as they are.
//
// Usage: go run ./testdata/gen/slimarchive perf.data   (rewrites perf.data.ustack)
package main

import (
	"encoding/hex"
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
	path := data + ".ustack"
	a, err := archive.Open(path, archive.Options{})
	if err != nil {
		return err
	}
	defer a.Close()
	if err := a.Err(); err != nil {
		return err
	}
	tmp := path + ".tmp"
	w, err := archive.Create(tmp, a.Meta(), true)
	if err != nil {
		return err
	}
	for _, e := range a.Entries() {
		id, _ := hex.DecodeString(e.BuildID)
		var (
			b  []byte
			ok bool
		)
		switch e.Kind {
		case archive.KindMeta, archive.KindManifest, archive.KindKallsyms:
			continue
		case archive.KindObject:
			if b, _, ok = a.ObjectByID(id); ok {
				err = w.AddObject(id, e.Path, b)
			}
		case archive.KindDebug:
			if b, ok = a.DebugFile(id); ok {
				err = w.AddDebugFile(id, e.Path, b)
			}
		case archive.KindVDSO:
			if b, id, ok = a.VDSO(); ok {
				err = w.AddVDSO(id, b)
			}
		default:
			return fmt.Errorf("%s: member %s: kind %q unknown to slimarchive", path, e.Member, e.Kind)
		}
		if !ok {
			return fmt.Errorf("%s: member %s unreadable", path, e.Member)
		}
		if err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
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
