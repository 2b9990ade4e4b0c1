package report

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/debuginfod"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/jitdump"
	"github.com/ustack/ustack/kallsyms"
	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/procmaps"
	"github.com/ustack/ustack/resolve"
	"github.com/ustack/ustack/tracefmt"
	"github.com/ustack/ustack/unwinder"
)

// Options configure a report. The zero value reports a recording made on
// this machine.
type Options struct {
	// SymFS is a directory prepended to every object path, like perf's
	// --symfs.
	SymFS string
	// RecordingEnd is when the recording ended (its file's modification
	// time; zero: unknown). On the machine that made it, a file at a
	// mapping's path modified after it, and not named by a build-id, is
	// not taken for what the process mapped (resolve.Options).
	RecordingEnd time.Time
	// DebugDirs are searched for separate debug files (default
	// /usr/lib/debug).
	DebugDirs []string
	// SectionCache, when set, keeps decompressed debug sections (glibc's
	// line tables, for inline frames) and the objects' sorted symbol
	// tables on disk between reports, keyed by build-id; nil decompresses
	// and sorts them on every run. The output is the same
	// either way. ustack report uses elfcache.DefaultSectionCacheDir.
	SectionCache *elfcache.SectionCache
	// Cache, when set, opens the object files and keeps them for the next
	// Run given it: a tracer that reports every few seconds builds each
	// object's symbol, line and unwind tables once, not once a report.
	// Its own elfcache.Options (SymFS, DebugDirs, SectionCache) are used
	// for the files it opens, not SymFS, DebugDirs and SectionCache here;
	// Run does not close it. nil: each Run opens and closes its own.
	Cache *elfcache.Cache
	// BuildIDDir is perf's build-id cache, used for the vdso and for
	// objects whose file on disk changed; "" is perf's default,
	// resolve.DefaultBuildIDDir() ($HOME/.debug). (resolve.Options'
	// "" is none: a library's Resolver reads only what it is told.)
	BuildIDDir string
	// MoreBuildIDDirs are further build-id caches searched after
	// BuildIDDir (an unpacked perf archive tarball).
	MoreBuildIDDirs []string
	// Kallsyms is the kernel symbol table (default: the recording's
	// kernel's, which is /proc/kallsyms when the recording was made on the
	// running kernel, else perf record's copy in the build-id caches, as
	// perf script finds it; "-" for none). A file given here is used
	// whatever kernel the recording names.
	Kallsyms string
	// KallsymsCache, when set with the default Kallsyms, is the directory
	// where the running kernel's image symbols are kept between reports
	// (kallsyms.LoadProc), keyed by boot: reading /proc/kallsyms costs
	// tens of milliseconds. The output is the same either way. ustack
	// report uses kallsyms.DefaultCacheDir.
	KallsymsCache string
	// NoInline leaves out inlined frames.
	NoInline bool
	// NoTailCall leaves out the frames of functions that tail-called
	// (resolve.HowTailCall).
	NoTailCall bool
	// NoDemangle prints symbol names as they are in the object.
	NoDemangle bool
	// Jobs is the number of unwinding workers (default GOMAXPROCS).
	Jobs int
	// MaxFrames bounds the user frames of one stack (default 1024;
	// ustack report --max-stack).
	MaxFrames int
	// PACMask is the arm64 pointer authentication mask (0: from a 48-bit
	// virtual address space).
	PACMask uint64
	// Objects, when set, supplies objects by build-id or path (a
	// recording's companion archive): used when the file's build-id is
	// not the recording's, and first when the recording gives none.
	Objects ObjectSource
	// DebugData, when set, supplies separate debug files by build-id (a
	// recording's archive) before the debug directories are searched.
	DebugData func(buildID []byte) ([]byte, bool)
	// KallsymsData, when set, is read instead of the Kallsyms file (the
	// table a recording carries).
	KallsymsData io.Reader
	// Progress, when set, is called now and then from the reading
	// goroutine with the offset reached in the input.
	Progress func(offset int64)
	// PerfMapDir is where JIT symbol maps (perf-PID.map) are looked for
	// (default /tmp).
	PerfMapDir string
	// JITDumpDirs are directories where a JIT's jitdump (jit-PID.dump) is
	// looked for by its base name when its recorded path (under SymFS)
	// does not hold it: the recording's own directory (cmd/ustack passes
	// it), where node --perf-prof writes the dump.
	JITDumpDirs []string
	// HostVDSO, when set, reads the vdso of the kernel ustack runs on
	// (capture.ReadVDSO). It serves "[vdso]" mappings that neither the
	// archive nor a build-id cache holds (pipe-mode perf.data, perf
	// record --no-buildid-cache), only when the recording was made on
	// this kernel: the vdso build-id it lists agrees, or it lists none
	// and its osrelease is this kernel's.
	HostVDSO func() ([]byte, error)
	// Warn receives warnings (build-id mismatches, missing objects); nil
	// discards them.
	Warn func(msg string)
	// Filter, when set, keeps only the samples it accepts (perf script's
	// --pid, --tid, --comms, --cpu, --time).
	Filter *SampleFilter
	// TraceValues fills Sample.TraceFields.List (JSON's "fields") as well
	// as its Text; off, tracepoint samples cost no allocation for it.
	TraceValues bool
	// Debuginfod, when set, gets by build-id the objects and debug files
	// missing locally (and reuses the files elfutils' client cache holds);
	// when it has servers, Run first prepares every object of the
	// recording's build-id list at once, so that downloads run in
	// parallel. Nil fetches nothing.
	Debuginfod *debuginfod.Client
	// ObjectSources fills Summary.Objects: where each object's
	// information came from (ustack report --verbose).
	ObjectSources bool
	// NoCallchainRepair leaves stacks cut at the end of their snapshot
	// as they are, even where the sample's kernel call chain provably
	// continues them (repair.go).
	NoCallchainRepair bool
	// NoFPAudit skips the frame-pointer audit (fpaudit.go): no fp_frames,
	// no audit line, and so no repair either.
	NoFPAudit bool
}

// Sample is one recorded sample with its symbolized stack, innermost frame
// first (kernel frames, then user frames).
type Sample struct {
	// Index is the sample's position among the recording's samples.
	Index int
	// Pid and Tid are the kernel's u32 ids. A sample no task owns (one
	// taken as a task exited, system-wide) has ^uint32(0): every format
	// prints them as signed numbers (printedID), -1 there, as perf does.
	Pid, Tid uint32
	CPU      uint32
	Time     uint64
	Period   uint64
	Comm     string
	Event    string
	// IP is the sampled instruction pointer.
	IP uint64
	// Signal names the signal a core dump's thread received ("SIGSEGV");
	// "" for the other threads and for recordings.
	Signal string
	// TraceFields are a tracepoint sample's fields; empty for other
	// events and for events the recording's tracing data gives no format
	// for (Run warns then).
	TraceFields TraceFields
	Frames      []Frame
	// Stop says why the user stack ended ("" when the sample had no user
	// registers to unwind).
	Stop    string
	StopErr string
	// StackSize is the number of stack bytes the sample captured.
	StackSize int
	// Goroutine describes the goroutine a sample of event GoroutineEvent
	// stands for; nil for other events.
	Goroutine *Goroutine
	// FPFrames is the number of user frames a frame-pointer walk by the
	// kernel's rules finds on the same registers and stack, the sampled
	// PC included (fpaudit.go), and FPStop why that walk ended
	// (unwinder.FPStop); FPStop is "" when there was no stack to walk.
	FPFrames int
	FPStop   string
	// FPLost, when the stack was audited, says for each of Frames
	// (kernel frames included; shorter than Frames where the rest are
	// not lost) whether a frame-pointer walk would have lost it.
	FPLost []bool

	// space is the process's address space at the sample (MappingOf).
	space *resolve.Space
	// noMaps: the recording holds no maps of the sample's process
	// (Summary.NoMaps).
	noMaps bool
}

// Summary describes a whole report.
type Summary struct {
	// PACMask is the pointer authentication mask stripped from arm64
	// return addresses (0 for other architectures) and PACSource says
	// where it came from.
	PACMask   uint64
	PACSource string

	Samples int
	// Filtered counts the samples Options.Filter dropped.
	Filtered int
	// NoUserData counts samples of events recorded with user registers
	// and stack (a DWARF call graph) that carry neither, in a user
	// context (kernel threads have none and are not counted), and whose
	// user frames are therefore missing. Those the kernel's call chain
	// carried instead (stop StopCallchain) are counted in
	// NoStackChained.
	NoUserData int
	// NoStackChained counts samples with user registers but no stack
	// bytes (the kernel copied none) whose stack went on with the
	// kernel's call chain of the sample (stop StopCallchain).
	NoStackChained int
	// Attrs are the recording's events and Cmdline the command that
	// made it (perf's CMDLINE header; "ustack record ..." for ustack).
	Attrs   []*perfdata.Attr
	Cmdline []string
	// Skipped counts, by record type, the records skipped that may hold
	// samples (compressed or of a type this reader does not know).
	Skipped     map[string]int
	Lost        uint64 // samples the kernel reported lost: the LOST_SAMPLES records' sum, or without any, the LOST records
	Stops       map[string]int
	Missing     map[string]string // object path -> why it could not be used
	DecodeError error             // a damaged recording: where reading stopped
	// Damage lists where reading skipped damaged data and resumed at the
	// next valid record (the first 100; Damaged counts them all).
	Damage  []perfdata.Damage
	Damaged int
	// Objects says where each object's information came from; filled
	// with Options.ObjectSources.
	Objects []resolve.ObjectInfo
	// MaxFrames is the bound on the user frames of one stack that was in
	// force (Options.MaxFrames); stacks cut by it stopped with "depth".
	MaxFrames int
	// JITStops counts the stacks that stopped with no_unwind_info in JIT
	// code (a frame named from a perf map, or in anonymous memory), whose
	// CFI-less code needs frame pointers; JITModule is one such frame's
	// module.
	JITStops  int
	JITModule string
	// NoMaps, when not "", says how many samples with user registers
	// were of processes the recording holds no maps of, and names them.
	NoMaps string
	// NoUnwindIn counts, by the module of the frame where they ended,
	// the other stacks that stopped with no_unwind_info: an object
	// found, but without CFI for the frame (or missing: Missing says
	// why).
	NoUnwindIn map[string]int
	// SnapshotCut counts the stacks that stopped truncated at the end of
	// a snapshot the kernel filled to the size asked for: those a larger
	// size would carry further. A truncated stack whose snapshot came
	// back shorter than asked (the kernel met a page it could not read,
	// such as a new thread's stack not yet in memory) is not one.
	SnapshotCut int
	// SignalStackMissing counts the stacks that stopped past a signal
	// delivered on an alternate signal stack, whose interrupted stack
	// the recording does not hold (unwinder.ErrInterruptedStackNotCaptured).
	SignalStackMissing int
	// FP is the frame-pointer audit (fpaudit.go).
	FP FPAudit

	// UnmappedPC, when not "", says how many samples of processes the
	// recording holds maps of had their PC in none of them (stop
	// no_mapping at the first user frame: the records of the mmaps or
	// the exec that mapped it are missing), and names the processes.
	UnmappedPC string

	// noMapsSamples is the samples NoMaps counts (JSON's no_maps), and
	// noMaps those samples by pid: those with user registers of processes
	// the recording holds no maps of, save the ones taken inside execve
	// (stop exec: between the exec and the new program's mmaps).
	// unmappedPC counts those UnmappedPC counts, by pid (JSON's
	// unmapped_pc).
	noMapsSamples int
	noMaps        map[uint32]int
	// installing counts the stacks that stopped stack_switch in an
	// exception unwinder installing a handler's frame, not at a Go stack
	// switch (cfi.ErrInstallingHandler).
	installing int
	unmappedPC map[uint32]int

	core bool // a core dump's threads: no stack snapshot to enlarge
	// goroutines: a Go core's goroutines (CoreOptions.Goroutines).
	goroutines bool
	fix        missingFix // what MissingFix needs
	// warned: Options.Warn was given, so the objects resolve warns about
	// (resolve.WarnsAbout) were named, with their reason, as met.
	warned bool
}

// Run reads the recording and calls emit for every sample, in file order.
// emit runs on one goroutine; the Sample and its Frames are valid only
// during the call.
func Run(r *perfdata.Reader, opts Options, emit func(*Sample) error) (*Summary, error) {
	p, err := newProcessor(r.Session(), opts)
	if err != nil {
		return nil, err
	}
	// What Run opens it closes: the objects and the cache holding them.
	p.resolver = newResolver(&p.opts, p.session, func(msg string) { p.warn("%s", msg) }, p.jitClock)
	defer func() {
		p.warm.wait()         // the objects' tables being built ahead
		p.ksymsLoading.Wait() // the loading goroutine, and its cache write
		p.storeKernelSyms()   // when a worker or a tracepoint loaded them
		p.resolver.Close()
	}()
	if opts.Debuginfod.Enabled() {
		p.prepareObjects()
	}
	p.warnGroupRead()
	sum, err := p.run(r, emit)
	if sum != nil {
		sum.fix = missingFix{symFS: opts.SymFS, buildIDs: p.buildID, buildIDDir: opts.BuildIDDir != "",
			perfArchive: len(opts.MoreBuildIDDirs) > 0, debuginfodOff: opts.Debuginfod != nil && !opts.Debuginfod.Enabled()}
		sum.warned = opts.Warn != nil
	}
	return sum, err
}

// noMapsLine describes the samples of processes the recording holds no
// maps of (Summary.noMaps, byPid): how many, of how many processes, the
// three with the most samples named. "" when there were none.
func (p *processor) noMapsLine(byPid map[uint32]int) string {
	n, of, names := p.samplesOf(byPid)
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%s the recording holds no maps of (pid comm: samples %s): their user frames cannot be placed (no_mapping); "+
		"a recording of some CPUs only (perf record -C) holds the maps of processes whose exec and mmaps ran on them", of, names)
}

// unmappedPCLine describes the samples whose PC lay in none of the maps
// the recording holds of their process (Summary.UnmappedPC). "" when there
// were none.
func (p *processor) unmappedPCLine(byPid map[uint32]int) string {
	n, of, names := p.samplesOf(byPid)
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%s had their PC in none of the maps the recording holds of their process (pid comm: samples %s), "+
		"so their stacks stopped at it (no_mapping): the records of the mmaps or the exec that mapped it are missing; "+
		"a recording of some CPUs only (perf record -C) holds the execs and mmaps that ran on them, and lost events may have held them", of, names)
}

// samplesOf says how many samples byPid counts (n), of how many processes
// ("N samples of M processes"), and names the three with the most samples
// ("pid comm: samples, ...").
func (p *processor) samplesOf(byPid map[uint32]int) (n int, of, names string) {
	if len(byPid) == 0 {
		return 0, "", ""
	}
	pids := make([]uint32, 0, len(byPid))
	for pid, k := range byPid {
		pids = append(pids, pid)
		n += k
	}
	sort.Slice(pids, func(i, j int) bool {
		a, b := byPid[pids[i]], byPid[pids[j]]
		return a > b || a == b && pids[i] < pids[j]
	})
	var each []string
	for _, pid := range pids[:min(3, len(pids))] {
		each = append(each, fmt.Sprintf("%d %s: %d", pid, p.commOf(pid), byPid[pid]))
	}
	if len(pids) > 3 {
		each = append(each, "...")
	}
	return n, plural(n, "sample") + " of " + processes(len(pids)), strings.Join(each, ", ")
}

// warnGroupRead says, once per event, that an event's samples carry its
// event group's counts (perf record -e '{a,b}:S': the leader samples, the
// members only count), from which perf script makes samples of the
// members too; ustack reports the leader's samples alone.
func (p *processor) warnGroupRead() {
	for _, a := range p.session.Attrs {
		if a.SampleType&perfdata.SampleRead == 0 || a.ReadFormat&perfdata.FormatGroup == 0 {
			continue
		}
		var members []string
		for _, b := range p.session.Attrs {
			if b != a && b.SamplePeriod == 0 {
				members = append(members, b.Name)
			}
		}
		if len(members) == 0 {
			continue
		}
		p.warn("%s: its samples carry the counts of its event group (perf record -e '{...}:S'), from which perf script also makes samples of %s; ustack reports %s's samples only, with their stacks",
			a.Name, strings.Join(members, ", "), a.Name)
	}
}

type processor struct {
	opts Options
	// warm builds objects' tables ahead (warmSpace) of the build-ids
	// in hit, the recording's list of objects hit by samples.
	warm       warmer
	hit        map[string]bool
	arch       arch.Arch
	session    *perfdata.Session
	resolver   *resolve.Resolver
	ksyms      *kallsyms.Table // loaded by kernelSyms, once (ksymsOnce)
	ksymsPath  string          // where from; "" for none or when given
	ksymsCache string          // LoadProc's cache directory, for /proc/kallsyms
	ksymsOnce  sync.Once
	ksymsFull  *kallsyms.Table // the whole table, when ksyms is LoadProc's partial one
	fullOnce   sync.Once
	ksymsStore func() // LoadProc's cache write, run once the table is handed on
	storeOnce  sync.Once
	ksymsStart bool // the reader met a kernel frame and started loading
	// kernelRef is the recording's kernel map (perf's MMAP record of
	// "[kernel.kallsyms]_text": the reference symbol's name after the
	// brackets, its address then in PgOff, the kernel text's range), set
	// by the reader before the first sample; ksymsDelta is what
	// kernelSyms found the table's reference symbol moved by since
	// (KASLR: another boot), added to kernel text addresses to look them
	// up.
	kernelRef    *perfdata.Mmap
	ksymsDelta   uint64
	ksymsLoading sync.WaitGroup // the goroutine that loads and stores them
	unw          *unwinder.Unwinder
	tracker      *procmaps.Tracker
	comms        map[uint32]string // tid -> comm
	buildID      map[string][]byte // path -> build-id from the recording
	// builds counts the different build-ids the recording lists for a
	// path (a file replaced while recording: dlopen, rebuild, dlopen);
	// replaced names the paths warned about.
	builds   map[string]int
	replaced map[string]bool
	// markers are the jitdump marker mappings seen: when each was first
	// mapped, and whether the recording's clock is CLOCK_MONOTONIC.
	markers map[string]markerTime

	spaces map[uint32]pidSpace // pid -> its latest address space
	mapBuf []resolve.Mapping
	traces traceFormats
}

func newProcessor(s *perfdata.Session, opts Options) (*processor, error) {
	a := s.Arch()
	if a == arch.Unknown {
		a = arch.AMD64
	}
	if opts.Jobs <= 0 {
		opts.Jobs = runtime.GOMAXPROCS(0)
	}
	if opts.MaxFrames <= 0 {
		opts.MaxFrames = 1024
	}
	if opts.PerfMapDir == "" {
		opts.PerfMapDir = "/tmp"
	}
	if opts.BuildIDDir == "" {
		opts.BuildIDDir = resolve.DefaultBuildIDDir()
	}
	p := &processor{
		opts:    opts,
		arch:    a,
		session: s,
		unw:     unwinder.New(a, unwinder.Options{PACMask: opts.PACMask}),
		tracker: procmaps.NewTracker(),
		comms:   map[uint32]string{},
		buildID: map[string][]byte{},
		markers: map[string]markerTime{},
		spaces:  map[uint32]pidSpace{},
	}
	p.traces.p = p
	p.builds, p.replaced = map[string]int{}, map[string]bool{}
	listed := map[string]bool{} // path and build-id
	for _, b := range s.Features.BuildIDs {
		if len(b.BuildID) > 0 {
			if k := b.Filename + "\x00" + string(b.BuildID); !listed[k] {
				listed[k] = true
				p.builds[b.Filename]++
			}
			p.buildID[b.Filename] = b.BuildID
		}
	}
	if opts.KallsymsData != nil {
		t, err := kallsyms.Parse(opts.KallsymsData)
		if err != nil {
			return nil, fmt.Errorf("kallsyms from the recording: %w", err)
		}
		p.ksyms = t
		return p, nil
	}
	if opts.Kallsyms == "-" {
		return p, nil
	}
	path := opts.Kallsyms
	if path == "" {
		path = "/proc/kallsyms"
		p.ksymsCache = opts.KallsymsCache
	}
	if opts.Kallsyms != "" {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("kallsyms: %w", err)
		}
	}
	// /proc/kallsyms costs 50-60 ms of CPU (the kernel formats it, then it
	// is parsed): it is loaded only once the reader meets a sample with
	// kernel frames, on a goroutine of its own, so that a recording of user
	// stacks only (perf record --user-callchains, ustack record) never
	// pays and others pay while reading goes on.
	p.ksymsPath = path
	return p, nil
}

// kernelSyms returns the kernel symbol table, loading it on first use; nil
// when there is none. Safe for concurrent use: the workers that meet their
// first kernel frame while it loads wait for it.
func (p *processor) kernelSyms() *kallsyms.Table {
	p.ksymsOnce.Do(func() {
		if p.ksymsPath == "" {
			return
		}
		if p.opts.Kallsyms == "" && !p.recordingKernel() {
			return
		}
		var t *kallsyms.Table
		var err error
		if p.ksymsCache != "" {
			t, p.ksymsStore, err = kallsyms.LoadProc(p.ksymsCache, p.opts.BuildIDDir)
		} else {
			t, err = kallsyms.Load(p.ksymsPath)
		}
		switch {
		case err != nil:
			p.warn("kernel frames will not be symbolized: %v", err)
		case t.Len() == 0:
			p.warn("kernel frames will not be symbolized: %s holds no kernel symbol (a copy of /proc/kallsyms has lines of address, type and name)", p.ksymsPath)
		default:
			p.ksyms = t
			p.relocateKernel(t)
		}
	})
	return p.ksyms
}

// relocateKernel sets ksymsDelta from the recording's kernel map: the
// table's reference symbol (_text) minus where the recording had it, as
// perf relocates a kallsyms table of another boot (KASLR moves the kernel
// at every boot; perf record's copy of kallsyms in the build-id cache is
// of the boot that first recorded that kernel).
func (p *processor) relocateKernel(t *kallsyms.Table) {
	ref := p.kernelRef
	if ref == nil {
		return
	}
	name := strings.TrimPrefix(ref.Filename, "[kernel.kallsyms]")
	if name == "" {
		return
	}
	if addr, ok := t.Address(name); ok {
		p.ksymsDelta = addr - ref.PgOff
	}

}

// lookupKernel names a kernel address of the recording from t: kernel
// text addresses moved by ksymsDelta, others (modules, BPF) as they are.
func (p *processor) lookupKernel(t *kallsyms.Table, addr uint64) (kallsyms.Symbol, uint64, bool) {
	if ref := p.kernelRef; p.ksymsDelta != 0 && ref != nil && addr >= ref.Start && addr-ref.Start < ref.Len {
		addr += p.ksymsDelta
	}
	return p.kernelTable(t, addr).Lookup(addr)
}

// recordingKernel points the default kernel symbols (/proc/kallsyms) at
// the kernel the recording was made on, as perf does: when the recording's
// [kernel.kallsyms] build-id is not the running kernel's, at perf record's
// copy of that kernel's /proc/kallsyms in a build-id cache (BuildIDDir,
// MoreBuildIDDirs). It says false, with a warning, when kernel frames must
// stay unnamed: this machine's symbols would name them wrongly. A recording
// without a kernel build-id is named from /proc/kallsyms, as perf names it,
// with a warning when its kernel release is not this machine's. It runs
// with the first kernel frame, after a pipe-mode recording's features.
func (p *processor) recordingKernel() bool {
	var id string
	for _, b := range p.session.Features.BuildIDs {
		if b.Misc&perfdata.MiscCPUModeMask == perfdata.MiscKernel && b.Filename == "[kernel.kallsyms]" && len(b.BuildID) > 0 {
			id = hex.EncodeToString(b.BuildID)
		}
	}
	running := kallsyms.RunningBuildID()
	if id == "" || running == "" {
		rel, err := os.ReadFile("/proc/sys/kernel/osrelease")
		if here := strings.TrimSpace(string(rel)); err == nil && p.session.Features.OSRelease != "" && here != p.session.Features.OSRelease {
			p.warn("[kernel.kallsyms]: the recording was made on kernel %s and names no kernel build-id; this machine runs %s: kernel frames are named from this machine's %s and may be wrong (--kallsyms FILE gives the recording kernel's symbols)",
				p.session.Features.OSRelease, here, p.ksymsPath)
		}
		return true
	}
	if id == running {
		return true
	}
	dirs := append([]string{p.opts.BuildIDDir}, p.opts.MoreBuildIDDirs...)
	var looked []string
	for _, dir := range dirs {
		if dir == "" {
			continue
		}
		path := kallsyms.PerfCachePath(dir, id)
		if _, err := os.Stat(path); err == nil {
			p.ksymsPath, p.ksymsCache = path, ""
			return true
		}
		looked = append(looked, path)
	}
	where := "no build-id cache"
	if len(looked) > 0 {
		where = "not in " + strings.Join(looked, ", ")
	}
	p.warn("[kernel.kallsyms]: the recording was made on a kernel with build-id %s, this machine runs %s, and that kernel's kallsyms is %s (perf record keeps it in ~/.debug, perf archive packs it; --kallsyms FILE gives it): kernel frames are not symbolized",
		id, running, where)
	p.ksymsPath = ""
	return false
}

// storeKernelSyms writes LoadProc's cache entry, once, after the table
// was handed to whoever waited for it.
func (p *processor) storeKernelSyms() {
	p.storeOnce.Do(func() {
		if p.ksymsStore != nil {
			p.ksymsStore()
			p.ksymsStore = nil
		}
	})
}

// kernelTable returns a table that answers addr exactly: t, or when t is
// LoadProc's cached table of the kernel image only and addr lies outside
// it (a module's, a BPF program's), the whole table, read once.
func (p *processor) kernelTable(t *kallsyms.Table, addr uint64) *kallsyms.Table {
	if t == nil || t.Covers(addr) {
		return t
	}
	p.fullOnce.Do(func() {
		if full, err := kallsyms.Load(p.ksymsPath); err == nil {
			p.ksymsFull = full
		} else {
			p.warn("kernel frames outside the kernel image will not be symbolized: %v", err)
		}
	})
	return p.ksymsFull
}

func (p *processor) warn(format string, args ...any) {
	if p.opts.Warn != nil {
		p.opts.Warn(fmt.Sprintf(format, args...))
	}
}

// job is one sample on its way through the workers.
type job struct {
	out    Sample
	regs   arch.Regs
	hasReg bool
	// stack is the sample's user stack: the sorter's copy of it (a
	// slice of a mapped recording, read-only, of a chunk of the
	// recording that src shares, or of the sorter's clone), or own, the
	// job's buffer, holding a copy.
	stack []byte
	own   []byte
	// src is the sorter's sample that stack lies in, released with the
	// job (perfdata.Sample.Release): its chunk is then read into again.
	src    *perfdata.Sample
	user   []uint64 // user callchain when there are no registers
	kernel []uint64
	ip     uint64 // the sampled user IP, when there is neither
	userIP bool
	// fullStack: the kernel copied the whole stack snapshot asked for.
	fullStack bool
	// signalStackMissing: the walk stopped past a signal delivered on an
	// alternate stack (unwinder.ErrInterruptedStackNotCaptured).
	signalStackMissing bool
	// installing: the walk stopped in an exception unwinder installing a
	// handler's frame (cfi.ErrInstallingHandler).
	installing bool
	// noUserData: the sample was recorded for a DWARF unwind but
	// carries no user registers or no stack (missingUserData).
	noUserData bool
	space      *resolve.Space
	err        error
	// trace is a tracepoint sample's format and raw a copy of its data,
	// formatted by the worker into traceText.
	trace     *tracefmt.Format
	raw       []byte
	traceText []byte

	// maxStack is the event's sample_max_stack (0: the kernel's default),
	// uprobe whether a uprobe took the sample and fp the sample's
	// frame-pointer audit (fpaudit.go).
	maxStack int
	uprobe   bool
	fp       fpSample
}

var jobPool = sync.Pool{New: func() any { return new(job) }}

// A batch is jobs handed to a worker and to the emitter together: a job a
// sample, handed on alone, cost the pipeline a wake-up of another
// goroutine each, and a worker alone (-j 1) then ran mostly in turn with
// the reader and the emitter rather than beside them.
type batch struct {
	jobs []*job
	done chan struct{} // the worker is through with the jobs
}

// batchJobs is the jobs of a batch read from a file. A stream (pipe mode:
// perf record -o - | ustack report) hands on each sample's job as it comes.
const batchJobs = 16

var batchPool = sync.Pool{New: func() any { return &batch{jobs: make([]*job, 0, batchJobs), done: make(chan struct{}, 1)} }}

func (p *processor) run(r *perfdata.Reader, emit func(*Sample) error) (*Summary, error) {
	sum := &Summary{Stops: map[string]int{}, Missing: map[string]string{}, Skipped: map[string]int{}, MaxFrames: p.opts.MaxFrames}
	if p.arch == arch.ARM64 {
		// perf.data does not record the PAC mask.
		sum.PACMask, sum.PACSource = p.opts.PACMask, "--pac-mask"
		if sum.PACMask == 0 {
			sum.PACMask, sum.PACSource = arch.PACMask(48), "default: 48-bit virtual addresses"
		}
	}
	sorter := perfdata.NewSorter(r, 0)
	var lostInRecords, lostSamples uint64
	sawLostSamples := false

	perBatch := batchJobs
	if p.session.Pipe {
		perBatch = 1
	}
	// The batches in flight hold their samples' frames (a deep stack
	// of a compiler, inline frames included, is 100-150 of them, 12-18
	// KB a job) and the chunks of the recording their stacks lie in:
	// ordered, the emitter's queue, bounds them. 4 batches a worker keep
	// a worker from waiting on the emitter as 8 did (wall time the same on
	// the 10x benchmark recording written to /dev/null; to a file, once
	// the emitter no longer waits in write(2): cmd/ustack's asyncWriter),
	// and the report's peak RSS 4-5 MB lower (64.5 -> 59.6 MB warm, 71 ->
	// 67 cold); 2 a worker cost 13% more wall time.
	queue := make(chan *batch, 2*p.opts.Jobs)
	ordered := make(chan *batch, 4*p.opts.Jobs)
	var wg sync.WaitGroup
	for i := 0; i < p.opts.Jobs; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := newWorker(p)
			for b := range queue {
				for _, j := range b.jobs {
					w.process(j)
				}
				b.done <- struct{}{}
			}
		}()
	}
	// The emitter waits for each batch in order.
	emitErr := make(chan error, 1)
	go func() {
		var err error
		for b := range ordered {
			<-b.done
			for _, j := range b.jobs {
				err = emitJob(sum, j, emit, err)
			}
			clear(b.jobs)
			b.jobs = b.jobs[:0]
			batchPool.Put(b)
		}
		emitErr <- err
	}()
	cur := batchPool.Get().(*batch)
	send := func() {
		if len(cur.jobs) > 0 {
			ordered <- cur
			queue <- cur
			cur = batchPool.Get().(*batch)
		}
	}
	var readErr error
	index := 0
	for {
		rec, err := sorter.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			readErr = err
			break
		}
		if p.opts.Progress != nil && index&1023 == 0 {
			p.opts.Progress(r.Offset())
		}
		switch rec := rec.(type) {
		case *perfdata.Sample:
			p.tracker.Thread(rec.Pid, rec.Tid)
			if f := p.opts.Filter; f != nil && !f.Keep(rec.Pid, rec.Tid, rec.CPU, rec.Time, p.commOf(rec.Tid)) {
				index++
				sum.Filtered++
				rec.Release()
				continue
			}
			j := p.newJob(rec, index)
			j.noUserData = missingUserData(rec)
			if j.src != rec {
				rec.Release() // nothing of it kept
			}
			index++
			if cur.jobs = append(cur.jobs, j); len(cur.jobs) >= perBatch {
				send()
			}
		case *perfdata.Mmap:
			p.mmap(rec)
		case *perfdata.Comm:
			if rec.Exec {
				p.tracker.Exec(rec.Pid)
			}
			p.tracker.Thread(rec.Pid, rec.Tid)
			p.comms[rec.Tid] = rec.Comm
		case *perfdata.Fork:
			p.tracker.Fork(rec.Pid, rec.Ppid)
			p.tracker.Thread(rec.Pid, rec.Tid)
			if c, ok := p.comms[rec.Ptid]; ok {
				p.comms[rec.Tid] = c
			}
		case *perfdata.Exit:
			p.tracker.ThreadExit(rec.Pid, rec.Tid)
		case *perfdata.Lost:
			lostInRecords += rec.Lost
		case *perfdata.LostSamples:
			lostSamples += rec.Lost
			sawLostSamples = true
		case *perfdata.Raw:
			// Records that may hold samples ustack cannot read.
			if t := rec.Type; t == perfdata.RecordCompressed || t == perfdata.RecordCompressed2 || strings.HasPrefix(t.String(), "type(") {
				sum.Skipped[t.String()]++
			}
		}
	}
	// perf record (6.0 on) and ustack record count the same drops twice:
	// in LOST records, per ring as they happen, and at the end in
	// LOST_SAMPLES, per event from the kernel's count, which also holds
	// the drops no LOST record could tell. A LOST record also counts the
	// ring's other records it dropped (mmap, comm, exit): where
	// LOST_SAMPLES were written, theirs is the count of samples, as perf
	// report's "Total Lost Samples".
	sum.Lost = lostInRecords
	if sawLostSamples {
		sum.Lost = lostSamples
	}
	send()
	close(queue)
	close(ordered)
	wg.Wait()
	err := <-emitErr
	sum.Missing = p.resolver.Missing()
	sum.NoMaps = p.noMapsLine(sum.noMaps)
	for _, n := range sum.noMaps {
		sum.noMapsSamples += n
	}
	sum.UnmappedPC = p.unmappedPCLine(sum.unmappedPC)
	if p.opts.ObjectSources {
		sum.Objects = p.resolver.Objects()
	}
	sum.Damage, sum.Damaged = r.Damages(), r.Damaged()
	// In pipe mode the events and features arrive with the records.
	sum.Attrs, sum.Cmdline = p.session.Attrs, p.session.Features.Cmdline
	if readErr != nil {
		var fe *perfdata.FormatError
		if errors.As(readErr, &fe) {
			sum.DecodeError = readErr
		} else if err == nil {
			err = readErr
		}
	}
	return sum, err
}

// emitJob counts a finished job in sum and hands its sample to emit, unless
// emit failed before (err), then lets the job go.
func emitJob(sum *Summary, j *job, emit func(*Sample) error, err error) error {
	if err == nil {
		sum.Samples++
		if j.out.Stop != "" {
			sum.Stops[j.out.Stop]++
		}
		if j.out.Stop == "truncated" && j.fullStack {
			sum.SnapshotCut++
		}
		if j.signalStackMissing {
			sum.SignalStackMissing++
		}
		if j.installing {
			sum.installing++
		}
		if j.noUserData && j.out.Stop == StopCallchain {
			sum.NoStackChained++
		} else if j.noUserData {
			sum.NoUserData++
		}
		sum.countNoUnwind(&j.out)
		if j.out.noMaps {
			if sum.noMaps == nil {
				sum.noMaps = map[uint32]int{}
			}
			sum.noMaps[j.out.Pid]++
		}
		if !j.out.noMaps && pcUnmapped(&j.out) {
			if sum.unmappedPC == nil {
				sum.unmappedPC = map[uint32]int{}
			}
			sum.unmappedPC[j.out.Pid]++
		}
		sum.addFP(&j.fp)
		err = emit(&j.out)
	}
	j.release()
	return err
}

// pcUnmapped reports whether s's stack, with stack bytes to unwind,
// stopped at its first user frame, whose PC lies in no mapping of its
// process (stop no_mapping there).
func pcUnmapped(s *Sample) bool {
	if s.Stop != unwinder.StopNoMapping.String() || s.StackSize == 0 {
		return false
	}
	for i := range s.Frames {
		if f := &s.Frames[i]; !f.Kernel {
			return f.Module == "" && i == len(s.Frames)-1
		}
	}
	return false
}

func (j *job) release() {
	j.out.Frames = j.out.Frames[:0]
	j.stack = nil // never written: it may be a read-only mapping's
	if j.src != nil {
		j.src.Release()
		j.src = nil
	}
	j.user = j.user[:0]
	j.kernel = j.kernel[:0]
	j.space = nil
	j.err = nil
	jobPool.Put(j)
}

// branchCallStack is PERF_SAMPLE_BRANCH_CALL_STACK in branch_sample_type:
// the LBR records the call stack (perf record --call-graph lbr).
const branchCallStack = 1 << 11

// newJob copies what the workers need out of the reader's buffers.
func (p *processor) newJob(s *perfdata.Sample, index int) *job {
	j := jobPool.Get().(*job)
	j.out = Sample{Index: index, Pid: s.Pid, Tid: s.Tid, CPU: s.CPU, Time: s.Time,
		Period: s.Period, Event: s.EventName, IP: s.IP, Frames: j.out.Frames[:0],
		TraceFields: TraceFields{List: j.out.TraceFields.List[:0]}}
	j.trace = nil
	if s.Attr != nil && s.Attr.Type == perfdata.TypeTracepoint {
		if j.trace = p.traces.format(s); j.trace != nil {
			j.raw = append(j.raw[:0], s.Raw...)
		}
	}
	j.out.Comm = p.commOf(s.Tid)
	kernel, user := perfdata.SplitCallchain(s.Callchain)
	if len(kernel) > 0 && !p.ksymsStart {
		// Load the kernel symbols while the reader goes on: the workers
		// will need them (this one's sample first).
		p.ksymsStart = true
		p.ksymsLoading.Go(func() {
			p.kernelSyms()
			p.storeKernelSyms()
		})
	}
	j.kernel = append(j.kernel[:0], kernel...)
	j.user = append(j.user[:0], user...)
	j.hasReg, j.fullStack, j.fp.done, j.maxStack, j.signalStackMissing, j.installing = false, false, false, 0, false, false
	j.uprobe = isUprobe(s.EventName)
	if s.Attr != nil {
		j.maxStack = int(s.Attr.SampleMaxStack)
	}
	if s.Attr != nil && s.RegsABI != 0 && len(s.Regs) > 0 {
		s.Attr.LoadUserRegs(p.arch, s, &j.regs, p.arch == arch.AMD64)
		j.hasReg = true
		if s.HasTime() && s.Time != 0 {
			// The sorter handed over its own copy: keep it.
			j.stack, j.src = s.Stack(), s
		} else {
			j.own = append(j.own[:0], s.Stack()...)
			j.stack = j.own
		}
		j.out.StackSize = len(j.stack)
		j.fullStack = len(s.StackData) > 0 && s.StackDynSize >= uint64(len(s.StackData))
	}
	j.userIP = false
	if !j.hasReg && len(s.Branches) > 0 && s.Attr != nil && s.Attr.BranchSampleType&branchCallStack != 0 {
		// --call-graph lbr: the user part is the LBR call stack, as perf
		// builds it (resolve_lbr_callchain_sample): the target of the
		// newest call, then each call's source, newest first.
		j.user = append(j.user[:0], s.Branches[0].To)
		for _, b := range s.Branches {
			j.user = append(j.user, b.From)
		}
	}
	if !j.hasReg && len(s.Callchain) == 0 && len(j.user) == 0 && s.Attr != nil && s.Attr.SampleType&perfdata.SampleIP != 0 {
		switch s.Misc & perfdata.MiscCPUModeMask {
		case perfdata.MiscKernel:
			j.kernel = append(j.kernel, s.IP)
		case perfdata.MiscUser:
			j.ip, j.userIP = s.IP, true
		}
	}
	snap := p.tracker.Maps(s.Pid)
	j.out.noMaps = j.hasReg && len(snap.Maps) == 0 && s.Pid != 0 && s.Pid != ^uint32(0)
	j.space = p.spaceFor(s.Pid, snap).At(s.Time)
	j.out.space = j.space
	return j
}

// commOf returns a thread's comm, or what perf calls a thread the
// recording names not: "swapper" for the idle task (tid 0), else ":TID".
func (p *processor) commOf(tid uint32) string {
	if c := p.comms[tid]; c != "" {
		return c
	}
	if tid == 0 {
		return "swapper"
	}
	return ":" + strconv.FormatInt(printedID(tid), 10)
}

// printedID returns a pid or tid as perf prints it: the kernel's u32 as a
// signed int (perf's %d), so that ^uint32(0), no task, is -1.
func printedID(id uint32) int64 { return int64(int32(id)) }

// missingUserData reports whether a sample of an event recorded with user
// registers and stack carries neither although it was taken in a user
// context (it has a user call chain or was taken in user mode).
func missingUserData(s *perfdata.Sample) bool {
	a := s.Attr
	if a == nil || a.SampleType&perfdata.SampleRegsUser == 0 || a.SampleType&perfdata.SampleStackUser == 0 {
		return false
	}
	if s.RegsABI != perfdata.RegsABINone && len(s.Stack()) > 0 {
		return false
	}
	return len(perfdata.UserCallchain(s.Callchain)) > 0 || s.CPUMode() == perfdata.MiscUser
}

func (p *processor) mmap(m *perfdata.Mmap) {
	if m.Pid == ^uint32(0) && strings.HasPrefix(m.Filename, "[kernel.kallsyms]") {
		if p.kernelRef == nil {
			p.kernelRef = m.Clone().(*perfdata.Mmap)
		}
		return
	}
	exec := m.Prot&procmaps.ProtExec != 0 || (m.Header().Type == perfdata.RecordMmap && !m.Data())
	if m.Header().Type == perfdata.RecordMmap2 && m.Prot == 0 && !m.Data() {
		exec = true // synthesized records may carry no prot
	}
	if len(m.BuildID) > 0 {
		p.buildID[m.Filename] = append([]byte(nil), m.BuildID...)
	} else if exec && p.builds[m.Filename] > 1 && !p.replaced[m.Filename] {
		// perf.data ties build-ids to paths, not to mappings: which
		// build each mapping was cannot be told.
		p.replaced[m.Filename] = true
		p.warn("%s: the recording lists %d different builds of this file (it was replaced while recording) and does not say which mapping was which: its frames are named from build-id %x, the last listed, and those of the other builds are wrong (perf names them so too)",
			m.Filename, p.builds[m.Filename], p.buildID[m.Filename])
	}
	if _, ok := jitdump.IsMarkerPath(m.Filename); ok && m.Time != 0 {
		if _, seen := p.markers[m.Filename]; !seen {
			a := m.Header().Attr
			p.markers[m.Filename] = markerTime{mapped: m.Time,
				monotonic: a != nil && a.Flags&perfdata.AttrUseClockID != 0 && a.ClockID == clockMonotonic}
		}
	}
	p.tracker.Mmap(m.Pid, procmaps.Map{Start: m.Start, End: m.Start + m.Len, PgOff: m.PgOff,
		Path: m.Filename, BuildID: p.buildID[m.Filename], Prot: m.Prot, Exec: exec, Maj: m.Maj, Min: m.Min, Ino: m.Ino, InoGen: m.InoGen})
}

// markerTime is when a jitdump's marker was mapped, in the samples' clock.
type markerTime struct {
	mapped    uint64
	monotonic bool
}

// clockMonotonic is CLOCK_MONOTONIC, the clock JITs stamp jitdumps with.
const clockMonotonic = 1

// jitClock answers resolve.Options.JITClock from the marker mappings seen;
// it runs on the reading goroutine, as mmap does. A marker the recording
// synthesized (time 0) or never saw counts as in the same clock.
func (p *processor) jitClock(path string) (uint64, bool) {
	m, ok := p.markers[path]
	if !ok {
		return 0, true
	}
	return m.mapped, m.monotonic
}

// sortedKeys returns the keys of a count map, most frequent first.
func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

// WriteSummary prints the end-of-report summary: lost samples, stacks by
// stop reason when many ended early, and the objects that could not be
// used; nothing when all is well. WriteLine prints the line that follows,
// always.
func (s *Summary) WriteSummary(w io.Writer) {
	early, unwound := 0, 0
	for k, n := range s.Stops {
		unwound += n
		if k != "outermost" && k != "fp_guess" {
			early += n
		}
	}
	if s.Lost > 0 {
		fmt.Fprintf(w, "ustack: %d samples lost by the kernel\n", s.Lost)
	}
	if s.PACMask != 0 {
		fmt.Fprintf(w, "ustack: arm64 return addresses stripped with PAC mask %#x (%s)\n", s.PACMask, s.PACSource)
	}
	if unwound > 0 && early*10 > unwound {
		// Only the early stops: outermost is the complete stacks.
		fmt.Fprintf(w, "ustack: %d of %d stacks ended early:", early, unwound)
		for _, k := range sortedKeys(s.Stops) {
			if k != "outermost" && k != "fp_guess" {
				fmt.Fprintf(w, " %s %d", k, s.Stops[k])
			}
		}
		fmt.Fprintln(w)
	}
	if n := s.Stops["fp_guess"]; n > 0 {
		fmt.Fprintf(w, "ustack: %d of %d stacks reached their outermost frame only through a guess (fp_guess): a function without CFI was left by a frame pointer it is not shown to set up, by a return address whose call is not shown to be to it, or by scanning the stack for a return address where its code is missing; its caller may be missing, so these stacks are not called complete\n", n, unwound)
	}
	if n := s.installing; n > 0 {
		fmt.Fprintf(w, "ustack: %d of %d stacks ended in libgcc's exception unwinder as it installed a handler's frame (stack_switch): its CFI there gives the handler's registers with the unwinder's own stack pointer, from which the handler's callers cannot be found\n", n, unwound)
	}
	if n := s.Stops["stack_switch"] - s.installing; n > 0 {
		if s.core {
			fmt.Fprintf(w, "ustack: %d of %d stacks ended where Go's runtime had switched their thread to its g0 stack (stack_switch) and the thread runs no goroutine to go on with (one preempted in runtime.morestack and descheduled); --goroutines shows every goroutine's own stack\n", n, unwound)
		} else {
			fmt.Fprintf(w, "ustack: %d of %d stacks ended where Go's runtime had switched their thread's stack (stack_switch): in runtime.systemstack, morestack, asmcgocall and the vDSO calls (time.now, nanotime1) to its g0 stack, their goroutine's frames are on the stack it left, which the recording does not hold; in gogo, back to a goroutine's stack, the goroutine's innermost frame is at the PC the runtime saved in its memory, which the recording does not hold either\n", n, unwound)
		}
	}
	if n := s.Stops["depth"]; n > 0 && s.MaxFrames > 0 {
		// A stack overflow's core, a deep recursion: the outermost
		// frames (main) are past the limit, not lost.
		fmt.Fprintf(w, "ustack: %d stacks reached the limit of %d frames and were cut there; --max-stack raises it\n", n, s.MaxFrames)
	}
	if s.Samples > 0 && s.JITStops*10 > s.Samples {
		fmt.Fprintf(w, "ustack: %d of %d stacks stopped in JIT code (%s) with no unwind information and no frame pointer to follow; run the JIT with frame pointers (java -XX:+PreserveFramePointer) or have it write a jitdump with unwinding info (python 3.13 -X perf_jit, node --perf-prof --perf-prof-unwinding-info)\n", s.JITStops, s.Samples, s.JITModule)
	}
	if fix := s.StackSizeFix(); fix != "" {
		fmt.Fprintf(w, "ustack: %d of %d stacks were cut short by the size of the stack snapshot; %s\n", s.SnapshotCut, s.Samples, fix)
	}
	if n := s.SignalStackMissing; n > 0 {
		fmt.Fprintf(w, "ustack: %d of %d stacks stopped past a signal delivered on an alternate signal stack (sigaltstack; Go's runtime delivers every signal so): the snapshot starts at the handler's SP, on that stack, and does not hold the interrupted code's stack; a larger snapshot does not reach it\n", n, s.Samples)
	}
	if s.NoMaps != "" {
		fmt.Fprintf(w, "ustack: %s\n", s.NoMaps)
	}
	if s.UnmappedPC != "" {
		fmt.Fprintf(w, "ustack: %s\n", s.UnmappedPC)
	}
	s.writeNoUnwindIn(w)
	s.writeObjects(w)
	if len(s.Missing) > 0 {
		keys := make([]string, 0, len(s.Missing))
		for k := range s.Missing {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintf(w, "ustack: %s without unwind or symbol information:\n", plural(len(keys), "object"))
		for _, k := range keys {
			why := s.Missing[k]
			if s.warned && resolve.WarnsAbout(why) {
				// The warning gave the whole reason: one line each.
				why, _, _ = strings.Cut(why, ":")
				why += " (warned above)"
			}
			fmt.Fprintf(w, "  %s: %s\n", k, why)
		}
		if fix := s.MissingFix(); fix != "" {
			fmt.Fprintf(w, "ustack: %s\n", fix)
		}
	}
	for _, d := range s.Damage {
		fmt.Fprintf(w, "ustack: %v\n", d)
	}
	if n := s.Damaged - len(s.Damage); n > 0 {
		fmt.Fprintf(w, "ustack: %d more damaged stretches skipped\n", n)
	}
	if s.DecodeError != nil {
		fmt.Fprintf(w, "ustack: the recording is damaged; reading stopped: %v\n", s.DecodeError)
	}
}

// WriteLine prints the report's one-line summary, as ustack report ends
// its output on stderr: how many samples (of a core: threads, or with
// CoreOptions.Goroutines goroutines) it printed,
// how many of their user stacks are complete and how the others ended, by
// stop reason (docs/GLOSSARY.md). Nothing when no sample was printed.
// WriteSummary's lines, printed only where something needs saying, come
// before it.
func (s *Summary) WriteLine(w io.Writer) {
	if s.Samples == 0 {
		return
	}
	unit := "sample"
	switch {
	case s.goroutines:
		unit = "goroutine"
	case s.core:
		unit = "thread"
	}
	if s.Samples != 1 {
		unit += "s"
	}
	fmt.Fprintf(w, "ustack: %d %s", s.Samples, unit)
	unwound := 0
	for _, n := range s.Stops {
		unwound += n
	}
	out, guess := s.Stops["outermost"], s.Stops["fp_guess"]
	early := unwound - out - guess
	switch {
	case early == 0 && guess == 0 && out > 0:
		fmt.Fprintf(w, ", %d unwound to the outermost frame", out)
	case early > 0 || guess > 0:
		// How many of the stacks are complete, 0 included, and how
		// the others ended.
		fmt.Fprintf(w, ", %d of %d unwound to the outermost frame", out, unwound)
		if guess > 0 {
			fmt.Fprintf(w, ", %d reached it only through a guess (fp_guess %d)", guess, guess)
		}
		if early > 0 {
			fmt.Fprintf(w, ", %d stopped early (", early)
			sep := ""
			for _, k := range slices.Sorted(maps.Keys(s.Stops)) {
				if k != "outermost" && k != "fp_guess" {
					fmt.Fprintf(w, "%s%s %d", sep, k, s.Stops[k])
					sep = ", "
				}
			}
			fmt.Fprint(w, ")")
		}
	}
	if rest := s.Samples - unwound; rest > 0 {
		fmt.Fprintf(w, ", %d without a user stack to unwind", rest)
	}
	fmt.Fprintln(w)
}

// processes is plural's for "process".
func processes(n int) string {
	if n == 1 {
		return "1 process"
	}
	return fmt.Sprintf("%d processes", n)
}

// plural returns "1 object", "2 objects".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// writeObjects prints, when Summary.Objects was filled, where each
// object's information came from, "none" where it has none.
func (s *Summary) writeObjects(w io.Writer) {
	if len(s.Objects) == 0 {
		return
	}
	fmt.Fprintf(w, "ustack: where the information of %s came from:\n", plural(len(s.Objects), "object"))
	for _, o := range s.Objects {
		fmt.Fprintf(w, "  %s: object %s, unwind %s, symbols %s, lines %s", o.Path, o.FoundIn,
			o.Sources.Unwind, o.Sources.Symbols, o.Sources.Lines)
		if o.Sources.DebugFile != "" {
			fmt.Fprintf(w, "; debug file %s", o.Sources.DebugFile)
		}
		if o.Sources.Supplementary != "" {
			fmt.Fprintf(w, "; supplementary %s", o.Sources.Supplementary)
		}
		if len(o.Sources.SplitDWARF) > 0 {
			fmt.Fprintf(w, "; split DWARF %s", strings.Join(o.Sources.SplitDWARF, ", "))
		}
		if o.File != "" {
			fmt.Fprintf(w, "; read from %s", o.File)
		}
		if len(o.BuildID) > 0 {
			fmt.Fprintf(w, "; build-id %x", o.BuildID)
		}
		fmt.Fprintln(w)
	}
}

// countNoUnwind counts out when its stack stopped for want of unwind
// information: in JITStops when it ended in JIT code, else in NoUnwindIn
// by the module of its last user frame.
func (s *Summary) countNoUnwind(out *Sample) {
	if out.Stop != "no_unwind_info" {
		return
	}
	for i := len(out.Frames) - 1; i >= 0; i-- {
		f := &out.Frames[i]
		if f.Kernel {
			continue
		}
		b := filepath.Base(f.Module)
		if memfdProgram(f.Module, out.Comm) {
			return // a program run from a memfd, not JIT code: a missing object
		}
		if resolve.IsAnonymous(f.Module) || strings.HasPrefix(b, "perf-") && strings.HasSuffix(b, ".map") {
			s.JITStops++
			if s.JITModule == "" {
				s.JITModule = f.Module
			}
			return
		}
		if f.Module != "" {
			if s.NoUnwindIn == nil {
				s.NoUnwindIn = map[string]int{}
			}
			s.NoUnwindIn[f.Module]++
		}
		return
	}
}

// writeNoUnwindIn names the objects where stacks stopped for want of
// unwind information that were found (those missing are listed with why
// below): the stop reason alone does not say which object lacks its CFI.
func (s *Summary) writeNoUnwindIn(w io.Writer) {
	var mods []string
	for m := range s.NoUnwindIn {
		if _, missing := s.Missing[m]; !missing {
			mods = append(mods, m)
		}
	}
	if len(mods) == 0 {
		return
	}
	sort.Slice(mods, func(i, j int) bool {
		a, b := s.NoUnwindIn[mods[i]], s.NoUnwindIn[mods[j]]
		return a > b || a == b && mods[i] < mods[j]
	})
	var parts []string
	n := 0
	for _, m := range mods {
		parts = append(parts, fmt.Sprintf("%s (%d)", m, s.NoUnwindIn[m]))
		n += s.NoUnwindIn[m]
	}
	fmt.Fprintf(w, "ustack: %d stacks stopped (no_unwind_info) in code without unwind information that no fallback could leave: %s; install the objects' debug files, or build them with -fasynchronous-unwind-tables or frame pointers\n",
		n, strings.Join(parts, ", "))
}

// memfdProgram reports whether module is the memfd a process whose name is
// comm was run from: an exec of a memfd names the process after it (its
// first 15 bytes), "memfd:NAME", where the mapping is "/memfd:NAME
// (deleted)". Such code is a program whose file nothing kept, not JIT
// code.
func memfdProgram(module, comm string) bool {
	return strings.HasPrefix(comm, "memfd:") && strings.HasPrefix(module, "/"+comm)
}

// StackSizeFix returns, when 1% or more of the stacks ended at the end of
// a full stack snapshot (SnapshotCut), how to record a larger one with the
// recorder that made the file: ustack record's --stack-size, or perf
// record's --call-graph dwarf,N. It returns "" otherwise.
func (s *Summary) StackSizeFix() string {
	cut := s.SnapshotCut
	if s.core || s.Samples == 0 || cut*100 < s.Samples {
		return ""
	}
	size := uint32(0)
	for _, a := range s.Attrs {
		if a.SampleStackUser > size {
			size = a.SampleStackUser
		}
	}
	const max = 65528 // the kernel's limit, perf's too
	next := uint32(2 * size)
	if size == 0 {
		next = 16384
	}
	if next > max {
		next = max
	}
	if size >= max {
		return fmt.Sprintf("the recording already copied %d bytes, the kernel's limit", size)
	}
	if s.recordedByUstack() {
		return fmt.Sprintf("record more with ustack record --stack-size %d (this recording copied %d bytes)", next, size)
	}
	return fmt.Sprintf("record more with perf record --call-graph dwarf,%d (this recording copied %d bytes)", next, size)
}
