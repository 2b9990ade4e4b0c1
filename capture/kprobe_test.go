package capture

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/ustack/ustack/perfdata"
	"golang.org/x/sys/unix"
)

// fakeKernel is a fake sysfs, procfs, debugfs and tracefs for the kprobe
// code: the PMU directory, kallsyms, the blacklist and a tracefs root.
type fakeKernel struct {
	pmus, kallsyms, blacklist, tracefs string
}

// testKallsyms is a few lines of a real /proc/kallsyms (6.1, x86_64).
const testKallsyms = `ffffffff81000000 T _text
ffffffff8138a1d0 T do_sys_openat2
ffffffff8138a3a0 T do_sys_open
ffffffff8138a2f0 t do_sys_openat2.cold
ffffffff8139e010 T do_sys_poll
ffffffff81029e60 t nmi_handle
ffffffff81234560 t cleanup_module_dup
ffffffff81234990 t cleanup_module_dup
ffffffff82a05000 D jiffies
ffffffffc0a01000 t ext4_file_open	[ext4]
`

// newFakeKernel points the package's kernel paths at a tree in a temporary
// directory: with a kprobe PMU of type 6 when pmu is set, with tracefs's
// kprobe_events when tracefs is set.
func newFakeKernel(t *testing.T, pmu, tracefs bool, kallsyms string) *fakeKernel {
	t.Helper()
	d := t.TempDir()
	fk := &fakeKernel{pmus: filepath.Join(d, "devices"), kallsyms: filepath.Join(d, "kallsyms"),
		blacklist: filepath.Join(d, "blacklist"), tracefs: filepath.Join(d, "tracing")}
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(fk.pmus, "uprobe", "type"), "7\n")
	if pmu {
		write(filepath.Join(fk.pmus, "kprobe", "type"), "6\n")
		write(filepath.Join(fk.pmus, "kprobe", "format", "retprobe"), "config:0\n")
	}
	write(fk.kallsyms, kallsyms)
	write(fk.blacklist, "0xffffffff81029e60-0xffffffff81029f80\tnmi_handle\n")
	write(filepath.Join(fk.tracefs, "events", "kprobes", "k", "id"), "1500\n")
	write(filepath.Join(fk.tracefs, "events", "probe", "do_sys_openat2", "id"), "1501\n")
	write(filepath.Join(fk.tracefs, "available_filter_functions"), "do_sys_openat2\ndo_sys_open\ndo_sys_poll\nnmi_handle\next4_file_open [ext4]\n")
	if tracefs {
		write(filepath.Join(fk.tracefs, "kprobe_events"), "")
	}
	oldP, oldK, oldB, oldT := pmuDevices, kallsymsPath, kprobeBlacklists, tracefsRoots
	pmuDevices, kallsymsPath, kprobeBlacklists, tracefsRoots = fk.pmus, fk.kallsyms, []string{fk.blacklist}, []string{fk.tracefs}
	t.Cleanup(func() { pmuDevices, kallsymsPath, kprobeBlacklists, tracefsRoots = oldP, oldK, oldB, oldT })
	return fk
}

// TestParseKprobe parses every spelling of kprobes and kretprobes against
// a fake kprobe PMU, and checks that kprobes:NAME and probe:NAME stay
// tracepoints.
func TestParseKprobe(t *testing.T) {
	newFakeKernel(t, true, false, testKallsyms)
	for _, c := range []struct {
		spec, name string
		kind       EventKind
		typ        uint32
		config     uint64
		config2    uint64
		fn         string // the string config1 points to
	}{
		{"k:do_sys_openat2", "kprobe:do_sys_openat2", KindKprobe, 6, 0, 0, "do_sys_openat2"},
		{"p:do_sys_openat2", "kprobe:do_sys_openat2", KindKprobe, 6, 0, 0, "do_sys_openat2"},
		{"kprobe:do_sys_openat2", "kprobe:do_sys_openat2", KindKprobe, 6, 0, 0, "do_sys_openat2"},
		{"k:do_sys_openat2+0x10", "kprobe:do_sys_openat2+0x10", KindKprobe, 6, 0, 16, "do_sys_openat2"},
		{"kprobe:do_sys_openat2+16", "kprobe:do_sys_openat2+0x10", KindKprobe, 6, 0, 16, "do_sys_openat2"},
		{"kr:do_sys_openat2", "kretprobe:do_sys_openat2", KindKprobe, 6, 1, 0, "do_sys_openat2"},
		{"r:do_sys_openat2", "kretprobe:do_sys_openat2", KindKprobe, 6, 1, 0, "do_sys_openat2"},
		{"kretprobe:do_sys_openat2", "kretprobe:do_sys_openat2", KindKprobe, 6, 1, 0, "do_sys_openat2"},
		{"k:do_sys_openat2.cold", "kprobe:do_sys_openat2.cold", KindKprobe, 6, 0, 0, "do_sys_openat2.cold"},
		{"k:ext4:ext4_file_open", "kprobe:ext4:ext4_file_open", KindKprobe, 6, 0, 0, "ext4:ext4_file_open"},
		{"k:0xffffffff8138a1d0", "kprobe:0xffffffff8138a1d0", KindKprobe, 6, 0, 0xffffffff8138a1d0, ""},
		{" k:do_sys_poll ", "kprobe:do_sys_poll", KindKprobe, 6, 0, 0, "do_sys_poll"},
		// Tracefs systems of probes made by hand or by perf probe.
		{"kprobes:k", "kprobes:k", KindTracepoint, unix.PERF_TYPE_TRACEPOINT, 1500, 0, ""},
		{"probe:do_sys_openat2", "probe:do_sys_openat2", KindTracepoint, unix.PERF_TYPE_TRACEPOINT, 1501, 0, ""},
	} {
		t.Run(c.spec, func(t *testing.T) {
			ev, err := ParseEvent(c.spec)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Name != c.name || ev.Kind != c.kind || ev.Type != c.typ || ev.Config != c.config || ev.Config2 != c.config2 {
				t.Errorf("got name %q kind %v type %d config %#x config2 %#x, want %q %v %d %#x %#x",
					ev.Name, ev.Kind, ev.Type, ev.Config, ev.Config2, c.name, c.kind, c.typ, c.config, c.config2)
			}
			ua := ev.kernelAttr(&perfdata.Attr{Type: ev.Type, Config: ev.Config, Config2: ev.Config2})
			switch {
			case c.fn == "" && ua.Ext1 != 0:
				t.Errorf("config1 = %#x, want 0 (no function name)", ua.Ext1)
			case c.fn != "":
				if string(ev.config1Bytes) != c.fn+"\x00" || ua.Ext1 != uint64(uintptr(unsafe.Pointer(&ev.config1Bytes[0]))) {
					t.Errorf("config1 points to %q (%#x), want the NUL-terminated %q", ev.config1Bytes, ua.Ext1, c.fn)
				}
			}
		})
	}
	for _, c := range []struct{ spec, want string }{
		{"kr:do_sys_openat2+4", "takes no +OFFSET"},
		{"k:", "no function"},
		{"k:do_sys_openat2+zz", "bad offset"},
		{"k:do sys", "not a kernel function name"},
		{"k:0x10+4", "takes no +OFFSET"},
	} {
		if _, err := ParseEvent(c.spec); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseEvent(%q) = %v, want an error saying %q", c.spec, err, c.want)
		}
	}
}

// TestKprobeRetprobeBit reads the retprobe bit from the PMU's format
// directory, not from a constant.
func TestKprobeRetprobeBit(t *testing.T) {
	fk := newFakeKernel(t, true, false, testKallsyms)
	if err := os.WriteFile(filepath.Join(fk.pmus, "kprobe", "format", "retprobe"), []byte("config:5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ev, err := ParseEvent("kr:do_sys_openat2")
	if err != nil {
		t.Fatal(err)
	}
	if ev.Config != 1<<5 {
		t.Errorf("kretprobe config = %#x, want bit 5 (%#x) as format/retprobe says", ev.Config, 1<<5)
	}
}

// TestKprobeFunctionErrors checks what is said of functions that do not
// exist, are data, are blacklisted, are notrace or are ambiguous.
func TestKprobeFunctionErrors(t *testing.T) {
	newFakeKernel(t, true, false, testKallsyms)
	for _, c := range []struct {
		spec    string
		want    []string
		unknown bool
	}{
		{"k:do_sys_opn", []string{`no kernel function "do_sys_opn"`, "similar names: do_sys_open"}, true},
		{"k:sys_openat2", []string{`no kernel function "sys_openat2"`, "similar names: do_sys_openat2"}, true},
		{"k:nosuchthing_at_all", []string{`no kernel function "nosuchthing_at_all"`}, true},
		{"k:jiffies", []string{`"jiffies" is not a function`}, true},
		{"k:nmi_handle", []string{"nmi_handle is on the kprobe blacklist", "blacklist"}, false},
		{"kr:xfs:xfs_file_open", []string{`no kernel function "xfs:xfs_file_open"`, "is module xfs loaded?"}, true},
	} {
		_, err := ParseEvent(c.spec)
		if err == nil {
			t.Errorf("ParseEvent(%q) accepted", c.spec)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ParseEvent(%q) = %v, want it to say %q", c.spec, err, w)
			}
		}
		if errors.Is(err, ErrUnknownEvent) != c.unknown {
			t.Errorf("ParseEvent(%q): errors.Is(ErrUnknownEvent) = %v, want %v", c.spec, !c.unknown, c.unknown)
		}
	}
	// The prefix suggestion of the issue: do_sys_open is there, so take
	// a kernel without it.
	fk := newFakeKernel(t, true, false, strings.ReplaceAll(testKallsyms, "ffffffff8138a3a0 T do_sys_open\n", ""))
	_, err := ParseEvent("k:do_sys_open")
	if err == nil || !strings.Contains(err.Error(), "similar names: do_sys_openat2, do_sys_openat2.cold") || !strings.Contains(err.Error(), fk.kallsyms) {
		t.Errorf("k:do_sys_open on a kernel with only do_sys_openat2: %v", err)
	}
	// Warnings: not traceable by ftrace, several functions of one name.
	newFakeKernel(t, true, false, testKallsyms)
	ev, err := ParseEvent("k:do_sys_openat2.cold")
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.Warnings) != 1 || !strings.Contains(ev.Warnings[0], "not in available_filter_functions") {
		t.Errorf("k:do_sys_openat2.cold warnings %q, want one about available_filter_functions", ev.Warnings)
	}
	ev, err = ParseEvent("k:cleanup_module_dup")
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(ev.Warnings, "\n"); !strings.Contains(w, "names 2 functions") || !strings.Contains(w, "0xffffffff81234560, 0xffffffff81234990") {
		t.Errorf("k:cleanup_module_dup warnings %q, want the two addresses", ev.Warnings)
	}
	if ev, err := ParseEvent("k:do_sys_openat2"); err != nil || len(ev.Warnings) != 0 {
		t.Errorf("k:do_sys_openat2: %v, warnings %q", err, ev.Warnings)
	}
}

// TestKprobeNoKernelSupport: without the PMU and kprobe_events, the error
// says the kernel has no kprobes.
func TestKprobeNoKernelSupport(t *testing.T) {
	newFakeKernel(t, false, false, testKallsyms)
	_, err := ParseEvent("k:do_sys_openat2")
	if err == nil || !strings.Contains(err.Error(), "this kernel has no kprobes") || !strings.Contains(err.Error(), "kprobe_events") {
		t.Errorf("k:do_sys_openat2 without kprobes: %v", err)
	}
}

// TestKprobeOpenErrors checks the explanation of each errno the kernel
// gives a refused kprobe.
func TestKprobeOpenErrors(t *testing.T) {
	newFakeKernel(t, true, false, testKallsyms)
	parse := func(spec string) *Event {
		ev, err := ParseEvent(spec)
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	for _, c := range []struct {
		ev    *Event
		errno unix.Errno
		want  string
	}{
		{parse("k:do_sys_openat2"), unix.ENOENT, "no kernel function do_sys_openat2"},
		{parse("k:do_sys_openat2+3"), unix.EILSEQ, "+0x3 is not at an instruction boundary of do_sys_openat2"},
		{parse("k:do_sys_openat2.cold"), unix.EINVAL, "do_sys_openat2.cold cannot be probed: it is not in available_filter_functions"},
		{parse("k:do_sys_openat2+5"), unix.EINVAL, "or the offset is not an instruction boundary"},
		{parse("k:cleanup_module_dup"), unix.EADDRNOTAVAIL, "several kernel functions are named cleanup_module_dup"},
	} {
		err := openError(c.ev, -1, 0, c.errno)
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s, %v: %v, want it to say %q", c.ev.Name, c.errno, err, c.want)
		}
	}
	// A function the blacklist lists but that passed the parse (the
	// blacklist appeared, or debugfs was mounted, in between).
	ev := parse("k:do_sys_poll")
	os.WriteFile(kprobeBlacklists[0], []byte("0xffffffff8139e010-0xffffffff8139e100\tdo_sys_poll\n"), 0o644)
	if err := openError(ev, -1, 0, unix.EINVAL); !strings.Contains(err.Error(), "do_sys_poll is on the kprobe blacklist") {
		t.Errorf("blacklisted at open: %v", err)
	}
}

// TestKprobeAttr checks the attr of a kprobe sample: the kernel call
// chain above the user stack, no exclude_kernel, no user-only fallback.
func TestKprobeAttr(t *testing.T) {
	newFakeKernel(t, true, false, testKallsyms)
	r, err := NewRecorder(Options{Events: []string{"k:do_sys_openat2", "kr:do_sys_openat2"}, Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range r.events {
		a := r.buildAttr(i, ev)
		if a.Type != 6 || a.SampleType&perfdata.SampleCallchain == 0 || a.Flags&perfdata.AttrExcludeCallchainKernel != 0 ||
			a.Flags&perfdata.AttrExcludeKernel != 0 || a.Flags&perfdata.AttrExcludeCallchainUser != 0 ||
			a.SampleType&perfdata.SampleStackUser == 0 || a.SamplePeriod != 1 {
			t.Errorf("%s: attr type %d sample_type %#x flags %#x period %d: want the kprobe PMU's type, the kernel and user callchain, the user stack, every hit",
				ev.Name, a.Type, a.SampleType, a.Flags, a.SamplePeriod)
		}
	}
	r.openErrno = unix.EACCES
	if r.userOnlyFallback() {
		t.Error("a kprobe recording would fall back to user space only")
	}
}

// TestKprobeTracefsFallback defines kprobes in a fake tracefs's
// kprobe_events where the kernel has no kprobe PMU: the lines written,
// the tracepoint ids used, the tracing data, and their removal, also when
// opening the event fails and after a recorder that was killed.
func TestKprobeTracefsFallback(t *testing.T) {
	fk := newFakeKernel(t, false, true, testKallsyms)
	group := kprobeGroup(os.Getpid())
	// A group left by a killed recorder (a pid that does not exist).
	dead := 4194000
	for unix.Kill(dead, 0) != unix.ESRCH {
		dead++
	}
	staleLine := fmt.Sprintf("p:ustack_%d/do_sys_poll do_sys_poll\n", dead)
	events := filepath.Join(fk.tracefs, "kprobe_events")
	if err := os.WriteFile(events, []byte(staleLine), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, ev := range []string{"do_sys_openat2", "do_sys_openat2__return", "do_sys_openat2_16"} {
		dir := filepath.Join(fk.tracefs, "events", group, ev)
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "id"), []byte(fmt.Sprint(2000+i)), 0o644)
		os.WriteFile(filepath.Join(dir, "format"), []byte("name: "+ev+"\nID: "+fmt.Sprint(2000+i)+"\n"), 0o644)
	}
	r, err := NewRecorder(Options{Events: []string{"k:do_sys_openat2", "kr:do_sys_openat2", "k:do_sys_openat2+16"}, Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.addProbes(); err != nil {
		t.Fatal(err)
	}
	for i, ev := range r.events {
		a := r.buildAttr(i, ev)
		if a.Type != unix.PERF_TYPE_TRACEPOINT || a.Config != uint64(2000+i) || a.SampleType&perfdata.SampleRaw == 0 || a.Name != ev.Name {
			t.Errorf("%s: attr type %d config %d sample_type %#x name %q: want the tracepoint %d with its raw fields", ev.Name, a.Type, a.Config, a.SampleType, a.Name, 2000+i)
		}
	}
	wantAdded := staleLine + fmt.Sprintf("-:ustack_%d/do_sys_poll\n", dead) +
		"p:" + group + "/do_sys_openat2 do_sys_openat2\n" +
		"r:" + group + "/do_sys_openat2__return do_sys_openat2\n" +
		"p:" + group + "/do_sys_openat2_16 do_sys_openat2+16\n"
	if b, _ := os.ReadFile(events); string(b) != wantAdded {
		t.Errorf("kprobe_events after adding:\n%s\nwant:\n%s", b, wantAdded)
	}
	td, err := tracingData(r.events)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range []string{"do_sys_openat2", "do_sys_openat2__return", "do_sys_openat2_16"} {
		if !strings.Contains(string(td), "name: "+ev+"\n") || !strings.Contains(string(td), group+"\x00") {
			t.Errorf("tracing data lacks the format of %s/%s", group, ev)
		}
	}
	if err := r.removeProbes(); err != nil {
		t.Fatal(err)
	}
	wantRemoved := wantAdded + "-:" + group + "/do_sys_openat2\n-:" + group + "/do_sys_openat2__return\n-:" + group + "/do_sys_openat2_16\n"
	if b, _ := os.ReadFile(events); string(b) != wantRemoved {
		t.Errorf("kprobe_events after removing:\n%s\nwant:\n%s", b, wantRemoved)
	}
	if err := r.removeProbes(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(events); string(b) != wantRemoved {
		t.Errorf("a second removal wrote again:\n%s", b)
	}

	// Run, when the kernel refuses the event (the fake id names no
	// tracepoint), removes what it added before returning the error.
	os.WriteFile(events, nil, 0o644)
	os.WriteFile(filepath.Join(fk.tracefs, "events", group, "do_sys_openat2", "id"), []byte("999999999"), 0o644)
	_, err = Record(context.Background(), Options{Events: []string{"k:do_sys_openat2"}, Command: []string{"true"},
		Output: filepath.Join(t.TempDir(), "perf.data"), NoArchive: true})
	if err == nil {
		t.Fatal("recording a fake tracepoint id succeeded")
	}
	want := "p:" + group + "/do_sys_openat2 do_sys_openat2\n-:" + group + "/do_sys_openat2\n"
	if b, _ := os.ReadFile(events); string(b) != want {
		t.Errorf("kprobe_events after a failed Run (%v):\n%s\nwant:\n%s", err, b, want)
	}
}

// TestKprobeForceTracefs: USTACK_NO_KPROBE_PMU makes kprobes through
// kprobe_events on a kernel that has the PMU, to test that path for real.
func TestKprobeForceTracefs(t *testing.T) {
	fk := newFakeKernel(t, true, true, testKallsyms)
	t.Setenv("USTACK_NO_KPROBE_PMU", "1")
	ev, err := ParseEvent("kr:do_sys_openat2")
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != unix.PERF_TYPE_TRACEPOINT || ev.kprobe.tracefs != fk.tracefs || ev.config1Bytes != nil {
		t.Errorf("type %d tracefs %q config1 %q: want a kprobe_events tracepoint in %s", ev.Type, ev.kprobe.tracefs, ev.config1Bytes, fk.tracefs)
	}
}

// TestKprobeTracefsRefused: a kprobe_events write the kernel refuses is
// reported with the line written and tracefs's error_log.
func TestKprobeTracefsRefused(t *testing.T) {
	fk := newFakeKernel(t, false, true, testKallsyms)
	os.WriteFile(filepath.Join(fk.tracefs, "error_log"), []byte("[  12.3] trace_kprobe: error: Failed to register probe event\n  Command: p:ustack_1/x do_sys_openat2\n             ^\n"), 0o644)
	os.Chmod(filepath.Join(fk.tracefs, "kprobe_events"), 0o444)
	if os.Geteuid() == 0 {
		// Root writes a 0444 file: make it a directory instead.
		os.Remove(filepath.Join(fk.tracefs, "kprobe_events"))
		os.Mkdir(filepath.Join(fk.tracefs, "kprobe_events"), 0o755)
	}
	r, err := NewRecorder(Options{Events: []string{"k:do_sys_openat2"}, Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	err = r.addProbes()
	if err == nil || !strings.Contains(err.Error(), `writing "p:ustack_`) || !strings.Contains(err.Error(), "Failed to register probe event") {
		t.Errorf("refused kprobe_events write: %v", err)
	}
}

// TestUprobeTracefsWhenInherited: a uprobe whose event the workload's
// threads inherit is defined in tracefs's uprobe_events and opened as its
// tracepoint (the uprobe PMU's path pointer would be read again in the
// workload at each clone, which then fails), named after the symbol, and
// removed after; recorded without inheritance (NoInherit, every CPU) it
// stays the PMU's.
func TestUprobeTracefsWhenInherited(t *testing.T) {
	fk := newFakeKernel(t, true, true, testKallsyms)
	events := filepath.Join(fk.tracefs, "uprobe_events")
	if err := os.WriteFile(events, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	group := kprobeGroup(os.Getpid())
	for i, ev := range []string{"main_main", "main_main__return"} {
		dir := filepath.Join(fk.tracefs, "events", group, ev)
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "id"), []byte(fmt.Sprint(3000+i)), 0o644)
		os.WriteFile(filepath.Join(dir, "format"), []byte("name: "+ev+"\nID: "+fmt.Sprint(3000+i)+"\n"), 0o644)
	}
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	specs := []string{"u:" + bin + ":main.main", "ur:" + bin + ":main.main"}
	r, err := NewRecorder(Options{Events: specs, Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	path := r.events[0].Path
	off := r.events[0].Offset
	if err := r.addProbes(); err != nil {
		t.Fatal(err)
	}
	for i, ev := range r.events {
		a := r.buildAttr(i, ev)
		if a.Type != unix.PERF_TYPE_TRACEPOINT || a.Config != uint64(3000+i) || a.Config1 != 0 || a.Config2 != 0 ||
			a.SampleType&perfdata.SampleRaw == 0 || a.Flags&perfdata.AttrInherit == 0 || ev.config1Bytes != nil {
			t.Errorf("%s: attr type %d config %d config1 %#x config2 %#x sample_type %#x flags %#x: want the inherited tracepoint %d with its raw fields",
				ev.Name, a.Type, a.Config, a.Config1, a.Config2, a.SampleType, a.Flags, 3000+i)
		}
	}
	wantAdded := fmt.Sprintf("p:%s/main_main %s:%#x\nr:%s/main_main__return %s:%#x\n", group, path, off, group, path, off)
	if b, _ := os.ReadFile(events); string(b) != wantAdded {
		t.Errorf("uprobe_events after adding:\n%s\nwant:\n%s", b, wantAdded)
	}
	td, err := tracingData(r.events)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(td), "name: main_main\n") || !strings.Contains(string(td), "name: main_main__return\n") {
		t.Error("the tracing data lack the probes' formats")
	}
	if err := r.removeProbes(); err != nil {
		t.Fatal(err)
	}
	for _, ev := range r.events {
		if ev.Type != 7 || ev.config1Bytes == nil {
			t.Errorf("%s after the removal: type %d: want the PMU's fields back", ev.Name, ev.Type)
		}
	}
	wantRemoved := wantAdded + "-:" + group + "/main_main\n-:" + group + "/main_main__return\n"
	if b, _ := os.ReadFile(events); string(b) != wantRemoved {
		t.Errorf("uprobe_events after removing:\n%s\nwant:\n%s", b, wantRemoved)
	}

	for _, o := range []Options{{NoInherit: true, Command: []string{"true"}}, {AllCPUs: true}} {
		o.Events = specs[:1]
		r, err := NewRecorder(o)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(events, nil, 0o644)
		if err := r.addProbes(); err != nil {
			t.Fatal(err)
		}
		if ev := r.events[0]; ev.Type != 7 || ev.config1Bytes == nil || ev.probe != nil {
			t.Errorf("not inherited (%+v): type %d, probe %v: want the uprobe PMU (7)", o, ev.Type, ev.probe)
		}
		if b, _ := os.ReadFile(events); len(b) != 0 {
			t.Errorf("not inherited (%+v): uprobe_events written: %s", o, b)
		}
	}
}

// TestKprobePMUTracefsWhenInherited: a kprobe on a function named by a
// string, which the kprobe PMU would read again in the workload at each
// clone (as the uprobe PMU reads its path), is defined in kprobe_events
// when its event is inherited; one at an address passes no string and
// stays the PMU's.
func TestKprobePMUTracefsWhenInherited(t *testing.T) {
	fk := newFakeKernel(t, true, true, testKallsyms)
	group := kprobeGroup(os.Getpid())
	dir := filepath.Join(fk.tracefs, "events", group, "do_sys_openat2")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "id"), []byte("4000"), 0o644)
	r, err := NewRecorder(Options{Events: []string{"k:do_sys_openat2", "k:0xffffffff8138a1d0"}, Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.addProbes(); err != nil {
		t.Fatal(err)
	}
	if ev := r.events[0]; ev.Type != unix.PERF_TYPE_TRACEPOINT || ev.Config != 4000 || ev.config1Bytes != nil {
		t.Errorf("k:do_sys_openat2: type %d config %d: want the tracepoint 4000", ev.Type, ev.Config)
	}
	if ev := r.events[1]; ev.Type != 6 || ev.Config2 != 0xffffffff8138a1d0 || ev.probe != nil {
		t.Errorf("k:0xADDR: type %d config2 %#x: want the kprobe PMU (6) at the address", ev.Type, ev.Config2)
	}
	want := "p:" + group + "/do_sys_openat2 do_sys_openat2\n"
	if b, _ := os.ReadFile(filepath.Join(fk.tracefs, "kprobe_events")); string(b) != want {
		t.Errorf("kprobe_events:\n%s\nwant:\n%s", b, want)
	}
	if err := r.removeProbes(); err != nil {
		t.Fatal(err)
	}
}

// TestProbeNamesPerProcess: two recorders of one process at once (a
// tracer's) define the same probe under different names in the process's
// group, and a name is free again once its probe is removed.
func TestProbeNamesPerProcess(t *testing.T) {
	fk := newFakeKernel(t, true, true, testKallsyms)
	group := kprobeGroup(os.Getpid())
	for i, ev := range []string{"do_sys_openat2", "do_sys_openat2_1"} {
		dir := filepath.Join(fk.tracefs, "events", group, ev)
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "id"), []byte(fmt.Sprint(5000+i)), 0o644)
	}
	var rs []*Recorder
	for range 2 {
		r, err := NewRecorder(Options{Events: []string{"k:do_sys_openat2"}, Command: []string{"true"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.addProbes(); err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	if a, b := rs[0].events[0].probe, rs[1].events[0].probe; a == nil || b == nil || a.event != "do_sys_openat2" || b.event != "do_sys_openat2_1" {
		t.Fatalf("probes %+v and %+v: want do_sys_openat2 and do_sys_openat2_1", a, b)
	}
	if err := rs[0].removeProbes(); err != nil {
		t.Fatal(err)
	}
	r, err := NewRecorder(Options{Events: []string{"k:do_sys_openat2"}, Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.addProbes(); err != nil {
		t.Fatal(err)
	}
	if p := r.events[0].probe; p == nil || p.event != "do_sys_openat2" {
		t.Errorf("after the first was removed: %+v, want do_sys_openat2 again", p)
	}
	for _, r := range []*Recorder{r, rs[1]} {
		if err := r.removeProbes(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUprobeTracefsRefused: where tracefs cannot define an inherited
// uprobe, the recording is refused, saying why and what works instead,
// rather than made through the PMU, which would fail the program's clones.
func TestUprobeTracefsRefused(t *testing.T) {
	fk := newFakeKernel(t, true, true, testKallsyms)
	// uprobe_events a directory: no write can succeed, even as root.
	if err := os.Mkdir(filepath.Join(fk.tracefs, "uprobe_events"), 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRecorder(Options{Events: []string{"u:" + bin + ":main.main"}, Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	err = r.addProbes()
	if err == nil {
		t.Fatal("an inherited uprobe tracefs cannot define was accepted")
	}
	for _, want := range []string{"uprobe:", "EFAULT", "uprobe_events", "-a", "--no-inherit"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal lacks %q: %v", want, err)
		}
	}
	if ev := r.events[0]; ev.probe != nil || ev.Type != 7 {
		t.Errorf("after the refusal: type %d, probe %v", ev.Type, ev.probe)
	}
}

// TestEventNameChars: tracefs event names are letters, digits and '_',
// begin with neither a digit nor nothing, and stay short enough for the
// kernel (under 64 bytes, with a "_N" the name set may add) whatever the
// symbol: C++ symbols are often longer.
func TestEventNameChars(t *testing.T) {
	long := "_ZNSt6vectorIN4llvm9StringRefESaIS1_EE17_M_realloc_insertIJRKS1_EEEvN9__gnu_cxx17__normal_iteratorIPS1_S3_EEDpOT_"
	for in, want := range map[string]string{
		"leaf": "leaf", "main.main": "main_main", "do_sys_openat2.isra.0": "do_sys_openat2_isra_0",
		"ext4:ext4_file_open": "ext4_ext4_file_open", "0x11e0": "p_0x11e0", "": "p_", "a+b$c": "a_b_c",
		long: long[:maxEventBase],
	} {
		got := eventNameChars(in)
		if got != want {
			t.Errorf("eventNameChars(%q) = %q, want %q", in, got, want)
		}
		if len(got)+len("_999") >= 64 {
			t.Errorf("eventNameChars(%q) = %q: %d bytes, too long for the kernel with a suffix", in, got, len(got))
		}
	}
}
