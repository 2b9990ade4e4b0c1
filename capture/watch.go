package capture

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/procmaps"
	"golang.org/x/sys/unix"
)

// watchSymbol is the global a watchpoint by name watches:
// mem:BINARY:SYMBOL. Its address in a process is its link-time value plus
// the load bias of the object there.
type watchSymbol struct {
	// Path is the object (program or shared library), Symbol the name.
	Path, Symbol string
	// Value and Size are the symbol's st_value and st_size.
	Value, Size uint64
	// loads are the object's PT_LOAD segments.
	loads []elf.ProgHeader
	// dev and ino identify the file, to find it in /proc/PID/maps under
	// another name.
	dev, ino uint64
}

// errNotMapped says that the object of a watchpoint by name is not (yet)
// mapped in the process.
var errNotMapped = errors.New("not mapped")

// isAccess reports whether s is a watchpoint access: r, w, rw, x.
func isAccess(s string) bool {
	return s != "" && strings.Trim(s, "rwx") == ""
}

// parseBreakpoint parses mem:ADDR[/LEN][:rwx] and
// mem:BINARY:SYMBOL[/LEN][:rwx] (s is what follows "mem:").
func parseBreakpoint(spec, s string) (*Event, error) {
	head, _, _ := strings.Cut(s, ":")
	addrS, _, _ := strings.Cut(head, "/")
	if _, err := strconv.ParseUint(addrS, 0, 64); err == nil {
		return parseBreakpointAddr(spec, s)
	}
	body, access := s, ""
	if i := strings.LastIndexByte(s, ':'); i >= 0 && isAccess(s[i+1:]) && strings.Contains(s[:i], ":") {
		body, access = s[:i], s[i+1:]
	}
	i := strings.LastIndexByte(body, ':')
	if i <= 0 || i == len(body)-1 {
		return nil, fmt.Errorf("breakpoint %q: bad address %q: want mem:ADDR[/LEN][:rwx] with ADDR in hex (0x...), or mem:BINARY:SYMBOL[/LEN][:rwx] for a global of a program or library", spec, addrS)
	}
	path, sym := body[:i], body[i+1:]
	sym, lenS, _ := strings.Cut(sym, "/")
	bt, err := parseAccess(spec, access)
	if err != nil {
		return nil, err
	}
	w, err := lookupWatchSymbol(path, sym)
	if err != nil {
		return nil, fmt.Errorf("breakpoint %q: %w", spec, err)
	}
	var n uint64
	switch {
	case lenS != "":
		if n, err = strconv.ParseUint(lenS, 0, 64); err != nil || (n != 1 && n != 2 && n != 4 && n != 8) {
			return nil, fmt.Errorf("breakpoint %q: bad length %q: want 1, 2, 4 or 8", spec, lenS)
		}
	case bt == bpX:
		n = 8 // sizeof(long), as perf uses
	case w.Size == 1 || w.Size == 2 || w.Size == 4 || w.Size == 8:
		n = w.Size
	default:
		return nil, fmt.Errorf("breakpoint %q: %s is %d bytes and a watchpoint covers 1, 2, 4 or 8 aligned bytes: give the length to watch its first bytes (mem:%s:%s/8:%s)", spec, sym, w.Size, path, sym, accessName(access))
	}
	// The load bias is a multiple of the page size: the alignment in the
	// process is the link-time one.
	if bt != bpX && w.Value%n != 0 {
		return nil, fmt.Errorf("breakpoint %q: %s at %#x is not aligned to its length %d, which the hardware needs: give a smaller /LEN", spec, sym, w.Value, n)
	}
	name := fmt.Sprintf("mem:%s:%s", filepath.Base(w.Path), sym)
	if lenS != "" {
		name += "/" + lenS
	}
	name += ":" + accessName(access)
	return &Event{Spec: spec, Name: name, Kind: KindBreakpoint, Type: unix.PERF_TYPE_BREAKPOINT,
		BPType: bt, Config1: w.Value, Config2: n, DefaultPeriod: 1, Path: w.Path, watch: w}, nil
}

// accessName is the access a watchpoint is named with: rw by default.
func accessName(access string) string {
	if access == "" {
		return "rw"
	}
	return access
}

// parseAccess parses the rwx part of a breakpoint (rw when empty).
func parseAccess(spec, access string) (uint32, error) {
	var bt uint32
	for _, c := range accessName(access) {
		switch c {
		case 'r':
			bt |= bpR
		case 'w':
			bt |= bpW
		case 'x':
			bt |= bpX
		default:
			return 0, fmt.Errorf("breakpoint %q: bad access %q: want r, w, rw or x", spec, access)
		}
	}
	if bt&bpX != 0 && bt != bpX {
		return 0, fmt.Errorf("breakpoint %q: an execute breakpoint cannot also watch reads or writes", spec)
	}
	return bt, nil
}

// parseBreakpointAddr parses mem:ADDR[/LEN][:rwx].
func parseBreakpointAddr(spec, s string) (*Event, error) {
	addrS, access, _ := strings.Cut(s, ":")
	lenS := ""
	if a, l, ok := strings.Cut(addrS, "/"); ok {
		addrS, lenS = a, l
	}
	addr, err := strconv.ParseUint(addrS, 0, 64)
	if err != nil {
		return nil, fmt.Errorf("breakpoint %q: bad address %q: want mem:ADDR[/LEN][:rwx] with ADDR in hex (0x...)", spec, addrS)
	}
	bt, err := parseAccess(spec, access)
	if err != nil {
		return nil, err
	}
	n := uint64(4)
	if bt == bpX {
		n = 8 // sizeof(long), as perf uses
	}
	if lenS != "" {
		if n, err = strconv.ParseUint(lenS, 0, 64); err != nil || (n != 1 && n != 2 && n != 4 && n != 8) {
			return nil, fmt.Errorf("breakpoint %q: bad length %q: want 1, 2, 4 or 8", spec, lenS)
		}
	}
	name := fmt.Sprintf("mem:%#x", addr)
	if lenS != "" {
		name += "/" + lenS
	}
	name += ":" + accessName(access)
	return &Event{Spec: spec, Name: name, Kind: KindBreakpoint, Type: unix.PERF_TYPE_BREAKPOINT,
		BPType: bt, Config1: addr, Config2: n, DefaultPeriod: 1}, nil
}

// lookupWatchSymbol finds sym in the symbol tables of the object at path
// (a path, or a program found in PATH), or in its separate debug file.
func lookupWatchSymbol(path, sym string) (*watchSymbol, error) {
	path = objectPath(path)
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("object not found: %v", err)
	}
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s is not an ELF object: %v", path, err)
	}
	defer f.Close()
	w := &watchSymbol{Path: path, Symbol: sym}
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		w.dev, w.ino = uint64(s.Dev), s.Ino
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			w.loads = append(w.loads, p.ProgHeader)
		}
	}
	s, found := findObjectSymbol(f, sym)
	if !found {
		// A stripped object's separate debug file may know it.
		if o, err := elfcache.Open(path, elfcache.Options{}); err == nil {
			if dp := o.DebugPath(); dp != "" {
				if df, err := elf.Open(dp); err == nil {
					s, found = findObjectSymbol(df, sym)
					df.Close()
				}
			}
			o.Close()
		}
	}
	if !found {
		return nil, fmt.Errorf("%w: no symbol %q in %s (list its globals with nm %s, or nm -D for a stripped library)", ErrUnknownEvent, sym, path, path)
	}
	switch elf.ST_TYPE(s.Info) {
	case elf.STT_TLS:
		return nil, fmt.Errorf("%s in %s is thread-local: each thread has its own copy at its own address (watch one with mem:ADDR)", sym, path)
	case elf.STT_SECTION, elf.STT_FILE:
		return nil, fmt.Errorf("%w: %q in %s is not a variable or function", ErrUnknownEvent, sym, path)
	}
	w.Value, w.Size = s.Value, s.Size
	return w, nil
}

// findObjectSymbol finds a defined symbol named sym (or sym@VERSION) in
// f's .symtab, then its .dynsym.
func findObjectSymbol(f *elf.File, sym string) (elf.Symbol, bool) {
	for _, get := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		syms, _ := get()
		for _, s := range syms {
			if s.Section == elf.SHN_UNDEF {
				continue
			}
			if n, _, _ := strings.Cut(s.Name, "@"); n == sym {
				return s, true
			}
		}
	}
	return elf.Symbol{}, false
}

// addressIn returns the symbol's address in a process with these
// mappings: its value plus the bias of the object's segment mapped at
// one of them. It fails with errNotMapped when the object is not mapped,
// and says so when the address is in no mapping.
func (w *watchSymbol) addressIn(maps []procmaps.Map) (uint64, error) {
	var bias uint64
	found := false
	for _, m := range maps {
		if m.Path != w.Path && (w.ino == 0 || m.Ino != w.ino || uint64(unix.Mkdev(m.Maj, m.Min)) != w.dev) {
			continue
		}
		for _, p := range w.loads {
			// The mapping starts at the page of the segment's
			// offset: p_vaddr - (p_offset - pgoff) is mapped at Start.
			if m.PgOff > p.Off || p.Off-m.PgOff >= uint64(unix.Getpagesize()) || p.Filesz == 0 {
				continue
			}
			bias = m.Start - (p.Vaddr - (p.Off - m.PgOff))
			found = true
			break
		}
		if found {
			break
		}
	}
	if !found {
		return 0, errNotMapped
	}
	addr := w.Value + bias
	for _, m := range maps {
		if addr >= m.Start && addr < m.End {
			return addr, nil
		}
	}
	return 0, fmt.Errorf("%s's %s would be at %#x (load bias %#x), which is in no mapping of the process", filepath.Base(w.Path), w.Symbol, addr, bias)
}

// resolveWatch computes the address of a watchpoint by name in process pid.
func resolveWatch(ev *Event, pid int) (uint64, error) {
	maps, err := procmaps.Read(pid)
	if err != nil {
		return 0, fmt.Errorf("watchpoint %s: reading the maps of process %d: %w", ev.Name, pid, err)
	}
	addr, err := ev.watch.addressIn(maps)
	if errors.Is(err, errNotMapped) {
		return 0, fmt.Errorf("watchpoint %s: %s is not mapped in process %d (is it the program or a library it loaded? see /proc/%d/maps)", ev.Name, ev.watch.Path, pid, pid)
	}
	if err != nil {
		return 0, fmt.Errorf("watchpoint %s: %w", ev.Name, err)
	}
	return addr, nil
}

// watchesByName reports whether a started command has watchpoints by name,
// whose addresses are known only once its objects are mapped.
func (r *Recorder) watchesByName() bool {
	if r.cmd == nil {
		return false
	}
	for _, ev := range r.events {
		if ev.watch != nil {
			return true
		}
	}
	return false
}

// releaseWatched lets the command at the gate exec under ptrace, steps it
// from syscall to syscall until every object a watchpoint by name needs
// is mapped (the program at exec, a library once ld.so has mapped it),
// sets the watchpoints' addresses (PERF_EVENT_IOC_MODIFY_ATTRIBUTES),
// enables them and lets the command go. The events were opened disabled
// at the link-time addresses.
func (r *Recorder) releaseWatched(ctx context.Context) error {
	runtime.LockOSThread() // ptrace requests come from the tracing thread
	defer runtime.UnlockOSThread()
	pid := r.targetPID
	const opts = unix.PTRACE_O_TRACEEXEC | unix.PTRACE_O_TRACESYSGOOD | unix.PTRACE_O_EXITKILL
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, opts, 0, 0); e != 0 {
		return fmt.Errorf("watchpoints by name: can't trace the command (pid %d) to find where its objects are mapped: ptrace: %v", pid, e)
	}
	if _, err := r.gateW.Write([]byte("go\n")); err != nil {
		return fmt.Errorf("starting the command: %w", err)
	}
	r.gateW.Close()
	r.gateW = nil
	stop := context.AfterFunc(ctx, func() { r.cmd.Process.Kill() })
	defer stop()
	pending := map[*Event]bool{}
	for _, ev := range r.events {
		if ev.watch != nil {
			pending[ev] = true
		}
	}
	execed := false
	for {
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
			if err == unix.EINTR {
				continue
			}
			return fmt.Errorf("watchpoints by name: waiting for the command: %v", err)
		}
		if ws.Exited() || ws.Signaled() {
			r.reaped = true
			var missing []string
			for ev := range pending {
				missing = append(missing, ev.watch.Path)
			}
			return fmt.Errorf("the command ended (%s) before %s was mapped: no watchpoint could be set", waitString(ws), strings.Join(missing, ", "))
		}
		if !ws.Stopped() {
			continue
		}
		sig := 0
		switch s, event := ws.StopSignal(), int(ws>>16)&0xff; {
		case s == unix.SIGTRAP && event == unix.PTRACE_EVENT_EXEC:
			execed = true
		case s == unix.SIGTRAP|0x80: // a syscall stop
		case event == unix.PTRACE_EVENT_STOP: // a group stop
		default:
			sig = int(s) // a signal for the command: deliver it
		}
		if execed {
			for ev := range pending {
				maps, err := procmaps.Read(pid)
				if err != nil {
					return fmt.Errorf("watchpoint %s: reading the maps of process %d: %w", ev.Name, pid, err)
				}
				addr, err := ev.watch.addressIn(maps)
				if errors.Is(err, errNotMapped) {
					continue
				}
				if err != nil {
					return fmt.Errorf("watchpoint %s: %w", ev.Name, err)
				}
				if err := r.setWatchAddress(ev, addr); err != nil {
					return err
				}
				delete(pending, ev)
			}
			if len(pending) == 0 {
				if err := unix.PtraceDetach(pid); err != nil {
					return fmt.Errorf("watchpoints by name: detaching from the command: %v", err)
				}
				if sig != 0 {
					unix.Kill(pid, syscall.Signal(sig))
				}
				return nil
			}
		}
		req := unix.PtraceCont
		if execed {
			req = unix.PtraceSyscall
		}
		if err := req(pid, sig); err != nil {
			if err == unix.ESRCH {
				// Killed between its stop and this (the recording was
				// interrupted): the next wait says how it ended.
				continue
			}
			return fmt.Errorf("watchpoints by name: resuming the command: %v", err)
		}
	}
}

// waitString says how a process ended.
func waitString(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return "killed by " + unix.SignalName(ws.Signal())
	}
	return "exit status " + strconv.Itoa(ws.ExitStatus())
}

// setWatchAddress moves the watchpoint ev, opened disabled, to addr on every
// CPU, then enables it.
func (r *Recorder) setWatchAddress(ev *Event, addr uint64) error {
	i := r.eventIndex(ev)
	a := r.attrs[i]
	ua := toUnixAttr(a)
	ua.Ext1 = addr
	for _, fd := range r.eventFDs[i] {
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.PERF_EVENT_IOC_MODIFY_ATTRIBUTES, uintptr(unsafe.Pointer(&ua))); e != 0 {
			return watchOpenError(ev, addr, e)
		}
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			return fmt.Errorf("watchpoint %s: enabling it: %v", ev.Name, err)
		}
	}
	a.Config1, ev.Config1 = addr, addr
	if r.opts.Log != nil {
		fmt.Fprintf(r.opts.Log, "ustack record: watching %s in %s at %#x (%d bytes)\n", ev.watch.Symbol, ev.watch.Path, addr, ev.Config2)
	}
	return nil
}

// watchOpenError explains why the kernel refused a watchpoint at addr.
func watchOpenError(ev *Event, addr uint64, errno unix.Errno) error {
	switch errno {
	case unix.ENOSPC:
		return fmt.Errorf("watchpoint %s: no hardware watchpoint left (%v): x86 has 4 debug registers, arm64 usually 2 to 4 watchpoints, and other events or debuggers may hold some: watch fewer places", ev.Name, errno)
	case unix.EINVAL:
		return fmt.Errorf("watchpoint %s: the kernel refused %d bytes at %#x (%v): this CPU cannot watch that length there (x86 watches 1, 2, 4 or 8 aligned bytes; 8 only in 64-bit mode)", ev.Name, ev.Config2, addr, errno)
	}
	return fmt.Errorf("watchpoint %s at %#x: %v", ev.Name, addr, errno)
}

// eventIndex returns ev's index in r.events.
func (r *Recorder) eventIndex(ev *Event) int {
	for i, e := range r.events {
		if e == ev {
			return i
		}
	}
	panic("capture: event not in the recorder")
}
