package report

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ustack/ustack/perfdata"
)

// The committed recording of resolve's Example: one sample of a static
// program, the program under symfs/ at the path the recording names.
var (
	staticDir   = filepath.Join("..", "testdata", "recordings", "static_close")
	staticData  = filepath.Join(staticDir, "perf.data")
	staticSymFS = filepath.Join(staticDir, "symfs")
	staticProg  = filepath.Join(staticSymFS, "tmp", "ustack-example", "prog")
)

// bytesObjects is an ObjectSource holding one object, as an archive would.
type bytesObjects struct {
	id   []byte
	data []byte
}

func (b bytesObjects) Object(buildID []byte, path string) ([]byte, string, bool) {
	if bytes.Equal(buildID, b.id) {
		return b.data, path, true
	}
	return nil, "", false
}

// TestRunClosesWhatItOpens runs Run many times in one process, with the
// program's file opened through SymFS (an open mapping of the file) and,
// separately, from archive bytes, and checks that the process's open files
// (/proc/self/fd) and mappings (/proc/self/maps) do not grow: whatever Run
// opens, it closes.
func TestRunClosesWhatItOpens(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("needs /proc/self/fd")
	}
	prog, err := os.ReadFile(staticProg)
	if err != nil {
		t.Fatal(err)
	}
	var id []byte
	{
		r, err := perfdata.Open(staticData)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range r.Session().Features.BuildIDs {
			if b.Filename == "/tmp/ustack-example/prog" {
				id = b.BuildID
			}
		}
		r.Close()
	}
	if id == nil {
		t.Fatal("the recording names no build-id for the program")
	}
	configs := []struct {
		name string
		opts Options
	}{
		{"symfs", Options{SymFS: staticSymFS, BuildIDDir: t.TempDir()}},
		{"archive", Options{SymFS: t.TempDir(), BuildIDDir: t.TempDir(), Kallsyms: "-", Objects: bytesObjects{id, prog}}},
	}
	run := func(opts Options) {
		t.Helper()
		r, err := perfdata.Open(staticData)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		frames := 0
		if _, err := Run(r, opts, func(s *Sample) error {
			for _, f := range s.Frames {
				if f.Symbol == "leaf" {
					frames++
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if frames != 1 {
			t.Fatalf("the sample has %d frames named leaf; want 1 (the program was not resolved)", frames)
		}
	}
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			for i := 0; i < 3; i++ { // let the runtime make its own files and mappings
				run(c.opts)
			}
			runtime.GC()
			fds, maps := countFDs(t), countMaps(t)
			const runs = 40
			for i := 0; i < runs; i++ {
				run(c.opts)
			}
			runtime.GC()
			fds2, maps2 := countFDs(t), countMaps(t)
			t.Logf("%d runs: open files %d -> %d, mappings %d -> %d", runs, fds, fds2, maps, maps2)
			if fds2 > fds {
				t.Errorf("open files grew from %d to %d over %d runs", fds, fds2, runs)
			}
			// The Go heap may add a mapping or two; a leaked object adds
			// one per run.
			if maps2 > maps+runs/8 {
				t.Errorf("mappings grew from %d to %d over %d runs", maps, maps2, runs)
			}
		})
	}
}

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func countMaps(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte{'\n'})
}
