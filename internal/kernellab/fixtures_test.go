package kernellab

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/ulikunitz/xz"
	"github.com/ustack/ustack/archive"
	"github.com/ustack/ustack/internal/testfiles"
	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/perfdata"
)

// updateFixtures makes TestLab's arm64 stable-kernel run rewrite the
// committed arm64 recordings: go test ./internal/kernellab -run
// 'TestLab/^bookworm-arm64$' -update-arm64-fixtures, then
// sh testdata/gen/arm64lab/truth.sh for gdb-multiarch's truth.
var updateFixtures = flag.Bool("update-arm64-fixtures", false, "rewrite testdata/recordings/arm64-lab from the arm64 guest's recordings")

// fixtureRecordings are the arm64 guest's recordings kept as fixtures, and
// the gdb-multiarch truth (testdata/recordings/arm64-lab/TRUTH.frames)
// each is compared with.
var fixtureRecordings = []struct {
	name, truth, comm string
	// stop is the gdb stop (breakpoint location) whose chains are the
	// truth; frame 0 is compared by function, the callers by address.
	stop string
	// samples is how many samples of comm have truth's chain.
	samples int
}{
	{"kprobe", "open", "lab-static", "__libc_open64", 8},
	{"kretprobe", "open", "lab-static", "__libc_open64", 8},
	{"watch_addr", "watch", "lab-static", "write_leaf", 8},
	{"signal", "signal", "lab-static", "__libc_open64", 4},
	{"uprobe", "dynopen", "lab-dyn", "open_leaf", 8},
	{"tracepoint_plt", "dynopen", "lab-dyn", "open64", 8},
	{"watch_lib", "libwatch", "lab-dyn", "lib_bump", 8},
	{"cpuclock", "", "lab-static", "", 0},
}

func fixtureDir() string { return filepath.Join(testfiles.Dir(), "recordings", "arm64-lab") }

// writeFixtures copies the arm64 guest's recordings, the programs they
// ran and one archive for all of them (the guest's vdso and the lines of
// its kallsyms that name the recordings' kernel frames) into testdata.
func writeFixtures(t *testing.T, lr *labRun, p *payload, host string) {
	dir := fixtureDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	objDir := filepath.Join(testfiles.Dir(), "objects", "aarch64")
	for _, name := range []string{"lab-static", "lab-dyn", "liblab.so"} {
		b, err := os.ReadFile(filepath.Join(p.dir, name))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		w, err := xz.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(b)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(objDir, name+".xz"), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(objDir, name)) // unpacked again from the new .xz
	}
	kernelPCs := map[uint64]bool{}
	for _, f := range fixtureRecordings {
		b, err := os.ReadFile(filepath.Join(lr.out, f.name+".data"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f.name+".data"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		out, _ := lr.report(t, host, f.name, "--format", "json")
		sc := bufio.NewScanner(bytes.NewReader(out))
		sc.Buffer(make([]byte, 1<<20), 1<<26)
		for sc.Scan() {
			var s struct {
				Frames []struct {
					PC     string `json:"pc"`
					Kernel bool   `json:"kernel"`
				} `json:"frames"`
			}
			if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
				t.Fatal(err)
			}
			for _, fr := range s.Frames {
				if fr.Kernel {
					v, _ := strconv.ParseUint(strings.TrimPrefix(fr.PC, "0x"), 16, 64)
					kernelPCs[v] = true
				}
			}
		}
	}
	src, err := archive.Open(filepath.Join(lr.out, "kprobe.data.ustack"), archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ks := src.Kallsyms()
	if ks == nil {
		t.Fatal("the guest's archive has no kallsyms")
	}
	var all bytes.Buffer
	all.ReadFrom(ks)
	slim := trimKallsyms(all.Bytes(), kernelPCs)
	arc := filepath.Join(dir, "lab.ustack")
	w, err := archive.Create(arc, src.Meta(), true)
	if err != nil {
		t.Fatal(err)
	}
	vdso, id, ok := src.VDSO()
	if !ok {
		t.Fatal("the guest's archive has no vdso")
	}
	if err := w.AddVDSO(id, vdso); err != nil {
		t.Fatal(err)
	}
	if err := w.AddKallsyms(slim); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	os.Chmod(arc, 0o644)
	t.Logf("wrote %d recordings, the programs and lab.ustack (%d of %d kallsyms bytes) to %s", len(fixtureRecordings), len(slim), all.Len(), dir)
}

// trimKallsyms keeps the lines of a /proc/kallsyms that name pcs: for each,
// the symbol at or below it and the one after it (where the first ends),
// and _text/_stext, by which a kernel is relocated.
func trimKallsyms(b []byte, pcs map[uint64]bool) []byte {
	type line struct {
		addr uint64
		text string
	}
	var lines []line
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		a, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			continue
		}
		lines = append(lines, line{a, l})
	}
	sorted := append([]line(nil), lines...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].addr < sorted[j].addr })
	keep := map[string]bool{}
	for pc := range pcs {
		i := sort.Search(len(sorted), func(i int) bool { return sorted[i].addr > pc })
		if i > 0 {
			keep[sorted[i-1].text] = true
		}
		if i < len(sorted) {
			keep[sorted[i].text] = true
		}
	}
	var out bytes.Buffer
	for _, l := range lines {
		f := strings.Fields(l.text)
		if keep[l.text] || f[2] == "_text" || f[2] == "_stext" {
			out.WriteString(l.text + "\n")
		}
	}
	return out.Bytes()
}

// truthStop is one gdb-multiarch stop of testdata/gen/arm64lab/truth.sh.
type truthStop struct {
	Stop   string `json:"stop"`
	Frames []struct {
		PC       string  `json:"pc"`
		Symbol   *string `json:"symbol"`
		Offset   *uint64 `json:"offset"`
		Function *string `json:"function"`
		SigTramp bool    `json:"signal_trampoline"`
	} `json:"frames"`
}

// A fixture frame as ustack's JSON has it.
type fixFrame struct {
	PC       string  `json:"pc"`
	Addr     string  `json:"addr"`
	Symbol   *string `json:"symbol"`
	SymOff   *uint64 `json:"symoff"`
	Kernel   bool    `json:"kernel"`
	Inlined  bool    `json:"inlined"`
	SigTramp bool    `json:"signal_trampoline"`
	How      string  `json:"how"`
}

func hexval(s string) uint64 {
	v, _ := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	return v
}

// symAt is "symbol+offset of the frame's pc" as gdb's `info symbol` says
// it, from ustack's symbol and symoff (which count from addr, pc-1 for a
// return address).
func (f fixFrame) symAt() string {
	if f.Symbol == nil || f.SymOff == nil {
		return "??"
	}
	return fmt.Sprintf("%s+%d", *f.Symbol, *f.SymOff+hexval(f.PC)-hexval(f.Addr))
}

// TestArm64LabRecordings reports the committed recordings an arm64 kernel
// made in the lab (kprobe, kretprobe, hardware watchpoints, a uprobe, a
// tracepoint reached through the PLT, a signal handler, cpu-clock) on
// this host, with no qemu, and compares every sample's user frames with
// gdb-multiarch's frame chain for the same binaries stopped at the same
// function under qemu-user: frame 0's function, then each caller's
// symbol and offset, the signal trampoline where gdb has one, to main and
// on to _start.
func TestArm64LabRecordings(t *testing.T) {
	dir := fixtureDir()
	host := hostBinary(t)
	symfs := arm64Symfs(t)
	for _, f := range fixtureRecordings {
		t.Run(f.name, func(t *testing.T) {
			lr := &labRun{out: dir}
			data := filepath.Join(dir, f.name+".data")
			lrOut := func(extra ...string) []byte {
				out, _ := lr.reportFile(t, host, data, append([]string{"--symfs", symfs, "--archive", filepath.Join(dir, "lab.ustack")}, extra...)...)
				return out
			}
			var truth [][]string
			var truthTramp [][]bool
			if f.truth != "" {
				b, err := os.ReadFile(filepath.Join(dir, f.truth+".frames"))
				if err != nil {
					t.Fatal(err)
				}
				for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
					var ts truthStop
					if err := json.Unmarshal([]byte(l), &ts); err != nil {
						t.Fatal(err)
					}
					if ts.Stop != f.stop {
						continue
					}
					var chain []string
					var tramp []bool
					for i, fr := range ts.Frames {
						s := "??"
						if fr.Symbol != nil && fr.Offset != nil {
							s = fmt.Sprintf("%s+%d", *fr.Symbol, *fr.Offset)
						}
						if i == 0 && fr.Function != nil {
							s = *fr.Function
						}
						chain = append(chain, s)
						tramp = append(tramp, fr.SigTramp)
					}
					truth, truthTramp = append(truth, chain), append(truthTramp, tramp)
				}
				if len(truth) == 0 {
					t.Fatalf("%s.frames has no stop at %s", f.truth, f.stop)
				}
			}
			out := lrOut("--format", "json")
			sc := bufio.NewScanner(bytes.NewReader(out))
			sc.Buffer(make([]byte, 1<<20), 1<<26)
			matched, samples := 0, 0
			for sc.Scan() {
				var s struct {
					Comm   string     `json:"comm"`
					Stop   string     `json:"stop"`
					Frames []fixFrame `json:"frames"`
				}
				if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
					t.Fatal(err)
				}
				if s.Comm != f.comm {
					continue
				}
				samples++
				var kernel []string
				for _, fr := range s.Frames {
					if fr.Kernel && fr.Symbol != nil {
						kernel = append(kernel, *fr.Symbol)
					}
				}
				if inExec(kernel) {
					if s.Stop != "exec" {
						t.Errorf("sample %d, inside execve (kernel %v): stop %q, want exec", samples, kernel, s.Stop)
					}
					continue
				}
				if s.Stop != "outermost" {
					t.Errorf("sample %d: stop %q, want outermost", samples, s.Stop)
				}
				var user []fixFrame
				for _, fr := range s.Frames {
					if !fr.Kernel && !fr.Inlined {
						user = append(user, fr)
					}
				}
				if f.truth == "" {
					if testprog.HasChain(syms(user), []string{"spin_mid", "main"}) {
						matched++
					}
					continue
				}
				for ti, chain := range truth {
					if sameChain(user, chain, truthTramp[ti], f.stop) {
						matched++
						break
					}
				}
			}
			want := f.samples
			if f.truth == "" {
				want = 20
				if matched < want {
					t.Errorf("%d of %d cpu-clock samples have spin_mid <- main, want at least %d", matched, samples, want)
				}
				return
			}
			if matched != want {
				t.Errorf("%d of %d samples of %s equal gdb-multiarch's chain at %s, want %d; gdb's: %v; ustack's report:\n%s",
					matched, samples, f.comm, f.stop, want, truth[0], lrOut())
			}
		})
	}
}

// arm64Symfs lays the guest's paths out as a --symfs tree over the
// committed arm64 objects.
func arm64Symfs(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(fixtureDir(), "lab.ustack")); err != nil {
		t.Fatalf("no arm64 lab fixtures: %v", err)
	}
	if err := testfiles.Unpack(testfiles.Dir()); err != nil {
		t.Fatal(err)
	}
	symfs := t.TempDir()
	obj := filepath.Join(testfiles.Dir(), "objects", "aarch64")
	for guest, o := range map[string]string{
		"lab/lab-static": "lab-static", "lab/lab-dyn": "lab-dyn", "lab/liblab.so": "liblab.so",
		"lib/aarch64-linux-gnu/libc.so.6": "libc.so.6", "lib/ld-linux-aarch64.so.1": "ld-linux-aarch64.so.1",
	} {
		// Copies: --symfs is a root, absolute links resolve inside it.
		os.MkdirAll(filepath.Join(symfs, filepath.Dir(guest)), 0o755)
		b, err := os.ReadFile(filepath.Join(obj, o))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(symfs, guest), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return symfs
}

// TestArm64EmptySnapshotChained: a guest recording (tracepoint_plt_nostack,
// one run of TestLab's tracepoint_plt in 25) in which the kernel copied no
// stack bytes for ld.so's eight opens at start-up (perf -D: "ustack: size
// 0") but recorded its frame-pointer call chain. Those stacks go on with
// the chain (stop callchain), and every format prints them: perf script
// prints the chain there too. Before, the text format printed no frame
// for them while JSON had eleven, and a warning said their user frames
// were missing.
func TestArm64EmptySnapshotChained(t *testing.T) {
	dir := fixtureDir()
	host := hostBinary(t)
	symfs := arm64Symfs(t)
	data := filepath.Join(dir, "tracepoint_plt_nostack.data")

	// The recording's own bytes: which samples have no stack, and the
	// kernel's user chain of each.
	raw, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	r, err := perfdata.NewFileReader(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	var empty []bool
	var chains [][]uint64
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		if s, ok := rec.(*perfdata.Sample); ok {
			empty = append(empty, len(s.Stack()) == 0)
			chains = append(chains, append([]uint64(nil), perfdata.UserCallchain(s.Callchain)...))
		}
	}

	lr := &labRun{out: dir}
	args := []string{"--symfs", symfs, "--archive", filepath.Join(dir, "lab.ustack")}
	jsonOut, stderr := lr.reportFile(t, host, data, append(args, "--format", "json")...)
	text, _ := lr.reportFile(t, host, data, args...)
	samples := parseSamples(t, data, jsonOut)
	blocks := strings.Split(strings.TrimSpace(string(text)), "\n\n")
	if len(samples) != len(empty) || len(blocks) != len(empty) {
		t.Fatalf("%d samples in the recording, %d in JSON, %d in text", len(empty), len(samples), len(blocks))
	}
	chained := 0
	for i, s := range samples {
		if !empty[i] {
			continue
		}
		if s.Stop != "callchain" {
			t.Errorf("sample %d has no stack bytes: stop %q, want callchain", i, s.Stop)
			continue
		}
		chained++
		// The frames the chain carried are the recorded chain's last
		// entries, in order.
		var pcs []uint64
		for _, f := range s.Frames {
			if f.How == "callchain" {
				v, _ := strconv.ParseUint(strings.TrimPrefix(f.PC, "0x"), 16, 64)
				pcs = append(pcs, v)
			}
		}
		c := chains[i]
		if len(pcs) == 0 || len(pcs) > len(c) || fmt.Sprint(c[len(c)-len(pcs):]) != fmt.Sprint(pcs) {
			t.Errorf("sample %d: frames from the chain %x, recorded chain %x", i, pcs, c)
		}
		// Text prints the user frames JSON has, one a line.
		lines := strings.Split(blocks[i], "\n")[1:]
		if len(lines) != len(s.user()) {
			t.Errorf("sample %d: text prints %d frames, JSON has %d user frames:\n%s", i, len(lines), len(s.user()), blocks[i])
		}
	}
	if chained != 8 {
		t.Errorf("%d samples without stack bytes went on with the chain, want ld.so's 8", chained)
	}
	if strings.Contains(string(stderr), "user frames are missing") {
		t.Errorf("the report says frames are missing that it printed:\n%s", stderr)
	}
	if !strings.Contains(string(stderr), "8 of them had no stack snapshot at all") {
		t.Errorf("the summary does not say 8 stacks had no snapshot:\n%s", stderr)
	}
}

func syms(fr []fixFrame) []string {
	var out []string
	for _, f := range fr {
		if f.Symbol != nil {
			out = append(out, *f.Symbol)
		} else {
			out = append(out, "??")
		}
	}
	return out
}

// sameChain compares ustack's user frames of a sample with one of gdb's
// chains: frame 0 by function (the probe and gdb's breakpoint stop at
// different instructions of it; the name may be any alias of the same
// address, so it is compared as gdb names the stop), each caller by
// symbol+offset, the trampoline by kind (gdb under qemu-user meets
// qemu's trampoline, the guest the vdso's).
func sameChain(user []fixFrame, chain []string, tramp []bool, stop string) bool {
	if len(user) != len(chain) {
		return false
	}
	for i := range chain {
		switch {
		case i == 0:
			if user[0].Symbol == nil || (*user[0].Symbol != chain[0] && *user[0].Symbol != stop) {
				return false
			}
		case tramp[i]:
			if !user[i].SigTramp {
				return false
			}
		default:
			if user[i].symAt() != chain[i] {
				return false
			}
		}
	}
	return true
}
