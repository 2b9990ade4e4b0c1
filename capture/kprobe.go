package capture

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Where the kernel describes its probes. Variables so that tests can point
// them at a fake sysfs, procfs or debugfs tree.
var (
	// pmuDevices holds one directory per PMU (type, format/...).
	pmuDevices = "/sys/bus/event_source/devices"
	// kallsymsPath lists the kernel's symbols.
	kallsymsPath = "/proc/kallsyms"
	// kprobeBlacklists list the functions the kernel refuses to probe
	// ("0xSTART-0xEND\tNAME" lines); debugfs may not be mounted.
	kprobeBlacklists = []string{"/sys/kernel/debug/kprobes/blacklist"}
)

// kprobe is what a kprobe or kretprobe event probes.
type kprobe struct {
	// Func is the kernel function ("MODULE:FUNC" for a module's), "" when
	// the probe is at an address.
	Func string
	// Offset is the offset into Func, or the address when Func is "".
	Offset uint64
	// Ret makes it a kretprobe.
	Ret bool
	// tracefs is the tracefs root whose kprobe_events defines the probe
	// when the kernel has no kprobe PMU ("" with the PMU).
	tracefs string
}

// target is how the probe is spelled in kprobe_events: FUNC, FUNC+OFF,
// MOD:FUNC or 0xADDR.
func (k *kprobe) target() string {
	switch {
	case k.Func == "":
		return fmt.Sprintf("%#x", k.Offset)
	case k.Offset != 0:
		return fmt.Sprintf("%s+%d", k.Func, k.Offset)
	}
	return k.Func
}

// isKprobeSpec reports whether an -e argument is a kprobe or kretprobe:
// k:, p:, kprobe:, kr:, r:, kretprobe:. kprobes:NAME and probe:NAME are
// tracepoints (the tracefs systems of probes made with kprobe_events or
// perf probe), not this.
func isKprobeSpec(s string) bool {
	for _, p := range []string{"k:", "p:", "kprobe:", "kr:", "r:", "kretprobe:"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// parseKprobe parses k:FUNC[+OFF], kr:FUNC and their spellings, checks the
// function against the kernel's lists and picks how the probe is made: the
// kprobe PMU, or kprobe_events in tracefs where the PMU is missing.
func parseKprobe(spec, s string) (*Event, error) {
	prefix, rest, _ := strings.Cut(s, ":")
	k := &kprobe{Ret: prefix == "kr" || prefix == "r" || prefix == "kretprobe"}
	usage := "want k:FUNC[+OFFSET] (kprobe:, p:) or kr:FUNC (kretprobe:, r:), FUNC a kernel function as in /proc/kallsyms"
	fn := rest
	if f, o, ok := strings.Cut(rest, "+"); ok {
		v, err := strconv.ParseUint(o, 0, 64)
		if err != nil {
			return nil, fmt.Errorf("kprobe %q: bad offset %q: %s", spec, o, usage)
		}
		fn, k.Offset = f, v
	}
	if fn == "" {
		return nil, fmt.Errorf("kprobe %q: no function: %s", spec, usage)
	}
	if a, err := strconv.ParseUint(fn, 0, 64); err == nil && strings.HasPrefix(fn, "0x") {
		if k.Offset != 0 {
			return nil, fmt.Errorf("kprobe %q: an address takes no +OFFSET", spec)
		}
		k.Offset = a
	} else {
		mod, name, hasMod := strings.Cut(fn, ":")
		if !hasMod {
			name, mod = mod, ""
		}
		if !isKernelSymbolName(name) || (hasMod && !isKernelSymbolName(mod)) {
			return nil, fmt.Errorf("kprobe %q: %q is not a kernel function name: %s", spec, fn, usage)
		}
		k.Func = fn
	}
	if k.Ret && k.Offset != 0 && k.Func != "" {
		return nil, fmt.Errorf("kprobe %q: a kretprobe fires when the function returns and takes no +OFFSET", spec)
	}
	ev := &Event{Spec: spec, Kind: KindKprobe, kprobe: k, DefaultPeriod: 1, Offset: k.Offset}
	prefix = "kprobe"
	if k.Ret {
		prefix = "kretprobe"
	}
	ev.Name = prefix + ":" + k.Func
	switch {
	case k.Func == "":
		ev.Name = fmt.Sprintf("%s:%#x", prefix, k.Offset)
	case k.Offset != 0:
		ev.Name = fmt.Sprintf("%s:%s+%#x", prefix, k.Func, k.Offset)
	}
	typ, err := pmuType("kprobe")
	if os.Getenv("USTACK_NO_KPROBE_PMU") != "" {
		// For tests of the tracefs path on kernels that have the PMU.
		err = errors.New("USTACK_NO_KPROBE_PMU is set")
	}
	if err == nil {
		ev.Type = typ
		if k.Func != "" {
			ev.config1Bytes = append([]byte(k.Func), 0)
		}
		ev.Config2 = k.Offset
		if k.Ret {
			ev.Config = 1 << pmuRetprobeBit("kprobe")
		}
	} else {
		dir, err := kprobeEventsDir()
		if err != nil {
			return nil, fmt.Errorf("event %q: this kernel has no kprobes (no kprobe PMU in %s, and %v): it needs CONFIG_KPROBE_EVENTS; use a tracepoint (-e syscalls:sys_enter_NAME) or a uprobe (-e u:/path/to/bin:symbol) instead", spec, pmuDevices, err)
		}
		k.tracefs = dir
		ev.Type = unix.PERF_TYPE_TRACEPOINT // the id is known once the probe is added
	}
	if k.Func != "" {
		warns, err := checkKernelFunc(k.Func)
		if err != nil {
			return nil, fmt.Errorf("kprobe %q: %w", spec, err)
		}
		ev.Warnings = append(ev.Warnings, warns...)
	}
	return ev, nil
}

// isKernelSymbolName reports whether s can be a kernel symbol's name:
// letters, digits, '_' and '.' (foo.isra.0, foo.cold).
func isKernelSymbolName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c == '_' || c == '.' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// kprobeEventsDir returns the tracefs root that has kprobe_events.
func kprobeEventsDir() (string, error) {
	dir, err := TracefsDir()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "kprobe_events")); err != nil {
		return "", fmt.Errorf("no %s/kprobe_events", dir)
	}
	return dir, nil
}

// kallsymsEntry is one kernel symbol named like a probed function.
type kallsymsEntry struct {
	addr   uint64
	typ    byte
	module string
}

// checkKernelFunc checks fn ("FUNC" or "MODULE:FUNC") against the kernel's
// symbols (an unknown name is an error that names similar functions), the
// kprobe blacklist (an error) and ftrace's available_filter_functions (a
// warning: the kernel refuses notrace functions unless built with
// CONFIG_KPROBE_EVENTS_ON_NOTRACE). Lists that cannot be read check nothing.
func checkKernelFunc(fn string) (warnings []string, err error) {
	mod, name, hasMod := strings.Cut(fn, ":")
	if !hasMod {
		name, mod = mod, ""
	}
	entries, similar, ok := lookupKallsyms(kallsymsPath, name, mod)
	if ok {
		var text []kallsymsEntry
		for _, e := range entries {
			if e.typ == 't' || e.typ == 'T' || e.typ == 'w' || e.typ == 'W' {
				text = append(text, e)
			}
		}
		switch {
		case len(entries) == 0:
			msg := fmt.Sprintf("no kernel function %q in %s", fn, kallsymsPath)
			if mod != "" {
				msg += fmt.Sprintf(" (is module %s loaded? see lsmod)", mod)
			}
			if len(similar) > 0 {
				msg += "; similar names: " + strings.Join(similar, ", ")
			}
			return nil, fmt.Errorf("%w: %s", ErrUnknownEvent, msg)
		case len(text) == 0:
			return nil, fmt.Errorf("%w: %q is not a function (kallsyms type %c: data)", ErrUnknownEvent, fn, entries[0].typ)
		case len(text) > 1:
			var addrs []string
			for _, e := range text {
				if e.addr != 0 {
					addrs = append(addrs, fmt.Sprintf("%#x", e.addr))
				}
			}
			w := fmt.Sprintf("kernel function %s names %d functions in %s; recent kernels refuse the name (EADDRNOTAVAIL), older ones probe the first", fn, len(text), kallsymsPath)
			if len(addrs) > 0 {
				w += ": probe one by address with -e k:ADDR (" + strings.Join(addrs, ", ") + ")"
			}
			warnings = append(warnings, w)
		}
	}
	if list, ok := kprobeBlacklisted(name); ok {
		return warnings, fmt.Errorf("kernel function %s is on the kprobe blacklist (%s): the kernel refuses to probe it", fn, list)
	}
	if known, ok := inFilterFunctions(name); ok && !known {
		warnings = append(warnings, fmt.Sprintf("kernel function %s is not in available_filter_functions (it is notrace, or was inlined at every call): the kernel may refuse to probe it", fn))
	}
	return warnings, nil
}

// lookupKallsyms reads a kallsyms file for the symbols named name (in
// module mod when it is not ""), and when there is none, up to 5 function
// names like it. ok is false when the file cannot be read.
func lookupKallsyms(path, name, mod string) (found []kallsymsEntry, similar []string, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, false
	}
	defer f.Close()
	type cand struct {
		name  string
		score int
	}
	var cands []cand
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || len(fields[1]) != 1 {
			continue
		}
		m := ""
		if len(fields) >= 4 {
			m = strings.Trim(fields[3], "[]")
		}
		typ := fields[1][0]
		sym := fields[2]
		if sym == name {
			if mod == "" || m == mod {
				a, _ := strconv.ParseUint(fields[0], 16, 64)
				found = append(found, kallsymsEntry{addr: a, typ: typ, module: m})
			}
			continue
		}
		if len(found) > 0 || seen[sym] || (typ != 't' && typ != 'T') {
			continue
		}
		if s := similarity(name, sym); s > 0 {
			seen[sym] = true
			cands = append(cands, cand{sym, s})
		}
	}
	if len(found) > 0 {
		return found, nil, true
	}
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].score != cands[j].score {
			return cands[i].score > cands[j].score
		}
		if len(cands[i].name) != len(cands[j].name) {
			return len(cands[i].name) < len(cands[j].name)
		}
		return cands[i].name < cands[j].name
	})
	for i := 0; i < len(cands) && i < 5; i++ {
		similar = append(similar, cands[i].name)
	}
	return nil, similar, sc.Err() == nil
}

// similarity scores how likely a user who typed want meant have: 3 for a
// name that extends it (do_sys_open -> do_sys_openat2), 2 for one that
// contains it, 1 for one at most two edits away; 0 otherwise.
func similarity(want, have string) int {
	switch {
	case len(want) < 3:
		return 0
	case strings.HasPrefix(have, want):
		return 3
	case strings.Contains(have, want):
		return 2
	case len(have) >= len(want)-2 && len(have) <= len(want)+2 && editDistance(want, have) <= 2:
		return 1
	}
	return 0
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// kprobeBlacklisted reports whether name is on a kprobe blacklist the
// kernel publishes, and which file says so.
func kprobeBlacklisted(name string) (string, bool) {
	for _, p := range kprobeBlacklists {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) >= 2 && f[1] == name {
				return p, true
			}
		}
	}
	return "", false
}

// inFilterFunctions reports whether name is among ftrace's
// available_filter_functions in a mounted tracefs; ok is false when the
// list cannot be read.
func inFilterFunctions(name string) (known, ok bool) {
	for _, d := range tracefsRoots {
		f, err := os.Open(filepath.Join(d, "available_filter_functions"))
		if err != nil {
			continue
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			l := sc.Text()
			if sym, _, _ := strings.Cut(l, " "); sym == name {
				return true, true
			}
		}
		return false, sc.Err() == nil
	}
	return false, false
}

// tracefsProbe is a probe defined in tracefs: in kprobe_events on a
// kernel without the kprobe PMU, or in kprobe_events or uprobe_events for
// a probe on a function named by a string whose event the workload's
// threads inherit (probeByName): "p:GROUP/EVENT TARGET" (or "r:"),
// removed with "-:GROUP/EVENT" when the recording ends.
type tracefsProbe struct {
	dir          string // tracefs root
	file         string // kprobe_events or uprobe_events
	group, event string
	line         string // as written
	// pmu is the event as it was before (its PMU's fields), restored
	// when the probe is removed.
	pmu Event
}

// kprobeGroup is the tracefs group of this process's probes; a group whose
// process is gone was left by a recorder that was killed.
func kprobeGroup(pid int) string { return "ustack_" + strconv.Itoa(pid) }

// tracefsEventName makes a tracefs event name for k: the function's name
// with '.' as '_', then _OFFSET or __return as perf probe names them.
func tracefsEventName(k *kprobe) string {
	n := eventNameChars(k.Func)
	switch {
	case k.Func == "":
		n = fmt.Sprintf("addr_%x", k.Offset)
	case k.Offset != 0:
		n += "_" + strconv.FormatUint(k.Offset, 10)
	}
	if k.Ret {
		n += "__return"
	}
	return n
}

// eventNameChars makes s a tracefs event name: every character but
// letters, digits and '_' as '_', "p_" before a leading digit, and no
// longer than maxEventBase (a C++ symbol's name is often longer than the
// kernel takes).
func eventNameChars(s string) string {
	b := []byte(s[:min(len(s), maxEventBase)])
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) == 0 || b[0] >= '0' && b[0] <= '9' {
		return "p_" + string(b)
	}
	return string(b)
}

// maxEventBase bounds the names eventNameChars makes: the kernel refuses an
// event name of 64 bytes or more (MAX_EVENT_NAME_LEN), and a name may get
// "p_" before it and "_N" after it (nameSet.take).
const maxEventBase = 56

// addTracefsKprobe writes the probe of k into dir's kprobe_events under
// group, named event, and returns it with its tracepoint id.
func addTracefsKprobe(dir, group, event string, k *kprobe) (*tracefsProbe, uint64, error) {
	kind := "p"
	if k.Ret {
		kind = "r"
	}
	return addTracefsProbe(dir, "kprobe_events", fmt.Sprintf("%s:%s/%s %s", kind, group, event, k.target()), group, event)
}

// addTracefsUprobe writes the uprobe of ev (at file offset ev.Offset of
// ev.Path) into dir's uprobe_events under group, named event, and returns
// it with its tracepoint id.
func addTracefsUprobe(dir, group, event string, ev *Event) (*tracefsProbe, uint64, error) {
	if strings.ContainsAny(ev.Path, " \t\n") {
		return nil, 0, fmt.Errorf("uprobe_events cannot name %q: it holds white space", ev.Path)
	}
	kind := "p"
	if ev.Config != 0 { // the uprobe PMU's retprobe bit
		kind = "r"
	}
	return addTracefsProbe(dir, "uprobe_events", fmt.Sprintf("%s:%s/%s %s:%#x", kind, group, event, ev.Path, ev.Offset), group, event)
}

// addTracefsProbe writes line, which defines group/event, into dir's
// control file file and returns the probe with its tracepoint id.
func addTracefsProbe(dir, file, line, group, event string) (*tracefsProbe, uint64, error) {
	p := &tracefsProbe{dir: dir, file: file, group: group, event: event, line: line}
	if err := appendLine(filepath.Join(dir, file), p.line); err != nil {
		return nil, 0, fmt.Errorf("writing %q into %s/%s: %w%s", p.line, dir, file, err, lastTracefsError(dir))
	}
	idPath := filepath.Join(dir, "events", group, event, "id")
	b, err := os.ReadFile(idPath)
	if err == nil {
		var id uint64
		if id, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
			return p, id, nil
		}
	}
	rmErr := p.remove()
	return nil, 0, errors.Join(fmt.Errorf("probe %s added to %s/%s but its id cannot be read: %w", p.line, dir, file, err), rmErr)
}

// remove deletes the probe from its control file.
func (p *tracefsProbe) remove() error {
	line := fmt.Sprintf("-:%s/%s", p.group, p.event)
	if err := appendLine(filepath.Join(p.dir, p.file), line); err != nil {
		return fmt.Errorf("removing probe %s/%s (write %q into %s/%s by hand): %w", p.group, p.event, line, p.dir, p.file, err)
	}
	return nil
}

// appendLine writes one line to a tracefs control file in one write, as
// echo LINE >> FILE does.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.Write([]byte(line + "\n"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// lastTracefsError returns ": " and the last entry of tracefs's error_log
// (where the kernel explains a refused kprobe_events line), or "".
func lastTracefsError(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "error_log"))
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "[") {
			start = i
		}
	}
	if start < 0 {
		return ""
	}
	var parts []string
	for _, l := range lines[start:] {
		if l = strings.TrimSpace(l); l != "" && strings.Trim(l, "^ ") != "" {
			parts = append(parts, l)
		}
	}
	return " (tracefs error_log: " + strings.Join(parts, " ") + ")"
}

// removeStaleProbes removes the lines of ustack groups in dir's control
// file file (kprobe_events, uprobe_events) whose recorder is gone (killed
// with SIGKILL before it could remove them), so that no recording leaves
// probes behind for long.
func removeStaleProbes(dir, file string) {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return
	}
	for _, l := range strings.Split(string(b), "\n") {
		// "p:ustack_123/do_sys_openat2 do_sys_openat2"
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		_, def, ok := strings.Cut(f[0], ":")
		if !ok {
			continue
		}
		group, event, ok := strings.Cut(def, "/")
		pid, err := strconv.Atoi(strings.TrimPrefix(group, "ustack_"))
		if !ok || !strings.HasPrefix(group, "ustack_") || err != nil || pid <= 0 {
			continue
		}
		if pid == os.Getpid() || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		(&tracefsProbe{dir: dir, file: file, group: group, event: event}).remove()
	}
}

// addProbes defines in tracefs the probes of events that need it and sets
// their tracepoint ids: kprobes where the kernel has no kprobe PMU, and
// uprobes and kprobes on a function named by a string (probeByName) whose
// events the workload's threads inherit. Event names are made unique within
// the recording.
func (r *Recorder) addProbes() error {
	stale := map[string]bool{}
	define := func(ev *Event, dir, file, base string, add func(name string) (*tracefsProbe, uint64, error)) error {
		if !stale[dir+"/"+file] {
			stale[dir+"/"+file] = true
			removeStaleProbes(dir, file)
		}
		name := probeNames.take(base)
		p, id, err := add(name)
		if err != nil {
			probeNames.give(name)
			return err
		}
		p.pmu = *ev
		ev.probe = p
		ev.Type, ev.Config, ev.Config2, ev.config1Bytes = unix.PERF_TYPE_TRACEPOINT, id, 0, nil
		return nil
	}
	group := kprobeGroup(os.Getpid())
	for _, ev := range r.events {
		if ev.probe != nil {
			continue
		}
		if k := ev.kprobe; k != nil && k.tracefs != "" {
			err := define(ev, k.tracefs, "kprobe_events", tracefsEventName(k), func(name string) (*tracefsProbe, uint64, error) {
				return addTracefsKprobe(k.tracefs, group, name, k)
			})
			if err != nil {
				return fmt.Errorf("kprobe %s: %w", ev.Name, err)
			}
			continue
		}
		if !probeByName(ev) || !r.inherits() {
			continue
		}
		// The uprobe and kprobe PMUs take the probed file or function
		// as a string at the attr's config1, a pointer the kernel
		// reads again where an event is inherited: in the workload,
		// at each thread or process it creates, where the pointer
		// means nothing, and the clone fails (pthread_create: EFAULT).
		// A tracefs probe is a tracepoint: nothing to read again.
		dir, err := TracefsDir()
		if err == nil {
			if ev.Kind == KindUprobe {
				// Named as the event is: uprobe:FILE:WHERE.
				prefix, _, _ := strings.Cut(ev.Name, ":")
				where := strings.TrimPrefix(ev.Name, prefix+":"+filepath.Base(ev.Path)+":")
				if prefix == "uretprobe" {
					where += "__return"
				}
				err = define(ev, dir, "uprobe_events", eventNameChars(where), func(name string) (*tracefsProbe, uint64, error) {
					return addTracefsUprobe(dir, group, name, ev)
				})
			} else {
				k := ev.kprobe
				err = define(ev, dir, "kprobe_events", tracefsEventName(k), func(name string) (*tracefsProbe, uint64, error) {
					return addTracefsKprobe(dir, group, name, k)
				})
			}
		}
		if err != nil {
			// Never the PMU then: the recording would break the
			// program it records.
			return fmt.Errorf("%s: the threads and processes the program creates inherit its event, and through the %s PMU each of their creations would fail (EFAULT: the kernel reads the probed name again in the program); defining it in tracefs failed: %w; run as root, record every CPU (-a), or only the threads that exist at the start (--no-inherit)", ev.Name, ev.Kind, err)
		}
	}
	return nil
}

// probeByName reports whether ev is opened through the uprobe or kprobe
// PMU with a string naming what it probes (config1).
func probeByName(ev *Event) bool {
	return ev.probe == nil && ev.config1Bytes != nil && (ev.Kind == KindUprobe || ev.Kind == KindKprobe)
}

// removeProbes removes what addProbes added. The events must be closed
// first: the kernel refuses to remove a probe in use (EBUSY).
func (r *Recorder) removeProbes() error {
	var errs []error
	for _, ev := range r.events {
		if p := ev.probe; p != nil {
			err := p.remove()
			if err == nil {
				probeNames.give(p.event)
			}
			errs = append(errs, err)
			ev.probe = nil
			ev.Type, ev.Config, ev.Config2, ev.config1Bytes = p.pmu.Type, p.pmu.Config, p.pmu.Config2, p.pmu.config1Bytes
		}
	}
	return errors.Join(errs...)
}

// probeNames are the tracefs event names this process's recorders have
// defined in their group (ustack_PID) and not removed: two recorders at
// once (a tracer's) must not both write group/leaf.
var probeNames nameSet

type nameSet struct {
	mu   sync.Mutex
	used map[string]bool
}

// take returns base, or base_N for the least N that makes it unused, and
// marks it used.
func (s *nameSet) take(base string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used == nil {
		s.used = map[string]bool{}
	}
	name := base
	for i := 1; s.used[name]; i++ {
		name = fmt.Sprintf("%s_%d", base, i)
	}
	s.used[name] = true
	return name
}

// give marks name unused.
func (s *nameSet) give(name string) {
	s.mu.Lock()
	delete(s.used, name)
	s.mu.Unlock()
}

// kprobeOpenError explains why the kernel refused a kprobe event.
func kprobeOpenError(ev *Event, errno unix.Errno) error {
	k := ev.kprobe
	what := "the kernel refused kprobe " + ev.Name
	switch errno {
	case unix.ENOENT:
		return fmt.Errorf("%s (%v): no kernel function %s (not in the kernel, or in a module that is not loaded)", what, errno, k.target())
	case unix.EILSEQ:
		return fmt.Errorf("%s (%v): +%#x is not at an instruction boundary of %s", what, errno, k.Offset, k.Func)
	case unix.EADDRNOTAVAIL:
		return fmt.Errorf("%s (%v): several kernel functions are named %s: probe one by address (-e k:0xADDR, addresses in /proc/kallsyms)", what, errno, k.Func)
	case unix.EINVAL:
		name := k.Func
		if _, n, ok := strings.Cut(name, ":"); ok {
			name = n
		}
		if list, ok := kprobeBlacklisted(name); ok && name != "" {
			return fmt.Errorf("%s (%v): %s is on the kprobe blacklist (%s)", what, errno, name, list)
		}
		if known, ok := inFilterFunctions(name); ok && !known && name != "" {
			return fmt.Errorf("%s (%v): %s cannot be probed: it is not in available_filter_functions (notrace, or inlined at every call)", what, errno, name)
		}
		msg := fmt.Sprintf("%s (%v): %s may be on the kprobe blacklist (/sys/kernel/debug/kprobes/blacklist) or notrace (not in available_filter_functions)", what, errno, k.target())
		if k.Offset != 0 && k.Func != "" {
			msg += ", or the offset is not an instruction boundary"
		}
		return errors.New(msg)
	}
	return nil
}
