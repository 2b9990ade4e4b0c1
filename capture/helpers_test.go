package capture

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ustack/ustack/perfdata"
	"golang.org/x/sys/unix"
)

// The test binary doubles as a recorder process for the SIGKILL test: with
// USTACK_CAPTURE_HELPER set to a JSON Options it records and exits.
func TestMain(m *testing.M) {
	if js := os.Getenv("USTACK_CAPTURE_HELPER"); js != "" {
		var o Options
		if err := json.Unmarshal([]byte(js), &o); err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(3)
		}
		o.Stdout, o.Stderr = io.Discard, os.Stderr
		if os.Getenv("USTACK_CAPTURE_HELPER_LOG") != "" {
			o.Log = os.Stderr
		}
		if _, err := Record(context.Background(), o); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// needPerf skips the test when perf_event_open cannot be used here.
func needPerf(t *testing.T) {
	t.Helper()
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK, Sample: 1000}
	attr.Size = uint32(perfdata.AttrSizeVer7)
	attr.Bits = unix.PerfBitDisabled
	fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		t.Skipf("perf_event_open is unavailable here (%v): live recording tests need root or CAP_PERFMON", err)
	}
	unix.Close(fd)
}

var (
	progOnce sync.Once
	progPath string
	progErr  error
)

// testProg is the program the live tests record: main -> top -> mid ->
// leaf, where leaf calls close(-1), nanosleep (the syscall itself) and
// burns CPU in burn.
const testProg = `
#include <unistd.h>
#include <time.h>
#include <sys/syscall.h>
volatile unsigned long sink;
__attribute__((noinline)) void burn(void) {
	for (unsigned long j = 0; j < 4000000; j++) sink += j;
	asm volatile("");
}
__attribute__((noinline)) void leaf(int i) {
	close(-1);
	struct timespec ts = {0, 100000};
	syscall(SYS_nanosleep, &ts, 0);
	burn();
	asm volatile("");
}
__attribute__((noinline)) void mid(int i) { leaf(i); asm volatile(""); }
__attribute__((noinline)) void top(int i) { mid(i); asm volatile(""); }
int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 20;
	for (int i = 0; i < n; i++) top(i);
	return 0;
}
`

// buildProg compiles testProg once per test binary run.
func buildProg(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found")
	}
	progOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ustack-capture-prog")
		if err != nil {
			progErr = err
			return
		}
		src := filepath.Join(dir, "prog.c")
		os.WriteFile(src, []byte("#include <stdlib.h>\n"+testProg), 0o644)
		progPath = filepath.Join(dir, "prog")
		out, err := exec.Command("gcc", "-O2", "-g", "-Wl,--build-id", "-o", progPath, src).CombinedOutput()
		if err != nil {
			progErr = errors.New(string(out))
		}
	})
	if progErr != nil {
		t.Fatalf("building the test program: %v", progErr)
	}
	return progPath
}

// readAll reads a perf.data file, returning its samples (detached), the
// pid of the first exec'd COMM of comm, and the reader's final error.
type fileContents struct {
	session *perfdata.Session
	samples []*perfdata.Sample
	comms   []*perfdata.Comm
	mmaps   []*perfdata.Mmap
	records int
	err     error
}

func readPerfData(t *testing.T, path string) *fileContents {
	t.Helper()
	r, err := perfdata.Open(path)
	if err != nil {
		t.Fatalf("perfdata.Open(%s): %v", path, err)
	}
	defer r.Close()
	fc := &fileContents{session: r.Session()}
	for {
		rec, err := r.Next()
		if err != nil {
			if err != io.EOF {
				fc.err = err
			}
			break
		}
		fc.records++
		switch x := rec.(type) {
		case *perfdata.Sample:
			fc.samples = append(fc.samples, x.Detach())
		case *perfdata.Comm:
			fc.comms = append(fc.comms, x.Clone().(*perfdata.Comm))
		case *perfdata.Mmap:
			fc.mmaps = append(fc.mmaps, x.Clone().(*perfdata.Mmap))
		}
	}
	return fc
}

// perfScript runs perf script on a file and returns its output, skipping
// when perf is not installed.
func perfScript(t *testing.T, path string, args ...string) string {
	t.Helper()
	perf, err := exec.LookPath("perf")
	if err != nil {
		t.Skip("perf not installed: cannot cross-check with perf script")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, perf, append([]string{"script", "-i", path}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("perf script -i %s: %v\n%s", path, err, stderr.String())
	}
	return string(out)
}

// perfScriptSamples splits perf script output into samples: a header line
// and its frames (symbol names).
type scriptSample struct {
	header string
	syms   []string
}

func parseScript(out string) []scriptSample {
	var res []scriptSample
	for _, block := range strings.Split(out, "\n\n") {
		lines := strings.Split(strings.Trim(block, "\n"), "\n")
		if len(lines) == 0 || lines[0] == "" {
			continue
		}
		s := scriptSample{header: lines[0]}
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			if len(f) >= 2 {
				sym := f[1]
				if i := strings.LastIndex(sym, "+0x"); i > 0 {
					sym = sym[:i]
				}
				s.syms = append(s.syms, sym)
			}
		}
		res = append(res, s)
	}
	return res
}

// hasChain reports whether syms holds want as consecutive frames.
func hasChain(syms, want []string) bool {
	for i := 0; i+len(want) <= len(syms); i++ {
		ok := true
		for j, w := range want {
			if syms[i+j] != w {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}
