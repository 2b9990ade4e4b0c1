package perfdata

// Record is one perf record. Its concrete type is one of the pointer types
// of this file (*Sample, *Mmap, *Comm, ...); records the package does not
// decode are *Raw.
//
// Records returned by Reader.Next are owned by the Reader and overwritten by
// the next call; byte and integer slices in them may alias the Reader's
// buffers. Call Clone to keep one.
type Record interface {
	// Header returns the fields every record has.
	Header() *RecordHeader
	// Clone returns a deep copy that does not alias the Reader's buffers.
	Clone() Record
}

// SampleIDFields is a record's sample id: the fields a SAMPLE carries, or the
// sample_id_all trailer of other records. Has says which fields were present
// (Sample* bits of sample_type).
type SampleIDFields struct {
	Pid, Tid uint32
	Time     uint64
	ID       uint64
	StreamID uint64
	CPU      uint32
	Has      uint64
}

// RecordHeader holds what every record has: its perf_event_header, where it
// was, the attr its sample id maps to and the sample id fields.
type RecordHeader struct {
	Type RecordType
	Misc uint16
	// Size is header.size: the record's length in bytes including the
	// 8-byte header (for AUXTRACE, excluding the aux data that follows).
	Size uint16
	// Offset is the record's byte offset in the file (pipe mode: in the stream).
	Offset int64
	// Attr is the event the record's sample id maps to, nil when unknown.
	Attr *Attr
	SampleIDFields
}

// Header returns h itself; it makes every record type satisfy Record.
func (h *RecordHeader) Header() *RecordHeader { return h }

// CPUMode returns the misc cpumode bits (MiscKernel, MiscUser, ...).
func (h *RecordHeader) CPUMode() uint16 { return h.Misc & MiscCPUModeMask }

// HasTime reports whether the record carries a timestamp.
func (h *RecordHeader) HasTime() bool { return h.Has&SampleTime != 0 }

// BranchEntry is one entry of a sample's branch stack (perf_branch_entry).
type BranchEntry struct {
	From, To uint64
	Flags    uint64 // mispred, predicted, in_tx, abort, cycles, type, ...
}

// ReadValue is one counter of a PERF_SAMPLE_READ group (or the single counter).
type ReadValue struct {
	Value, ID, Lost uint64
}

// ReadValues is the PERF_SAMPLE_READ (and READ record) payload.
type ReadValues struct {
	TimeEnabled, TimeRunning uint64
	Values                   []ReadValue
}

func (r *ReadValues) clone() ReadValues {
	c := *r
	c.Values = append([]ReadValue(nil), r.Values...)
	return c
}

// Sample is a PERF_RECORD_SAMPLE. Fields absent from the attr's sample_type
// are zero; Has (in the header) lists the id fields present and
// Attr.SampleType all of them.
//
// The slices (Callchain, Raw, Branches, Regs, StackData, IntrRegs, AuxData,
// Read.Values) are valid until the next Reader.Next; use Clone to keep them.
type Sample struct {
	RecordHeader
	// EventName is Attr.Name, or "" when the attr is unknown.
	EventName string
	IP        uint64
	Addr      uint64
	// Period is PERF_SAMPLE_PERIOD, or attr.sample_period when the
	// sample_type lacks it (as perf reports it).
	Period uint64
	Read   ReadValues
	// Callchain holds the ips with their context markers (Context*).
	Callchain []uint64
	Raw       []byte
	// BranchHWIndex is the hw_idx of the branch stack (when the attr's
	// branch_sample_type has BranchHWIndex).
	BranchHWIndex uint64
	Branches      []BranchEntry
	// RegsABI is the user register ABI (RegsABINone when the sample hit
	// a kernel thread); Regs holds one value per set bit of RegsMask.
	RegsABI  uint64
	RegsMask uint64
	Regs     []uint64
	// StackData is the user stack snapshot from the sampled SP upward;
	// only its first StackDynSize bytes were captured.
	StackData    []byte
	StackDynSize uint64
	// Weight is PERF_SAMPLE_WEIGHT, or the packed PERF_SAMPLE_WEIGHT_STRUCT.
	Weight       uint64
	DataSrc      uint64
	Transaction  uint64
	IntrRegsABI  uint64
	IntrRegsMask uint64
	IntrRegs     []uint64
	PhysAddr     uint64
	Cgroup       uint64
	DataPageSize uint64
	CodePageSize uint64
	AuxData      []byte

	// chunk is the chunk of the file that StackData, Raw and AuxData lie
	// in, when a Sorter queued the sample from a file read in chunks
	// (chunk.go); Release lets it go.
	chunk *chunk
}

// Stack returns the captured part of the user stack: StackData cut to
// StackDynSize.
func (s *Sample) Stack() []byte {
	if s.StackDynSize < uint64(len(s.StackData)) {
		return s.StackData[:s.StackDynSize]
	}
	return s.StackData
}

// Clone returns a deep copy of the sample.
func (s *Sample) Clone() Record { return s.Detach() }

// Detach returns a deep copy of the sample that stays valid after the next
// Reader.Next.
func (s *Sample) Detach() *Sample {
	c := s.detachInPlace(nil)
	c.chunk = nil
	c.Raw = cloneBytes(s.Raw)
	c.StackData = cloneBytes(s.StackData)
	c.AuxData = cloneBytes(s.AuxData)
	return c
}

// detachInPlace is Detach for a sample whose body stays in memory (a
// mapped file): Raw, StackData and AuxData, which alias the body, are
// shared, not copied. The copy and its word slices come from a (a new
// allocation each where a is nil).
func (s *Sample) detachInPlace(a *sampleArena) *Sample {
	c := a.sample()
	*c = *s
	c.Read = s.Read.clone()
	c.Callchain = a.u64s(s.Callchain)
	c.Branches = append([]BranchEntry(nil), s.Branches...)
	c.Regs = a.u64s(s.Regs)
	c.IntrRegs = a.u64s(s.IntrRegs)
	return c
}

// sampleArena hands out the Samples a Sorter queues and their word slices
// from blocks, so that queuing a sample costs no allocation of its own (a
// block of 64 samples, 8K words, is allocated at once). A block stays
// alive while any sample or slice of it is referenced; each slice is
// capped at its length, so appending to one never writes into another.
type sampleArena struct {
	samples []Sample
	words   []uint64
}

func (a *sampleArena) sample() *Sample {
	if a == nil {
		return new(Sample)
	}
	if len(a.samples) == 0 {
		a.samples = make([]Sample, 64)
	}
	s := &a.samples[0]
	a.samples = a.samples[1:]
	return s
}

// u64s copies v as cloneU64 does (nil for an empty v).
func (a *sampleArena) u64s(v []uint64) []uint64 {
	n := len(v)
	if n == 0 {
		return nil
	}
	if a == nil {
		return cloneU64(v)
	}
	if n > cap(a.words)-len(a.words) {
		if n > 1<<11 {
			return cloneU64(v)
		}
		a.words = make([]uint64, 0, 1<<13)
	}
	i := len(a.words)
	a.words = append(a.words, v...)
	return a.words[i : i+n : i+n]
}

// Mmap is a PERF_RECORD_MMAP or PERF_RECORD_MMAP2 (Type says which). MMAP
// records have no Maj/Min/Ino/Prot/Flags; MMAP2 records carry either the
// device and inode or, when Misc has MiscMmapBuildID, a BuildID.
type Mmap struct {
	RecordHeader
	Pid, Tid    uint32
	Start, Len  uint64
	PgOff       uint64
	Maj, Min    uint32
	Ino, InoGen uint64
	BuildID     []byte
	Prot, Flags uint32
	Filename    string
}

// Data reports whether the mapping is a data (non-executable) mapping
// (misc has MiscMmapData).
func (m *Mmap) Data() bool { return m.Misc&MiscMmapData != 0 }

// Clone returns a deep copy.
func (m *Mmap) Clone() Record { c := *m; c.BuildID = cloneBytes(m.BuildID); return &c }

// Comm is a PERF_RECORD_COMM: a thread's name changed; Exec says it was by exec.
type Comm struct {
	RecordHeader
	Pid, Tid uint32
	Comm     string
	Exec     bool
}

// Clone returns a copy.
func (c *Comm) Clone() Record { x := *c; return &x }

// Fork is a PERF_RECORD_FORK (a thread was created).
type Fork struct {
	RecordHeader
	Pid, Ppid, Tid, Ptid uint32
	Time                 uint64
}

// Clone returns a copy.
func (f *Fork) Clone() Record { x := *f; return &x }

// Exit is a PERF_RECORD_EXIT (a thread exited).
type Exit struct {
	RecordHeader
	Pid, Ppid, Tid, Ptid uint32
	Time                 uint64
}

// Clone returns a copy.
func (e *Exit) Clone() Record { x := *e; return &x }

// Lost is a PERF_RECORD_LOST: the kernel dropped Lost records of event ID.
type Lost struct {
	RecordHeader
	LostID uint64
	Lost   uint64
}

// Clone returns a copy.
func (l *Lost) Clone() Record { x := *l; return &x }

// LostSamples is a PERF_RECORD_LOST_SAMPLES.
type LostSamples struct {
	RecordHeader
	Lost uint64
}

// Clone returns a copy.
func (l *LostSamples) Clone() Record { x := *l; return &x }

// Throttle is a PERF_RECORD_THROTTLE or PERF_RECORD_UNTHROTTLE (Type says which).
type Throttle struct {
	RecordHeader
	ThrottleTime     uint64
	ThrottleID       uint64
	ThrottleStreamID uint64
}

// Clone returns a copy.
func (t *Throttle) Clone() Record { x := *t; return &x }

// Read is a PERF_RECORD_READ.
type Read struct {
	RecordHeader
	Pid, Tid uint32
	Values   ReadValues
}

// Clone returns a deep copy.
func (r *Read) Clone() Record { x := *r; x.Values = r.Values.clone(); return &x }

// Aux is a PERF_RECORD_AUX (new data in the AUX area).
type Aux struct {
	RecordHeader
	AuxOffset, AuxSize, Flags uint64
}

// Clone returns a copy.
func (a *Aux) Clone() Record { x := *a; return &x }

// Switch is a PERF_RECORD_SWITCH or SWITCH_CPU_WIDE; Out says switch-out.
type Switch struct {
	RecordHeader
	// NextPrevPid/Tid are set for SWITCH_CPU_WIDE.
	NextPrevPid, NextPrevTid uint32
	Out                      bool
}

// Clone returns a copy.
func (s *Switch) Clone() Record { x := *s; return &x }

// Ksymbol is a PERF_RECORD_KSYMBOL (a kernel symbol was (un)registered).
type Ksymbol struct {
	RecordHeader
	Addr     uint64
	Len      uint32
	KsymType uint16
	Flags    uint16
	Name     string
}

// Clone returns a copy.
func (k *Ksymbol) Clone() Record { x := *k; return &x }

// BPFEvent is a PERF_RECORD_BPF_EVENT.
type BPFEvent struct {
	RecordHeader
	EventType uint16
	Flags     uint16
	ProgID    uint32
	Tag       [8]byte
}

// Clone returns a copy.
func (b *BPFEvent) Clone() Record { x := *b; return &x }

// Cgroup is a PERF_RECORD_CGROUP.
type Cgroup struct {
	RecordHeader
	CgroupID uint64
	Path     string
}

// Clone returns a copy.
func (c *Cgroup) Clone() Record { x := *c; return &x }

// TextPoke is a PERF_RECORD_TEXT_POKE: kernel text at Addr changed from Old to New.
type TextPoke struct {
	RecordHeader
	Addr     uint64
	Old, New []byte
}

// Clone returns a deep copy.
func (t *TextPoke) Clone() Record {
	x := *t
	x.Old, x.New = cloneBytes(t.Old), cloneBytes(t.New)
	return &x
}

// IDIndexEntry maps a sample id to an attr index, CPU and thread.
type IDIndexEntry struct {
	ID, Idx, CPU, Tid uint64
}

// IDIndex is a PERF_RECORD_ID_INDEX.
type IDIndex struct {
	RecordHeader
	Entries []IDIndexEntry
}

// Clone returns a deep copy.
func (r *IDIndex) Clone() Record {
	x := *r
	x.Entries = append([]IDIndexEntry(nil), r.Entries...)
	return &x
}

// ThreadMapEntry is one thread of a THREAD_MAP.
type ThreadMapEntry struct {
	Pid  uint64
	Comm string
}

// ThreadMap is a PERF_RECORD_THREAD_MAP.
type ThreadMap struct {
	RecordHeader
	Threads []ThreadMapEntry
}

// Clone returns a deep copy.
func (r *ThreadMap) Clone() Record {
	x := *r
	x.Threads = append([]ThreadMapEntry(nil), r.Threads...)
	return &x
}

// CPUMap is a PERF_RECORD_CPU_MAP, decoded to the list of CPUs it names
// (-1 stands for "any CPU").
type CPUMap struct {
	RecordHeader
	CPUs []int
}

// Clone returns a deep copy.
func (r *CPUMap) Clone() Record { x := *r; x.CPUs = append([]int(nil), r.CPUs...); return &x }

// Stat is a PERF_RECORD_STAT (a counter value from perf stat record).
type Stat struct {
	RecordHeader
	StatID        uint64
	StatCPU       uint32
	Thread        uint32
	Val, Ena, Run uint64
}

// Clone returns a copy.
func (s *Stat) Clone() Record { x := *s; return &x }

// Auxtrace is a PERF_RECORD_AUXTRACE. The aux data that follows the record
// in the file is skipped, not read; DataOffset says where it is.
type Auxtrace struct {
	RecordHeader
	AuxSize, AuxOffset, Reference uint64
	Idx, Tid, AuxCPU              uint32
	// DataOffset is the file (stream) offset of the AuxSize bytes of data.
	DataOffset int64
}

// Clone returns a copy.
func (a *Auxtrace) Clone() Record { x := *a; return &x }

// TimeConv is a PERF_RECORD_TIME_CONV: how to convert TSC to perf time.
type TimeConv struct {
	RecordHeader
	TimeShift, TimeMult, TimeZero, TimeCycles, TimeMask uint64
	CapUserTimeZero, CapUserTimeShort                   bool
}

// Clone returns a copy.
func (t *TimeConv) Clone() Record { x := *t; return &x }

// Raw is any other record, including the pipe-mode header records (which the
// Reader also applies to its Session). Data is the body after the 8-byte
// header, trailer included.
type Raw struct {
	RecordHeader
	Data []byte
}

// Clone returns a deep copy.
func (r *Raw) Clone() Record { x := *r; x.Data = cloneBytes(r.Data); return &x }

func cloneU64(s []uint64) []uint64 {
	if s == nil {
		return nil
	}
	return append([]uint64(nil), s...)
}

func cloneBytes(s []byte) []byte {
	if s == nil {
		return nil
	}
	return append([]byte(nil), s...)
}

// SplitCallchain splits a callchain into its kernel and user parts using the
// context markers: entries after ContextKernel (or before any marker, when
// the chain starts without one) are kernel, entries after ContextUser are
// user; entries of other contexts (hypervisor, guest) are dropped, and so
// are the markers. The results alias chain's backing array only through
// re-slicing when possible; they are fresh slices otherwise.
func SplitCallchain(chain []uint64) (kernel, user []uint64) {
	ctx := ContextKernel
	if len(chain) > 0 && chain[0] < ContextMax {
		// No leading marker: perf treats the first context as the cpumode's;
		// kernel addresses have the top bit set.
		if chain[0]>>63 == 0 {
			ctx = ContextUser
		}
	}
	for _, ip := range chain {
		if ip >= ContextMax {
			ctx = ip
			continue
		}
		switch ctx {
		case ContextKernel:
			kernel = append(kernel, ip)
		case ContextUser:
			user = append(user, ip)
		}
	}
	return kernel, user
}

// UserCallchain returns the user part of a callchain without allocating: the
// entries after the last ContextUser marker up to the next marker.
func UserCallchain(chain []uint64) []uint64 {
	for i, ip := range chain {
		if ip == ContextUser {
			j := i + 1
			for j < len(chain) && chain[j] < ContextMax {
				j++
			}
			return chain[i+1 : j]
		}
	}
	return nil
}
