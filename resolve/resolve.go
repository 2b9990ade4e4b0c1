package resolve

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/jitdump"
	"github.com/ustack/ustack/procmaps"
	"github.com/ustack/ustack/unwinder"
)

// ObjectSource finds the bytes of an object, for recordings that carry
// their objects with them (a ustack record archive).
type ObjectSource interface {
	// Object returns the object with the given build-id or, when the
	// recording gave none, the one recorded for path ("[vdso]" included).
	Object(buildID []byte, path string) (data []byte, name string, ok bool)
}

// GivenSource is an ObjectSource some of whose objects the user named for
// their paths (ustack report --exe): those come before the file at the
// path, even one of the same build (a stripped copy of the binary given
// with its symbols), and are reported as FoundGiven.
type GivenSource interface {
	ObjectSource
	// Given reports whether path's object is one the user named.
	Given(path string) bool
}

// Options configure a Resolver. The zero value resolves a process of this
// machine from the files on disk.
type Options struct {
	// Cache, when set, opens object files; the Resolver does not close
	// it. When nil the Resolver makes one from SymFS and DebugDirs and
	// closes it in Close.
	Cache *elfcache.Cache
	// SymFS is a directory prepended to every object path, like perf's
	// --symfs.
	SymFS string
	// DebugDirs are searched for separate debug files (default
	// /usr/lib/debug).
	DebugDirs []string
	// SectionCache, when set, keeps the objects' decompressed debug
	// sections on disk between runs (elfcache.SectionCache); used by the
	// caches the Resolver makes and the objects it opens from bytes, not
	// by a Cache supplied in Cache. nil decompresses every time.
	SectionCache *elfcache.SectionCache
	// DebugData, when set, supplies separate debug files by build-id (a
	// recording's archive) for objects made from archive bytes.
	DebugData func(buildID []byte) ([]byte, bool)
	// BuildIDDir is perf's build-id cache; "" for none. Unlike
	// report.Options.BuildIDDir, whose "" means DefaultBuildIDDir() as
	// for perf, a Resolver reads no directory the caller did not name:
	// pass DefaultBuildIDDir() for perf's.
	BuildIDDir string
	// MoreBuildIDDirs are further build-id caches in perf's layout,
	// searched after BuildIDDir: unpacked perf archive tarballs, whose
	// objects are FoundPerfArchive.
	MoreBuildIDDirs []string
	// Objects, when set, supplies objects by build-id or path (a
	// recording's archive).
	Objects ObjectSource
	// VDSO, when set, is the vdso's image, used for "[vdso]" mappings
	// before any other source (the running kernel's, when unwinding live).
	VDSO []byte
	// HostVDSO, when set, returns the vdso of the kernel this program
	// runs on, or nil where it must not be used. It is called once, the
	// first time a "[vdso]" mapping finds no other source, and the image
	// is refused when the recording names another build-id. Callers return
	// it only for recordings made on this kernel (perf uses its own vdso
	// the same way): pipe-mode perf.data and recordings made without a
	// build-id cache carry no copy of theirs.
	HostVDSO func() []byte
	// ProcRoot makes a file that cannot be opened by its path be looked
	// for under /proc/PID/root as well (live processes in another mount
	// namespace).
	ProcRoot bool
	// PerfMapDir is where JIT symbol maps (perf-PID.map) are looked for;
	// "" for none.
	PerfMapDir string
	// JITDumpDirs are directories where a JIT's jitdump (jit-PID.dump,
	// the file of a marker mapping) is looked for by its base name after
	// its recorded path (under SymFS): the recording's directory, where
	// node writes it.
	JITDumpDirs []string
	// JITClock, when set, says how a jitdump's timestamps (the JIT's
	// CLOCK_MONOTONIC) relate to the samples' times: given the marker
	// mapping's path it returns the time, in the samples' clock, at which
	// the process mapped it, and whether the samples' clock is
	// CLOCK_MONOTONIC too (perf record -k 1, ustack record). When it is
	// not, the dump's times are shifted so that the dump's creation falls
	// at that mapping, with a warning where the dump's times matter. It
	// is called from NewSpace.
	JITClock func(markerPath string) (mapped uint64, monotonic bool)
	// NoInline leaves the frames of inlined functions out.
	NoInline bool
	// NoTailCall leaves out the frames of functions that tail-called
	// (see HowTailCall).
	NoTailCall bool
	// Warn receives warnings (build-id mismatches, damaged objects), once
	// per path; nil discards them.
	Warn func(msg string)
	// Fetcher, when set, gets by build-id the objects that no local source
	// has (elfcache.Cache.OpenBuildID) and the debug files that no local
	// search found (a *debuginfod.Client); nil fetches nothing.
	Fetcher elfcache.Fetcher
	// CacheBudget, when positive, is how many bytes the objects of the
	// caches the Resolver makes may hold (elfcache.Cache.SetBudget;
	// elfcache.Object.HeldBytes) before the objects no Space holds are
	// closed, least recently released first; 0 keeps every object open
	// until Close. A Cache given in Cache keeps its own budget. For a
	// long-lived Resolver (a tracer's whole run): Close the Spaces of
	// processes that exited, and ForgetPID them.
	CacheBudget int64
	// Origin names where the build-ids come from in warnings ("the core");
	// "" is "the recording".
	Origin string
	// SameMachine says the recording was made on this machine, so that
	// a mapping's device and inode (procmaps.Map's Maj, Min, Ino) name
	// this machine's files: a file at the mapping's path (not under
	// SymFS) that the recording gives no build-id for is refused, with a
	// warning, when it is on the device the process mapped but another
	// inode (rebuilt, reinstalled or replaced since the recording).
	SameMachine bool
	// RecordingEnd, with SameMachine, is when the recording ended (its
	// file's modification time; zero: unknown): a file at a mapping's
	// path that the recording gives no build-id for, the very inode the
	// process mapped but modified after that (copied over in place, which
	// keeps the inode), is refused as another inode is.
	RecordingEnd time.Time
}

// DefaultBuildIDDir returns perf's build-id cache, $HOME/.debug, or "" when
// there is no home directory.
func DefaultBuildIDDir() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".debug")
}

// Mapping is one mapping handed to NewSpace: the mapping as the process had
// it and, optionally, where its object is to be found instead.
type Mapping struct {
	procmaps.Map
	// File, when set, is the object file to open for the mapping instead
	// of Path (a fixture's committed copy), executable or not; no
	// build-id policy applies.
	File string
	// Object, when set, is used as the mapping's object as is, with a
	// load bias of Start-PgOff (a page known only by its bytes).
	Object unwinder.Object
}

// Resolver opens the objects of mappings and builds address spaces from
// them. Its methods are safe for concurrent use.
type Resolver struct {
	opts      Options
	cache     *elfcache.Cache // object paths, under SymFS
	ownsCache bool
	local     *elfcache.Cache // perf's build-id cache, a local directory

	mu      sync.Mutex
	objects map[objectKey]*elfcache.Object // nil: could not be used
	owned   []*elfcache.Object             // opened from bytes; closed by Close
	ownedBy map[*elfcache.Object]bool      // the same, as a set
	jit     map[uint32]*perfMap
	dumps   map[string]*jitDump // by marker path; nil: not found
	missing map[string]string
	warned  map[string]bool
	closed  bool
	// spaces are the Spaces holding references not given back yet,
	// given back by Close (to a Cache the Resolver does not own, which
	// outlives it).
	spaces map[*spaceRefs]struct{}
	// found says where each object was found, for Objects.
	found map[*elfcache.Object]foundAt
	// pyCode holds each python object's trampoline template (nil: none),
	// for pytrampoline.go.
	pyCode map[*elfcache.Object][]byte

	hostOnce sync.Once
	hostVDSO []byte // Options.HostVDSO's answer
}

// foundAt is where Resolver.find found an object.
type foundAt struct {
	path  string // the mapping's path
	where string // a FoundIn value
}

// Where an object was found, in ObjectInfo.FoundIn.
const (
	FoundFile         = "file"           // its path (under SymFS, or the process's root)
	FoundGiven        = "given"          // the file the user named for the path (GivenSource)
	FoundArchive      = "archive"        // the recording's archive
	FoundBuildIDCache = "build-id cache" // perf's build-id cache
	FoundPerfArchive  = "perf archive"   // an unpacked perf archive tarball (MoreBuildIDDirs)
	FoundDebuginfod   = "debuginfod"     // fetched by build-id through Options.Fetcher
	FoundVDSO         = "vdso"           // Options.VDSO
	FoundHostVDSO     = "running kernel" // Options.HostVDSO
	// FoundBeside: a JIT's jitdump, found not where the JIT wrote it
	// but by its name in Options.JITDumpDirs (beside the recording).
	FoundBeside = "beside the recording"
)

type objectKey struct {
	path, buildID string
	pid           uint32 // with ProcRoot, for what depends on the process's root
	ino           uint64 // with SameMachine, the inode the process mapped
}

// New returns a Resolver.
func New(opts Options) *Resolver {
	r := &Resolver{opts: opts, cache: opts.Cache, objects: map[objectKey]*elfcache.Object{},
		jit: map[uint32]*perfMap{}, dumps: map[string]*jitDump{}, missing: map[string]string{}, warned: map[string]bool{},
		found: map[*elfcache.Object]foundAt{}, pyCode: map[*elfcache.Object][]byte{}, ownedBy: map[*elfcache.Object]bool{},
		spaces: map[*spaceRefs]struct{}{}}
	if r.cache == nil {
		r.cache = elfcache.NewCache(elfcache.Options{DebugDirs: opts.DebugDirs, SymFS: opts.SymFS,
			SectionCache: opts.SectionCache, Fetcher: opts.Fetcher})
		r.cache.SetBudget(opts.CacheBudget)
		r.ownsCache = true
	}
	r.local = r.cache
	if opts.SymFS != "" && (opts.BuildIDDir != "" || len(opts.MoreBuildIDDirs) > 0) {
		r.local = elfcache.NewCache(elfcache.Options{DebugDirs: opts.DebugDirs,
			SectionCache: opts.SectionCache, Fetcher: opts.Fetcher})
		r.local.SetBudget(opts.CacheBudget)
	}
	return r
}

// CacheStats returns the counters of the Resolver's object caches (summed
// when it has two: its SymFS's and a build-id cache's), for a tracer to
// export: objects open and in use, bytes held, evictions, misses and
// re-opens. Objects made from bytes (an archive's, the vdso's) are not
// among them.
func (r *Resolver) CacheStats() elfcache.CacheStats {
	s := r.cache.Stats()
	if r.local != r.cache {
		l := r.local.Stats()
		s.Objects += l.Objects
		s.InUse += l.InUse
		s.HeldBytes += l.HeldBytes
		s.MappedBytes += l.MappedBytes
		s.Budget += l.Budget
		s.Misses += l.Misses
		s.Reopens += l.Reopens
		s.Evictions += l.Evictions
	}
	return s
}

// acquire takes a reference to obj for a Space: false when its cache
// evicted it. Objects made from bytes are the Resolver's till Close.
func (r *Resolver) acquire(obj *elfcache.Object) bool {
	r.mu.Lock()
	owned := r.ownedBy[obj]
	r.mu.Unlock()
	return owned || r.cache.Acquire(obj) || r.local != r.cache && r.local.Acquire(obj)
}

// release gives back a reference acquire, or an open through a cache,
// took.
func (r *Resolver) release(obj *elfcache.Object) {
	if obj == nil {
		return
	}
	r.cache.Release(obj)
	if r.local != r.cache {
		r.local.Release(obj)
	}
}

// ForgetPID drops what the Resolver keeps for process pid (it exited): its
// JIT perf map and jitdump, the objects found inside its root. The
// Spaces made for it must be closed (Space.Close) for their objects to be
// closed when over the budget. It also drops the Resolver's entries of
// objects their caches closed since.
func (r *Resolver) ForgetPID(pid uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	delete(r.jit, pid)
	for path := range r.dumps {
		if p, ok := jitdump.IsMarkerPath(path); ok && p == pid {
			delete(r.dumps, path)
		}
	}
	for k, o := range r.objects {
		if k.pid == pid && pid != 0 || o != nil && o.Closed() {
			delete(r.objects, k)
		}
	}
	for o := range r.found {
		if o.Closed() {
			delete(r.found, o)
		}
	}
	for o := range r.pyCode {
		if o.Closed() {
			delete(r.pyCode, o)
		}
	}
}

// Close releases the objects the Resolver opened and its object cache
// (unless Options.Cache supplied it). Spaces and frames from it must not be
// used afterwards.
func (r *Resolver) Close() error {
	r.mu.Lock()
	spaces := r.spaces
	r.spaces = nil
	r.mu.Unlock()
	// Spaces never closed give their references back: a Cache given in
	// Options.Cache outlives the Resolver, and its objects must not stay
	// in use (the budget could never close them).
	for sr := range spaces {
		sr.release()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	var first error
	for _, o := range r.owned {
		if err := o.Close(); err != nil && first == nil {
			first = err
		}
	}
	r.owned, r.objects, r.jit, r.dumps, r.found = nil, nil, nil, nil, nil
	if r.ownsCache {
		if err := r.cache.Close(); err != nil && first == nil {
			first = err
		}
	}
	if r.local != r.cache {
		if err := r.local.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Missing returns the objects that could not be used, by path, with why.
func (r *Resolver) Missing() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.missing))
	for k, v := range r.missing {
		out[k] = v
	}
	return out
}

// ObjectInfo says where one object a Resolver used came from, for a
// report's summary.
type ObjectInfo struct {
	// Path is the path of the mapping the object was opened for.
	Path    string
	BuildID []byte
	// FoundIn says where the object file was found: FoundFile,
	// FoundArchive, FoundBuildIDCache, FoundPerfArchive, FoundDebuginfod
	// or FoundVDSO.
	FoundIn string
	// Sources says where its unwind rows, names and lines come from.
	Sources elfcache.Sources
	// File is where a JIT's jitdump was read from when that is not Path
	// (found beside the recording, or under SymFS); "" otherwise.
	File string
}

// Objects describes the objects the Resolver found, sorted by path. It
// builds what the objects have not built yet (elfcache.Object.Sources), so
// call it once, for a summary.
func (r *Resolver) Objects() []ObjectInfo {
	r.mu.Lock()
	out := make([]ObjectInfo, 0, len(r.found))
	objs := make([]*elfcache.Object, 0, len(r.found))
	for o, f := range r.found {
		out = append(out, ObjectInfo{Path: f.path, BuildID: o.BuildID(), FoundIn: f.where})
		objs = append(objs, o)
	}
	var jits []ObjectInfo
	for path, d := range r.dumps {
		if d != nil {
			j := ObjectInfo{Path: path, FoundIn: d.foundIn, Sources: d.sources()}
			if d.file != path {
				j.File = d.file
			}
			jits = append(jits, j)
		}
	}
	r.mu.Unlock()
	for i, o := range objs {
		out[i].Sources = o.Sources()
	}
	out = append(out, jits...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Path != out[j].Path {
			return out[i].Path < out[j].Path
		}
		return bytes.Compare(out[i].BuildID, out[j].BuildID) < 0
	})
	return out
}

// Prepare opens the object of path with the build-id the recording gives,
// and its separate debug file, ahead of the first sample that needs them:
// run for every object of a recording at once, it fetches what
// Options.Fetcher must fetch in parallel rather than one object at a time
// as samples come. Its outcome is what NewSpace would find.
func (r *Resolver) Prepare(path string, buildID []byte) {
	if obj := r.OpenObject(path, buildID); obj != nil {
		obj.DebugFile()
	}
}

// OpenObject returns the object of path with the given build-id (nil: any
// build), found as NewSpace finds a mapping's (the file at path, the
// build-id caches, the Fetcher...), or nil when none could be used
// (Missing says why). The Resolver owns it: it stays open until Close,
// whatever the budget (Options.CacheBudget).
func (r *Resolver) OpenObject(path string, buildID []byte) *elfcache.Object {
	m := Mapping{Map: procmaps.Map{Path: path, BuildID: buildID, Exec: true}}
	return r.object(0, &m)
}

// Space is the unwinder's view of one process's maps, with what
// symbolizing needs for each mapping. It is read-only and may be shared
// between goroutines.
type Space struct {
	as   *unwinder.AddressSpace
	pid  uint32
	maps []spaceMap // indexed by unwinder.Mapping.Tag
	jit  *perfMap
	// jitd is the process's jitdump, nil without one; epoch is the
	// dump's epoch this Space shows (see jitDump.bounds).
	jitd  *jitState
	epoch int
	// noInline is the Resolver's Options.NoInline.
	noInline bool
	// noTailCall is the Resolver's Options.NoTailCall.
	noTailCall bool
	r          *Resolver // for warnings
	// refs are the references to the objects the Space holds, shared by
	// the Spaces At derives from it.
	refs *spaceRefs
}

// spaceRefs are the object references of a Space and its users.
type spaceRefs struct {
	r    *Resolver
	objs []*elfcache.Object // each with a reference taken for the Space
	// state is 2 × the Pins in force, plus 1 once the Space is closed;
	// the references are given back when it becomes 1.
	state atomic.Int64
	// released is set when the references were given back (by the
	// Space's Close or the Resolver's).
	released atomic.Bool
}

// Pin marks the Space in use (an unwind, a symbolization) until Unpin, so
// that Close does not give its objects back under the user: a Space
// closed while pinned gives them back at the last Unpin. It reports
// false, and the Space must not be used, when the Space is closed
// already. Safe for concurrent use; it does not allocate.
func (s *Space) Pin() bool {
	for {
		v := s.refs.state.Load()
		if v&1 != 0 {
			return false
		}
		if s.refs.state.CompareAndSwap(v, v+2) {
			return true
		}
	}
}

// Unpin ends a Pin.
func (s *Space) Unpin() {
	if s.refs.state.Add(-2) == 1 {
		s.refs.release()
	}
}

// Close gives back the Space's references to its objects (and those of
// the Spaces At derived from it), now or at the last Unpin of a Pin in
// force: with a budget (Options.CacheBudget) they may be closed after, so
// the Space, its frames' Objects and the Spaces At gave must not be used
// (frames already symbolized stay valid: their strings are copies). A
// Space that is never closed keeps its objects open until the Resolver's
// Close. Closing twice is harmless.
func (s *Space) Close() {
	v := s.refs.state.Or(1)
	if v == 0 {
		s.refs.release()
	}
}

func (sr *spaceRefs) release() {
	if !sr.released.CompareAndSwap(false, true) {
		return
	}
	for _, o := range sr.objs {
		sr.r.release(o)
	}
	sr.objs = nil
	sr.r.mu.Lock()
	if sr.r.spaces != nil {
		delete(sr.r.spaces, sr)
	}
	sr.r.mu.Unlock()
}

type spaceMap struct {
	path      string
	start     uint64
	pgoff     uint64
	obj       *elfcache.Object
	bias      uint64
	anonymous bool     // JIT code may live here
	jit       *jitFunc // a function of the process's jitdump
	// splitWarned is set once the object's split DWARF problem has
	// been handed to warnOnce, which then need not be asked again
	// (shared by the copies of a map in a jitdump's spaces).
	splitWarned *atomic.Bool
}

// AddressSpace returns the space to unwind in.
func (s *Space) AddressSpace() *unwinder.AddressSpace { return s.as }

// Object returns the ELF object of the AddressSpace's mapping i (a Frame's
// Mapping), or nil when it has none.
func (s *Space) Object(i int) *elfcache.Object {
	if m := s.mapOf(i); m != nil {
		return m.obj
	}
	return nil
}

// Bias returns the load bias of the AddressSpace's mapping i: runtime
// address minus the object's link-time address.
func (s *Space) Bias(i int) uint64 {
	if m := s.mapOf(i); m != nil {
		return m.bias
	}
	return 0
}

// MappingInfo describes one mapping of a Space, for writers that describe
// the address space (pprof's mappings).
type MappingInfo struct {
	// Start and Limit bound the mapping's addresses [Start, Limit);
	// Offset is the file offset mapped at Start.
	Start, Limit, Offset uint64
	// File is the mapped path ("[vdso]" for the vdso).
	File string
	// BuildID is the object's build-id, when its object was found.
	BuildID []byte
}

// Mapping describes the AddressSpace's mapping i (a Frame's Mapping, or
// what AddressSpace().Find returned); false for an index out of range.
func (s *Space) Mapping(i int) (out MappingInfo, ok bool) {
	sm := s.mapOf(i)
	if sm == nil {
		return out, false
	}
	// Field by field into the named result: a MappingInfo built in a
	// variable and returned was copied through memory, a store-forwarding
	// stall on every call (the frame-pointer audit makes one a frame).
	m := s.as.Mapping(i)
	out.Start, out.Limit, out.Offset, out.File = m.Start, m.End, sm.pgoff, sm.path
	if sm.obj != nil {
		out.BuildID = sm.obj.BuildID()
	}
	return out, true
}

// MainMapping describes the process's main binary: its executable
// file-backed mapping at the lowest address (where both position-dependent
// and PIE executables sit below their libraries); false when the process
// has none.
func (s *Space) MainMapping() (MappingInfo, bool) {
	for i := 0; i < s.as.Len(); i++ {
		sm := s.mapOf(i)
		if s.as.Mapping(i).Exec && !isPseudoPath(sm.path) && !sm.anonymous && sm.jit == nil {
			return s.Mapping(i)
		}
	}
	return MappingInfo{}, false
}

func (s *Space) mapOf(i int) *spaceMap {
	if i < 0 || i >= s.as.Len() {
		return nil
	}
	return &s.maps[s.as.Mapping(i).Tag]
}

// NewSpace builds the address space of process pid from its mappings,
// opening each executable mapping's object (once per Resolver) by the
// build-id policy of the package documentation.
func (r *Resolver) NewSpace(pid uint32, maps []Mapping) *Space {
	s := &Space{pid: pid, maps: make([]spaceMap, len(maps)), noInline: r.opts.NoInline, noTailCall: r.opts.NoTailCall, r: r,
		refs: &spaceRefs{r: r}}
	ums := make([]unwinder.Mapping, len(maps))
	anon := false
	marker := ""
	for i := range maps {
		m := &maps[i]
		um := unwinder.Mapping{Start: m.Start, End: m.End, Exec: m.Exec, Name: m.Path, Tag: i}
		sm := spaceMap{path: m.Path, start: m.Start, pgoff: m.PgOff, anonymous: IsAnonymous(m.Path), splitWarned: new(atomic.Bool)}
		_, isMarker := jitdump.IsMarkerPath(m.Path)
		switch {
		case isMarker && m.Object == nil && m.File == "":
			// A JIT's jitdump, mapped so that perf sees it: no code
			// runs there, its records name the JIT's code.
			marker = m.Path
		case m.Object != nil:
			um.Object, um.Bias = m.Object, m.Start-m.PgOff
			if o, ok := m.Object.(*elfcache.Object); ok {
				sm.obj = o
			}
		case m.Exec || m.File != "":
			if obj := r.object(pid, m); obj != nil {
				s.refs.objs = append(s.refs.objs, obj)
				if bias, ok := obj.Bias(m.Start, m.PgOff); ok {
					um.Object, um.Bias = obj, bias
					sm.obj = obj
				} else if m.Exec {
					r.note(m.Path, fmt.Sprintf("%s: no loadable segment maps file offset %#x", obj.Path(), m.PgOff))
				}
				// Else data mapped from the file outside its segments
				// (a debugger's or a linker's view of its sections):
				// no code lies there, and nothing is missing.
			}
		}
		sm.bias = um.Bias
		// A memfd holding an ELF object (a program or library run from
		// memory, its file read through /proc/PID/map_files by ustack
		// record) has file offsets like any file; code in one that holds
		// none is JIT code.
		sm.anonymous = sm.anonymous && sm.obj == nil
		anon = anon || (m.Exec && sm.anonymous)
		ums[i], s.maps[i] = um, sm
	}
	if anon {
		s.jit = r.perfMap(pid)
		r.pyTrampolines(s, ums)
	}
	if len(s.refs.objs) > 0 {
		r.mu.Lock()
		if r.spaces != nil {
			r.spaces[s.refs] = struct{}{}
		}
		r.mu.Unlock()
	}
	s.as = unwinder.NewAddressSpace(ums)
	if marker != "" {
		if d := r.jitDump(pid, marker); d != nil {
			j := &jitState{dump: d, ums: ums, base: s.maps, epochs: map[int]*Space{}}
			// The code in force at the end of the dump (a live process,
			// a core); At gives a sample's own.
			return j.space(s, len(d.bounds))
		}
	}
	return s
}

// LiveUnlinked points File, for each executable mapping of live process
// pid whose file no path reaches (procmaps.Unlinked: deleted while
// mapped, a memfd), at the mapping itself (procmaps.MappedFile), where
// this process may open it (CAP_SYS_ADMIN); it leaves the others alone.
func LiveUnlinked(pid int, maps []Mapping) {
	for i := range maps {
		m := &maps[i]
		if m.Exec && m.File == "" && procmaps.Unlinked(m.Path) {
			if f := procmaps.MappedFile(pid, m.Start, m.End); statOK(f) {
				m.File = f
			}
		}
	}
}

func statOK(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// FromProcmaps appends the mappings of a procmaps snapshot to dst, for
// NewSpace.
func FromProcmaps(dst []Mapping, maps []procmaps.Map) []Mapping {
	for _, m := range maps {
		dst = append(dst, Mapping{Map: m})
	}
	return dst
}

// object finds the object of an executable mapping, or nil (noted in
// Missing) when none can be used. The caller holds a reference to it
// (Resolver.release).
func (r *Resolver) object(pid uint32, m *Mapping) *elfcache.Object {
	path := m.Path
	if m.File != "" {
		obj, err := r.cache.Open(m.File)
		if err != nil {
			r.note(path, err.Error())
			return nil
		}
		return obj
	}
	if path == "" || (isPseudoPath(path) && path != "[vdso]") {
		return nil
	}
	// An object found by its path serves every process; one found (or
	// not) inside a process's root only that process.
	key := objectKey{path: path, buildID: string(m.BuildID)}
	if r.opts.SameMachine {
		key.ino = m.Ino
	}
	own := key
	if r.opts.ProcRoot {
		own.pid = pid
	}
	r.mu.Lock()
	k := key
	obj, seen := r.objects[key]
	if !seen {
		k = own
		obj, seen = r.objects[own]
	}
	r.mu.Unlock()
	if seen && (obj == nil || r.acquire(obj)) {
		return obj
	}
	if seen {
		// Its cache closed it (over the budget, unused): find it again.
		r.mu.Lock()
		if r.objects[k] == obj {
			delete(r.objects, k)
		}
		delete(r.found, obj)
		delete(r.pyCode, obj)
		r.mu.Unlock()
	}
	obj, where, why := r.find(pid, m)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil // the caches are closed
	}
	if _, ok := r.found[obj]; obj != nil && !ok {
		r.found[obj] = foundAt{path: path, where: where}
	}
	if obj == nil || r.opts.ProcRoot && strings.HasPrefix(obj.Path(), "/proc/") {
		key = own
	}
	r.objects[key] = obj
	if obj == nil {
		if _, ok := r.missing[path]; !ok {
			r.missing[path] = why
		}
		if WarnsAbout(why) && !r.warned[path] {
			r.warned[path] = true
			r.warnLocked(fmt.Sprintf("%s: %s", path, why))
		}
	}
	return obj
}

// WarnsAbout reports whether the Resolver gives a warning (Options.Warn)
// when it meets an object that cannot be used for this reason (a
// Missing value): a file of another build, or not the file the process
// mapped. A summary of the missing objects need not say it twice.
func WarnsAbout(why string) bool {
	return strings.HasPrefix(why, "build-id mismatch") || strings.HasPrefix(why, notMapped)
}

// find tries the sources of an object in the order of the build-id
// policy. It returns where it found the object (a FoundIn value), or why
// none could be used.
func (r *Resolver) find(pid uint32, m *Mapping) (*elfcache.Object, string, string) {
	path, buildID := m.Path, m.BuildID
	var why string
	keep := func(msg string) {
		if why == "" || strings.HasPrefix(msg, "build-id mismatch") && !strings.HasPrefix(why, "build-id mismatch") {
			why = msg
		}
	}
	if path == "[vdso]" && len(r.opts.VDSO) > 0 {
		if obj := r.fromBytes("[vdso]", r.opts.VDSO, nil, "the given vdso", keep); obj != nil {
			return obj, FoundVDSO, ""
		}
	}
	if g, ok := r.opts.Objects.(GivenSource); ok && g.Given(path) {
		if data, name, ok := g.Object(buildID, path); ok {
			if obj := r.fromGiven(name, data, buildID, keep); obj != nil {
				return obj, FoundGiven, ""
			}
		}
	}
	// A file is trusted first only when the recording says which build
	// it wants; else the recording's own copy comes first.
	if path != "[vdso]" && len(buildID) > 0 {
		if obj := r.mappedFile(m); obj != nil {
			return obj, FoundFile, ""
		}
		if obj := r.openFile(pid, path, buildID, keep); obj != nil {
			r.otherRoot(obj, m)
			return obj, FoundFile, ""
		}
		// A file deleted while mapped (a library upgraded under a
		// running process) is named "PATH (deleted)"; the file now at
		// PATH is it when its build-id says so.
		if p, ok := strings.CutSuffix(path, deletedSuffix); ok {
			if obj := r.openFile(pid, p, buildID, keep); obj != nil {
				return obj, FoundFile, ""
			}
		}
	}
	if r.opts.Objects != nil {
		if data, name, ok := r.opts.Objects.Object(buildID, path); ok {
			if obj := r.fromBytes(name, data, buildID, "the recording's archive", keep); obj != nil {
				return obj, FoundArchive, ""
			}
		}
	}
	if path != "[vdso]" && len(buildID) == 0 {
		if obj := r.openFile(pid, path, nil, keep); obj != nil {
			if msg := r.replaced(obj, m); msg != "" {
				r.release(obj)
				keep(msg)
				return nil, "", msg
			}
			return obj, FoundFile, ""
		}
		if p, ok := strings.CutSuffix(path, deletedSuffix); ok && p != "" {
			// Deleted while mapped. A copy of the mapped file put
			// under --symfs at its path is the user's word for it;
			// whatever is at that path here is another file (an
			// upgrade's), of a build nothing names.
			if r.opts.SymFS != "" {
				if obj := r.openFile(pid, p, nil, keep); obj != nil {
					return obj, FoundFile, ""
				}
			} else if _, err := os.Stat(p); err == nil {
				keep(fmt.Sprintf("%s: the process mapped %s, deleted since, and %s names no build-id for it: the file at %s now is another, "+
					"maybe another build, and is not used (if it is the same build, --symfs / uses it; ustack record reads such files through /proc/PID/map_files while the process lives)",
					notMapped, p, r.origin(), p))
			}
		}
	}
	for _, c := range r.buildIDPaths(path, buildID) {
		if obj := r.openChecked(r.local, c.path, buildID, keep); obj != nil {
			return obj, c.where, ""
		}
	}
	if path == "[vdso]" && r.opts.HostVDSO != nil {
		r.hostOnce.Do(func() { r.hostVDSO = r.opts.HostVDSO() })
		if len(r.hostVDSO) > 0 {
			if obj := r.fromBytes("[vdso]", r.hostVDSO, buildID, "the running kernel's vdso", keep); obj != nil {
				return obj, FoundHostVDSO, ""
			}
		}
	}
	fetchWhy := ""
	if r.opts.Fetcher != nil && path != "[vdso]" && len(buildID) > 0 {
		obj, err := r.cache.OpenBuildID(path, buildID)
		if err == nil {
			return obj, FoundDebuginfod, ""
		}
		fetchWhy = err.Error()
		if e := (*elfcache.Error)(nil); errors.As(err, &e) && e.Path == path && e.Err != nil {
			fetchWhy = e.Err.Error() // the summary names the path
		}
	}
	if why == "" {
		why = "not found"
		if r.opts.SymFS != "" && path != "[vdso]" {
			// Where it was looked for: a copied root that lacks it.
			why += " under " + r.opts.SymFS
		}
		if fetchWhy != "" {
			why += "; " + fetchWhy
		}
	}
	return nil, "", why
}

// deletedSuffix is what the kernel appends to the path of a mapped file
// that has been deleted (in /proc/PID/maps and a core's NT_FILE).
const deletedSuffix = " (deleted)"

// notMapped starts the reason a file was refused by replaced.
const notMapped = "not the mapped file"

// replaced says why the file opened by its path for a mapping that the
// recording gives no build-id for is not the file the process mapped, ""
// when it may be: with Options.SameMachine, the recording's device and
// inode of the mapping name another file on the same device. (Another
// machine's inodes say nothing of this one's files.)
func (r *Resolver) replaced(obj *elfcache.Object, m *Mapping) string {
	if r.opts.SymFS != "" {
		return ""
	}
	if mt, ok := r.modifiedAfter(obj.File(), m); ok {
		return fmt.Sprintf("%s: %s names no build-id for it (perf record lists only objects with samples; perf record --buildid-all lists every one), "+
			"and %s, the inode the process mapped, was modified at %s, after the recording ended (%s): its frames are left unnamed, not named from what was written over it "+
			"(if it is the same build, --symfs / uses it)",
			notMapped, r.origin(), obj.File(), mt.Format(time.RFC3339), r.opts.RecordingEnd.Format(time.RFC3339))
	}
	ino, ok := r.otherInode(obj, m)
	if !ok {
		return ""
	}
	if ino == m.Ino {
		// The same inode number, another generation: a new file that
		// was given the number of the one deleted.
		return fmt.Sprintf("%s: %s names no build-id for it (perf record lists only objects with samples; perf record --buildid-all lists every one), "+
			"and the process mapped generation %d of inode %d of device %d:%d, where %s is another generation of that inode now (rebuilt or replaced since the recording): its frames are left unnamed, not named from another build "+
			"(if it is the same build, --symfs / uses it)",
			notMapped, r.origin(), m.InoGen, m.Ino, m.Maj, m.Min, obj.File())
	}
	return fmt.Sprintf("%s: %s names no build-id for it (perf record lists only objects with samples; perf record --buildid-all lists every one), "+
		"and the process mapped inode %d of device %d:%d, where %s is inode %d now (rebuilt or replaced since the recording): its frames are left unnamed, not named from another build "+
		"(if it is the same build, --symfs / uses it)",
		notMapped, r.origin(), m.Ino, m.Maj, m.Min, obj.File(), ino)
}

// fsIocGetVersion is FS_IOC_GETVERSION (_IOR('v', 1, long) on 64-bit
// Linux): an inode's generation, which perf's MMAP2 records carry.
const fsIocGetVersion = 0x80087601

// inodeCheck is what the device and inode of a file say of a mapping's.
type inodeCheck int

const (
	inodeUnknown inodeCheck = iota // another device, or nothing to compare
	inodeSame                      // the inode the process mapped
	inodeOther                     // another inode, or a reused number of another generation
)

// checkInode compares file's device, inode and (where the file system
// tells it) inode generation with the mapping's; its inode is returned for
// warnings.
func checkInode(file string, m *Mapping) (inodeCheck, uint64) {
	var st unix.Stat_t
	if m.Ino == 0 || unix.Stat(file, &st) != nil || unix.Major(st.Dev) != m.Maj || unix.Minor(st.Dev) != m.Min {
		return inodeUnknown, 0
	}
	if st.Ino != m.Ino {
		return inodeOther, st.Ino
	}
	if m.InoGen != 0 {
		if fd, err := unix.Open(file, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			gen, err := unix.IoctlGetUint32(fd, fsIocGetVersion)
			unix.Close(fd)
			if err == nil && uint64(gen) != m.InoGen&0xffffffff {
				return inodeOther, st.Ino
			}
		}
	}
	return inodeSame, st.Ino
}

// modifiedAfter returns the modification time of file when, with
// Options.SameMachine and Options.RecordingEnd, it is the inode the
// process mapped but was written after the recording ended: its contents
// are not the mapped ones.
func (r *Resolver) modifiedAfter(file string, m *Mapping) (time.Time, bool) {
	if !r.opts.SameMachine || r.opts.RecordingEnd.IsZero() {
		return time.Time{}, false
	}
	if c, _ := checkInode(file, m); c != inodeSame {
		return time.Time{}, false
	}
	st, err := os.Stat(file)
	if err != nil || !st.ModTime().After(r.opts.RecordingEnd) {
		return time.Time{}, false
	}
	return st.ModTime(), true
}

// otherInode returns the inode of obj's file when, with
// Options.SameMachine, it is on the device the process mapped but is not
// the inode it mapped (or a reused number of it): not the mapped file.
func (r *Resolver) otherInode(obj *elfcache.Object, m *Mapping) (uint64, bool) {
	if !r.opts.SameMachine {
		return 0, false
	}
	c, ino := checkInode(obj.File(), m)
	return ino, c == inodeOther
}

// mappedFile returns the file at the mapping's path (under SymFS) when,
// with Options.SameMachine, it is the very inode the process mapped: the
// mapped file, whatever build-id the recording gives. perf takes the
// build-ids of its list from the paths as this machine's root sees them,
// so those of a process in a chroot or container are its host's files'
// (another build, or none); the mapped file is used then, with a warning
// naming both build-ids. nil when the inodes say nothing.
func (r *Resolver) mappedFile(m *Mapping) *elfcache.Object {
	if !r.opts.SameMachine || m.Ino == 0 {
		return nil
	}
	obj, err := r.cache.Open(m.Path)
	if err != nil {
		return nil
	}
	if c, _ := checkInode(obj.File(), m); c != inodeSame {
		r.release(obj)
		return nil
	}
	if _, ok := r.modifiedAfter(obj.File(), m); ok {
		r.release(obj)
		return nil
	}
	if mismatch(obj, m.BuildID) {
		r.warnOnce(m.Path, fmt.Sprintf("%s: %s gives build-id %x, but %s, the file the process mapped (inode %d of device %d:%d), has %x: "+
			"the recording's build-id is another file's at this path (perf reads build-ids by path as the host sees it, outside a chroot's or container's root; "+
			"a path mapped in two roots gets one build-id); using the mapped file",
			m.Path, r.origin(), m.BuildID, obj.File(), m.Ino, m.Maj, m.Min, obj.BuildID()))
	}
	return obj
}

// otherRoot warns, once per path, when the file found at a mapping's path
// by its build-id (not under SymFS) is, with Options.SameMachine, another
// inode of the device the process mapped. The same build-id makes it the
// same build (installed again, or a twin without debug information), and
// it is used; but perf reads the build-ids of its list by path as the host
// sees it, so for a process that ran in a chroot or container the
// recording's build-id is this file's, whatever that root held: the
// warning says so, and that --symfs gives the root's files.
func (r *Resolver) otherRoot(obj *elfcache.Object, m *Mapping) {
	if r.opts.SymFS != "" {
		return
	}
	if ino, ok := r.otherInode(obj, m); ok {
		r.warnOnce(m.Path, fmt.Sprintf("%s: the process mapped inode %d of device %d:%d, not %s (inode %d), which has %s's build-id %x and is used as the same build; "+
			"if the process ran in a chroot or container, that build-id is this file's (perf reads build-ids by path), not the mapped one's: --symfs ROOT gives the files of the process's root",
			m.Path, m.Ino, m.Maj, m.Min, obj.File(), ino, r.origin(), m.BuildID))
	}
}

// openFile opens the mapped file (under SymFS), or with ProcRoot the same
// path inside the process's root.
func (r *Resolver) openFile(pid uint32, path string, buildID []byte, keep func(string)) *elfcache.Object {
	if obj := r.openChecked(r.cache, path, buildID, keep); obj != nil {
		return obj
	}
	if r.opts.ProcRoot && strings.HasPrefix(path, "/") {
		return r.openChecked(r.cache, filepath.Join("/proc", strconv.Itoa(int(pid)), "root", path), buildID, keep)
	}
	return nil
}

// openChecked opens a file through a cache and refuses it when its
// build-id is not the recording's.
func (r *Resolver) openChecked(c *elfcache.Cache, file string, buildID []byte, keep func(string)) *elfcache.Object {
	obj, err := c.Open(file)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			keep(err.Error())
		}
		return nil
	}
	if mismatch(obj, buildID) {
		keep(fmt.Sprintf("build-id mismatch: %s has %x, %s has %x", r.origin(), buildID, obj.Path(), obj.BuildID()))
		c.Release(obj)
		return nil
	}
	return obj
}

// fromBytes makes an object of an image (archive copy, vdso) from src, owned by the
// Resolver.
func (r *Resolver) fromBytes(name string, data, buildID []byte, src string, keep func(string)) *elfcache.Object {
	return r.fromImage(name, data, buildID, src, r.opts.DebugDirs, keep)
}

// fromGiven is fromBytes for the image of a file the user named at name
// (GivenSource): its separate debug file is looked for as for a file
// opened from disk, by its .gnu_debuglink beside it and in the default
// debug directory too (elfcache.OpenBytes looks nowhere it is not told
// to: ustack report --exe lost a stripped program's debug file, found
// without --exe).
func (r *Resolver) fromGiven(name string, data, buildID []byte, keep func(string)) *elfcache.Object {
	dirs := r.opts.DebugDirs
	if dirs == nil {
		dirs = []string{elfcache.DefaultDebugDir}
	}
	return r.fromImage(name, data, buildID, name, dirs, keep)
}

func (r *Resolver) fromImage(name string, data, buildID []byte, src string, debugDirs []string, keep func(string)) *elfcache.Object {
	opts := elfcache.Options{DebugDirs: debugDirs, SymFS: r.opts.SymFS, DebugData: r.opts.DebugData,
		SectionCache: r.opts.SectionCache, Fetcher: r.opts.Fetcher}
	if name == "[vdso]" && r.opts.DebugData == nil {
		opts.NoDebugFile = true
	}
	obj, err := elfcache.OpenBytes(name, data, opts)
	if err != nil {
		keep(fmt.Sprintf("copy in %s: %v", src, err))
		return nil
	}
	if mismatch(obj, buildID) {
		keep(fmt.Sprintf("build-id mismatch: %s has %x, %s (%s) has %x", r.origin(), buildID, src, name, obj.BuildID()))
		obj.Close()
		return nil
	}
	r.mu.Lock()
	r.owned = append(r.owned, obj)
	r.ownedBy[obj] = true
	r.mu.Unlock()
	return obj
}

func (r *Resolver) origin() string {
	if r.opts.Origin != "" {
		return r.opts.Origin
	}
	return "the recording"
}

func mismatch(obj *elfcache.Object, buildID []byte) bool {
	return len(buildID) > 0 && len(obj.BuildID()) > 0 && !bytes.Equal(obj.BuildID(), buildID)
}

// buildIDCandidate is a file that may hold an object: its path in a
// build-id cache, and which cache (a FoundIn value).
type buildIDCandidate struct{ path, where string }

// buildIDPaths returns where perf's build-id cache, then the unpacked perf
// archives, keep an object.
func (r *Resolver) buildIDPaths(path string, buildID []byte) []buildIDCandidate {
	if len(buildID) == 0 {
		return nil
	}
	id := hex.EncodeToString(buildID)
	var out []buildIDCandidate
	for i, dir := range append([]string{r.opts.BuildIDDir}, r.opts.MoreBuildIDDirs...) {
		if dir == "" {
			continue
		}
		where := FoundBuildIDCache
		if i > 0 {
			where = FoundPerfArchive
		}
		out = append(out, buildIDCandidate{filepath.Join(dir, ".build-id", id[:2], id[2:]+"/elf"), where},
			buildIDCandidate{filepath.Join(dir, ".build-id", id[:2], id[2:]), where})
		if path == "[vdso]" {
			out = append(out, buildIDCandidate{filepath.Join(dir, "[vdso]", id, "vdso"), where})
		}
	}
	return out
}

// note records why a mapping's object could not be used.
func (r *Resolver) note(path, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.missing[path]; !ok && r.missing != nil {
		r.missing[path] = why
	}
}

// warnOnce gives a warning once per key.
func (r *Resolver) warnOnce(key, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.warned != nil && !r.warned[key] {
		r.warned[key] = true
		r.warnLocked(msg)
	}
}

func (r *Resolver) warnLocked(msg string) {
	if r.opts.Warn != nil {
		r.opts.Warn(msg)
	}
}

// perfMap returns the JIT symbol map of pid, read on first use.
func (r *Resolver) perfMap(pid uint32) *perfMap {
	if r.opts.PerfMapDir == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if m, ok := r.jit[pid]; ok || r.closed {
		return m
	}
	m, err := parsePerfMap(filepath.Join(r.opts.PerfMapDir, fmt.Sprintf("perf-%d.map", pid)))
	if err != nil {
		m = nil
	}
	r.jit[pid] = m
	return m
}

// pyTrampolines gives the anonymous executable mappings of ums the unwind
// rows of Python 3.12's perf trampolines when s's perf map names some and
// a mapped libpython holds their known template (pytrampoline.go).
func (r *Resolver) pyTrampolines(s *Space, ums []unwinder.Mapping) {
	if s.jit == nil {
		return
	}
	if !s.jit.hasPython() {
		return
	}
	var p *pyTrampolines
	for i := range s.maps {
		if o := s.maps[i].obj; o != nil && strings.Contains(filepath.Base(s.maps[i].path), "python") {
			if p = newPyTrampolines(s.jit, r.pyTemplate(o)); p != nil {
				break
			}
		}
	}
	if p == nil {
		r.warnOnce("pytrampoline:"+s.jit.path, fmt.Sprintf("%s names Python's perf trampolines (py::), but no mapped python object ustack could open holds the x86-64 trampoline code it knows (_Py_trampoline_func_start): stacks stop at the first Python frame, as perf's do; python 3.13 -X perf_jit writes a jitdump whose unwinding info goes on", s.jit.path))
		return
	}
	for i := range ums {
		if ums[i].Exec && ums[i].Object == nil && s.maps[ums[i].Tag].anonymous {
			ums[i].Object, ums[i].Bias = p, 0
		}
	}
}

// pyTemplate is pyTrampolineTemplate(o), found once per object.
func (r *Resolver) pyTemplate(o *elfcache.Object) []byte {
	r.mu.Lock()
	code, ok := r.pyCode[o]
	r.mu.Unlock()
	if !ok {
		code = pyTrampolineTemplate(o)
		r.mu.Lock()
		r.pyCode[o] = code
		r.mu.Unlock()
	}
	return code
}

// IsAnonymous reports whether a mapping name is anonymous memory, where JITs
// put their code.
func IsAnonymous(path string) bool {
	return path == "" || path == "//anon" || strings.HasPrefix(path, "[anon") || strings.HasPrefix(path, "/memfd:")
}

func isPseudoPath(path string) bool {
	return path == "" || strings.HasPrefix(path, "[") || strings.HasPrefix(path, "//")
}
