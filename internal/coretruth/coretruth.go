// Package coretruth loads the truth files of the core dump fixtures
// (testdata/cores/<arch>/<name>.json, written by testdata/gen/cores/gen.py
// from gdb and elfutils, never from ustack) for the tests of the packages
// that read cores, and lays out a fixture's committed objects as a --symfs
// tree. Load unpacks the xz-packed objects first (internal/testfiles).
package coretruth

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/ustack/ustack/coredump"
	"github.com/ustack/ustack/internal/testfiles"
)

// Truth is a testdata/cores/<arch>/<name>.json file (testdata/cores/README.md):
// gdb's, eu-stack's, eu-unstrip's and eu-readelf's reading of a core.
type Truth struct {
	Name      string            `json:"name"`
	Arch      string            `json:"arch"`
	Core      string            `json:"core"`
	Exe       string            `json:"exe"`
	Files     map[string]string `json:"files"`
	DebugDirs []string          `json:"debug_dirs"`
	GDB       struct {
		SelectedLWP int `json:"selected_lwp"`
		Siginfo     *struct {
			Signo int    `json:"signo"`
			Code  int    `json:"code"`
			Errno int    `json:"errno"`
			Addr  string `json:"addr"`
		} `json:"siginfo"`
		Threads []struct {
			Num    int               `json:"num"`
			LWP    int               `json:"lwp"`
			Regs   map[string]string `json:"regs"`
			Frames []GDBFrame        `json:"frames"`
		} `json:"threads"`
		Mappings []struct {
			Start, End, Offset, Path string
		} `json:"mappings"`
		SharedLibrary []struct {
			From, To, Path string
		} `json:"sharedlibrary"`
		Auxv []struct {
			Type  uint64 `json:"type"`
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"auxv"`
		Memory []struct {
			Addr  string  `json:"addr"`
			Value *string `json:"value"`
		} `json:"memory"`
	} `json:"gdb"`
	EuStack struct {
		Exit    int `json:"exit"`
		Threads []struct {
			TID    int `json:"tid"`
			Frames []struct {
				PC, Function, Module string
			} `json:"frames"`
		} `json:"threads"`
	} `json:"eu_stack"`
	EuUnstrip []struct {
		Start, Size, Note, File, Name string
		BuildID                       string `json:"build_id"`
	} `json:"eu_unstrip"`
	EuReadelf struct {
		Threads []struct {
			PID     int               `json:"pid"`
			Cursig  int               `json:"cursig"`
			Regs    map[string]string `json:"regs"`
			Siginfo *struct {
				Signo int `json:"si_signo"`
				Code  int `json:"si_code"`
			} `json:"siginfo"`
		} `json:"threads"`
		PRPSInfo struct {
			PID    int    `json:"pid"`
			PPID   int    `json:"ppid"`
			Fname  string `json:"fname"`
			Psargs string `json:"psargs"`
		} `json:"prpsinfo"`
		Siginfo *struct {
			Signo int    `json:"si_signo"`
			Code  int    `json:"si_code"`
			Addr  string `json:"addr"`
		} `json:"siginfo"`
		Files []struct {
			Start, End, Offset, Path string
		} `json:"files"`
	} `json:"eu_readelf"`
}

// GDBFrame is one frame of gdb's backtrace of a thread.
type GDBFrame struct {
	PC       string `json:"pc"`
	Function string `json:"function"`
	Kind     string `json:"kind"`
	SP       string `json:"sp"`
}

// Load returns every core truth file under testdata (the repository's
// testdata directory), in path order, after unpacking the tree's xz-packed
// objects (testfiles.Unpack) that the truth files name.
func Load(testdata string) ([]*Truth, error) {
	paths, err := filepath.Glob(filepath.Join(testdata, "cores", "*", "*.json"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no core fixtures under %s", filepath.Join(testdata, "cores"))
	}
	sort.Strings(paths)
	// The truth files name committed objects, some of them packed (NAME.xz).
	if err := testfiles.Unpack(testdata); err != nil {
		return nil, err
	}
	var out []*Truth
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		tr := &Truth{}
		if err := json.Unmarshal(data, tr); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, tr)
	}
	return out, nil
}

// Symfs lays out the fixture's committed objects at their recorded paths
// under dir, as a user would for --symfs (hard links, or copies across
// file systems: ustack resolves symbolic links inside the symfs), with the
// fixture's debuglink files next to the program and, when this machine has
// them (libc6-dbg), the separate debug files of the system libraries
// (testdata/objects) under usr/lib/debug/.build-id: gdb named glibc's
// functions from them. It reports whether all of those were found.
func (tr *Truth) Symfs(dir, testdata string) (systemDebug bool, err error) {
	for rec, rel := range tr.Files {
		if err := linkOrCopy(filepath.Join(testdata, rel), filepath.Join(dir, rec)); err != nil {
			return false, err
		}
	}
	for _, d := range tr.DebugDirs {
		dbg, _ := filepath.Glob(filepath.Join(testdata, d, "*.debug"))
		for _, f := range dbg {
			if err := linkOrCopy(f, filepath.Join(dir, filepath.Dir(tr.Exe), filepath.Base(f))); err != nil {
				return false, err
			}
		}
	}
	c, err := coredump.Open(filepath.Join(testdata, tr.Core), &coredump.Options{NoMappedFiles: true})
	if err != nil {
		return false, err
	}
	defer c.Close()
	systemDebug = true
	for _, o := range c.Objects() {
		rel := tr.Files[o.Path]
		if len(o.BuildID) == 0 || filepath.Dir(filepath.Dir(rel)) != "objects" {
			continue // the vdso, or the fixture's own program
		}
		id := hex.EncodeToString(o.BuildID)
		dbg := filepath.Join("usr", "lib", "debug", ".build-id", id[:2], id[2:]+".debug")
		if _, err := os.Stat(filepath.Join("/", dbg)); err != nil {
			systemDebug = false
			continue
		}
		if err := linkOrCopy(filepath.Join("/", dbg), filepath.Join(dir, dbg)); err != nil {
			return false, err
		}
	}
	return systemDebug, nil
}

// IsSystem reports whether the recorded path is one of the system's
// objects (glibc, committed in testdata/objects) rather than a fixture's
// own program or library.
func (tr *Truth) IsSystem(recorded string) bool {
	return filepath.Dir(filepath.Dir(tr.Files[recorded])) == "objects"
}

func linkOrCopy(from, to string) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	if os.Link(from, to) == nil {
		return nil
	}
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o644)
}

// InCode reports whether addr is in an executable segment of the core, or
// in a mapped file where the core has no segment (gdb's gcore omits them):
// where gdb's last frames are words that are no code, they are not.
func InCode(c *coredump.Core, addr uint64) bool {
	for _, s := range c.Memory().Segments() {
		if addr >= s.Addr && addr < s.Addr+s.Size {
			return s.Exec
		}
	}
	for _, m := range c.Mappings {
		if addr >= m.Start && addr < m.End {
			return true
		}
	}
	return false
}
