package coredump_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/coredump"
)

// truth is a testdata/cores/<arch>/<name>.json file (testdata/cores/README.md).
type truth struct {
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
			Frames []gdbFrame        `json:"frames"`
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

type gdbFrame struct {
	PC       string `json:"pc"`
	Function string `json:"function"`
	Kind     string `json:"kind"`
	SP       string `json:"sp"`
}

func hex(t testing.TB, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	require.NoError(t, err, "hex %q", s)
	return v
}

func testdataDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata")
}

// fixtures returns every core truth file of arch ("" for all).
func fixtures(t testing.TB) []*truth {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(testdataDir(), "cores", "*", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, paths, "no core fixtures under testdata/cores")
	sort.Strings(paths)
	var out []*truth
	for _, p := range paths {
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		tr := &truth{}
		require.NoError(t, json.Unmarshal(data, tr), p)
		out = append(out, tr)
	}
	return out
}

// options opens mapped files from their committed copies.
func (tr *truth) options() *coredump.Options {
	return &coredump.Options{OpenMapped: func(path string) (coredump.ReaderAt, error) {
		rel, ok := tr.Files[path]
		if !ok {
			return nil, os.ErrNotExist
		}
		return os.Open(filepath.Join(testdataDir(), rel))
	}}
}

func (tr *truth) corePath() string { return filepath.Join(testdataDir(), tr.Core) }

func (tr *truth) open(t testing.TB) *coredump.Core {
	t.Helper()
	c, err := coredump.Open(tr.corePath(), tr.options())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}
