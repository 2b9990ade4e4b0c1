package capture

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/archive"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/procmaps"
)

// progPid returns the pid of the recorded test program (its exec COMM).
func progPid(t *testing.T, fc *fileContents) uint32 {
	t.Helper()
	for _, c := range fc.comms {
		if c.Exec && c.Comm == "prog" {
			return c.Pid
		}
	}
	t.Fatalf("no exec COMM record for prog among %d COMMs", len(fc.comms))
	return 0
}

func checkMode(t *testing.T, path string) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", path, st.Mode().Perm())
	}
}

// TestRecordCommand records the test program at close and nanosleep
// tracepoints, a uprobe on leaf and cpu-clock, reads the file back, has
// perf script unwind it, and checks the archive.
func TestRecordCommand(t *testing.T) {
	testprog.NeedPerfEvents(t)
	prog := buildProg(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "perf.data")
	// An existing file with a lax mode must end up 0600 too.
	os.WriteFile(out, []byte("old"), 0o644)
	var st *Stats
	// The kernel drops records when the recorder does not get the CPU
	// in time to drain its rings (a loaded machine): record again, up to
	// three times, so that every event below can be counted.
	for attempt := 1; ; attempt++ {
		var err error
		st, err = Record(context.Background(), Options{
			Events: []string{"syscalls:sys_enter_close", "syscalls:sys_enter_nanosleep", "u:" + prog + ":leaf", "cpu-clock"},
			Freq:   2000, Command: []string{prog, "20"}, Output: out,
		})
		if err != nil {
			t.Fatalf("Record: %v", err)
		}
		t.Logf("stats: %+v", *st)
		if st.Lost == 0 && st.LostSamples == 0 {
			break
		}
		if attempt == 3 {
			t.Fatalf("lost %d samples (%d LOST_SAMPLES) in each of 3 recordings", st.Lost, st.LostSamples)
		}
		t.Logf("recording again: the kernel dropped %d records (%d LOST_SAMPLES)", st.Lost, st.LostSamples)
	}
	if st.ExitCode != 0 {
		t.Errorf("command exit code %d", st.ExitCode)
	}
	checkMode(t, out)
	checkMode(t, out+".ustack")

	fc := readPerfData(t, out)
	if fc.err != nil {
		t.Fatalf("reading back: %v", fc.err)
	}
	if fc.session.DataSize == 0 {
		t.Errorf("header not finalized: data size 0")
	}
	pid := progPid(t, fc)
	mask := arch.AMD64.PerfMask()
	counts := map[string]int{}
	closeMinus1, noStack := 0, 0
	for _, s := range fc.samples {
		if s.Pid != pid {
			continue
		}
		counts[s.EventName]++
		if s.Tid != pid {
			t.Errorf("%s sample tid %d, want %d", s.EventName, s.Tid, pid)
		}
		if s.RegsABI != perfdata.RegsABI64 || s.RegsMask != mask || len(s.Regs) != bits.OnesCount64(mask) {
			t.Errorf("%s sample: regs abi %d mask %#x n %d", s.EventName, s.RegsABI, s.RegsMask, len(s.Regs))
		}
		if len(s.StackData) != DefaultStackSize {
			t.Errorf("%s sample: stack %d bytes, dyn %d", s.EventName, len(s.StackData), s.StackDynSize)
		}
		if s.StackDynSize == 0 {
			// A clock tick can find no user stack to copy: during exec,
			// or while the kernel faults in the very page the stack
			// pointer has just moved into (more ticks land there on a
			// busy machine). An event the program's own code raises
			// always has its stack.
			noStack++
			if s.EventName != "cpu-clock" {
				t.Errorf("%s sample without its user stack", s.EventName)
			}
		}
		if s.EventName == "syscalls:sys_enter_close" && len(s.Raw) >= 24 && uint32(binary.LittleEndian.Uint64(s.Raw[16:])) == 0xffffffff {
			closeMinus1++
		}
	}
	t.Logf("samples of prog by event: %v", counts)
	if noStack*2 > counts["cpu-clock"] {
		t.Errorf("%d of %d cpu-clock samples without user stack", noStack, counts["cpu-clock"])
	}
	if closeMinus1 != 20 {
		t.Errorf("close(-1) samples: %d, want 20", closeMinus1)
	}
	if n := counts["syscalls:sys_enter_nanosleep"]; n != 20 {
		t.Errorf("nanosleep samples: %d, want 20", n)
	}
	upName := "uprobe:prog:leaf"
	if n := counts[upName]; n != 20 {
		t.Errorf("%s samples: %d, want 20", upName, n)
	}
	if n := counts["cpu-clock"]; n < 10 {
		t.Errorf("cpu-clock samples: %d, want >= 10", n)
	}

	// perf unwinds the file with its own unwinder: an independent check
	// that registers, stacks and maps are right.
	ss := testprog.ParseScript(testprog.Script(t, out))
	want := map[string][]string{
		"syscalls:sys_enter_close: fd: 0xffffffff": {"leaf", "mid", "top", "main"},
		"syscalls:sys_enter_nanosleep":             {"leaf", "mid", "top", "main"},
		upName:                                     {"leaf", "mid", "top", "main"},
		"cpu-clock":                                {"burn", "leaf", "mid", "top", "main"},
	}
	for key, chain := range want {
		n, good := 0, 0
		for _, s := range ss {
			if !strings.Contains(s.Header, key) || !strings.HasPrefix(s.Header, "prog ") {
				continue
			}
			if key == "cpu-clock" && (len(s.Syms) == 0 || s.Syms[0] != "burn") {
				continue // ticks elsewhere (startup, syscalls)
			}
			n++
			if testprog.HasChain(s.Syms, chain) {
				good++
			}
		}
		if n == 0 || good < n*9/10 {
			t.Errorf("perf script: %d of %d %q samples show %v", good, n, key, chain)
		} else {
			t.Logf("perf script: %d of %d %q samples show %v", good, n, key, chain)
		}
	}
	for _, s := range ss {
		if strings.Contains(s.Header, upName) && (len(s.Syms) == 0 || s.Syms[0] != "leaf") {
			t.Errorf("uprobe sample's first frame is %v, want leaf", s.Syms)
			break
		}
	}

	// The archive holds every mapped object by build-id, byte for byte.
	a, err := archive.Open(out+".ustack", archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Err() != nil {
		t.Errorf("archive: %v", a.Err())
	}
	objs := map[string]bool{}
	for _, m := range fc.mmaps {
		if m.Pid == pid && m.Prot&procmaps.ProtExec != 0 && strings.HasPrefix(m.Filename, "/") {
			objs[m.Filename] = true
		}
	}
	if !objs[prog] {
		t.Errorf("no executable MMAP2 of %s", prog)
	}
	fileIDs := map[string]bool{}
	for _, b := range fc.session.Features.BuildIDs {
		fileIDs[fmt.Sprintf("%x", b.BuildID)] = true
	}
	for path := range objs {
		o, err := elfcache.Open(path, elfcache.Options{NoDebugFile: true})
		if err != nil {
			t.Fatal(err)
		}
		id := o.BuildID()
		o.Close()
		data, p, ok := a.ObjectByID(id)
		if !ok {
			t.Errorf("archive lacks %s (build-id %x)", path, id)
			continue
		}
		disk, _ := os.ReadFile(path)
		if p != path || !bytes.Equal(data, disk) {
			t.Errorf("archive object %x: path %q, %d bytes; want %q, %d bytes", id, p, len(data), path, len(disk))
		}
		if !fileIDs[fmt.Sprintf("%x", id)] {
			t.Errorf("BUILD_ID feature lacks %s", path)
		}
	}
	if k := a.Kallsyms(); k == nil {
		t.Error("archive has no kallsyms")
	} else if b, _ := io.ReadAll(k); !bytes.Contains(b, []byte(" T ")) {
		t.Error("archived kallsyms has no text symbols")
	}
	if v, id, ok := a.VDSO(); !ok || len(v) == 0 || len(id) == 0 {
		t.Error("archive has no vdso")
	} else if _, err := elf.NewFile(bytes.NewReader(v)); err != nil {
		t.Errorf("archived vdso is not ELF: %v", err)
	}
}

// TestRecordInterrupt ends a recording from outside (Ctrl-C) once it has
// written samples and checks the file is complete and finalized.
func TestRecordInterrupt(t *testing.T) {
	testprog.NeedPerfEvents(t)
	prog := buildProg(t)
	out := filepath.Join(t.TempDir(), "perf.data")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waited := make(chan error, 1)
	go func() {
		defer cancel()
		waited <- waitForSample(out, ctx.Done())
	}()
	st, err := Record(ctx, Options{Events: []string{"cpu-clock"}, Command: []string{prog, "1000000"}, Output: out, NoArchive: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	if st.Samples == 0 {
		t.Fatal("no samples")
	}
	fc := readPerfData(t, out)
	if fc.err != nil {
		t.Fatalf("reading an interrupted recording: %v", fc.err)
	}
	if fc.session.DataSize == 0 || !fc.session.Features.Has(perfdata.FeatEventDesc) {
		t.Error("interrupted recording not finalized")
	}
	if uint64(len(fc.samples)) != st.Samples {
		t.Errorf("read %d samples, recorder wrote %d", len(fc.samples), st.Samples)
	}
}

// countComplete walks the data section of a perf.data file and counts the
// records that lie whole in it.
func countComplete(t *testing.T, path string) (n int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, _ = completeRecords(b)
	return n
}

// completeRecords walks the data section of a perf.data file's bytes (one
// being written, too) and counts the records that lie whole in it, and
// the samples among them.
func completeRecords(b []byte) (records, samples int) {
	if len(b) < 56 {
		return 0, 0
	}
	off := int(binary.LittleEndian.Uint64(b[40:]))
	end := len(b)
	if ds := int(binary.LittleEndian.Uint64(b[48:])); ds != 0 && off+ds < end {
		end = off + ds
	}
	for off >= 0 && off+8 <= end {
		sz := int(binary.LittleEndian.Uint16(b[off+6:]))
		if sz < 8 || off+sz > end {
			break
		}
		if perfdata.RecordType(binary.LittleEndian.Uint32(b[off:])) == perfdata.RecordSample {
			samples++
		}
		off += sz
		records++
	}
	return records, samples
}

// waitForSample waits until the recording being written at path holds a
// whole sample record: the recorder is running and the program it records
// has been sampled, however long a busy machine took to get there (two
// minutes at most), or until done is closed (the recorder ended).
//
// It reads only the file's first MB (its first samples): os.ReadFile reads
// to the end, and a recording of a busy program grows faster than a reader
// under the race detector on a loaded machine reads it, so ReadFile never
// returned and held everything it read (the race pass's capture test grew
// to 24 GB and was killed, twice in a row in CI rehearsals).
func waitForSample(path string, done <-chan struct{}) error {
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(testprog.Timeout); time.Now().Before(deadline); {
		if b, err := readPrefix(path, buf); err == nil {
			if _, n := completeRecords(b); n > 0 {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("%s: the recorder ended before it wrote a sample", path)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s: no sample written in %v", path, testprog.Timeout)
}

// readPrefix reads the start of the file at path into buf, as much of it as
// the file holds.
func readPrefix(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := io.ReadFull(f, buf)
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		err = nil
	}
	return buf[:n], err
}

// TestRecordKilled kills the recorder with SIGKILL in the middle of a
// recording: every complete record must still be read back.
func TestRecordKilled(t *testing.T) {
	testprog.NeedPerfEvents(t)
	prog := buildProg(t)
	out := filepath.Join(t.TempDir(), "perf.data")
	js := helperOptions(t, Options{Events: []string{"cpu-clock", "syscalls:sys_enter_close"}, Freq: 1000,
		Command: []string{prog, "1000000"}, Output: out})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "USTACK_CAPTURE_HELPER="+string(js))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	// In the middle: once samples are on disk, with the program (a
	// million rounds) still running.
	err := waitForSample(out, exited)
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the recorder and the recorded program
	<-exited
	if err != nil {
		t.Fatal(err)
	}
	checkMode(t, out)
	want := countComplete(t, out)
	fc := readPerfData(t, out)
	if fc.err != nil && !errors.Is(fc.err, perfdata.ErrTruncated) {
		t.Fatalf("reading a killed recording: %v", fc.err)
	}
	if fc.records != want || len(fc.samples) == 0 {
		t.Fatalf("read %d records (%d samples) of %d complete ones", fc.records, len(fc.samples), want)
	}
	t.Logf("killed recording: %d records, %d samples recovered", fc.records, len(fc.samples))
	for _, s := range fc.samples {
		if s.RegsABI == perfdata.RegsABI64 && len(s.StackData) == 0 {
			t.Fatal("sample without stack")
		}
	}
}

// TestTruncatedRecording cuts a finished recording at many points inside
// its records and checks the reader returns every record before the cut.
func TestTruncatedRecording(t *testing.T) {
	testprog.NeedPerfEvents(t)
	prog := buildProg(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "perf.data")
	if _, err := Record(context.Background(), Options{Events: []string{"syscalls:sys_enter_close", "cpu-clock"},
		Command: []string{prog, "5"}, Output: out, NoArchive: true}); err != nil {
		t.Fatal(err)
	}
	r, err := perfdata.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	var ends []int64
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		h := rec.Header()
		ends = append(ends, h.Offset+int64(h.Size))
	}
	r.Close()
	full, _ := os.ReadFile(out)
	cut := filepath.Join(dir, "cut.data")
	for i := 1; i < len(ends); i += max(1, len(ends)/25) {
		at := ends[i-1] + (ends[i]-ends[i-1])/2 // inside record i
		os.WriteFile(cut, full[:at], 0o600)
		fc := readPerfData(t, cut)
		if fc.records != i {
			t.Fatalf("cut at %d (inside record %d): read %d records, want %d (err %v)", at, i, fc.records, i, fc.err)
		}
		if !errors.Is(fc.err, perfdata.ErrTruncated) {
			t.Fatalf("cut at %d: error %v, want ErrTruncated", at, fc.err)
		}
	}
}

// TestRecordPID attaches to a running process.
func TestRecordPID(t *testing.T) {
	testprog.NeedPerfEvents(t)
	prog := buildProg(t)
	cmd := startProg(t, prog)
	time.Sleep(100 * time.Millisecond)
	out := filepath.Join(t.TempDir(), "perf.data")
	st, err := Record(context.Background(), Options{Events: []string{"cpu-clock", "syscalls:sys_enter_close"},
		PID: cmd.Process.Pid, Duration: 700 * time.Millisecond, Output: out, NoArchive: true})
	if err != nil {
		t.Fatal(err)
	}
	fc := readPerfData(t, out)
	if fc.err != nil {
		t.Fatal(fc.err)
	}
	pid := uint32(cmd.Process.Pid)
	n := 0
	for _, s := range fc.samples {
		if s.Pid == pid {
			n++
		} else {
			t.Errorf("sample of pid %d, want only %d", s.Pid, pid)
			break
		}
	}
	synth := false
	for _, m := range fc.mmaps {
		if m.Pid == pid && m.Filename == prog && m.Prot&procmaps.ProtExec != 0 {
			synth = true
		}
	}
	if n == 0 || !synth || st.Samples == 0 {
		t.Fatalf("-p: %d samples of the target, synthesized exec map of %s: %v", n, prog, synth)
	}
	ss := testprog.ParseScript(testprog.Script(t, out))
	good := 0
	for _, s := range ss {
		if strings.Contains(s.Header, "cpu-clock") && testprog.HasChain(s.Syms, []string{"burn", "leaf", "mid", "top", "main"}) {
			good++
		}
	}
	if good == 0 {
		t.Error("perf script shows no burn<-leaf<-mid<-top<-main chain for a -p recording")
	}
}

// TestRecordAll records every CPU for a moment.
func TestRecordAll(t *testing.T) {
	testprog.NeedPerfEvents(t)
	prog := buildProg(t)
	cmd := startProg(t, prog)
	out := filepath.Join(t.TempDir(), "perf.data")
	if _, err := Record(context.Background(), Options{Events: []string{"cpu-clock"}, AllCPUs: true, Freq: 500,
		Duration: 500 * time.Millisecond, Output: out, NoArchive: true}); err != nil {
		t.Fatal(err)
	}
	fc := readPerfData(t, out)
	if fc.err != nil {
		t.Fatal(fc.err)
	}
	cpus := map[uint32]bool{}
	target := 0
	for _, s := range fc.samples {
		cpus[s.CPU] = true
		if s.Pid == uint32(cmd.Process.Pid) {
			target++
		}
	}
	if target == 0 {
		t.Errorf("-a: no sample of the running program among %d", len(fc.samples))
	}
	if len(fc.comms) < 3 {
		t.Errorf("-a: only %d COMM records synthesized", len(fc.comms))
	}
}

// TestRecordWatchpoint watches writes to the program's sink variable.
func TestRecordWatchpoint(t *testing.T) {
	testprog.NeedPerfEvents(t)
	prog := buildProg(t)
	f, err := elf.Open(prog)
	if err != nil {
		t.Fatal(err)
	}
	syms, _ := f.Symbols()
	f.Close()
	var sinkAddr uint64
	for _, s := range syms {
		if s.Name == "sink" {
			sinkAddr = s.Value
		}
	}
	cmd := startProg(t, prog)
	time.Sleep(50 * time.Millisecond)
	maps, err := procmaps.Read(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	var base uint64
	for _, m := range maps {
		if m.Path == prog && m.PgOff == 0 {
			base = m.Start
			break
		}
	}
	addr := base + sinkAddr
	out := filepath.Join(t.TempDir(), "perf.data")
	_, err = Record(context.Background(), Options{Events: []string{fmt.Sprintf("mem:%#x/8:w", addr)}, Period: 1000,
		PID: cmd.Process.Pid, Duration: 500 * time.Millisecond, Output: out, NoArchive: true})
	if err != nil {
		if strings.Contains(err.Error(), "breakpoints are not available") {
			t.Skipf("no hardware breakpoints here: %v", err)
		}
		t.Fatal(err)
	}
	fc := readPerfData(t, out)
	if len(fc.samples) == 0 {
		// Some VMs accept breakpoint events but never deliver debug
		// exceptions (perf record -e mem:... records nothing there either).
		t.Skip("the watchpoint was armed but never fired: this machine does not deliver hardware breakpoints")
	}
	ss := testprog.ParseScript(testprog.Script(t, out))
	good := 0
	for _, s := range ss {
		if testprog.HasChain(s.Syms, []string{"burn", "leaf", "mid", "top", "main"}) {
			good++
		}
	}
	if good == 0 {
		t.Errorf("no watchpoint sample unwinds to burn<-leaf<-mid<-top<-main (%d samples)", len(ss))
	}
}

// TestRecordUnwind unwinds at capture time: the file holds frames only.
func TestRecordUnwind(t *testing.T) {
	testprog.NeedPerfEvents(t)
	prog := buildProg(t)
	out := filepath.Join(t.TempDir(), "perf.data")
	st, err := Record(context.Background(), Options{Events: []string{"syscalls:sys_enter_close", "cpu-clock"},
		Command: []string{prog, "20"}, Output: out, Unwind: true, NoArchive: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats: %+v", *st)
	fc := readPerfData(t, out)
	if fc.err != nil {
		t.Fatal(fc.err)
	}
	for _, a := range fc.session.Attrs {
		if a.SampleType&(perfdata.SampleRegsUser|perfdata.SampleStackUser) != 0 {
			t.Fatalf("--unwind attr %s still samples registers or stack", a.Name)
		}
	}
	withUser := 0
	for _, s := range fc.samples {
		if len(s.StackData) != 0 || len(s.Regs) != 0 {
			t.Fatal("--unwind sample carries stack or registers")
		}
		if len(perfdata.UserCallchain(s.Callchain)) > 1 {
			withUser++
		}
	}
	if withUser == 0 {
		t.Fatal("no sample has user frames")
	}
	good, n := closeChains(t, out)
	// Every close sample that was kept must show the chain; the kernel
	// may drop a few of the 20 when the machine is busy (counted in
	// st.Lost or, where no LOST record could follow, st.LostSamples;
	// never silently).
	if lost := max(st.Lost, st.LostSamples); n+int(lost) < 20 || n < 10 || good != n {
		t.Errorf("perf script of an --unwind recording: %d of %d close(-1) samples show leaf<-mid<-top<-main (%d lost)", good, n, lost)
	}
}

// closeChains counts, in perf script's reading of a recording of
// buildProg's program, the close(-1) samples and those whose stack shows
// leaf<-mid<-top<-main.
func closeChains(t *testing.T, out string) (good, n int) {
	for _, s := range testprog.ParseScript(testprog.Script(t, out)) {
		if strings.Contains(s.Header, "fd: 0xffffffff") {
			n++
			if testprog.HasChain(s.Syms, []string{"leaf", "mid", "top", "main"}) {
				good++
			}
		}
	}
	return good, n
}

// TestRecordUnwindBudget: with a one-byte CacheBudget, the objects of
// each process that exits are closed, and opened again for the next
// process running the same program, whose stacks are still right (perf
// script's reading of the frames --unwind stored).
func TestRecordUnwindBudget(t *testing.T) {
	testprog.NeedPerfEvents(t)
	prog := buildProg(t)
	out := filepath.Join(t.TempDir(), "perf.data")
	st, err := Record(context.Background(), Options{Events: []string{"syscalls:sys_enter_close"},
		Command: []string{"sh", "-c", prog + " 10; " + prog + " 10; " + prog + " 10"}, Output: out, Unwind: true, NoArchive: true,
		CacheBudget: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats: %+v", *st)
	if c := st.Cache; c.Objects != 0 || c.Evictions == 0 || c.Reopens == 0 {
		t.Errorf("every process exited: want no object open, evictions and re-opens: %+v", c)
	}
	good, n := closeChains(t, out)
	if lost := max(st.Lost, st.LostSamples); n+int(lost) < 30 || n < 15 || good != n {
		t.Errorf("%d of %d close(-1) samples show leaf<-mid<-top<-main (%d lost)", good, n, lost)
	}
}

// TestRecordLostAtEnd: the kernel writes a LOST record only ahead of a
// later record that fits in the ring, so samples dropped with nothing
// written after them (here every sample: each is larger than the one-page
// ring, and the recorded process maps nothing new) left no trace before,
// and the recording looked like one of a process that never called close.
// Now the events' own counts (PERF_FORMAT_LOST) are read at the end and
// written as LOST_SAMPLES, as perf record does: perf report -D reads
// them, and they are the Stats' count.
func TestRecordLostAtEnd(t *testing.T) {
	testprog.NeedPerfEvents(t)
	if !lostCountable() {
		t.Skip("the kernel keeps no count of lost samples per event (PERF_FORMAT_LOST, Linux 6.0)")
	}
	cmd := startProg(t, buildProg(t))
	out := filepath.Join(t.TempDir(), "perf.data")
	st, err := Record(context.Background(), Options{Events: []string{"syscalls:sys_enter_close"},
		PID: cmd.Process.Pid, Duration: 500 * time.Millisecond, Output: out, NoArchive: true,
		MmapPages: 1, StackSize: 16384})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats: %+v", *st)
	if st.Samples != 0 {
		t.Errorf("%d samples larger than the ring were written", st.Samples)
	}
	if st.LostSamples == 0 {
		t.Fatal("the process called close(-1) for 500 ms, every sample was dropped, none was counted")
	}
	dump := testprog.Output(t, testprog.PerfCommand(t, "report", "-D", "-i", out))
	var perfLost uint64
	for _, line := range strings.Split(dump, "\n") {
		if _, n, ok := strings.Cut(line, "PERF_RECORD_LOST_SAMPLES:"); ok {
			_, n, _ = strings.Cut(n, "lost samples :")
			v, err := strconv.ParseUint(strings.TrimSpace(n), 10, 64)
			if err != nil {
				t.Fatalf("perf report -D: %q: %v", line, err)
			}
			perfLost += v
		}
	}
	if perfLost != st.LostSamples {
		t.Errorf("perf report -D reads LOST_SAMPLES of %d samples, the Stats count %d", perfLost, st.LostSamples)
	}
}

// TestErrors checks that what cannot be recorded is said plainly.
func TestErrors(t *testing.T) {
	if _, err := ParseEvent("nosuchsys:nosuchevent"); !errors.Is(err, ErrUnknownEvent) {
		t.Errorf("unknown tracepoint: %v", err)
	}
	if _, err := ParseEvent("bogus-event"); !errors.Is(err, ErrUnknownEvent) {
		t.Errorf("unknown event: %v", err)
	}
	if _, err := os.Stat("/sys/bus/event_source/devices/kprobe"); err != nil {
		if _, err := ParseEvent("p:do_sys_open"); err == nil || !strings.Contains(err.Error(), "no kprobes") {
			t.Errorf("kprobe: %v", err)
		}
	}
	if _, err := ParseEvent("u:/nonexistent/binary:main"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("uprobe on a missing file: %v", err)
	}
	if _, err := ParseEvent("mem:zz"); err == nil {
		t.Error("bad breakpoint accepted")
	}
	if _, err := NewRecorder(Options{PID: 0x3fffffff}); !errors.Is(err, ErrTargetNotFound) {
		t.Errorf("missing pid: %v", err)
	}
	if _, err := NewRecorder(Options{Command: []string{"/nonexistent/cmd"}}); !errors.Is(err, ErrTargetNotFound) {
		t.Errorf("missing command: %v", err)
	}
	if _, err := NewRecorder(Options{}); err == nil {
		t.Error("no target accepted")
	}
	testprog.NeedPerfEvents(t)
	if _, err := os.Stat("/sys/bus/event_source/devices/cpu"); err != nil {
		_, err := Record(context.Background(), Options{Events: []string{"cycles"}, Command: []string{"true"},
			Output: filepath.Join(t.TempDir(), "x.data"), NoArchive: true})
		if err == nil || !strings.Contains(err.Error(), "no hardware PMU") {
			t.Errorf("cycles without a PMU: %v", err)
		}
	}
}

// TestFreqAboveKernelLimit: the kernel refuses a frequency above
// perf_event_max_sample_rate with a bare EINVAL ("perf_event_open
// cpu-clock (pid N, cpu 0): invalid argument" before). -F above it is now
// refused before anything is opened, naming the limit; perf record's
// default frequency above a limit the kernel lowered is lowered to it, with
// a warning, as perf record does. Tracepoints take no frequency.
func TestFreqAboveKernelLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "max_rate")
	if err := os.WriteFile(path, []byte("2500\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	defer func(p string) { maxSampleRatePath = p }(maxSampleRatePath)
	maxSampleRatePath = path
	_, err := NewRecorder(Options{Freq: 3000, Command: []string{"true"}})
	if err == nil || !strings.Contains(err.Error(), "-F 3000: above the kernel's highest sampling frequency, 2500 Hz") {
		t.Errorf("-F 3000 with a limit of 2500: %v", err)
	}
	var log strings.Builder
	r, err := NewRecorder(Options{Command: []string{"true"}, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if r.opts.Freq != 2500 || !strings.Contains(log.String(), "sampling at it rather than at 4000 Hz") {
		t.Errorf("default frequency with a limit of 2500: %d Hz, log %q", r.opts.Freq, log.String())
	}
	if r, err := NewRecorder(Options{Freq: 2500, Command: []string{"true"}}); err != nil || r.opts.Freq != 2500 {
		t.Errorf("-F 2500 with a limit of 2500: %v", err)
	}
	if _, err := NewRecorder(Options{Freq: 3000, Events: []string{"syscalls:sys_enter_close"}, Command: []string{"true"}}); err != nil {
		t.Errorf("-F 3000 with only a tracepoint: %v", err)
	}
	if _, err := NewRecorder(Options{Period: 100000, Command: []string{"true"}}); err != nil {
		t.Errorf("-c 100000: %v", err)
	}
}

// threadsProg creates threads that each call leaf, and says whether each
// creation succeeded.
const threadsProg = `#include <pthread.h>
#include <stdio.h>
#include <string.h>
__attribute__((noinline)) void leaf(void) { __asm__ volatile(""); }
static void *run(void *a) { leaf(); return a; }
int main(void) {
	int bad = 0;
	for (int i = 0; i < 4; i++) {
		pthread_t t;
		int e = pthread_create(&t, 0, run, 0);
		printf("pthread_create: %s\n", e ? strerror(e) : "ok");
		if (e) bad++; else pthread_join(t, 0);
	}
	leaf();
	return bad;
}
`

// TestUprobeThreadedCommand records a uprobe in a program that creates
// threads. The uprobe PMU names the probed file by a pointer into the
// recorder's memory, which the kernel reads again in the program at each
// clone that inherits the event: there it meant nothing, and every
// pthread_create failed with EFAULT ("Bad address") while the recorder
// watched. Every creation must succeed, and the uprobe fire in each thread
// (4) and in main, with the stack perf script unwinds too.
func TestUprobeThreadedCommand(t *testing.T) {
	testprog.NeedPerfEvents(t)
	dir := t.TempDir()
	prog := testprog.Build(t, dir, "prog.c", threadsProg, "-O2", "-g", "-pthread")
	out := filepath.Join(dir, "perf.data")
	var stdout bytes.Buffer
	st, err := Record(context.Background(), Options{
		Events: []string{"u:" + prog + ":leaf"}, Command: []string{prog}, Output: out, NoArchive: true, Stdout: &stdout,
	})
	if err != nil {
		t.Fatalf("Record: %v", err)
	}
	assert.Equal(t, strings.Repeat("pthread_create: ok\n", 4), stdout.String(), "the program's own report of its thread creations")
	assert.Zero(t, st.ExitCode)
	fc := readPerfData(t, out)
	require.NoError(t, fc.err)
	pid := progPid(t, fc)
	tids := map[int]bool{}
	for _, s := range fc.samples {
		if s.Pid == pid && strings.HasSuffix(s.EventName, ":leaf") {
			tids[int(s.Tid)] = true
		}
	}
	assert.Len(t, tids, 5, "threads whose leaf call was sampled (4 threads and main)")
	ss := testprog.ParseScript(testprog.Script(t, out))
	n := 0
	for _, s := range ss {
		if strings.HasPrefix(s.Header, "prog ") && (testprog.HasChain(s.Syms, []string{"leaf", "run"}) || testprog.HasChain(s.Syms, []string{"leaf", "main"})) {
			n++
		}
	}
	assert.Equal(t, 5, n, "perf script's samples at leaf, called from run or main")
}
