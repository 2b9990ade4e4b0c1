package capture

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrPerfUnavailable is wrapped by errors meaning that perf_event_open
// cannot be used at all here (no permission, disabled, not in the kernel).
var ErrPerfUnavailable = errors.New("perf_event_open unavailable")

// ErrTargetNotFound is wrapped by errors for a -p process or a command that
// does not exist or has exited.
var ErrTargetNotFound = errors.New("target not found")

// paranoid returns /proc/sys/kernel/perf_event_paranoid, or -100 when unreadable.
func paranoid() int {
	b, err := os.ReadFile("/proc/sys/kernel/perf_event_paranoid")
	if err != nil {
		return -100
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -100
	}
	return n
}

// hasCapPerfmon reports whether the effective capability set has
// CAP_PERFMON (38) or CAP_SYS_ADMIN (21).
func hasCapPerfmon() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			c, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return false
			}
			return c&(1<<38) != 0 || c&(1<<21) != 0
		}
	}
	return false
}

// otherOwner returns the real user id owning process pid when it is not
// this process's effective user (ok false for pid -1, or when unreadable).
func otherOwner(pid int) (uid int, ok bool) {
	if pid <= 0 {
		return 0, false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, found := strings.CutPrefix(l, "Uid:"); found {
			f := strings.Fields(v)
			if len(f) == 0 {
				return 0, false
			}
			uid, err := strconv.Atoi(f[0])
			return uid, err == nil && uid != os.Geteuid()
		}
	}
	return 0, false
}

// openError explains a perf_event_open failure for ev and names the fix.
func openError(ev *Event, pid, cpu int, err error) error {
	where := fmt.Sprintf("pid %d, cpu %d", pid, cpu)
	if pid == -1 {
		where = fmt.Sprintf("cpu %d", cpu)
	}
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return fmt.Errorf("perf_event_open %s (%s): %w", ev.Name, where, err)
	}
	if ev.Kind == KindKprobe {
		if err := kprobeOpenError(ev, errno); err != nil {
			return err
		}
	}
	switch errno {
	case unix.EACCES, unix.EPERM:
		p := paranoid()
		msg := fmt.Sprintf("perf_event_open %s (%s): %v: ", ev.Name, where, errno)
		if owner, ok := otherOwner(pid); ok && os.Geteuid() != 0 {
			// perf_event_open on a task asks what ptrace asks: the
			// same user, or CAP_SYS_PTRACE. perf_event_paranoid is not
			// the obstacle.
			msg += fmt.Sprintf("process %d belongs to user %d, not to you (%d): recording another user's process needs permission to ptrace it: run as root or as its user, or give ustack CAP_SYS_PTRACE ('setcap cap_perfmon,cap_sys_ptrace+ep' the ustack binary)", pid, owner, os.Geteuid())
		} else if os.Geteuid() != 0 && !hasCapPerfmon() {
			msg += "not root and no CAP_PERFMON; run as root, or 'setcap cap_perfmon,cap_sys_ptrace+ep' the ustack binary"
			if p > -100 {
				msg += fmt.Sprintf(", or lower /proc/sys/kernel/perf_event_paranoid (now %d; -1 allows everything: 'sysctl kernel.perf_event_paranoid=-1')", p)
			}
		} else if p >= 2 && ev.Kind == KindTracepoint {
			msg += fmt.Sprintf("tracepoints need root or CAP_PERFMON with perf_event_paranoid (now %d) lowered: 'sysctl kernel.perf_event_paranoid=-1'", p)
		} else if p >= 3 {
			msg += fmt.Sprintf("perf_event_paranoid is %d, which forbids perf_event_open for everyone without CAP_PERFMON: 'sysctl kernel.perf_event_paranoid=2'", p)
		} else {
			msg += "permission denied (a security module such as SELinux or a seccomp filter may forbid perf_event_open, or the target belongs to another user)"
		}
		return fmt.Errorf("%s: %w", msg, ErrPerfUnavailable)
	case unix.ENOSYS:
		return fmt.Errorf("perf_event_open %s: the kernel has no perf events (CONFIG_PERF_EVENTS) or a seccomp filter blocks the syscall: %w", ev.Name, ErrPerfUnavailable)
	case unix.ESRCH:
		return fmt.Errorf("perf_event_open %s (%s): %w: the process does not exist or has exited", ev.Name, where, ErrTargetNotFound)
	case unix.ENOENT, unix.EOPNOTSUPP:
		if ev.Kind == KindHardware {
			return fmt.Errorf("event %s: this machine has no hardware PMU (no hardware counters are exposed, e.g. in a VM); use -e cpu-clock instead: %w", ev.Name, err)
		}
		if ev.Kind == KindBreakpoint {
			return fmt.Errorf("event %s: hardware breakpoints are not available here (%v): no debug registers exposed (VM?), or all are in use", ev.Name, errno)
		}
		if ev.Kind == KindUprobe {
			return fmt.Errorf("uprobe %s: the kernel refused %s at offset %#x: %v", ev.Name, ev.Path, ev.Offset, errno)
		}
		return fmt.Errorf("event %s: not supported by this kernel: %v", ev.Name, errno)
	case unix.ENOSPC:
		if ev.Kind == KindBreakpoint {
			return watchOpenError(ev, ev.Config1, errno)
		}
	case unix.EINVAL:
		if ev.Kind == KindBreakpoint {
			return fmt.Errorf("event %s: the kernel refused the breakpoint (%v): the address %#x must be a user address aligned to the length %d, and the CPU must support that length (x86 watches 1, 2, 4 or 8 bytes; execute breakpoints take the length of a long)", ev.Name, errno, ev.Config1, ev.Config2)
		}
		if ev.Kind == KindUprobe {
			return fmt.Errorf("uprobe %s: the kernel refused offset %#x of %s (%v): is it an instruction boundary in an executable segment?", ev.Name, ev.Offset, ev.Path, errno)
		}
	case unix.EMFILE:
		return fmt.Errorf("perf_event_open %s: too many open files: raise 'ulimit -n'", ev.Name)
	case unix.EOVERFLOW:
		return fmt.Errorf("perf_event_open %s: sample too large: lower --stack-size", ev.Name)
	}
	return fmt.Errorf("perf_event_open %s (%s): %w", ev.Name, where, errno)
}
