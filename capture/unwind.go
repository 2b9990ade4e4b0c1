package capture

import (
	"encoding/binary"
	"fmt"

	"github.com/ustack/ustack/arch"
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
	out    perfdata.Sample
}

type spaceEntry struct {
	version uint64
	as      *unwinder.AddressSpace
}

func newLiveUnwinder(a arch.Arch) *liveUnwinder {
	lu := &liveUnwinder{
		arch:   a,
		u:      unwinder.New(a, unwinder.Options{}),
		tr:     procmaps.NewTracker(),
		spaces: map[uint32]spaceEntry{},
		frames: make([]unwinder.Frame, maxUnwindFrames),
	}
	// The live files, or the same path in the process's root; the
	// running kernel's vdso.
	ro := resolve.Options{ProcRoot: true}
	if data, err := ReadVDSO(); err == nil {
		ro.VDSO = data
	}
	lu.res = resolve.New(ro)
	return lu
}

func (lu *liveUnwinder) close() { lu.res.Close() }

func (lu *liveUnwinder) mmap(pid uint32, start, ln, pgoff uint64, prot uint32, name string) {
	lu.tr.Mmap(pid, procmaps.Map{Start: start, End: start + ln, PgOff: pgoff, Path: name, Prot: prot, Exec: prot&4 != 0})
}

func (lu *liveUnwinder) exec(pid uint32)       { lu.tr.Exec(pid); delete(lu.spaces, pid) }
func (lu *liveUnwinder) fork(pid, ppid uint32) { lu.tr.Fork(pid, ppid) }
func (lu *liveUnwinder) exit(pid uint32)       { lu.tr.Exit(pid); delete(lu.spaces, pid) }

// space returns the address space of pid, rebuilt when its maps changed.
func (lu *liveUnwinder) space(pid uint32) *unwinder.AddressSpace {
	snap := lu.tr.Maps(pid)
	if e, ok := lu.spaces[pid]; ok && e.version == snap.Version {
		return e.as
	}
	lu.maps = resolve.FromProcmaps(lu.maps[:0], snap.Maps)
	as := lu.res.NewSpace(pid, lu.maps).AddressSpace()
	lu.spaces[pid] = spaceEntry{snap.Version, as}
	return as
}

// sampleView is the decoded part of a kernel sample --unwind needs.
type sampleView struct {
	id, ip    uint64
	pid, tid  uint32
	time      uint64
	cpu       uint32
	period    uint64
	callchain []uint64
	raw       []byte
	regsABI   uint64
	regs      []uint64
	stack     []byte
	stackDyn  uint64
}

// decodeSample decodes a sample of the recorder's sample_type.
func decodeSample(body []byte, st uint64, nregs int, v *sampleView) error {
	le := binary.LittleEndian
	p := 0
	need := func(n int) bool { return p+n <= len(body) }
	u64 := func() uint64 { x := le.Uint64(body[p:]); p += 8; return x }
	if !need(48) {
		return fmt.Errorf("short sample")
	}
	v.id = u64()
	v.ip = u64()
	v.pid, v.tid = le.Uint32(body[p:]), le.Uint32(body[p+4:])
	p += 8
	v.time = u64()
	v.cpu = le.Uint32(body[p:])
	p += 8
	v.period = u64()
	if !need(8) {
		return fmt.Errorf("short sample")
	}
	n := int(u64())
	if n < 0 || !need(8*n) {
		return fmt.Errorf("bad callchain")
	}
	v.callchain = v.callchain[:0]
	for i := 0; i < n; i++ {
		v.callchain = append(v.callchain, u64())
	}
	v.raw = nil
	if st&perfdata.SampleRaw != 0 {
		if !need(4) {
			return fmt.Errorf("short raw")
		}
		sz := int(le.Uint32(body[p:]))
		p += 4
		if !need(sz) {
			return fmt.Errorf("bad raw size")
		}
		v.raw = body[p : p+sz]
		p += sz
	}
	if !need(8) {
		return fmt.Errorf("short regs")
	}
	v.regsABI = u64()
	v.regs = v.regs[:0]
	if v.regsABI != 0 {
		if !need(8 * nregs) {
			return fmt.Errorf("short regs")
		}
		for i := 0; i < nregs; i++ {
			v.regs = append(v.regs, u64())
		}
	}
	if !need(8) {
		return fmt.Errorf("short stack")
	}
	sz := int(u64())
	v.stack, v.stackDyn = nil, 0
	if sz != 0 {
		if !need(sz + 8) {
			return fmt.Errorf("short stack")
		}
		v.stack = body[p : p+sz]
		p += sz
		v.stackDyn = u64()
		if v.stackDyn < uint64(len(v.stack)) {
			v.stack = v.stack[:v.stackDyn]
		}
	}
	return nil
}

// writeUnwound unwinds a kernel sample and writes it with its user frames
// as a callchain, without registers and stack bytes.
func (r *Recorder) writeUnwound(misc uint16, body []byte) error {
	lu := r.uw
	var v sampleView
	v.callchain = lu.chain[:0]
	// Find the sample's attr by its id (the first u64: IDENTIFIER).
	ai := 0
	if len(body) >= 8 {
		id := binary.LittleEndian.Uint64(body)
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
	nregs := 0
	for m := ka.SampleRegsUser; m != 0; m &= m - 1 {
		nregs++
	}
	if err := decodeSample(body, ka.SampleType, nregs, &v); err != nil {
		// Keep the books right: a malformed sample is dropped and counted.
		r.st.UnwindFailed++
		return nil
	}
	chain := v.callchain
	if v.regsABI != 0 {
		lu.regs.Reset()
		lu.arch.LoadPerf(&lu.regs, ka.SampleRegsUser, v.regs, true)
		sp, _ := lu.regs.Get(lu.arch.SP())
		stack := unwinder.Stack{Addr: sp, Data: v.stack}
		res := lu.u.Unwind(&lu.cache, lu.space(v.pid), &lu.regs, &stack, lu.frames)
		if res.Frames <= 1 {
			r.st.UnwindFailed++
		}
		if res.Frames > 0 {
			chain = append(chain, perfdata.ContextUser)
			for i := 0; i < res.Frames; i++ {
				chain = append(chain, lu.frames[i].PC)
			}
		}
	}
	lu.chain = chain[:0]
	s := &lu.out
	*s = perfdata.Sample{}
	s.Misc = misc
	s.Attr = r.w.Attrs()[ai]
	s.ID, s.IP, s.Pid, s.Tid, s.Time, s.CPU, s.Period = v.id, v.ip, v.pid, v.tid, v.time, v.cpu, v.period
	s.Callchain = chain
	s.Raw = v.raw
	return r.w.WriteSample(s)
}
