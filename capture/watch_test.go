package capture

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ustack/ustack/internal/testprog"
)

// watchLib is a shared library with globals of several kinds. The program
// reaches them only through the library's functions: a program that names
// a library's variable gets its own copy (a copy relocation) and the
// library's stays unused.
const watchLib = `
long libcounter = 1;
int libsmall;
char libarr[24];
__thread long libtls;
void libbump(void) { libcounter++; libsmall++; libarr[0]++; libtls++; }
void *libaddr(void) { return &libcounter; }
`

// watchMain is a PIE program that prints where its own and the library's
// counters are, then bumps them N times (argv[1]), every millisecond.
const watchMain = `
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
void libbump(void);
void *libaddr(void);
long progcounter;
int w; /* a symbol named like an access */
int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 10;
	printf("%p %p\n", libaddr(), (void *)&progcounter);
	fflush(stdout);
	for (int i = 0; i < n; i++) { libbump(); progcounter++; w++; usleep(1000); }
	return 0;
}
`

// buildWatchProg builds the PIE program, the library it loads and a
// second library it does not load.
func buildWatchProg(t *testing.T) (prog, lib, other string) {
	t.Helper()
	dir := t.TempDir()
	lib = testprog.Build(t, dir, "libwatch.c", watchLib, "-O2", "-g", "-shared", "-fPIC", "-Wl,-soname,libwatch")
	other = testprog.Build(t, dir, "libother.c", "long othercounter;\n", "-shared", "-fPIC")
	prog = testprog.Build(t, dir, "watchprog.c", watchMain, "-O1", "-g", "-fPIE", "-pie", "-Wl,--no-as-needed", lib, "-Wl,-rpath,"+dir)
	return prog, lib, other
}

// nmValue returns a symbol's value as nm prints it.
func nmValue(t *testing.T, file, sym string) uint64 {
	t.Helper()
	for _, l := range strings.Split(testprog.Tool(t, "", "nm", file), "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && f[2] == sym {
			v, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("nm %s: no %s", file, sym)
	return 0
}

// TestParseWatchpoint parses every spelling of breakpoints and
// watchpoints, by address and by name, with the symbols' values and sizes
// checked against nm.
func TestParseWatchpoint(t *testing.T) {
	prog, lib, _ := buildWatchProg(t)
	for _, c := range []struct {
		spec, name string
		addr       uint64 // by address; by name: nm's value
		sym        string // by name: the symbol
		length     uint64
		bpType     uint32
	}{
		{"mem:0x1000", "mem:0x1000:rw", 0x1000, "", 4, bpR | bpW},
		{"mem:0x1000/8:w", "mem:0x1000/8:w", 0x1000, "", 8, bpW},
		{"mem:0x1000:x", "mem:0x1000:x", 0x1000, "", 8, bpX},
		{"mem:4096/2:r", "mem:0x1000/2:r", 0x1000, "", 2, bpR},
		{"mem:" + prog + ":progcounter", "mem:watchprog:progcounter:rw", 0, "progcounter", 8, bpR | bpW},
		{"mem:" + prog + ":progcounter:w", "mem:watchprog:progcounter:w", 0, "progcounter", 8, bpW},
		{"mem:" + prog + ":progcounter/4:r", "mem:watchprog:progcounter/4:r", 0, "progcounter", 4, bpR},
		{"mem:" + prog + ":w", "mem:watchprog:w:rw", 0, "w", 4, bpR | bpW},
		{"mem:" + prog + ":w:r", "mem:watchprog:w:r", 0, "w", 4, bpR},
		{"mem:" + prog + ":main:x", "mem:watchprog:main:x", 0, "main", 8, bpX},
		{"mem:" + lib + ":libcounter:w", "mem:libwatch:libcounter:w", 0, "libcounter", 8, bpW},
		{"mem:" + lib + ":libsmall:rw", "mem:libwatch:libsmall:rw", 0, "libsmall", 4, bpR | bpW},
		{"mem:" + lib + ":libarr/8:w", "mem:libwatch:libarr/8:w", 0, "libarr", 8, bpW},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev, err := ParseEvent(c.spec)
			if err != nil {
				t.Fatal(err)
			}
			want := c.addr
			if c.sym != "" {
				if ev.watch == nil || ev.watch.Symbol != c.sym {
					t.Fatalf("not a watchpoint on %s: %+v", c.sym, ev.watch)
				}
				want = nmValue(t, ev.watch.Path, c.sym)
			} else if ev.watch != nil {
				t.Fatalf("by address, but watches %s", ev.watch.Symbol)
			}
			if ev.Name != c.name || ev.Kind != KindBreakpoint || ev.Config1 != want || ev.Config2 != c.length || ev.BPType != c.bpType {
				t.Errorf("got %q kind %v addr %#x len %d type %d, want %q breakpoint %#x %d %d",
					ev.Name, ev.Kind, ev.Config1, ev.Config2, ev.BPType, c.name, want, c.length, c.bpType)
			}
		})
	}
	for _, c := range []struct{ spec, want string }{
		{"mem:" + lib + ":libarr", "libarr is 24 bytes"},
		{"mem:" + lib + ":libarr:w", "(mem:" + lib + ":libarr/8:w)"},
		{"mem:" + lib + ":libtls:w", "thread-local"},
		{"mem:" + prog + ":nosuch", "nm " + prog},
		{"mem:/nonexistent/prog:x:w", "object not found"},
		{"mem:" + prog + ":progcounter/3", "bad length"},
		{"mem:" + prog + ":progcounter:q", "watchprog:progcounter: no such file"}, // q is no access: the object is PROG:progcounter
		{"mem:0x1000:z", "bad access"},
		{"mem:0x1000/16", "bad length"},
		{"mem:zz", "want mem:ADDR"},
		{"mem:0x1000:rx", "cannot also watch"},
	} {
		if _, err := ParseEvent(c.spec); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseEvent(%q) = %v, want an error saying %q", c.spec, err, c.want)
		}
	}
	if _, err := NewRecorder(Options{Events: []string{"mem:" + prog + ":progcounter"}, AllCPUs: true}); err == nil || !strings.Contains(err.Error(), "give -p PID or a command") {
		t.Errorf("a watchpoint by name system-wide: %v", err)
	}
}

// gdbAddresses asks gdb, attached to pid, for the addresses of syms.
func gdbAddresses(t *testing.T, pid int, syms ...string) []uint64 {
	t.Helper()
	args := []string{"-batch", "-nx", "-p", strconv.Itoa(pid)}
	for _, s := range syms {
		args = append(args, "-ex", "print/x (unsigned long)&"+s)
	}
	out := testprog.Tool(t, "", "gdb", args...)
	re := regexp.MustCompile(`(?m)^\$\d+ = (0x[0-9a-f]+)$`)
	m := re.FindAllStringSubmatch(out, -1)
	if len(m) != len(syms) {
		t.Fatalf("gdb printed %d addresses for %v:\n%s", len(m), syms, out)
	}
	var addrs []uint64
	for _, x := range m {
		v, _ := strconv.ParseUint(x[1], 0, 64)
		addrs = append(addrs, v)
	}
	return addrs
}

// TestWatchpointByNameLive computes the addresses of a PIE program's and a
// library's globals in a running process, compares them with gdb's, and
// records with -p: the file's attrs carry those addresses.
func TestWatchpointByNameLive(t *testing.T) {
	prog, lib, other := buildWatchProg(t)
	cmd := exec.Command(prog, "1000000")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// The program prints its two addresses once, then counts.
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the program's addresses: %v", err)
	}
	pid := cmd.Process.Pid
	truth := gdbAddresses(t, pid, "progcounter", "libcounter", "libsmall")
	var self [2]uint64
	fmt.Sscanf(line, "%v %v", &self[0], &self[1])
	if self[0] != truth[1] || self[1] != truth[0] {
		t.Fatalf("gdb (%#x %#x) and the program (%#x %#x) disagree", truth[1], truth[0], self[0], self[1])
	}
	specs := []string{"mem:" + prog + ":progcounter:w", "mem:" + lib + ":libcounter:w", "mem:" + lib + ":libsmall:w"}
	for i, spec := range specs {
		ev, err := ParseEvent(spec)
		if err != nil {
			t.Fatal(err)
		}
		addr, err := resolveWatch(ev, pid)
		if err != nil || addr != truth[i] {
			t.Errorf("%s in process %d: %#x, %v; gdb says %#x", spec, pid, addr, err, truth[i])
		}
	}
	ev, err := ParseEvent("mem:" + other + ":othercounter")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := resolveWatch(ev, pid); err == nil || !strings.Contains(err.Error(), "is not mapped in process") {
		t.Errorf("a library the process did not load: %v", err)
	}

	testprog.NeedPerfEvents(t)
	data := filepath.Join(t.TempDir(), "perf.data")
	_, err = Record(context.Background(), Options{Events: specs[:2], PID: pid, Duration: 200 * time.Millisecond,
		Output: data, NoArchive: true})
	if err != nil {
		if strings.Contains(err.Error(), "breakpoints are not available") {
			t.Skipf("no hardware breakpoints here: %v", err)
		}
		t.Fatal(err)
	}
	checkWatchAttrs(t, data, map[string]uint64{"mem:watchprog:progcounter:w": truth[0], "mem:libwatch:libcounter:w": truth[1]})
}

// checkWatchAttrs checks that the recording's breakpoint attrs watch the
// addresses want gives by event name.
func checkWatchAttrs(t *testing.T, data string, want map[string]uint64) {
	t.Helper()
	fc := readPerfData(t, data)
	seen := 0
	for _, a := range fc.session.Attrs {
		w, ok := want[a.Name]
		if !ok {
			continue
		}
		seen++
		if a.Type != 5 || a.Config1 != w || a.BPType != bpW {
			t.Errorf("%s: attr type %d bp_addr %#x bp_type %d, want a write watchpoint at %#x", a.Name, a.Type, a.Config1, a.BPType, w)
		}
	}
	if seen != len(want) {
		t.Errorf("the recording has %d of the watchpoints %v", seen, want)
	}
}

// TestWatchpointByNameCommand records a started command with watchpoints
// on a library's and the program's globals: their addresses, known only
// once the command has mapped them, are those the program prints, the
// command runs to its end, and the tracking (a dummy event enabled at
// exec) saw every mapping.
func TestWatchpointByNameCommand(t *testing.T) {
	testprog.NeedPerfEvents(t)
	prog, lib, other := buildWatchProg(t)
	data := filepath.Join(t.TempDir(), "perf.data")
	var out, log bytes.Buffer
	st, err := Record(context.Background(), Options{Events: []string{"mem:" + lib + ":libcounter:w", "mem:" + prog + ":progcounter:w"},
		Command: []string{prog, "20"}, Output: data, NoArchive: true, Stdout: &out, Log: &log})
	if err != nil {
		if strings.Contains(err.Error(), "breakpoints are not available") {
			t.Skipf("no hardware breakpoints here: %v", err)
		}
		t.Fatal(err)
	}
	if st.ExitCode != 0 {
		t.Errorf("the command exited %d", st.ExitCode)
	}
	var lc, pc uint64
	if n, _ := fmt.Sscanf(out.String(), "%v %v", &lc, &pc); n != 2 {
		t.Fatalf("the program printed %q", out.String())
	}
	checkWatchAttrs(t, data, map[string]uint64{"mem:libwatch:libcounter:w": lc, "mem:watchprog:progcounter:w": pc})
	fc := readPerfData(t, data)
	if fc.session.Attrs[0].Name != "dummy" {
		t.Errorf("first event %q, want the dummy tracking event", fc.session.Attrs[0].Name)
	}
	mapped := map[string]bool{}
	for _, m := range fc.mmaps {
		mapped[filepath.Base(m.Filename)] = true
	}
	if !mapped["watchprog"] || !mapped["libwatch"] || !mapped["libc.so.6"] {
		t.Errorf("mappings recorded: %v, want the program, the library and libc", mapped)
	}
	if !strings.Contains(log.String(), fmt.Sprintf("watching libcounter in %s at %#x", lib, lc)) {
		t.Errorf("log %q does not say where libcounter is watched", log.String())
	}

	// A command that never maps the object: the error says so, and the
	// command ran to its end.
	_, err = Record(context.Background(), Options{Events: []string{"mem:" + other + ":othercounter:w"},
		Command: []string{prog, "2"}, Output: data, NoArchive: true, Stdout: &out})
	if err == nil || !strings.Contains(err.Error(), "the command ended (exit status 0) before "+other+" was mapped") {
		t.Errorf("a library the command never loads: %v", err)
	}
	// Interrupted while waiting for the object: the command is killed.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = Record(ctx, Options{Events: []string{"mem:" + other + ":othercounter:w"},
		Command: []string{prog, "1000000"}, Output: data, NoArchive: true, Stdout: &out})
	if err == nil || !strings.Contains(err.Error(), "killed by SIGKILL") || time.Since(start) > 20*time.Second {
		t.Errorf("interrupted while waiting for a library: %v after %v", err, time.Since(start))
	}
	if errors.Is(err, ErrUnknownEvent) {
		t.Error("not an unknown event")
	}
}

// TestRecordUretprobe records a uretprobe (ur:, bpftrace's uretprobe:) on
// leaf: one sample per return, taken at the return address in mid, with
// perf script's own unwind of each showing mid <- top <- main.
func TestRecordUretprobe(t *testing.T) {
	testprog.NeedPerfEvents(t)
	prog := buildProg(t)
	for _, spec := range []string{"ur:" + prog + ":leaf", "uretprobe:" + prog + ":leaf"} {
		ev, err := ParseEvent(spec)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Name != "uretprobe:prog:leaf" || ev.Kind != KindUprobe || ev.Config != 1<<pmuRetprobeBit("uprobe") {
			t.Errorf("%s: name %q kind %v config %#x", spec, ev.Name, ev.Kind, ev.Config)
		}
	}
	data := filepath.Join(t.TempDir(), "perf.data")
	st, err := Record(context.Background(), Options{Events: []string{"ur:" + prog + ":leaf"}, Command: []string{prog, "5"},
		Output: data, NoArchive: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.Samples != 5 {
		t.Errorf("%d samples, want 5 (one per return from leaf)", st.Samples)
	}
	ss := testprog.ParseScript(testprog.Script(t, data))
	for _, s := range ss {
		if len(s.Syms) == 0 || s.Syms[0] != "mid" || !testprog.HasChain(s.Syms, []string{"mid", "top", "main"}) {
			t.Errorf("perf script: a uretprobe sample at %v, want mid <- top <- main", s.Syms)
		}
	}
	if len(ss) != 5 {
		t.Errorf("perf script printed %d samples", len(ss))
	}
}
