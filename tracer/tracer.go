package tracer

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/capture"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/procmaps"
	"github.com/ustack/ustack/resolve"
)

// Frame is a symbolized frame: a physical frame, or a function inlined at
// one (Inlined).
type Frame = resolve.Frame

// Options configure a Tracer. The zero value traces this machine's
// processes from the files on disk.
type Options struct {
	// Arch is the traced processes' architecture; zero is this
	// program's.
	Arch arch.Arch
	// DebugDirs are searched for separate debug files (default
	// /usr/lib/debug).
	DebugDirs []string
	// BuildIDDirs are directories of objects by build-id in perf's
	// build-id cache layout (.build-id/XX/REST or .build-id/XX/REST/elf),
	// searched for an object whose file at its path is missing or of
	// another build: pass resolve.DefaultBuildIDDir() for perf's own.
	BuildIDDirs []string
	// Fetcher, when set, fetches by build-id the objects and debug files
	// no local source has (a *debuginfod.Client).
	Fetcher elfcache.Fetcher
	// SectionCache, when set, keeps decompressed debug sections and the
	// objects' sorted symbol tables on disk between runs.
	SectionCache *elfcache.SectionCache
	// NoInline leaves the frames of inlined functions out.
	NoInline bool
	// MaxFrames bounds the physical frames of a stack (default 127,
	// perf's).
	MaxFrames int
	// Warn receives warnings (an object of another build, a process
	// whose maps cannot be read), once each; nil discards them.
	Warn func(msg string)
	// CacheBudget, when positive, bounds the memory the opened objects
	// hold (their tables, symbols, lines and decompressed sections:
	// elfcache.Object.HeldBytes): past it, objects no Process uses any
	// more (its maps read again without them, or Forget) are closed,
	// least recently used first, and opened again if needed. 0 keeps
	// every object open until Close. CacheStats counts what it does.
	CacheBudget int64
}

// Tracer serves the processes of one tracing run. Its methods are safe
// for concurrent use.
type Tracer struct {
	opts Options
	res  *resolve.Resolver

	// forgets counts Forget's calls with a budget: a Walker lets go of
	// what it remembers of the objects (forgetStale) when it changed.
	forgets atomic.Uint64

	mu      sync.Mutex
	procs   map[int]*Process
	objects map[string]map[string]*objectSpace // by build-id and path, for SymbolizeNormalized
}

// New returns a Tracer. The running kernel's vdso is used for the traced
// processes' [vdso] mappings.
func New(opts Options) *Tracer {
	if opts.Arch == arch.Unknown {
		opts.Arch = hostArch()
	}
	if opts.MaxFrames <= 0 {
		opts.MaxFrames = 127
	}
	ro := resolve.Options{DebugDirs: opts.DebugDirs, MoreBuildIDDirs: opts.BuildIDDirs, Fetcher: opts.Fetcher,
		SectionCache: opts.SectionCache, NoInline: opts.NoInline, Warn: opts.Warn, CacheBudget: opts.CacheBudget,
		ProcRoot: true, PerfMapDir: "/tmp", Origin: "the normalized address"}
	if vdso, err := capture.ReadVDSO(); err == nil {
		ro.VDSO = vdso
	}
	return &Tracer{opts: opts, res: resolve.New(ro), procs: map[int]*Process{}, objects: map[string]map[string]*objectSpace{}}
}

func hostArch() arch.Arch {
	if runtime.GOARCH == "arm64" {
		return arch.ARM64
	}
	return arch.AMD64
}

// Close releases the objects the Tracer opened. Its Processes and
// Walkers must not be used after.
func (t *Tracer) Close() error { return t.res.Close() }

// Missing returns the objects that could not be used, each with the
// reason (for a report's summary).
func (t *Tracer) Missing() map[string]string { return t.res.Missing() }

// Process returns live process pid, reading its maps the first time it is
// asked for; later calls return the same Process. It fails when the
// process's maps cannot be read (it has exited, or ptrace permission over
// it is missing).
func (t *Tracer) Process(pid int) (*Process, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.procs[pid]; p != nil {
		return p, nil
	}
	p := &Process{t: t, pid: pid, outside: map[uint64]bool{}}
	if err := p.read(); err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	t.procs[pid] = p
	return p, nil
}

// Forget drops process pid (it exited): a later Process(pid) reads the
// maps of whatever process has that pid then. The objects it used are
// given back (closed when over Options.CacheBudget and no other process
// uses them; a Walker in the middle of a stack of it finishes first);
// its Process must not be used after: Walker.Unwind and Symbolize of it
// return no frames (ErrForgotten). With a budget, each Walker lets go of
// the names it remembers at its next call, so that they keep no closed
// object's tables alive.
func (t *Tracer) Forget(pid int) {
	t.mu.Lock()
	p := t.procs[pid]
	delete(t.procs, pid)
	t.mu.Unlock()
	if p != nil {
		p.mu.Lock()
		p.forgotten = true
		if s := p.space.Load(); s != nil {
			s.Close()
		}
		p.mu.Unlock()
	}
	t.res.ForgetPID(uint32(pid))
	if t.opts.CacheBudget > 0 {
		t.forgets.Add(1)
	}
}

// CacheStats returns the object cache's counters, for a tracer to
// export: objects open and in use, bytes held, evictions, misses and
// re-opens.
func (t *Tracer) CacheStats() elfcache.CacheStats { return t.res.CacheStats() }

// ErrForgotten is Stack.Err for a Process that Tracer.Forget dropped.
var ErrForgotten = errors.New("the process was forgotten (Tracer.Forget)")

// pinned returns p's Space pinned for a walk (resolve.Space.Pin), or nil
// for a forgotten process.
func (p *Process) pinned() *resolve.Space {
	for {
		s := p.space.Load()
		if s.Pin() {
			return s
		}
		// Replaced by a new read, or forgotten.
		p.mu.Lock()
		gone := p.forgotten
		p.mu.Unlock()
		if gone {
			return nil
		}
	}
}

// repin returns p's Space after a read, pinned, and unpins old.
func (p *Process) repin(old *resolve.Space) *resolve.Space {
	s := p.pinned()
	old.Unpin()
	return s
}

// Process is a live process: its maps as last read, with their objects.
type Process struct {
	t     *Tracer
	pid   int
	space atomic.Pointer[resolve.Space]

	mu      sync.Mutex
	maps    []resolve.Mapping
	outside map[uint64]bool // addresses outside the maps even after a new read
	warned  bool
	// forgotten is set by Tracer.Forget: the Space is closed for good.
	forgotten bool
}

// Pid returns the process's id.
func (p *Process) Pid() int { return p.pid }

// Space returns the process's address space as last read, for the lower
// layers (resolve, unwinder).
func (p *Process) Space() *resolve.Space { return p.space.Load() }

// read reads the process's maps and builds its address space.
func (p *Process) read() error {
	pm, err := procmaps.Read(p.pid)
	if err != nil && len(pm) == 0 {
		return err
	}
	p.maps = resolve.FromProcmaps(p.maps[:0:0], pm)
	// Code no path reaches (a library deleted while mapped, a program
	// run from a memfd) is read through the mapping itself.
	resolve.LiveUnlinked(p.pid, p.maps)
	if root := "/proc/" + strconv.Itoa(p.pid) + "/root"; !sameRoot(p.pid, root) {
		// A container's process (another mount namespace): its maps
		// name files as its root sees them, which may be other files
		// at the same paths here (another libc), or none. Open them
		// through its root, as the recorder does; a path that is not
		// there (a chroot's, whose maps show this root's paths) is
		// opened as it is.
		for i := range p.maps {
			m := &p.maps[i]
			if !strings.HasPrefix(m.Path, "/") || strings.HasSuffix(m.Path, " (deleted)") {
				continue
			}
			if _, err := os.Stat(root + m.Path); err == nil {
				m.File = root + m.Path
			}
		}
	}
	if p.forgotten {
		return ErrForgotten
	}
	// The Space replaced gives its objects back once the walks that
	// pinned it end.
	if old := p.space.Swap(p.t.res.NewSpace(uint32(p.pid), p.maps)); old != nil {
		old.Close()
	}
	return nil
}

// sameRoot reports whether process pid sees files as this process does:
// the same mount namespace and the same root directory (root is
// /proc/PID/root). When that cannot be read, it says true.
func sameRoot(pid int, root string) bool {
	ns, err1 := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/mnt")
	self, err2 := os.Readlink("/proc/self/ns/mnt")
	if err1 == nil && err2 == nil && ns != self {
		return false
	}
	a, err1 := os.Stat(root)
	b, err2 := os.Stat("/")
	return err1 != nil || err2 != nil || os.SameFile(a, b)
}

// Refresh reads the process's maps again, for a process known to have
// mapped or unmapped something. Walker.Unwind does it by itself when an
// address lies outside the maps.
func (p *Process) Refresh() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.outside)
	return p.read()
}

// refresh reads the maps again because addr lay outside them, once per
// such address, and reports whether the new maps hold addr. A process
// whose maps cannot be read any more keeps the maps read last, with one
// warning.
func (p *Process) refresh(addr uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.space.Load().AddressSpace().Find(addr) >= 0 {
		return true // another goroutine read them already
	}
	if p.outside[addr] {
		return false
	}
	if err := p.read(); err != nil {
		if !p.warned && p.t.opts.Warn != nil {
			p.warned = true
			p.t.opts.Warn(fmt.Sprintf("process %d: cannot read its maps again (%v); its stacks end at the first address outside the maps read before", p.pid, err))
		}
	}
	if p.space.Load().AddressSpace().Find(addr) < 0 {
		p.outside[addr] = true
		return false
	}
	return true
}

// errNoStack is returned for a stack without a stack pointer.
var errNoStack = errors.New("no stack pointer among the registers")
