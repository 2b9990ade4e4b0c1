package main

import (
	"fmt"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/procmaps"
	"github.com/ustack/ustack/report"
	"github.com/ustack/ustack/resolve"
	"github.com/ustack/ustack/unwinder"
)

// maxFrames bounds the frames of one stack (perf's default max-stack).
const maxFrames = 127

// mapsReader returns the mappings of process pid: /proc/PID/maps for a
// live process (procmaps.Read), a saved copy in the benchmark.
type mapsReader func(pid uint32) ([]procmaps.Map, error)

// consumer turns ring buffer records into symbolized stacks with ustack's
// library: the resolver builds each process's address space from its
// maps, the unwinder walks the record's registers and stack copy, the
// symbolizer names the frames, and a report.Writer prints them. Once its
// processes' maps are read and its buffers have grown, handling a record
// allocates nothing.
type consumer struct {
	events    []string // event names by cookie
	stackSize int
	readMaps  mapsReader
	res       *resolve.Resolver
	out       report.Writer
	warn      func(string)

	unw    *unwinder.Unwinder
	cache  unwinder.Cache
	sym    *resolve.Symbolizer
	frames []unwinder.Frame
	stack  unwinder.Stack
	regs   arch.Regs
	ev     event
	sample report.Sample
	procs  map[uint32]*process
	comms  map[uint32]*comm

	sum       report.Summary
	malformed int
}

// process is what the consumer knows of one process: its address space
// from the last maps read, and the addresses that were outside every
// mapping even after a fresh read (so that a stack that really ends in
// unmapped memory does not reread the maps at every event).
type process struct {
	space   *resolve.Space
	outside map[uint64]bool
	warned  bool
	maps    []resolve.Mapping
}

// comm caches a thread's name as a string, made again only when it
// changes (exec, prctl).
type comm struct {
	raw  [16]byte
	n    int
	name string
}

// newConsumer returns a consumer printing to out. events are the names
// of the -e events by cookie.
func newConsumer(events []string, stackSize int, readMaps mapsReader, res *resolve.Resolver, out report.Writer, warn func(string)) *consumer {
	return &consumer{
		events: events, stackSize: stackSize, readMaps: readMaps, res: res, out: out, warn: warn,
		unw:    unwinder.New(arch.AMD64, unwinder.Options{}),
		sym:    resolve.NewSymbolizer(),
		frames: make([]unwinder.Frame, maxFrames),
		procs:  map[uint32]*process{},
		comms:  map[uint32]*comm{},
		sum:    report.Summary{Stops: map[string]int{}, Missing: map[string]string{}},
	}
}

// handle unwinds, symbolizes and prints one ring buffer record.
func (c *consumer) handle(rec []byte) error {
	e := &c.ev
	if err := decodeEvent(rec, e); err != nil {
		c.malformed++
		if c.malformed == 1 {
			c.warn(fmt.Sprintf("ring buffer record %d: %v (dropped; further malformed records are only counted)", c.sum.Samples+c.malformed, err))
		}
		return nil
	}
	e.loadRegs(&c.regs)
	p := c.process(e.Pid)
	ip := e.Regs[ptRegsIP]
	if p.space.AddressSpace().Find(ip) < 0 && !p.outside[ip] {
		c.refresh(e.Pid, p, ip)
	}
	res := c.unwind(p)
	// A return address outside every mapping: the process may have
	// mapped more since its maps were read.
	if nm, ok := res.Err.(*unwinder.NoMappingError); ok && !nm.Mapped && !p.outside[nm.PC] {
		if c.refresh(e.Pid, p, nm.PC) {
			res = c.unwind(p)
		}
	}

	s := &c.sample
	frames := s.Frames[:0]
	c.sym.Reset()
	for i := 0; i < res.Frames; i++ {
		frames = c.sym.Append(frames, p.space, &c.frames[i], resolve.HowOf(c.frames[i].Method))
	}
	name := "unknown"
	if int(e.Cookie) < len(c.events) {
		name = c.events[e.Cookie]
	}
	*s = report.Sample{Index: c.sum.Samples, Pid: e.Pid, Tid: e.Tid, CPU: e.CPU, Time: e.Time, Period: 1,
		Comm: c.commOf(e.Tid, e.Comm), Event: name, IP: ip, Frames: frames, Stop: res.Stop.String(),
		StackSize: len(c.stack.Data)}
	if res.Err != nil {
		s.StopErr = res.Err.Error()
	}
	if res.Stop == unwinder.StopTruncated && len(c.stack.Data) == c.stackSize {
		// Cut at the end of a full copy: a larger one would go on.
		c.sum.SnapshotCut++
	}
	c.stack.Data = nil
	c.sum.Samples++
	c.sum.Stops[s.Stop]++
	return c.out.Write(s)
}

// unwind walks the current record's stack in p's address space.
func (c *consumer) unwind(p *process) unwinder.Result {
	// The Stack lives in the consumer: a local one would escape into
	// Unwind and cost an allocation per event.
	c.stack = unwinder.Stack{Addr: c.ev.Regs[ptRegsSP], Data: c.ev.stackFromSP(c.stackSize)}
	return c.unw.Unwind(&c.cache, p.space.AddressSpace(), &c.regs, &c.stack, c.frames)
}

// process returns pid's process, reading its maps the first time.
func (c *consumer) process(pid uint32) *process {
	p := c.procs[pid]
	if p == nil {
		p = &process{outside: map[uint64]bool{}}
		c.procs[pid] = p
		c.refresh(pid, p, 0)
	}
	return p
}

// refresh rereads pid's maps because addr lay outside them, and reports
// whether the new maps hold addr. A process that has exited keeps the maps
// read last, with one warning.
func (c *consumer) refresh(pid uint32, p *process, addr uint64) bool {
	pm, err := c.readMaps(pid)
	if err != nil {
		if !p.warned {
			p.warned = true
			c.warn(fmt.Sprintf("process %d: cannot read its maps (%v); its stacks end at the first address outside the maps read before", pid, err))
		}
		if p.space == nil {
			p.space = c.res.NewSpace(pid, nil)
		}
		p.outside[addr] = true
		return false
	}
	p.maps = p.maps[:0]
	p.maps = resolve.FromProcmaps(p.maps[:0], pm)
	p.space = c.res.NewSpace(pid, p.maps)
	if addr != 0 && p.space.AddressSpace().Find(addr) < 0 {
		p.outside[addr] = true
		return false
	}
	return true
}

// commOf returns the thread's name as a string, made once per name.
func (c *consumer) commOf(tid uint32, raw []byte) string {
	k := c.comms[tid]
	if k == nil {
		k = &comm{}
		c.comms[tid] = k
	}
	if k.name == "" || k.n != len(raw) || string(k.raw[:k.n]) != string(raw) {
		k.n = copy(k.raw[:], raw)
		k.name = string(raw)
	}
	return k.name
}

// summary returns the report's summary: events, lost events, stop reasons
// and the objects that could not be used.
func (c *consumer) summary(lost uint64) *report.Summary {
	c.sum.Lost = lost
	// The stack copy's size, for Summary.StackSizeFix.
	c.sum.Attrs = []*perfdata.Attr{{SampleStackUser: uint32(c.stackSize)}}
	for path, why := range c.res.Missing() {
		c.sum.Missing[path] = why
	}
	return &c.sum
}
