package capture

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"testing"

	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/perfdata"
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
	code := m.Run()
	testprog.RemoveShared()
	os.Exit(code)
}

// helperOptions encodes o for a recorder run by TestMain in a child
// process (USTACK_CAPTURE_HELPER). A field JSON cannot carry would leave the
// variable empty and the child running the tests instead: a failure here.
func helperOptions(t *testing.T, o Options) []byte {
	t.Helper()
	js, err := json.Marshal(o)
	if err != nil {
		t.Fatalf("the recorder's options for the helper process: %v", err)
	}
	return js
}

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

// buildProg compiles testProg once per test binary run (tests that
// change the program copy it first).
func buildProg(t *testing.T) string {
	t.Helper()
	return testprog.Shared(t, "prog.c", "#include <stdlib.h>\n"+testProg, "-O2", "-g", "-Wl,--build-id")
}

// startProg starts prog running long (100000 rounds) for a test to
// attach to; the process is killed when the test ends.
func startProg(t *testing.T, prog string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(prog, "100000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// fileContents is what readPerfData found in a perf.data file: its
// samples (detached), COMM and MMAP records, the number of records and the
// reader's final error.
type fileContents struct {
	session *perfdata.Session
	samples []*perfdata.Sample
	comms   []*perfdata.Comm
	mmaps   []*perfdata.Mmap
	records int
	err     error
}

// readPerfData reads every record of the perf.data file at path.
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
