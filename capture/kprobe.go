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
	// probe is the kprobe_events line written for this event, once added.
	probe *tracefsKprobe
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

// tracefsKprobe is a probe defined in tracefs kprobe_events on a kernel
// without the kprobe PMU: "p:GROUP/EVENT TARGET" (or "r:"), removed with
// "-:GROUP/EVENT" when the recording ends.
type tracefsKprobe struct {
	dir          string // tracefs root
	group, event string
	line         string // as written
}

// kprobeGroup is the tracefs group of this process's probes; a group whose
// process is gone was left by a recorder that was killed.
func kprobeGroup(pid int) string { return "ustack_" + strconv.Itoa(pid) }

// tracefsEventName makes a tracefs event name for k: the function's name
// with '.' as '_', then _OFFSET or __return as perf probe names them.
func tracefsEventName(k *kprobe) string {
	n := strings.NewReplacer(".", "_", ":", "_", "$", "_").Replace(k.Func)
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

// addTracefsKprobe writes the probe of k into dir's kprobe_events under
// group, named event, and returns it with its tracepoint id.
func addTracefsKprobe(dir, group, event string, k *kprobe) (*tracefsKprobe, uint64, error) {
	kind := "p"
	if k.Ret {
		kind = "r"
	}
	p := &tracefsKprobe{dir: dir, group: group, event: event}
	p.line = fmt.Sprintf("%s:%s/%s %s", kind, group, event, k.target())
	if err := appendLine(filepath.Join(dir, "kprobe_events"), p.line); err != nil {
		return nil, 0, fmt.Errorf("writing %q into %s/kprobe_events: %w%s", p.line, dir, err, lastTracefsError(dir))
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
	return nil, 0, errors.Join(fmt.Errorf("kprobe %s added to %s/kprobe_events but its id cannot be read: %w", p.line, dir, err), rmErr)
}

// remove deletes the probe from kprobe_events.
func (p *tracefsKprobe) remove() error {
	line := fmt.Sprintf("-:%s/%s", p.group, p.event)
	if err := appendLine(filepath.Join(p.dir, "kprobe_events"), line); err != nil {
		return fmt.Errorf("removing kprobe %s/%s (write %q into %s/kprobe_events by hand): %w", p.group, p.event, line, p.dir, err)
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

// removeStaleKprobes removes the kprobe_events lines of ustack groups
// whose recorder is gone (killed with SIGKILL before it could remove
// them), so that no recording leaves probes behind for long.
func removeStaleKprobes(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "kprobe_events"))
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
		(&tracefsKprobe{dir: dir, group: group, event: event}).remove()
	}
}

// addKprobes defines in tracefs the kprobes of events that need it (no
// kprobe PMU) and sets their tracepoint ids. Event names are made unique
// within the recording.
func (r *Recorder) addKprobes() error {
	used := map[string]bool{}
	stale := map[string]bool{}
	for _, ev := range r.events {
		k := ev.kprobe
		if k == nil || k.tracefs == "" || k.probe != nil {
			continue
		}
		if !stale[k.tracefs] {
			stale[k.tracefs] = true
			removeStaleKprobes(k.tracefs)
		}
		base := tracefsEventName(k)
		name := base
		for i := 1; used[name]; i++ {
			name = fmt.Sprintf("%s_%d", base, i)
		}
		used[name] = true
		p, id, err := addTracefsKprobe(k.tracefs, kprobeGroup(os.Getpid()), name, k)
		if err != nil {
			return fmt.Errorf("kprobe %s: %w", ev.Name, err)
		}
		k.probe = p
		ev.Type, ev.Config = unix.PERF_TYPE_TRACEPOINT, id
	}
	return nil
}

// removeKprobes removes what addKprobes added. The events must be closed
// first: the kernel refuses to remove a probe in use (EBUSY).
func (r *Recorder) removeKprobes() error {
	var errs []error
	for _, ev := range r.events {
		if k := ev.kprobe; k != nil && k.probe != nil {
			errs = append(errs, k.probe.remove())
			k.probe = nil
		}
	}
	return errors.Join(errs...)
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
