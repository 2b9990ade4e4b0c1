package capture

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/procmaps"
	"golang.org/x/sys/unix"
)

// Defaults and limits.
const (
	// DefaultStackSize is the default --stack-size, perf's default for
	// --call-graph dwarf.
	DefaultStackSize = 8192
	// MaxStackSize is the largest stack snapshot the kernel takes (perf's limit).
	MaxStackSize = 65528
	// DefaultFreq is the sampling frequency of clock events when neither
	// Freq nor Period is given (perf's default).
	DefaultFreq = 4000
	// DefaultMmapPages is the default ring buffer size per CPU, in pages.
	DefaultMmapPages = 256
)

// Options configure a recording.
type Options struct {
	// Events are -e arguments (see ParseEvent); empty means cpu-clock.
	Events []string
	// Freq samples clock and counter events at this many Hz (-F);
	// Period samples every Period events (-c). Tracepoints, uprobes and
	// breakpoints default to every occurrence.
	Freq, Period uint64
	// StackSize is the bytes of user stack copied per sample (default 8192,
	// at most 65528, a multiple of 8).
	StackSize uint32
	// Command is the program to start and record (-- COMMAND ARGS), with
	// its threads and children. With PID or AllCPUs it is run but not
	// recorded: the recording of the process or of the system lasts as
	// long as the command runs, as perf record -a -- sleep 5 does.
	Command []string
	// PID records an existing process and all its threads (-p).
	PID int
	// AllCPUs records every process on every CPU (-a).
	AllCPUs bool
	// Duration ends the recording after this long (0: until the command
	// exits, the process exits, or ctx is done).
	Duration time.Duration
	// Output is the perf.data path (default "perf.data").
	Output string
	// MmapPages is the ring buffer size per CPU in pages, a power of two
	// (default DefaultMmapPages).
	MmapPages int
	// NoArchive disables the companion archive (<Output>.ustack).
	NoArchive bool
	// Unwind unwinds each sample at capture time and stores only the
	// frames (a user callchain), no registers or stack bytes.
	Unwind bool
	// KernelCallchain controls whether the kernel call chain is recorded
	// (default true; set NoKernelCallchain to drop it).
	NoKernelCallchain bool
	// NoUserCallchain leaves the user part of the kernel's call chain
	// out of dwarf-mode samples (exclude_callchain_user, as perf record
	// --call-graph dwarf sets it): perf script, which prints that part
	// before its own DWARF unwind, then shows each user stack once.
	// ustack report's frame-pointer audit loses its ground truth.
	NoUserCallchain bool
	// Stdin, Stdout, Stderr are the command's standard files (default:
	// the recorder's own).
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Log receives progress messages (nil: none).
	Log io.Writer
	// CPUs restricts recording to these CPUs (-C); empty means every
	// online CPU. With no command and no PID it records system-wide on
	// them.
	CPUs []int
	// NoInherit records only the threads that exist when recording
	// starts, not the children and threads they create later.
	NoInherit bool
	// CallGraph is how user stacks are recorded: "dwarf" (the default:
	// registers and a stack snapshot, unwound offline) or "fp" (only the
	// kernel's frame-pointer call chain, no registers or stack bytes).
	CallGraph string
	// Cmdline is the command line written into the recording's CMDLINE
	// header, as perf writes its own (default: this process's arguments).
	Cmdline []string
	// OnUnwound, with Unwind, receives each sample as it is unwound, in
	// the goroutine that drains the ring buffers (ustack record
	// --otlp-endpoint): it must hand the work on, not wait. The sample,
	// and its Space, are valid only during the call: the Space of a
	// process that exited, exec'd or mapped something new is closed
	// (resolve.Space.Close) and its objects may be closed with it
	// (CacheBudget).
	OnUnwound func(*UnwoundSample) `json:"-"`
	// SectionCache, when set, keeps the compressed debug sections --unwind
	// decompresses on disk (file-backed pages the kernel can reclaim)
	// instead of in the recorder's memory.
	SectionCache *elfcache.SectionCache `json:"-"`
	// CacheBudget, with Unwind, bounds the memory the objects opened to
	// unwind hold (resolve.Options.CacheBudget): past it the objects of
	// processes that exited (or exec'd) are closed, least recently used
	// first; those of live processes stay open. 0 keeps every object
	// open until the recording ends. ustack record's default is
	// DefaultCacheBudget.
	CacheBudget int64
}

// DefaultCacheBudget is ustack record's --cache-budget: 256 MiB.
const DefaultCacheBudget = 256 << 20

// Stats summarizes a finished recording.
type Stats struct {
	// Samples is the number of SAMPLE records written.
	Samples uint64
	// Lost is the sum of the counts of the kernel's LOST records (records
	// dropped because a ring buffer was full); LostRecords how many LOST
	// records there were.
	Lost, LostRecords uint64
	// LostSamples is the sum of LOST_SAMPLES records: those the kernel
	// wrote, and those written at the end from each event's own count of
	// the records it could not write (read with PERF_FORMAT_LOST, Linux
	// 6.0 on, as perf record does). That count includes the drops LOST
	// records report, and those no LOST record could report: the kernel
	// writes one only when a later record fits in the ring. The samples
	// lost are at least the larger of Lost and LostSamples.
	LostSamples uint64
	// Throttled counts THROTTLE records (the kernel lowered the rate).
	Throttled uint64
	// Records counts every record written, synthesized ones included.
	Records uint64
	// Bytes is the size of the data section.
	Bytes int64
	// UnwindFailed counts samples that --unwind could not unwind past
	// their first frame.
	UnwindFailed uint64
	// Objects is the number of objects stored in the archive.
	Objects int
	// ExitCode is the command's exit status (-- COMMAND), -1 if killed.
	ExitCode int
	// Output and Archive are the files written.
	Output, Archive string
	// Wakeups counts passes over the ring buffers that found records.
	Wakeups uint64
	// StackFull counts, with Unwind, the samples whose unwind stopped at
	// the end of the stack snapshot (StackSize bytes): a larger snapshot
	// would have given deeper stacks. (Without Unwind, ustack report
	// tells, since only an unwind can.)
	StackFull uint64
	// StackSize is the snapshot size an Unwind recording used (0 otherwise).
	StackSize uint32
	// Cache, with Unwind, is the object cache's counters at the end:
	// objects open, bytes held, evictions, re-opens (CacheBudget).
	Cache elfcache.CacheStats
}

// Recorder is one recording in progress. Create it with NewRecorder, then
// call Run.
type Recorder struct {
	pending []timedRecord // --unwind: one pass of records, sorted by time

	opts   Options
	events []*Event
	arch   arch.Arch
	cpus   []int

	attrs []*perfdata.Attr // file attrs, with the kernel's ids
	fds   []int
	// eventFDs are the fds of each event, one per CPU and thread.
	eventFDs [][]int
	rings    []*ring
	epfd     int
	// waiter parks the reader in Go's poller (nil: epoll_wait on epfd).
	waiter *ringWaiter

	cmd       *exec.Cmd
	gateW     *os.File
	cmdDone   chan struct{}
	cmdErr    error
	targetPID int
	// waiting is set once a goroutine waits for the command; reaped when
	// the ptrace loop of releaseWatched reaped it instead.
	waiting, reaped bool

	f  *os.File
	w  *perfdata.Writer
	st Stats

	objs *objectSet
	uw   *liveUnwinder

	firstTime, lastTime uint64
	// userOnly is set when the kernel refused kernel sampling and the
	// events were opened with exclude_kernel.
	userOnly bool
	// openErrno is the errno of the last failed perf_event_open.
	openErrno unix.Errno
}

// sampleType is what every event samples, like perf record --call-graph dwarf.
const sampleType = perfdata.SampleIdentifier | perfdata.SampleIP | perfdata.SampleTID |
	perfdata.SampleTime | perfdata.SampleCPU | perfdata.SamplePeriod |
	perfdata.SampleCallchain | perfdata.SampleRegsUser | perfdata.SampleStackUser

// NewRecorder parses the events and checks the options. Nothing is opened
// until Run.
func NewRecorder(opts Options) (*Recorder, error) {
	if opts.Output == "" {
		opts.Output = "perf.data"
	}
	switch opts.CallGraph {
	case "", "dwarf":
		opts.CallGraph = "dwarf"
	case "fp":
		if opts.Unwind {
			return nil, errors.New("--unwind needs --call-graph dwarf (fp records no stack to unwind)")
		}
	default:
		return nil, fmt.Errorf("--call-graph %q: want dwarf[,SIZE] or fp", opts.CallGraph)
	}
	if opts.StackSize == 0 {
		opts.StackSize = DefaultStackSize
		if opts.Unwind {
			opts.StackSize = unwindStackSize(opts)
		}
	}
	if opts.StackSize > MaxStackSize {
		return nil, fmt.Errorf("--stack-size %d is larger than the kernel's limit %d", opts.StackSize, MaxStackSize)
	}
	opts.StackSize = (opts.StackSize + 7) &^ 7
	if opts.StackSize > MaxStackSize {
		opts.StackSize = MaxStackSize
	}
	if opts.MmapPages == 0 {
		opts.MmapPages = DefaultMmapPages
		if opts.Unwind && os.Geteuid() == 0 {
			// Larger snapshots (unwindStackSize) need more room between
			// two drains; root is not bound by perf_event_mlock_kb.
			opts.MmapPages = 4 * DefaultMmapPages
		}
	}
	if opts.MmapPages&(opts.MmapPages-1) != 0 || opts.MmapPages < 1 {
		return nil, fmt.Errorf("-m %d: the ring buffer size must be a power of two number of pages", opts.MmapPages)
	}
	if opts.Freq != 0 && opts.Period != 0 {
		return nil, errors.New("-F and -c are exclusive")
	}
	if len(opts.CPUs) > 0 && len(opts.Command) == 0 && opts.PID == 0 {
		opts.AllCPUs = true // perf record -C N: system-wide on those CPUs
	}
	if len(opts.Command) == 0 && opts.PID == 0 && !opts.AllCPUs {
		return nil, errors.New("nothing to record: give -- COMMAND ARGS, -p PID or -a")
	}
	if opts.PID != 0 && opts.AllCPUs {
		return nil, errors.New("give only one of -p PID and -a")
	}
	if len(opts.Events) == 0 {
		opts.Events = []string{"cpu-clock"}
	}
	r := &Recorder{opts: opts, arch: hostArch(), epfd: -1}
	if r.arch == arch.Unknown {
		return nil, fmt.Errorf("unsupported architecture %s", runtime.GOARCH)
	}
	for _, s := range opts.Events {
		for _, part := range splitEvents(s) {
			ev, err := ParseEvent(part)
			if err != nil {
				return nil, err
			}
			if opts.Log != nil {
				for _, w := range ev.Warnings {
					fmt.Fprintf(opts.Log, "ustack record: warning: %s\n", w)
				}
			}
			if ev.watch != nil && opts.AllCPUs {
				return nil, fmt.Errorf("watchpoint %q: a global by name has an address only in a process: give -p PID or a command (or watch an address: mem:ADDR)", ev.Spec)
			}
			r.events = append(r.events, ev)
		}
	}
	if err := r.checkFreq(); err != nil {
		return nil, err
	}
	if len(opts.Command) > 0 && r.events[0].watch != nil {
		// A watchpoint by name is enabled only once its object is
		// mapped, too late to see the command's exec and first mmaps:
		// a dummy event enabled at exec tracks them, as perf adds one.
		dummy, _ := ParseEvent("dummy")
		r.events = append([]*Event{dummy}, r.events...)
	}
	if len(opts.Command) > 0 {
		if _, err := exec.LookPath(opts.Command[0]); err != nil {
			return nil, fmt.Errorf("command %q: %w: %v", opts.Command[0], ErrTargetNotFound, err)
		}
	}
	if opts.PID != 0 {
		if err := unix.Kill(opts.PID, 0); err == unix.ESRCH {
			return nil, fmt.Errorf("-p %d: %w: no such process", opts.PID, ErrTargetNotFound)
		}
	}
	return r, nil
}

// maxSampleRatePath holds the kernel's highest sampling frequency.
var maxSampleRatePath = "/proc/sys/kernel/perf_event_max_sample_rate"

// MaxSampleRate returns the kernel's highest sampling frequency in Hz
// (perf_event_max_sample_rate, which the kernel lowers itself when
// sampling interrupts take too long): what -F max asks for.
func MaxSampleRate() (uint64, error) {
	b, err := os.ReadFile(maxSampleRatePath)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%s holds %q, not a frequency", maxSampleRatePath, strings.TrimSpace(string(b)))
	}
	return n, nil
}

// checkFreq holds the frequency of the events sampled by frequency to the
// kernel's highest, which refuses more with a bare EINVAL: a frequency
// asked for (-F) above it is an error that says so, the default is
// lowered to it with a warning, as perf record does.
func (r *Recorder) checkFreq() error {
	if r.opts.Period != 0 {
		return nil
	}
	byFreq := false
	for _, ev := range r.events {
		if (ev.Kind == KindSoftware || ev.Kind == KindHardware) && (r.opts.Freq != 0 || ev.DefaultPeriod == 0) {
			byFreq = true
		}
	}
	limit, err := MaxSampleRate()
	if !byFreq || err != nil {
		return nil
	}
	switch {
	case r.opts.Freq > limit:
		return fmt.Errorf("-F %d: above the kernel's highest sampling frequency, %d Hz (%s): give a lower one, or -F max, or raise it ('sysctl kernel.perf_event_max_sample_rate=%d')",
			r.opts.Freq, limit, maxSampleRatePath, r.opts.Freq)
	case r.opts.Freq == 0 && DefaultFreq > limit:
		if r.opts.Log != nil {
			fmt.Fprintf(r.opts.Log, "ustack record: warning: the kernel's highest sampling frequency is %d Hz (%s; lowered by the kernel when sampling took too long): sampling at it rather than at %d Hz\n",
				limit, maxSampleRatePath, DefaultFreq)
		}
		r.opts.Freq = limit
	}
	return nil
}

// unwindStackSize is the stack snapshot --unwind takes by default. The
// stack bytes are unwound as they arrive and never stored, so a larger
// snapshot costs no file space, only kernel copying and ring room: take
// perf's maximum where the sampling rate keeps the copying under about
// 128 MiB/s per CPU, and less at higher rates (never below the default).
func unwindStackSize(opts Options) uint32 {
	rate := opts.Freq
	if rate == 0 && opts.Period == 0 {
		rate = DefaultFreq
	}
	if rate == 0 {
		return 32768 // every n-th event: the rate is unknown
	}
	size := uint64(128<<20) / rate
	size = min(max(size, DefaultStackSize), MaxStackSize)
	return uint32(size) &^ 7
}

// splitEvents splits "a,b" event lists, keeping commas inside uprobe paths
// intact only when they do not start a new known event (rare; paths with
// commas should be given with several -e).
func splitEvents(s string) []string {
	if isUprobeSpec(s) || strings.HasPrefix(s, "mem:") {
		return []string{s}
	}
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func hostArch() arch.Arch {
	switch runtime.GOARCH {
	case "amd64":
		return arch.AMD64
	case "arm64":
		return arch.ARM64
	}
	return arch.Unknown
}

func archName(a arch.Arch) string {
	switch a {
	case arch.AMD64:
		return "x86_64"
	case arch.ARM64:
		return "aarch64"
	}
	return a.String()
}

// onlineCPUs parses /sys/devices/system/cpu/online.
func onlineCPUs() []int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		out := make([]int, runtime.NumCPU())
		for i := range out {
			out[i] = i
		}
		return out
	}
	cpus, _ := ParseCPUList(strings.TrimSpace(string(b)))
	return cpus
}

// ParseCPUList parses a CPU list in the kernel's (and perf -C's) syntax:
// "0-3,6". It returns the CPUs parsed and an error naming the first part
// that is not a CPU or a range.
func ParseCPUList(s string) ([]int, error) {
	var out []int
	var bad error
	for _, part := range strings.Split(s, ",") {
		a, b, ok := strings.Cut(part, "-")
		lo, err := strconv.Atoi(a)
		hi := lo
		if err == nil && ok {
			hi, err = strconv.Atoi(b)
		}
		if err != nil || lo < 0 || hi < lo || hi-lo > 1<<16 {
			if bad == nil {
				bad = fmt.Errorf("CPU list %q: %q is not a CPU number or range", s, part)
			}
			continue
		}
		for c := lo; c <= hi; c++ {
			out = append(out, c)
		}
	}
	return out, bad
}

// buildAttr returns the kernel attr of event i.
func (r *Recorder) buildAttr(i int, ev *Event) *perfdata.Attr {
	a := ev.perfAttr()
	a.Size = perfdata.AttrSizeVer7
	a.SampleType = sampleType
	if a.Type == unix.PERF_TYPE_TRACEPOINT {
		// Tracepoints, and kprobes defined in tracefs: the event's
		// fields, as perf record takes them.
		a.SampleType |= perfdata.SampleRaw
	}
	a.Flags = perfdata.AttrSampleIDAll
	if r.opts.CallGraph == "fp" {
		// The kernel walks the user stack by frame pointers.
		a.SampleType &^= perfdata.SampleRegsUser | perfdata.SampleStackUser
	} else {
		a.SampleRegsUser = r.arch.PerfMask()
		// Without exclude_callchain_user (which perf record
		// --call-graph dwarf sets), the kernel's own frame-pointer
		// chain of the user stack comes beside the snapshot: the
		// truth ustack report's frame-pointer audit is held to.
		a.SampleStackUser = r.opts.StackSize
		// --unwind stores its own unwind as the user chain: the
		// kernel's would only be thrown away.
		if r.opts.NoUserCallchain || r.opts.Unwind {
			a.Flags |= perfdata.AttrExcludeCallchainUser
		}
	}
	if r.opts.NoKernelCallchain {
		a.Flags |= perfdata.AttrExcludeCallchainKernel
	}
	if ev.Kind == KindSoftware || ev.Kind == KindHardware {
		switch {
		case r.opts.Period != 0:
			a.SamplePeriod = r.opts.Period
		case r.opts.Freq != 0:
			a.SamplePeriod = r.opts.Freq
			a.Flags |= perfdata.AttrFreq
		case ev.DefaultPeriod != 0:
			a.SamplePeriod = ev.DefaultPeriod
		default:
			a.SamplePeriod = DefaultFreq
			a.Flags |= perfdata.AttrFreq
		}
	} else {
		a.SamplePeriod = 1
		if r.opts.Period != 0 {
			a.SamplePeriod = r.opts.Period
		}
	}
	if i == 0 {
		// The first event tracks the address spaces.
		a.Flags |= perfdata.AttrMmap | perfdata.AttrComm | perfdata.AttrTask |
			perfdata.AttrMmap2 | perfdata.AttrCommExec | perfdata.AttrMmapData
	}
	if r.commandIsTarget() {
		a.Flags |= perfdata.AttrDisabled | perfdata.AttrEnableOnExec | perfdata.AttrInherit
		if ev.watch != nil {
			// Enabled by releaseWatched once the address is known.
			a.Flags &^= perfdata.AttrEnableOnExec
		}
	} else {
		a.Flags |= perfdata.AttrDisabled
		if r.opts.PID != 0 {
			a.Flags |= perfdata.AttrInherit
		}
	}
	if r.opts.NoInherit {
		a.Flags &^= perfdata.AttrInherit
	}
	// Samples in CLOCK_MONOTONIC (perf record -k 1): the clock of the
	// timestamps JITs write in their jitdumps, which say which code an
	// address held at a sample's time.
	a.Flags |= perfdata.AttrUseClockID
	a.ClockID = unix.CLOCK_MONOTONIC
	if lostCountable() {
		a.ReadFormat |= perfdata.FormatLost
	}
	// Wake the reader when a quarter of the ring is full.
	a.Flags |= perfdata.AttrWatermark
	a.WakeupEvents = uint32(r.wakeupBytes())
	return &a
}

// wakeupBytes is the wakeup watermark: a quarter of a ring, so that a
// reader that misses one wakeup still has half a ring of room.
func (r *Recorder) wakeupBytes() uint64 {
	return uint64(r.opts.MmapPages * unix.Getpagesize() / 4)
}

func toUnixAttr(a *perfdata.Attr) unix.PerfEventAttr {
	return unix.PerfEventAttr{
		Type: a.Type, Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})), Config: a.Config,
		Sample: a.SamplePeriod, Sample_type: a.SampleType, Read_format: a.ReadFormat,
		Bits: a.Flags, Wakeup: a.WakeupEvents, Bp_type: a.BPType,
		Ext1: a.Config1, Ext2: a.Config2, Sample_regs_user: a.SampleRegsUser,
		Sample_stack_user: a.SampleStackUser, Sample_max_stack: a.SampleMaxStack, Clockid: a.ClockID,
	}
}

// kernelAttr returns the attr to open ev with: a, with config1 pointing to
// the string a uprobe or kprobe names (keep ev alive until it is opened).
func (ev *Event) kernelAttr(a *perfdata.Attr) unix.PerfEventAttr {
	ua := toUnixAttr(a)
	if ev.config1Bytes != nil {
		ua.Ext1 = uint64(uintptr(unsafe.Pointer(&ev.config1Bytes[0])))
	}
	return ua
}

// startCommand starts the command held at a gate: a shell that says it
// runs, waits for a byte on a pipe, then execs the command, so the events
// (enabled on exec) see it from its first instruction. The events are
// opened only once the shell has said so: os/exec's Start returns as soon
// as the shell's exec has closed its close-on-exec files, before that exec
// is over, and events opened then would be enabled by the shell's own exec.
func (r *Recorder) startCommand() error {
	path, err := exec.LookPath(r.opts.Command[0])
	if err != nil {
		return fmt.Errorf("command %q: %w: %v", r.opts.Command[0], ErrTargetNotFound, err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		pr.Close()
		pw.Close()
		return err
	}
	defer readyR.Close()
	script := `echo >&4; exec 4>&-; IFS= read -r _ <&3 || exit 126; exec 3<&-; exec "$@"`
	args := append([]string{"-c", script, r.opts.Command[0], path}, r.opts.Command[1:]...)
	cmd := exec.Command("/bin/sh", args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r.opts.Stdin, r.opts.Stdout, r.opts.Stderr
	if cmd.Stdin == nil {
		cmd.Stdin = os.Stdin
	}
	if cmd.Stdout == nil {
		cmd.Stdout = os.Stdout
	}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	cmd.ExtraFiles = []*os.File{pr, readyW}
	err = cmd.Start()
	pr.Close()
	readyW.Close()
	if err != nil {
		pw.Close()
		return fmt.Errorf("starting %q: %w", r.opts.Command[0], err)
	}
	var b [1]byte
	if _, err := io.ReadFull(readyR, b[:]); err != nil {
		pw.Close()
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("starting %q: the shell that holds it did not start: %v", r.opts.Command[0], err)
	}
	r.cmd, r.gateW = cmd, pw
	r.targetPID = cmd.Process.Pid
	r.cmdDone = make(chan struct{})
	if !r.watchesByName() {
		// Else releaseWatched waits for the command's ptrace stops
		// first: a concurrent wait would take them.
		r.waitCommand()
	}
	return nil
}

// waitCommand starts the goroutine that waits for the command to end.
func (r *Recorder) waitCommand() {
	if r.waiting {
		return
	}
	r.waiting = true
	go func() {
		// Wait also waits for the goroutines copying the command's
		// output into Options.Stdout and Stderr: without it they could
		// write there after Record returned. When releaseWatched
		// reaped the command, Wait's own wait fails (its status is
		// taken), and only that.
		err := r.cmd.Wait()
		if !r.reaped {
			r.cmdErr = err
		}
		close(r.cmdDone)
	}()
}

// openEvents opens every event on every CPU for the target threads, maps
// one ring per CPU and redirects the CPU's other events into it.
func (r *Recorder) openEvents() error {
	r.cpus = onlineCPUs()
	if len(r.opts.CPUs) > 0 {
		online := map[int]bool{}
		for _, c := range r.cpus {
			online[c] = true
		}
		for _, c := range r.opts.CPUs {
			if !online[c] {
				return fmt.Errorf("-C %d: no such online CPU (online: %v)", c, r.cpus)
			}
		}
		r.cpus = r.opts.CPUs
	}
	var pids []int
	switch {
	case r.opts.AllCPUs:
		pids = []int{-1}
	case r.opts.PID != 0:
		tids, err := ThreadsOf(r.opts.PID)
		if err != nil {
			return fmt.Errorf("-p %d: %w: %v", r.opts.PID, ErrTargetNotFound, err)
		}
		pids = tids
		r.targetPID = r.opts.PID
	default:
		pids = []int{r.targetPID}
	}
	for _, ev := range r.events {
		if ev.watch != nil && r.opts.PID != 0 {
			addr, err := resolveWatch(ev, r.opts.PID)
			if err != nil {
				return err
			}
			ev.Config1 = addr
			if r.opts.Log != nil {
				fmt.Fprintf(r.opts.Log, "ustack record: watching %s in %s at %#x (%d bytes)\n", ev.watch.Symbol, ev.watch.Path, addr, ev.Config2)
			}
		}
	}
	if err := r.addProbes(); err != nil {
		return err
	}
	r.attrs = make([]*perfdata.Attr, len(r.events))
	for i, ev := range r.events {
		r.attrs[i] = r.buildAttr(i, ev)
	}
	err := r.openAll(pids)
	if err != nil && r.userOnlyFallback() {
		// Not allowed to sample the kernel: record user space only, as
		// perf record does at perf_event_paranoid 2.
		r.closeEvents()
		for _, a := range r.attrs {
			a.Flags |= perfdata.AttrExcludeKernel | perfdata.AttrExcludeHV | perfdata.AttrExcludeCallchainKernel
			a.IDs = nil
		}
		r.userOnly = true
		if r.opts.Log != nil {
			fmt.Fprintf(r.opts.Log, "ustack record: perf_event_paranoid is %d and ustack is not privileged: recording user space only (no kernel samples, no kernel call chains)\n", paranoid())
		}
		err = r.openAll(pids)
	}
	if err != nil {
		return err
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	r.epfd = epfd
	for _, rg := range r.rings {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(rg.fd)}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, rg.fd, &ev); err != nil {
			return err
		}
	}
	return nil
}

// userOnlyFallback reports whether a failed open may be retried without
// the kernel: permission was denied to an unprivileged user at a
// perf_event_paranoid that still allows user-space profiling (2), for
// events that exist in user space (tracepoints are kernel events).
func (r *Recorder) userOnlyFallback() bool {
	if errno := r.openErrno; r.userOnly || (errno != unix.EACCES && errno != unix.EPERM) {
		return false
	}
	if os.Geteuid() == 0 || hasCapPerfmon() || paranoid() > 2 || r.opts.AllCPUs {
		return false
	}
	if _, other := otherOwner(r.opts.PID); other {
		return false // not the kernel's part: the process is not ours (openError says so)
	}
	for _, ev := range r.events {
		if ev.Kind == KindTracepoint || ev.Kind == KindKprobe {
			return false
		}
	}
	return true
}

// closeEvents closes what openAll opened.
func (r *Recorder) closeEvents() {
	for _, rg := range r.rings {
		rg.close()
	}
	r.rings = nil
	for _, fd := range r.fds {
		unix.Close(fd)
	}
	r.fds = nil
	r.eventFDs = nil
}

// openAll opens every event on every CPU for pids and maps the rings.
func (r *Recorder) openAll(pids []int) error {
	ringOf := map[int]*ring{}
	r.eventFDs = make([][]int, len(r.events))
	for _, cpu := range r.cpus {
		for i, ev := range r.events {
			ua := ev.kernelAttr(r.attrs[i])
			for _, pid := range pids {
				fd, err := unix.PerfEventOpen(&ua, pid, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
				runtime.KeepAlive(ev.config1Bytes)
				if err != nil {
					if err == unix.ESRCH && r.opts.PID != 0 && pid != r.opts.PID {
						continue // a thread ended meanwhile
					}
					r.openErrno, _ = err.(unix.Errno)
					return openError(ev, pid, cpu, err)
				}
				r.fds = append(r.fds, fd)
				r.eventFDs[i] = append(r.eventFDs[i], fd)
				var id uint64
				if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.PERF_EVENT_IOC_ID, uintptr(unsafe.Pointer(&id))); e != 0 {
					return fmt.Errorf("PERF_EVENT_IOC_ID: %v", e)
				}
				r.attrs[i].IDs = append(r.attrs[i].IDs, id)
				if rg := ringOf[cpu]; rg == nil {
					rg, err := newRing(fd, cpu, r.opts.MmapPages)
					if err != nil {
						return err
					}
					ringOf[cpu] = rg
					r.rings = append(r.rings, rg)
				} else if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_OUTPUT, rg.fd); err != nil {
					return fmt.Errorf("PERF_EVENT_IOC_SET_OUTPUT on cpu %d: %v", cpu, err)
				}
			}
		}
	}
	return nil
}

func (r *Recorder) ioctlAll(req uint) {
	for _, fd := range r.fds {
		unix.IoctlSetInt(fd, req, 0)
	}
}

// createOutput opens the output file 0600 and starts the perf.data writer.
func (r *Recorder) createOutput() error {
	if err := keepOld(r.opts.Output); err != nil {
		return err
	}
	f, err := os.OpenFile(r.opts.Output, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	feat := r.baseFeatures()
	attrs := r.attrs
	if r.opts.Unwind {
		attrs = make([]*perfdata.Attr, len(r.attrs))
		for i, a := range r.attrs {
			c := *a
			c.SampleType &^= perfdata.SampleRegsUser | perfdata.SampleStackUser
			c.SampleRegsUser, c.SampleStackUser = 0, 0
			c.Flags &^= perfdata.AttrExcludeCallchainUser
			attrs[i] = &c
		}
	}
	w, err := perfdata.NewWriter(f, attrs, feat)
	if err != nil {
		f.Close()
		return err
	}
	// The Writer leaves a zero header until Close. Write a valid one now,
	// with a data size of 0 and no features: readers take that as "the
	// data runs to the end of the file" (what perf itself leaves behind
	// when killed), so a recorder killed with SIGKILL leaves a readable
	// file. Close rewrites it with the final sizes.
	if err := writeProvisionalHeader(f, w); err != nil {
		f.Close()
		return err
	}
	r.f, r.w = f, w
	return nil
}

// keepOld renames an existing recording at path to path.old, and its
// archive path.ustack to path.old.ustack (so that "ustack report -i
// path.old" finds it), as perf record keeps perf.data.old: a new
// recording never destroys an old one. The archive moves even when the
// new recording writes none, so it cannot be taken for the new one's.
func keepOld(path string) error {
	for _, p := range [][2]string{{path, path + ".old"}, {path + ".ustack", path + ".old.ustack"}} {
		st, err := os.Stat(p[0])
		if err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
			continue
		}
		if err := os.Rename(p[0], p[1]); err != nil {
			return fmt.Errorf("keeping the old %s: %w", p[0], err)
		}
	}
	return nil
}

// writeProvisionalHeader writes a perf.data file header whose data section
// runs to the end of the file.
func writeProvisionalHeader(f *os.File, w *perfdata.Writer) error {
	const attrEntry = perfdata.AttrSizeVer7 + 16
	dataOff := w.DataOffset()
	nattr := int64(len(w.Attrs()))
	le := binary.LittleEndian
	h := make([]byte, 104)
	copy(h, "PERFILE2")
	le.PutUint64(h[8:], 104)
	le.PutUint64(h[16:], attrEntry)
	le.PutUint64(h[24:], uint64(dataOff-nattr*attrEntry))
	le.PutUint64(h[32:], uint64(nattr*attrEntry))
	le.PutUint64(h[40:], uint64(dataOff))
	le.PutUint64(h[48:], 0)
	_, err := f.WriteAt(h, 0)
	return err
}

func (r *Recorder) baseFeatures() *perfdata.Features {
	var u unix.Utsname
	unix.Uname(&u)
	cstr := func(b []byte) string {
		if i := strings.IndexByte(string(b), 0); i >= 0 {
			return string(b[:i])
		}
		return string(b)
	}
	if len(r.opts.Cmdline) == 0 {
		r.opts.Cmdline = os.Args
	}
	f := &perfdata.Features{
		Arch:      archName(r.arch),
		Hostname:  cstr(u.Nodename[:]),
		OSRelease: cstr(u.Release[:]),
		Version:   "6.1.ustack",
		Cmdline:   r.opts.Cmdline,
	}
	n := uint32(runtime.NumCPU())
	f.NrCPUsAvail, f.NrCPUsOnline = n, uint32(len(onlineCPUs()))
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				f.CPUDesc = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		f.TotalMem = uint64(si.Totalram) * uint64(si.Unit) / 1024
	}
	return f
}

// Run records until the command exits, the process exits, Duration passes
// or ctx is done (Ctrl-C), then finalizes the file and the archive. The
// file is valid whatever ends the recording; a SIGKILL leaves a file whose
// complete records a reader still recovers.
func (r *Recorder) Run(ctx context.Context) (*Stats, error) {
	defer r.cleanup()
	if len(r.opts.Command) > 0 {
		if err := r.startCommand(); err != nil {
			return nil, err
		}
	}
	if err := r.openEvents(); err != nil {
		r.killCommand()
		return nil, err
	}
	if r.watchesByName() {
		// The command runs from here on; its records wait in the rings.
		err := r.releaseWatched(ctx)
		r.waitCommand()
		if err != nil {
			r.killCommand()
			return nil, err
		}
	}
	if err := r.createOutput(); err != nil {
		r.killCommand()
		return nil, err
	}
	r.objs = newObjectSet(r.opts.Output+".ustack", !r.opts.NoArchive, r.opts.Log)
	if r.opts.Unwind {
		r.uw = newLiveUnwinder(r.arch, r.opts.SectionCache, r.opts.CacheBudget)
	}
	if err := r.synthesize(); err != nil {
		r.killCommand()
		return nil, err
	}
	if err := r.w.Flush(); err != nil {
		r.killCommand()
		return nil, err
	}
	// Go: the events of a command start at its exec; those of a process
	// or the system now, before a command that only bounds them starts.
	if !r.commandIsTarget() {
		r.ioctlAll(unix.PERF_EVENT_IOC_ENABLE)
	}
	if r.cmd != nil {
		if r.gateW != nil {
			if _, err := r.gateW.Write([]byte("go\n")); err != nil {
				return nil, fmt.Errorf("starting the command: %w", err)
			}
			r.gateW.Close()
			r.gateW = nil
		}
	}
	var deadline <-chan time.Time
	if r.opts.Duration > 0 {
		t := time.NewTimer(r.opts.Duration)
		defer t.Stop()
		deadline = t.C
	}
	events := make([]unix.EpollEvent, len(r.rings)+1)
	if w, err := newRingWaiter(r.rings, r.wakeupBytes()); err == nil {
		r.waiter = w
	}
	// The reader also drains every 100ms, for events too rare to reach
	// the watermark.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var loopErr error
	stopping := false
loop:
	for {
		var woken []int
		if w := r.waiter; w != nil {
			select {
			case <-ctx.Done():
				stopping = true
			case <-deadline:
				stopping = true
			case <-r.cmdDoneChan():
				break loop
			case i := <-w.wake:
				woken = append(woken, i)
			case <-tick.C:
			case <-w.failed:
				// The poller cannot wait on perf fds here: fall back
				// to epoll_wait.
				w.close()
				r.waiter = nil
			}
		} else {
			select {
			case <-ctx.Done():
				stopping = true
			case <-deadline:
				stopping = true
			case <-r.cmdDoneChan():
				break loop
			default:
			}
		}
		if stopping {
			break
		}
		if r.opts.PID != 0 && unix.Kill(r.opts.PID, 0) == unix.ESRCH {
			break
		}
		if r.waiter == nil {
			_, err := unix.EpollWait(r.epfd, events, 100)
			if err != nil && err != unix.EINTR {
				loopErr = err
				break
			}
		}
		if err := r.drainAll(); err != nil {
			loopErr = err
			break
		}
		if w := r.waiter; w != nil {
			// Every ring was drained: rearm the ones that asked.
		more:
			for {
				select {
				case i := <-w.wake:
					woken = append(woken, i)
				default:
					break more
				}
			}
			for _, i := range woken {
				w.drained(i)
			}
		}
	}
	r.waiter.close()
	r.waiter = nil
	r.ioctlAll(unix.PERF_EVENT_IOC_DISABLE)
	if r.cmd != nil {
		select {
		case <-r.cmdDone:
		default:
			// Stopped by a signal or a deadline: end the command as perf does.
			r.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-r.cmdDone:
			case <-time.After(2 * time.Second):
				r.cmd.Process.Kill()
				<-r.cmdDone
			}
		}
	}
	if err := r.drainAll(); err != nil && loopErr == nil {
		loopErr = err
	}
	if err := r.writeLostCounts(); err != nil && loopErr == nil {
		loopErr = err
	}
	if err := r.finish(); err != nil && loopErr == nil {
		loopErr = err
	}
	st := r.st
	return &st, loopErr
}

// lostCountable reports whether the kernel keeps each event's count of
// the records it could not write, for read (PERF_FORMAT_LOST, Linux 6.0):
// an older kernel refuses the bit, as it does a dummy event opened with it.
var lostCountable = sync.OnceValue(func() bool {
	a := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_DUMMY,
		Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})), Read_format: perfdata.FormatLost,
		Bits: unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv}
	fd, err := unix.PerfEventOpen(&a, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
})

// writeLostCounts reads, once the events are disabled and their rings
// drained, each event's count of the records the kernel could not write,
// and writes the counts as LOST_SAMPLES, as perf record does: a drop at
// the end of a recording (a full ring nothing is written to afterwards)
// has no LOST record.
func (r *Recorder) writeLostCounts() error {
	// The records' time: now, on the events' clock.
	var now unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &now)
	for i, fds := range r.eventFDs {
		if r.attrs[i].ReadFormat&perfdata.FormatLost == 0 {
			continue
		}
		for j, fd := range fds {
			// read_format LOST alone: the value, then the lost count.
			var b [16]byte
			if n, err := unix.Read(fd, b[:]); err != nil || n != len(b) || j >= len(r.attrs[i].IDs) {
				continue
			}
			lost := binary.LittleEndian.Uint64(b[8:])
			if lost == 0 {
				continue
			}
			l := perfdata.LostSamples{Lost: lost}
			l.Attr = r.w.Attrs()[i]
			l.ID, l.Time = r.attrs[i].IDs[j], uint64(now.Nano())
			if err := r.w.WriteLostSamples(&l); err != nil {
				return err
			}
			r.st.LostSamples += lost
		}
	}
	return nil
}

// commandIsTarget reports whether the command is what is recorded (not
// only how long a -p or -a recording lasts).
func (r *Recorder) commandIsTarget() bool {
	return len(r.opts.Command) > 0 && r.opts.PID == 0 && !r.opts.AllCPUs
}

// inherits reports whether the events are inherited by the threads and
// processes the target creates (buildAttr's AttrInherit).
func (r *Recorder) inherits() bool {
	return !r.opts.NoInherit && (r.commandIsTarget() || r.opts.PID != 0)
}

func (r *Recorder) cmdDoneChan() <-chan struct{} {
	if r.cmdDone == nil {
		return nil
	}
	return r.cmdDone
}

func (r *Recorder) killCommand() {
	if r.cmd != nil {
		if r.gateW != nil {
			r.gateW.Close()
			r.gateW = nil
		}
		r.cmd.Process.Kill()
		r.waitCommand()
		<-r.cmdDone
	}
}

func (r *Recorder) cleanup() {
	r.waiter.close()
	r.waiter = nil
	r.closeEvents()
	// After the events are closed: the kernel keeps a probe in use.
	if err := r.removeProbes(); err != nil && r.opts.Log != nil {
		fmt.Fprintf(r.opts.Log, "ustack record: %v\n", err)
	}
	if r.epfd >= 0 {
		unix.Close(r.epfd)
		r.epfd = -1
	}
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
	if r.objs != nil {
		r.objs.abort()
	}
	if r.uw != nil {
		r.uw.close()
	}
}

// synthesize writes the records describing processes that exist before
// the recording starts.
func (r *Recorder) synthesize() error {
	s := &synthesizer{w: r.w, rec: r}
	if err := r.writeKernelMmap(); err != nil {
		return err
	}
	switch {
	case r.opts.AllCPUs:
		for _, pid := range allPids() {
			s.process(pid) // processes come and go; errors are expected
		}
	case r.opts.PID != 0:
		if err := s.process(r.opts.PID); err != nil {
			return fmt.Errorf("-p %d: %w: %v", r.opts.PID, ErrTargetNotFound, err)
		}
	default:
		// The command has not exec'd yet: the kernel reports its COMM and
		// MMAP2 records at exec. Name the gate process like perf does.
		pid := uint32(r.targetPID)
		c := &perfdata.Comm{Pid: pid, Tid: pid, Comm: "ustack-exec"}
		c.RecordHeader.Pid, c.RecordHeader.Tid = pid, pid
		if err := r.w.WriteComm(c); err != nil {
			return err
		}
	}
	return nil
}

// writeKernelMmap writes the record perf writes first in every recording,
// the kernel text mapping "[kernel.kallsyms]_text" (pid -1), so that perf
// script and perf report find kernel symbols for the kernel call chains.
// Without readable kernel addresses (an unprivileged recorder) there is
// nothing to write.
func (r *Recorder) writeKernelMmap() error {
	start, end, ok := kernelText("/proc/kallsyms")
	if !ok {
		return nil
	}
	m := &perfdata.Mmap{Pid: ^uint32(0), Start: start, Len: end - start, PgOff: start,
		Filename: "[kernel.kallsyms]_text"}
	m.Type, m.Misc = perfdata.RecordMmap, perfdata.MiscKernel
	m.RecordHeader.Pid, m.RecordHeader.Tid = ^uint32(0), 0
	return r.w.WriteMmap(m)
}

// kernelText returns the addresses of _text and _etext from a kallsyms
// file; ok is false when they are missing or hidden (shown as zero).
func kernelText(path string) (start, end uint64, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, false
	}
	for len(b) > 0 && (start == 0 || end == 0) {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if !bytes.HasSuffix(line, []byte(" _text")) && !bytes.HasSuffix(line, []byte(" _etext")) {
			continue // kernel symbols only: a module's line ends in [module]
		}
		f := strings.Fields(string(line))
		if len(f) != 3 {
			continue
		}
		var dst *uint64
		switch f[2] {
		case "_text":
			dst = &start
		case "_etext":
			dst = &end
		default:
			continue
		}
		v, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			continue
		}
		*dst = v
	}
	return start, end, start != 0 && end > start
}

// drainAll empties every ring into the file, then marks the end of a round
// and flushes, so the file holds every record read so far.
func (r *Recorder) drainAll() error {
	total := 0
	var err error
	if r.uw != nil {
		// --unwind reads the maps from the mmap records as it goes, so
		// records must be handled in time order across the CPUs' rings:
		// a process that moved to another CPU may have its mmap in one
		// ring and its next sample in another.
		r.pending = r.pending[:0]
		for _, rg := range r.rings {
			total += rg.drain(func(rec []byte) {
				r.pending = append(r.pending, timedRecord{t: recordTime(rec), rec: append([]byte(nil), rec...)})
			})
		}
		sort.SliceStable(r.pending, func(i, j int) bool { return r.pending[i].t < r.pending[j].t })
		for _, p := range r.pending {
			if err == nil {
				err = r.handle(p.rec)
			}
		}
	}
	for _, rg := range r.rings {
		if r.uw != nil {
			total += rg.drain(func(rec []byte) {
				if err == nil {
					err = r.handle(rec)
				}
			})
			continue
		}
		// Without --unwind the records go to the file as the kernel
		// wrote them: note each, then copy the ring's bytes in one or
		// two writes, as perf does.
		total += rg.drainSpans(r.note, func(b []byte) {
			if err == nil {
				err = r.w.WriteRaw(b)
			}
		})
	}
	if err != nil {
		return err
	}
	if total == 0 {
		return nil
	}
	r.st.Wakeups++
	if err := r.w.WriteFinishedRound(); err != nil {
		return err
	}
	return r.w.Flush()
}

// timedRecord is a copied kernel record with its timestamp.
type timedRecord struct {
	t   uint64
	rec []byte
}

// recordTime returns a kernel record's timestamp: samples carry it after
// IDENTIFIER, IP and TID; other records (sample_id_all) in their trailer
// of TID, TIME, CPU, IDENTIFIER. Records without one sort first.
func recordTime(rec []byte) uint64 {
	le := binary.LittleEndian
	if len(rec) < 8 {
		return 0
	}
	body := rec[8:]
	if perfdata.RecordType(le.Uint32(rec)) == perfdata.RecordSample {
		if len(body) >= 32 {
			return le.Uint64(body[24:])
		}
		return 0
	}
	if len(body) >= 32 {
		return le.Uint64(body[len(body)-24:])
	}
	return 0
}

// handle writes one kernel record and keeps the books.
func (r *Recorder) handle(rec []byte) error {
	le := binary.LittleEndian
	typ := perfdata.RecordType(le.Uint32(rec))
	misc := le.Uint16(rec[4:])
	body := rec[8:]
	if typ == perfdata.RecordSample && r.uw != nil {
		r.note(rec)
		return r.writeUnwound(misc, body)
	}
	r.note(rec)
	return r.w.WriteRecord(typ, misc, body)
}

// note keeps the books for one kernel record: counts, times, lost samples,
// and the maps --unwind and the archive need.
func (r *Recorder) note(rec []byte) {
	le := binary.LittleEndian
	typ := perfdata.RecordType(le.Uint32(rec))
	misc := le.Uint16(rec[4:])
	body := rec[8:]
	r.st.Records++
	switch typ {
	case perfdata.RecordSample:
		r.st.Samples++
		if len(body) >= 32 {
			t := le.Uint64(body[24:])
			if r.firstTime == 0 || t < r.firstTime {
				r.firstTime = t
			}
			if t > r.lastTime {
				r.lastTime = t
			}
		}
	case perfdata.RecordLost:
		r.st.LostRecords++
		if len(body) >= 16 {
			r.st.Lost += le.Uint64(body[8:])
		}
	case perfdata.RecordLostSamples:
		if len(body) >= 8 {
			r.st.LostSamples += le.Uint64(body)
		}
	case perfdata.RecordThrottle:
		r.st.Throttled++
	case perfdata.RecordMmap2:
		if len(body) >= 72 {
			pid := le.Uint32(body)
			start, ln, pgoff := le.Uint64(body[8:]), le.Uint64(body[16:]), le.Uint64(body[24:])
			prot := le.Uint32(body[56:])
			name := cString(body[64:])
			id := fileID{maj: le.Uint32(body[32:]), min: le.Uint32(body[36:]), ino: le.Uint64(body[40:])}
			r.noteMmap(pid, start, ln, pgoff, prot, name, id)
		}
	case perfdata.RecordComm:
		if misc&perfdata.MiscCommExec != 0 && len(body) >= 8 && r.uw != nil {
			r.uw.exec(le.Uint32(body))
		}
		if len(body) >= 8 && r.uw != nil {
			r.uw.thread(le.Uint32(body), le.Uint32(body[4:]))
		}
		if len(body) > 8 && r.uw != nil && r.opts.OnUnwound != nil {
			r.uw.comms[le.Uint32(body[4:])] = cString(body[8:])
		}
	case perfdata.RecordFork:
		if len(body) >= 16 && r.uw != nil {
			r.uw.fork(le.Uint32(body), le.Uint32(body[4:]))
			r.uw.thread(le.Uint32(body), le.Uint32(body[8:]))
		}
	case perfdata.RecordExit:
		if len(body) >= 16 && r.uw != nil {
			pid, tid := le.Uint32(body), le.Uint32(body[8:])
			r.uw.exit(pid, tid)
			delete(r.uw.comms, tid)
		}
	}
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// noteMmap records an executable mapping: its object goes to the archive
// and the BUILD_ID feature, and to the live unwinder.
func (r *Recorder) noteMmap(pid uint32, start, ln, pgoff uint64, prot uint32, name string, id fileID) {
	if prot&procmaps.ProtExec == 0 {
		return
	}
	if r.objs != nil {
		r.objs.add(pid, name, id, start, start+ln)
	}
	if r.uw != nil {
		r.uw.mmap(pid, start, ln, pgoff, prot, name)
	}
}

// finish writes the features and the final header, and the archive.
func (r *Recorder) finish() error {
	var errs []error
	if r.objs != nil {
		ids, n, err := r.objs.finish()
		if err != nil {
			errs = append(errs, fmt.Errorf("archive: %w", err))
		}
		r.w.Features().BuildIDs = ids
		r.st.Objects = n
		if !r.opts.NoArchive && err == nil {
			r.st.Archive = r.opts.Output + ".ustack"
		}
	}
	for _, ev := range r.events {
		if ev.Type == unix.PERF_TYPE_TRACEPOINT {
			if td, err := tracingData(r.events); err == nil {
				r.w.SetFeatureSection(perfdata.FeatTracingData, td)
			}
			break
		}
	}
	if r.firstTime != 0 {
		r.w.Features().SampleTimeFirst = r.firstTime
		r.w.Features().SampleTimeLast = r.lastTime
	}
	if err := r.w.Close(); err != nil {
		errs = append(errs, err)
	}
	if st, err := r.f.Stat(); err == nil {
		r.st.Bytes = st.Size()
	}
	if err := r.f.Sync(); err != nil {
		errs = append(errs, err)
	}
	if err := r.f.Close(); err != nil {
		errs = append(errs, err)
	}
	r.f = nil
	r.st.Output = r.opts.Output
	if r.uw != nil {
		r.st.StackSize = r.opts.StackSize
		r.st.Cache = r.uw.res.CacheStats()
	}
	r.st.ExitCode = 0
	if r.cmd != nil && r.cmd.ProcessState != nil {
		r.st.ExitCode = r.cmd.ProcessState.ExitCode()
	}
	return errors.Join(errs...)
}

// Record runs a whole recording with opts: NewRecorder then Run.
func Record(ctx context.Context, opts Options) (*Stats, error) {
	r, err := NewRecorder(opts)
	if err != nil {
		return nil, err
	}
	return r.Run(ctx)
}
