package procmaps

import "sort"

// The bits of Map.Prot: mmap(2)'s PROT_READ, PROT_WRITE and PROT_EXEC, as
// perf's MMAP2 records carry them and /proc/PID/maps spells them "rwx".
const (
	ProtRead  = 1
	ProtWrite = 2
	ProtExec  = 4
)

// Map is one mapping of a process.
type Map struct {
	// Start and End bound the mapped addresses [Start, End).
	Start, End uint64
	// PgOff is the file offset mapped at Start.
	PgOff uint64
	// Path is the mapped file, or a pseudo-name such as "[vdso]",
	// "[stack]", "//anon".
	Path string
	// BuildID is the file's build-id when the recording carried it.
	BuildID []byte
	// Maj, Min, Ino and InoGen identify the mapped file on the
	// recording machine (its device's major and minor numbers, its inode
	// and the inode's generation, which tells a reused inode number) when
	// the recording carried them (perf's MMAP2 records); Ino is 0 when
	// not.
	Maj, Min    uint32
	Ino, InoGen uint64
	// Prot holds ProtRead, ProtWrite and ProtExec when known.
	Prot uint32
	// Exec is true for executable mappings.
	Exec bool
	// Shared is true for a MAP_SHARED mapping ("s" in /proc/PID/maps).
	Shared bool
}

// Snapshot is the set of mappings of one process at one point in time,
// sorted by start address and non-overlapping. It must not be modified.
type Snapshot struct {
	// Version is unique to this snapshot among all snapshots of a Tracker.
	Version uint64
	Maps    []Map
}

// Find returns the mapping containing addr, or nil.
func (s *Snapshot) Find(addr uint64) *Map {
	i := sort.Search(len(s.Maps), func(i int) bool { return s.Maps[i].End > addr })
	if i < len(s.Maps) && s.Maps[i].Start <= addr {
		return &s.Maps[i]
	}
	return nil
}

// Tracker holds the current maps of every process seen. It is not safe for
// concurrent use; the snapshots it returns are.
type Tracker struct {
	procs   map[uint32]*Snapshot
	version uint64
	empty   Snapshot
	threads threadsAlive
}

// NewTracker returns a Tracker that knows no process.
func NewTracker() *Tracker {
	return &Tracker{procs: map[uint32]*Snapshot{}}
}

func (t *Tracker) next(maps []Map) *Snapshot {
	t.version++
	return &Snapshot{Version: t.version, Maps: maps}
}

// Maps returns the current snapshot of process pid (an empty one when the
// process is unknown).
func (t *Tracker) Maps(pid uint32) *Snapshot {
	if s := t.procs[pid]; s != nil {
		return s
	}
	return &t.empty
}

// Mmap records that process pid mapped m. Like the kernel, the new mapping
// replaces whatever the range held before.
func (t *Tracker) Mmap(pid uint32, m Map) {
	if m.End <= m.Start {
		return
	}
	old := t.Maps(pid).Maps
	out := make([]Map, 0, len(old)+2)
	for _, o := range old {
		if o.End <= m.Start || o.Start >= m.End {
			out = append(out, o)
			continue
		}
		if o.Start < m.Start { // the part below the new mapping survives
			lo := o
			lo.End = m.Start
			out = append(out, lo)
		}
		if o.End > m.End { // and the part above it
			hi := o
			if !isPseudo(hi.Path) {
				hi.PgOff += m.End - o.Start
			}
			hi.Start = m.End
			out = append(out, hi)
		}
	}
	out = append(out, m)
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	t.procs[pid] = t.next(out)
}

// Fork records that process child was forked from parent: it starts with
// a copy of the parent's maps. Thread creation (child == parent) changes
// nothing.
func (t *Tracker) Fork(child, parent uint32) {
	if child == parent {
		return
	}
	maps := append([]Map(nil), t.Maps(parent).Maps...)
	t.procs[child] = t.next(maps)
	t.threads.reset(child)
}

// Exec records that process pid replaced its image: its maps are dropped,
// and the new image's mmaps follow.
func (t *Tracker) Exec(pid uint32) {
	t.procs[pid] = t.next(nil)
	t.threads.reset(pid)
}

// Exit records that process pid ended.
func (t *Tracker) Exit(pid uint32) {
	delete(t.procs, pid)
	t.threads.reset(pid)
}

// Thread records that thread tid of process pid exists (a FORK of a
// thread, a COMM or a sample of it), so that ThreadExit keeps the
// process's maps while it runs.
func (t *Tracker) Thread(pid, tid uint32) { t.threads.note(pid, tid) }

// ThreadExit records thread tid's EXIT. The process's maps go when its
// leader (tid == pid) and every other thread Thread was told of have
// exited, in whatever order: in a group exit the threads exit in any order,
// and a leader may end with pthread_exit while the process runs on. It
// reports whether the process went.
func (t *Tracker) ThreadExit(pid, tid uint32) bool {
	if !t.threads.exit(pid, tid) {
		return false
	}
	delete(t.procs, pid)
	return true
}

// Processes returns how many processes the tracker knows.
func (t *Tracker) Processes() int { return len(t.procs) }

func isPseudo(path string) bool {
	return len(path) > 0 && (path[0] == '[' || path[0] == '/' && len(path) > 1 && path[1] == '/')
}
