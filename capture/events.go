package capture

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/perfdata"
	"golang.org/x/sys/unix"
)

// EventKind says what kind of kernel event an Event is.
type EventKind int

// Event kinds.
const (
	KindSoftware   EventKind = iota // a software clock or counter (cpu-clock, page-faults, ...)
	KindTracepoint                  // a static tracepoint (syscalls:sys_enter_close)
	KindUprobe                      // a uprobe on a file offset, through the uprobe PMU
	KindBreakpoint                  // a hardware breakpoint or watchpoint (mem:ADDR)
	KindHardware                    // a hardware PMU event (cycles, instructions)
	KindKprobe                      // a kprobe or kretprobe on a kernel function
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case KindSoftware:
		return "software"
	case KindTracepoint:
		return "tracepoint"
	case KindUprobe:
		return "uprobe"
	case KindBreakpoint:
		return "breakpoint"
	case KindHardware:
		return "hardware"
	case KindKprobe:
		return "kprobe"
	}
	return "unknown"
}

// Event is one parsed -e event: the perf_event_attr fields that select it
// (type, config, config1/2 or breakpoint fields) and its name. The sampling
// fields (sample_type, registers, stack size) are filled by the Recorder.
type Event struct {
	// Spec is the text the event was parsed from.
	Spec string
	// Name is the event's name in the recording (perf's name where perf has one).
	Name string
	// Kind is the kind of event.
	Kind EventKind
	// Type, Config, Config1, Config2 and BPType are the attr fields that
	// select the event. For uprobes and kprobes on a function Config1 is
	// set when the event is opened (a pointer to Path or to the function's
	// name). A kprobe without the kprobe PMU is a tracepoint whose id is
	// known once Run has defined it in tracefs.
	Type             uint32
	Config           uint64
	Config1, Config2 uint64
	BPType           uint32
	// DefaultPeriod is the sampling period used when neither -F nor -c is
	// given (0: use the default frequency).
	DefaultPeriod uint64
	// Path is the probed file of a uprobe (or the object of a watchpoint
	// by symbol), Offset the probed file offset (a kprobe's offset into
	// its function, or its address).
	Path   string
	Offset uint64
	// Warnings say what may keep the event from working (a kprobe on a
	// function ftrace cannot trace); NewRecorder logs them.
	Warnings []string
	// config1Bytes holds the NUL-terminated string the attr's config1
	// points to (a uprobe's path, a kprobe's function).
	config1Bytes []byte
	// kprobe is what a KindKprobe event probes.
	kprobe *kprobe
	// probe is the tracefs definition of a kprobe or uprobe opened as a
	// tracepoint (Recorder.addProbes), once added.
	probe *tracefsProbe
	// watch is the symbol a watchpoint by name watches (nil for mem:ADDR).
	watch *watchSymbol
}

// Software event names and their PERF_COUNT_SW_* config.
var softwareEvents = map[string]uint64{
	"cpu-clock": 0, "task-clock": 1, "page-faults": 2, "faults": 2,
	"context-switches": 3, "cs": 3, "cpu-migrations": 4, "migrations": 4,
	"minor-faults": 5, "major-faults": 6, "alignment-faults": 7,
	"emulation-faults": 8, "dummy": 9,
}

var softwareCanon = map[string]string{"faults": "page-faults", "cs": "context-switches", "migrations": "cpu-migrations"}

var hardwareEvents = map[string]uint64{
	"cycles": 0, "cpu-cycles": 0, "instructions": 1, "cache-references": 2,
	"cache-misses": 3, "branches": 4, "branch-instructions": 4, "branch-misses": 5,
	"bus-cycles": 6, "ref-cycles": 9,
}

// ErrUnknownEvent is wrapped by errors for event names that match no event.
var ErrUnknownEvent = errors.New("unknown event")

// ParseEvent parses one -e argument:
//
//	cpu-clock, task-clock, page-faults, context-switches, ...  software events
//	SYSTEM:NAME                     a tracepoint (syscalls:sys_enter_close)
//	u:/path/to/bin:SYMBOL[+OFF]     a uprobe on a symbol of an ELF file
//	u:/path/to/bin:0xOFFSET         a uprobe at a file offset
//	ur:/path/to/bin:SYMBOL          a uretprobe (uretprobe:, as bpftrace spells it)
//	k:FUNC[+OFF], kr:FUNC           a kprobe or kretprobe on a kernel function (p:, r:,
//	                                kprobe:, kretprobe:; k:0xADDR at an address)
//	mem:ADDR[/LEN][:rwx]            a hardware breakpoint (x) or watchpoint (r, w, rw)
//	mem:BINARY:SYMBOL[/LEN][:rwx]   a watchpoint on a global of a program or library
//
// Tracepoints are looked up in tracefs (mounted when missing); uprobes need
// the uprobe PMU; kprobes the kprobe PMU, or tracefs kprobe_events where
// the PMU is missing. (A Recorder whose events are inherited makes both in
// tracefs: Recorder.addProbes.) Errors name what is missing and how to fix
// it.
func ParseEvent(spec string) (*Event, error) {
	s := strings.TrimSpace(spec)
	if s == "" {
		return nil, fmt.Errorf("empty event: %w", ErrUnknownEvent)
	}
	if c, ok := softwareEvents[s]; ok {
		name := s
		if n, ok := softwareCanon[s]; ok {
			name = n
		}
		ev := &Event{Spec: spec, Name: name, Kind: KindSoftware, Type: unix.PERF_TYPE_SOFTWARE, Config: c}
		if c >= 2 && c != 9 {
			// Counting events (faults, switches) sample every occurrence by
			// default, clocks at the default frequency.
			ev.DefaultPeriod = 1
		}
		return ev, nil
	}
	if c, ok := hardwareEvents[s]; ok {
		return &Event{Spec: spec, Name: s, Kind: KindHardware, Type: unix.PERF_TYPE_HARDWARE, Config: c}, nil
	}
	switch {
	case isUprobeSpec(s):
		return parseUprobe(spec, s)
	case strings.HasPrefix(s, "mem:"):
		return parseBreakpoint(spec, s[len("mem:"):])
	case isKprobeSpec(s):
		return parseKprobe(spec, s)
	}
	if i := strings.IndexByte(s, ':'); i > 0 && !strings.ContainsAny(s, "/") {
		return parseTracepoint(spec, s[:i], s[i+1:])
	}
	return nil, fmt.Errorf("event %q: %w (known: cpu-clock, task-clock, page-faults, context-switches, SYSTEM:TRACEPOINT, u:/path:symbol, ur:/path:symbol, k:FUNC, kr:FUNC, mem:ADDR[/LEN][:rwx], mem:/path:symbol[:rwx])", spec, ErrUnknownEvent)
}

// tracefsRoots are where tracefs is looked for, in order.
var tracefsRoots = []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}

// TracefsDir returns the mounted tracefs directory, mounting tracefs on
// /sys/kernel/tracing when it is not mounted (which needs root).
func TracefsDir() (string, error) {
	for _, d := range tracefsRoots {
		_, err := os.Stat(filepath.Join(d, "events"))
		if err == nil {
			return d, nil
		}
		if os.IsPermission(err) {
			// Mounted, but this user may not enter it (tracefs is 0700
			// root by default): perf says "No permissions to read".
			return "", fmt.Errorf("no permissions to read %s/events: tracefs is mounted on %s but this user may not read it; run as root, or give the user access ('chmod o+rx %s' or mount tracefs with gid=GROUP,mode=0750): %w", d, d, d, ErrPerfUnavailable)
		}
	}
	d := tracefsRoots[0]
	if err := unix.Mount("nodev", d, "tracefs", 0, ""); err != nil {
		return "", fmt.Errorf("tracefs is not mounted and mounting it on %s failed (%v): run 'mount -t tracefs nodev %s' as root", d, err, d)
	}
	if _, err := os.Stat(filepath.Join(d, "events")); err != nil {
		return "", fmt.Errorf("tracefs mounted on %s has no events directory: %v", d, err)
	}
	return d, nil
}

func parseTracepoint(spec, sys, name string) (*Event, error) {
	if sys == "" || name == "" || strings.ContainsAny(sys+name, "/ ") || sys == ".." || name == ".." {
		return nil, fmt.Errorf("event %q: %w: want SYSTEM:NAME", spec, ErrUnknownEvent)
	}
	dir, err := TracefsDir()
	if err != nil {
		return nil, fmt.Errorf("tracepoint %q: %w", spec, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "events", sys, name, "id"))
	if err != nil {
		if os.IsNotExist(err) {
			if _, e2 := os.Stat(filepath.Join(dir, "events", sys)); e2 != nil {
				return nil, fmt.Errorf("tracepoint %q: %w: no tracepoint system %q (see ls %s/events)", spec, ErrUnknownEvent, sys, dir)
			}
			return nil, fmt.Errorf("tracepoint %q: %w: no tracepoint %q in %q (see ls %s/events/%s)", spec, ErrUnknownEvent, name, sys, dir, sys)
		}
		if os.IsPermission(err) {
			return nil, fmt.Errorf("tracepoint %q: %v: reading tracefs needs root", spec, err)
		}
		return nil, fmt.Errorf("tracepoint %q: %v", spec, err)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("tracepoint %q: bad id file: %v", spec, err)
	}
	return &Event{Spec: spec, Name: sys + ":" + name, Kind: KindTracepoint, Type: unix.PERF_TYPE_TRACEPOINT, Config: id, DefaultPeriod: 1}, nil
}

// pmuType reads /sys/bus/event_source/devices/NAME/type.
func pmuType(name string) (uint32, error) {
	b, err := os.ReadFile(filepath.Join(pmuDevices, name, "type"))
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	return uint32(v), err
}

// pmuRetprobeBit reads the bit of config that makes a uprobe a uretprobe
// (a kprobe a kretprobe): format/retprobe, "config:0" on every kernel so far.
func pmuRetprobeBit(name string) uint {
	b, err := os.ReadFile(filepath.Join(pmuDevices, name, "format", "retprobe"))
	if err == nil {
		s := strings.TrimSpace(string(b))
		if v, ok := strings.CutPrefix(s, "config:"); ok {
			if n, err := strconv.Atoi(v); err == nil && n >= 0 && n < 64 {
				return uint(n)
			}
		}
	}
	return 0
}

// isUprobeSpec reports whether an -e argument is a uprobe or uretprobe:
// u:, uprobe:, ur:, uretprobe:.
func isUprobeSpec(s string) bool {
	for _, p := range []string{"u:", "uprobe:", "ur:", "uretprobe:"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func parseUprobe(spec, s string) (*Event, error) {
	ret := strings.HasPrefix(s, "ur:") || strings.HasPrefix(s, "uretprobe:")
	_, rest, _ := strings.Cut(s, ":")
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 || i == len(rest)-1 {
		return nil, fmt.Errorf("uprobe %q: want u:/path/to/binary:SYMBOL[+OFFSET], u:/path/to/binary:0xFILEOFFSET or ur:/path/to/binary:SYMBOL", spec)
	}
	path, where := rest[:i], rest[i+1:]
	typ, err := pmuType("uprobe")
	if err != nil {
		return nil, fmt.Errorf("uprobe %q: this kernel has no uprobe PMU (/sys/bus/event_source/devices/uprobe: %v); it needs CONFIG_UPROBE_EVENTS", spec, err)
	}
	path = objectPath(path)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("uprobe %q: target not found: %v", spec, err)
	}
	off, name, err := resolveUprobe(path, where)
	if err != nil {
		return nil, fmt.Errorf("uprobe %q: %w", spec, err)
	}
	ev := &Event{Spec: spec, Kind: KindUprobe, Type: typ, Path: path, Offset: off, DefaultPeriod: 1}
	ev.Config2 = off
	ev.config1Bytes = append([]byte(path), 0)
	prefix := "uprobe"
	if ret {
		ev.Config = 1 << pmuRetprobeBit("uprobe")
		prefix = "uretprobe"
	}
	ev.Name = fmt.Sprintf("%s:%s:%s", prefix, filepath.Base(path), name)
	return ev, nil
}

// objectPath makes the path of a probed object absolute, without symbolic
// links; a bare name that is no file here is looked up in PATH.
func objectPath(path string) string {
	if !filepath.IsAbs(path) {
		if p, err := lookPathOrFile(path); err == nil {
			path = p
		}
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	return path
}

func lookPathOrFile(p string) (string, error) {
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		c := filepath.Join(d, p)
		if st, err := os.Stat(c); err == nil && !st.IsDir() {
			return c, nil
		}
	}
	return "", os.ErrNotExist
}

// resolveUprobe turns SYMBOL[+OFF] or a number into a file offset of path.
func resolveUprobe(path, where string) (uint64, string, error) {
	if v, err := strconv.ParseUint(where, 0, 64); err == nil {
		return v, fmt.Sprintf("%#x", v), nil
	}
	sym, add := where, uint64(0)
	if i := strings.LastIndexByte(where, '+'); i > 0 {
		v, err := strconv.ParseUint(where[i+1:], 0, 64)
		if err != nil {
			return 0, "", fmt.Errorf("bad offset in %q", where)
		}
		sym, add = where[:i], v
	}
	obj, err := elfcache.Open(path, elfcache.Options{NoDebugFile: true})
	if err != nil {
		return 0, "", fmt.Errorf("target not found or not an ELF file: %v", err)
	}
	defer obj.Close()
	var addr uint64
	found := false
	for _, s := range obj.Symbols() {
		if s.Name == sym || strings.HasPrefix(s.Name, sym+"@") {
			addr, found = s.Addr, true
			break
		}
	}
	if !found {
		// A separate debug file may know it.
		if dbg, err := elfcache.Open(path, elfcache.Options{}); err == nil {
			for _, s := range dbg.Symbols() {
				if s.Name == sym {
					addr, found = s.Addr, true
					break
				}
			}
			dbg.Close()
		}
	}
	if !found {
		return 0, "", fmt.Errorf("%w: no function symbol %q in %s (list them with nm -D or nm)", ErrUnknownEvent, sym, path)
	}
	addr += add
	for _, p := range obj.LoadSegments() {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr < p.Vaddr+p.Filesz {
			name := sym
			if add != 0 {
				name = fmt.Sprintf("%s+%#x", sym, add)
			}
			return addr - p.Vaddr + p.Off, name, nil
		}
	}
	return 0, "", fmt.Errorf("symbol %q at %#x is in no loadable segment of %s", sym, addr, path)
}

// Breakpoint types (HW_BREAKPOINT_*).
const (
	bpR = 1
	bpW = 2
	bpX = 4
)

// perfAttr returns the perfdata form of the event's selecting fields.
func (e *Event) perfAttr() perfdata.Attr {
	return perfdata.Attr{Type: e.Type, Config: e.Config, Config1: e.Config1, Config2: e.Config2, BPType: e.BPType, Name: e.Name}
}
