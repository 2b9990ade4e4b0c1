package report

import (
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
func newResolver(opts *Options, warn func(string)) *resolve.Resolver {
	return resolve.New(resolve.Options{
		SymFS:           opts.SymFS,
		DebugDirs:       opts.DebugDirs,
		SectionCache:    opts.SectionCache,
		DebugData:       opts.DebugData,
		BuildIDDir:      opts.BuildIDDir,
		MoreBuildIDDirs: opts.MoreBuildIDDirs,
		Objects:         opts.Objects,
		PerfMapDir:      opts.PerfMapDir,
		NoInline:        opts.NoInline,
		Warn:            warn,
	})
}

// spaceFor returns the address space of a maps snapshot, building it on
// first use. It runs on the reader goroutine only.
func (p *processor) spaceFor(pid uint32, snap *procmaps.Snapshot) *resolve.Space {
	if sp, ok := p.spaces[snap.Version]; ok {
		return sp
	}
	if len(p.spaces) > 4096 { // bound memory on recordings with many processes
		p.spaces = map[uint64]*resolve.Space{}
	}
	p.mapBuf = resolve.FromProcmaps(p.mapBuf[:0], snap.Maps)
	sp := p.resolver.NewSpace(pid, p.mapBuf)
	p.spaces[snap.Version] = sp
	return sp
}
