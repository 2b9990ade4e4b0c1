package report

import (
	"encoding/hex"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"

	"github.com/ustack/ustack/debuginfod"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/procmaps"
	"github.com/ustack/ustack/resolve"
)

// ObjectSource finds the bytes of an object, for recordings that carry
// their objects with them (a ustack record archive).
type ObjectSource = resolve.ObjectSource

// Frame is one symbolized frame of a sample's stack (see resolve.Frame):
// kernel frames, and user frames each ending its inline chain.
type Frame = resolve.Frame

// newResolver returns the resolver of a report's options: objects from the
// files (under SymFS), the recording's archive, then perf's build-id cache.
func newResolver(opts *Options, s *perfdata.Session, warn func(string), jitClock func(string) (uint64, bool)) *resolve.Resolver {
	var host func() []byte
	if opts.HostVDSO != nil {
		host = func() []byte { return hostVDSO(opts.HostVDSO, s, warn) }
	}
	return resolve.New(resolve.Options{
		HostVDSO:        host,
		Cache:           opts.Cache,
		SymFS:           opts.SymFS,
		DebugDirs:       opts.DebugDirs,
		SectionCache:    opts.SectionCache,
		DebugData:       opts.DebugData,
		BuildIDDir:      opts.BuildIDDir,
		MoreBuildIDDirs: opts.MoreBuildIDDirs,
		Objects:         opts.Objects,
		PerfMapDir:      opts.PerfMapDir,
		JITDumpDirs:     opts.JITDumpDirs,
		JITClock:        jitClock,
		NoInline:        opts.NoInline,
		NoTailCall:      opts.NoTailCall,
		Warn:            warn,
		Fetcher:         fetcher(opts.Debuginfod),
		SameMachine:     sameMachine(s),
		RecordingEnd:    opts.RecordingEnd,
	})
}

// sameMachine reports whether the recording was made on this machine (its
// hostname is this one's), so that its mappings' inodes name this
// machine's files (resolve.Options.SameMachine). A pipe-mode recording's
// hostname comes later than the resolver is made: false.
func sameMachine(s *perfdata.Session) bool {
	host, err := os.Hostname()
	return err == nil && s.Features.Hostname != "" && s.Features.Hostname == host
}

// hostVDSO returns the running kernel's vdso when the recording was made
// on this kernel, else nil. It runs when a sample first needs the vdso,
// after a pipe-mode recording's feature records were read.
func hostVDSO(read func() ([]byte, error), s *perfdata.Session, warn func(string)) []byte {
	listed := false
	for _, b := range s.Features.BuildIDs {
		if b.Filename == "[vdso]" && len(b.BuildID) > 0 {
			listed = true // the resolver compares build-ids
		}
	}
	if !listed {
		rel, err := os.ReadFile("/proc/sys/kernel/osrelease")
		if err != nil || s.Features.OSRelease == "" || strings.TrimSpace(string(rel)) != s.Features.OSRelease {
			return nil
		}
	}
	img, err := read()
	if err != nil {
		warn(fmt.Sprintf("[vdso]: the recording carries none and this kernel's cannot be read: %v", err))
		return nil
	}
	return img
}

// fetcher returns the client as an elfcache.Fetcher: nil (not a nil
// pointer in an interface) when there is none.
func fetcher(c *debuginfod.Client) elfcache.Fetcher {
	if c == nil {
		return nil
	}
	return c
}

// prepareParallel bounds the objects prepareObjects opens at once; the
// client bounds the downloads among them.
const prepareParallel = 8

// prepareObjects opens every user-space object of the recording's build-id
// list, and its debug file, several at once (resolve.Resolver.Prepare), so
// that what debuginfod must fetch is fetched in parallel before the first
// sample rather than one object at a time as samples need them.
func (p *processor) prepareObjects() {
	sem := make(chan struct{}, prepareParallel)
	var wg sync.WaitGroup
	for _, b := range p.session.Features.BuildIDs {
		mode := b.Misc & perfdata.MiscCPUModeMask
		if len(b.BuildID) == 0 || mode == perfdata.MiscKernel || mode == perfdata.MiscGuestKernel ||
			b.Filename == "" || strings.HasPrefix(b.Filename, "[") {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			p.resolver.Prepare(b.Filename, b.BuildID)
		}()
	}
	wg.Wait()
}

// spaceFor returns the address space of a maps snapshot, building it on
// first use. It runs on the reader goroutine only. Only each process's
// latest space is kept: a sample is always of its process's current
// snapshot, so an older one is never asked for again (the jobs that hold
// it keep it as long as they need it). Keeping every version kept the
// spaces of every mmap a process made: a compiler's 450,000 samples held
// 14 MB of them and growing.
func (p *processor) spaceFor(pid uint32, snap *procmaps.Snapshot) *resolve.Space {
	if c, ok := p.spaces[pid]; ok && c.version == snap.Version {
		return c.space
	}
	if len(p.spaces) > 4096 { // bound memory on recordings with many processes
		p.spaces = map[uint32]pidSpace{}
	}
	p.mapBuf = resolve.FromProcmaps(p.mapBuf[:0], snap.Maps)
	sp := p.resolver.NewSpace(pid, p.mapBuf)
	p.spaces[pid] = pidSpace{version: snap.Version, space: sp}
	p.warmSpace(sp)
	return sp
}

// warmer builds objects' symbol tables and line indexes (what naming a
// frame's first address needs) ahead of the code that will need them, on
// goroutines of its own: that code would otherwise build them when a frame
// first needs them, one object after the other, each waiting on its own
// (inflating glibc's compressed DWARF, or reading the tables from the
// section cache). Code that needs a table before it is built waits for the
// same build (an object builds each table once). Wait for the goroutines
// before closing the objects.
type warmer struct {
	// tailCalls: tail call frames are looked for, which needs each
	// object's index of function names (FunctionNamed) too.
	tailCalls bool
	started   map[*elfcache.Object]bool
	sem       chan struct{} // bounds the goroutines building at once
	wg        sync.WaitGroup
}

// warmMax bounds the objects a warmer builds ahead: a system-wide recording
// names hundreds.
const warmMax = 32

// start begins building obj's tables, each on a goroutine, once per
// object and for at most warmMax objects; sp, which holds obj, stays
// pinned meanwhile. Their errors are for the code that uses the tables to
// report.
func (w *warmer) start(sp *resolve.Space, obj *elfcache.Object) {
	if obj == nil || w.started[obj] || len(w.started) >= warmMax {
		return
	}
	if w.started == nil {
		w.started = map[*elfcache.Object]bool{}
		w.sem = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	}
	w.started[obj] = true
	builds := []func(){func() { obj.SymbolsError() }, func() { obj.SourceError() }}
	if w.tailCalls {
		// Built by the first lookup of any name.
		builds = append(builds, func() { obj.FunctionNamed("") })
	}
	for _, build := range builds {
		if !sp.Pin() {
			return
		}
		w.wg.Go(func() {
			defer sp.Unpin()
			w.sem <- struct{}{}
			defer func() { <-w.sem }()
			build()
		})
	}
}

// wait waits for the builds started.
func (w *warmer) wait() { w.wg.Wait() }

// warmSpace warms (warmer) the objects of a new address space that the
// recording's build-id list names as hit by samples. It runs on the reader
// goroutine. Only objects of the spaces of kept samples are warmed, and
// only those the workers would open anyway: nothing more is opened, looked
// for or warned about than without it.
func (p *processor) warmSpace(sp *resolve.Space) {
	if p.hit == nil {
		p.warm.tailCalls = !p.opts.NoTailCall
		p.hit = map[string]bool{}
		for _, b := range p.session.Features.BuildIDs {
			if mode := b.Misc & perfdata.MiscCPUModeMask; len(b.BuildID) > 0 && mode != perfdata.MiscKernel && mode != perfdata.MiscGuestKernel {
				p.hit[hex.EncodeToString(b.BuildID)] = true
			}
		}
	}
	as := sp.AddressSpace()
	for i := 0; i < as.Len(); i++ {
		if obj := sp.Object(i); obj != nil && p.hit[obj.BuildIDHex()] {
			p.warm.start(sp, obj)
		}
	}
}

// pidSpace is a process's latest address space and the version of the
// maps snapshot it was built from.
type pidSpace struct {
	version uint64
	space   *resolve.Space
}
