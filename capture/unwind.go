package capture

import (
	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/procmaps"
	"github.com/ustack/ustack/resolve"
	"github.com/ustack/ustack/unwinder"
)

// maxUnwindFrames bounds the frames --unwind stores per sample (perf's
// default max-stack).
const maxUnwindFrames = 127

// liveUnwinder unwinds samples while recording (--unwind), against the
// live object files, following the processes' maps from the records.
type liveUnwinder struct {
	arch   arch.Arch
	u      *unwinder.Unwinder
	cache  unwinder.Cache
	res    *resolve.Resolver
	tr     *procmaps.Tracker
	spaces map[uint32]spaceEntry
	maps   []resolve.Mapping
	frames []unwinder.Frame
	regs   arch.Regs
	chain  []uint64
	in     perfdata.Sample // the kernel's sample, decoded
	out    perfdata.Sample
	// comms are the threads' names by tid, from COMM records, for
	// Options.OnUnwound; un is the sample handed to it.
	comms map[uint32]string
	un    UnwoundSample
}

type spaceEntry struct {
	version uint64
	sp      *resolve.Space
}

// UnwoundSample is a sample unwound at capture time, for Options.OnUnwound.
type UnwoundSample struct {
	// Event is the sample's event name.
	Event        string
	Pid, Tid     uint32
	Time, Period uint64
	// Comm is the thread's name, as COMM records last gave it (for a
	// thread older than the recording, as /proc gave it).
	Comm string
	// Kernel is the kernel's call chain, innermost first (context
	// markers included), and User the user frames' addresses as the
	// recording stores them: the sampled PC, then return addresses.
	Kernel, User []uint64
	// Space is the process's address space the user frames were unwound
	// in (resolve.Symbolizer names them in it).
	Space *resolve.Space
}

func newLiveUnwinder(a arch.Arch, sc *elfcache.SectionCache, budget int64) *liveUnwinder {
	lu := &liveUnwinder{
		arch:   a,
		u:      unwinder.New(a, unwinder.Options{}),
		tr:     procmaps.NewTracker(),
		spaces: map[uint32]spaceEntry{},
		comms:  map[uint32]string{},
		frames: make([]unwinder.Frame, maxUnwindFrames),
	}
	// The live files, or the same path in the process's root; the
	// running kernel's vdso.
	ro := resolve.Options{ProcRoot: true, SectionCache: sc, CacheBudget: budget}
	if data, err := ReadVDSO(); err == nil {
		ro.VDSO = data
	}
	lu.res = resolve.New(ro)
	return lu
}

func (lu *liveUnwinder) close() { lu.res.Close() }

func (lu *liveUnwinder) mmap(pid uint32, start, ln, pgoff uint64, prot uint32, name string) {
	lu.tr.Mmap(pid, procmaps.Map{Start: start, End: start + ln, PgOff: pgoff, Path: name, Prot: prot, Exec: prot&procmaps.ProtExec != 0})
}

func (lu *liveUnwinder) exec(pid uint32)       { lu.tr.Exec(pid); lu.drop(pid) }
func (lu *liveUnwinder) fork(pid, ppid uint32) { lu.tr.Fork(pid, ppid) }

// exit records thread tid's EXIT and forgets the process once its leader
// and every other thread known of it have exited (procmaps'
// Tracker.ThreadExit): its Space gives its objects back (closed when over
// the budget and no other process maps them).
func (lu *liveUnwinder) exit(pid, tid uint32) {
	if !lu.tr.ThreadExit(pid, tid) {
		return
	}
	lu.drop(pid)
	lu.res.ForgetPID(pid)
}

// thread records that thread tid of process pid exists.
func (lu *liveUnwinder) thread(pid, tid uint32) { lu.tr.Thread(pid, tid) }

// drop closes pid's Space. Samples are unwound and handed on
// (OnUnwound) in the one goroutine that calls it, so no unwind uses it.
func (lu *liveUnwinder) drop(pid uint32) {
	if e, ok := lu.spaces[pid]; ok {
		e.sp.Close()
		delete(lu.spaces, pid)
	}
}

// space returns the address space of pid, rebuilt when its maps changed.
func (lu *liveUnwinder) space(pid uint32) *resolve.Space {
	snap := lu.tr.Maps(pid)
	if e, ok := lu.spaces[pid]; ok && e.version == snap.Version {
		return e.sp
	}
	lu.maps = resolve.FromProcmaps(lu.maps[:0], snap.Maps)
	resolve.LiveUnlinked(int(pid), lu.maps)
	sp := lu.res.NewSpace(pid, lu.maps)
	lu.drop(pid) // after NewSpace, which takes its own references first
	lu.spaces[pid] = spaceEntry{snap.Version, sp}
	return sp
}

// writeUnwound unwinds a kernel sample and writes it with its user frames
// as a callchain, without registers and stack bytes.
func (r *Recorder) writeUnwound(misc uint16, body []byte) error {
	lu := r.uw
	// Find the sample's attr by its id.
	ai := 0
	if id, ok := r.attrs[0].SampleID(body); ok {
	find:
		for i, a := range r.attrs {
			for _, x := range a.IDs {
				if x == id {
					ai = i
					break find
				}
			}
		}
	}
	ka := r.attrs[ai]
	v := &lu.in
	if err := perfdata.DecodeSample(perfdata.RecordHeader{Type: perfdata.RecordSample, Misc: misc}, ka, body, v); err != nil {
		// Keep the books right: a malformed sample is dropped and counted.
		r.st.UnwindFailed++
		return nil
	}
	lu.thread(v.Pid, v.Tid)
	chain := append(lu.chain[:0], v.Callchain...)
	var space *resolve.Space
	if v.RegsABI != perfdata.RegsABINone {
		// The user part is this unwind's, never the kernel's chain too
		// (an event opened without exclude_callchain_user carries one).
		for i, ip := range chain {
			if ip == perfdata.ContextUser {
				chain = chain[:i]
				break
			}
		}
		lu.regs.Reset()
		lu.arch.LoadPerf(&lu.regs, v.RegsMask, v.Regs, true)
		sp, _ := lu.regs.Get(lu.arch.SP())
		stack := unwinder.Stack{Addr: sp, Data: v.Stack()}
		space = lu.space(v.Pid)
		res := lu.u.Unwind(&lu.cache, space.AddressSpace(), &lu.regs, &stack, lu.frames)
		if res.Frames <= 1 {
			r.st.UnwindFailed++
		}
		if res.Stop == unwinder.StopTruncated {
			r.st.StackFull++
		}
		if res.Frames > 0 {
			chain = append(chain, perfdata.ContextUser)
			for i := 0; i < res.Frames; i++ {
				chain = append(chain, lu.frames[i].PC)
			}
		}
	}
	if r.opts.OnUnwound != nil {
		r.handOn(ka.Name, v, chain, space)
	}
	lu.chain = chain[:0]
	s := &lu.out
	*s = perfdata.Sample{}
	s.Misc = misc
	s.Attr = r.w.Attrs()[ai]
	s.ID, s.IP, s.Pid, s.Tid, s.Time, s.CPU, s.Period = v.ID, v.IP, v.Pid, v.Tid, v.Time, v.CPU, v.Period
	s.Callchain = chain
	s.Raw = v.Raw
	return r.w.WriteSample(s)
}

// handOn gives Options.OnUnwound an unwound sample: chain is what the
// recording stores, the kernel's part, then ContextUser and the user
// frames.
func (r *Recorder) handOn(event string, v *perfdata.Sample, chain []uint64, space *resolve.Space) {
	lu := r.uw
	u := &lu.un
	comm, ok := lu.comms[v.Tid]
	if !ok && v.Pid != ^uint32(0) {
		// A thread older than the recording: its COMM was synthesized
		// from /proc, straight into the file.
		comm = readComm(int(v.Pid), int(v.Tid))
		lu.comms[v.Tid] = comm
	}
	*u = UnwoundSample{Event: event, Pid: v.Pid, Tid: v.Tid, Time: v.Time, Period: v.Period, Comm: comm, Space: space}
	u.Kernel = chain
	for i, ip := range chain {
		if ip == perfdata.ContextUser {
			u.Kernel, u.User = chain[:i], chain[i+1:]
			break
		}
	}
	if space == nil {
		u.User = nil
	}
	r.opts.OnUnwound(u)
}
