package perfdata

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/ustack/ustack/arch"
)

// Sizes of published perf_event_attr versions (PERF_ATTR_SIZE_VER*).
const (
	AttrSizeVer0 = 64
	AttrSizeVer1 = 72
	AttrSizeVer2 = 80
	AttrSizeVer3 = 96
	AttrSizeVer4 = 104
	AttrSizeVer5 = 112
	AttrSizeVer6 = 120
	AttrSizeVer7 = 128
	AttrSizeVer8 = 136
	// attrSizeMax is the largest attr this package decodes field by field;
	// larger attrs are accepted and their tail is kept in Attr.Extra.
	attrSizeMax = AttrSizeVer8
	// attrSizeLimit bounds attr.size to reject absurd values.
	attrSizeLimit = 4096
)

// Bits of Attr.Flags, the bitfield word of perf_event_attr at offset 40.
const (
	AttrDisabled      uint64 = 1 << 0
	AttrInherit       uint64 = 1 << 1
	AttrPinned        uint64 = 1 << 2
	AttrExclusive     uint64 = 1 << 3
	AttrExcludeUser   uint64 = 1 << 4
	AttrExcludeKernel uint64 = 1 << 5
	AttrExcludeHV     uint64 = 1 << 6
	AttrExcludeIdle   uint64 = 1 << 7
	AttrMmap          uint64 = 1 << 8
	AttrComm          uint64 = 1 << 9
	AttrFreq          uint64 = 1 << 10
	AttrInheritStat   uint64 = 1 << 11
	AttrEnableOnExec  uint64 = 1 << 12
	AttrTask          uint64 = 1 << 13
	AttrWatermark     uint64 = 1 << 14
	// precise_ip occupies bits 15 and 16.
	AttrMmapData               uint64 = 1 << 17
	AttrSampleIDAll            uint64 = 1 << 18
	AttrExcludeHost            uint64 = 1 << 19
	AttrExcludeGuest           uint64 = 1 << 20
	AttrExcludeCallchainKernel uint64 = 1 << 21
	AttrExcludeCallchainUser   uint64 = 1 << 22
	AttrMmap2                  uint64 = 1 << 23
	AttrCommExec               uint64 = 1 << 24
	AttrUseClockID             uint64 = 1 << 25
	AttrContextSwitch          uint64 = 1 << 26
	AttrWriteBackward          uint64 = 1 << 27
	AttrNamespaces             uint64 = 1 << 28
	AttrKsymbol                uint64 = 1 << 29
	AttrBPFEvent               uint64 = 1 << 30
	AttrAuxOutput              uint64 = 1 << 31
	AttrCgroup                 uint64 = 1 << 32
	AttrTextPoke               uint64 = 1 << 33
	AttrBuildID                uint64 = 1 << 34
	AttrInheritThread          uint64 = 1 << 35
	AttrRemoveOnExec           uint64 = 1 << 36
	AttrSigtrap                uint64 = 1 << 37
)

// Attr is one event's perf_event_attr, with the sample ids perf recorded for
// it and its name. Fields of attr versions newer than the file's attr.size
// are zero.
type Attr struct {
	Type             uint32
	Size             uint32 // attr.size as stored (0 means AttrSizeVer0)
	Config           uint64
	SamplePeriod     uint64 // sample_period, or sample_freq when Flags&AttrFreq
	SampleType       uint64
	ReadFormat       uint64
	Flags            uint64 // the bitfield word: Attr* constants
	WakeupEvents     uint32 // wakeup_events or wakeup_watermark
	BPType           uint32
	Config1          uint64 // config1 or bp_addr
	Config2          uint64 // config2 or bp_len
	BranchSampleType uint64
	SampleRegsUser   uint64
	SampleStackUser  uint32
	ClockID          int32
	SampleRegsIntr   uint64
	AuxWatermark     uint32
	SampleMaxStack   uint16
	AuxSampleSize    uint32
	SigData          uint64
	Config3          uint64
	// Extra holds bytes of an attr larger than this package knows.
	Extra []byte

	// IDs are the sample ids the kernel assigned to this event's file
	// descriptors; samples and sample_id_all trailers carry one of them.
	IDs []uint64
	// Name is the event name from EVENT_DESC (or pipe-mode equivalents),
	// or a name derived from Type and Config when the file has none.
	Name string
	// Index is the attr's position in Session.Attrs.
	Index int

	// Derived layout, computed by prepare.
	idPos      int // byte offset of the id in a sample body, -1 if none
	trailerLen int // bytes of the sample_id_all trailer
	trailerID  int // byte offset of the id from the trailer's end, -1 if none
}

// SampleIDAll reports whether non-sample records carry a sample_id trailer.
func (a *Attr) SampleIDAll() bool { return a.Flags&AttrSampleIDAll != 0 }

// PreciseIP returns the precise_ip bitfield (0..3).
func (a *Attr) PreciseIP() int { return int(a.Flags>>15) & 3 }

// UserRegs returns, for an architecture, the DWARF register numbers of the
// values in Sample.Regs in order (-1 for registers without a DWARF column):
// the perf register layout of attr.sample_regs_user. Pass the result of
// Session.Arch.
func (a *Attr) UserRegs(ar arch.Arch) []int {
	out := make([]int, 0, bits.OnesCount64(a.SampleRegsUser))
	for b := 0; b < 64; b++ {
		if a.SampleRegsUser&(1<<uint(b)) != 0 {
			out = append(out, ar.PerfToDWARF(b))
		}
	}
	return out
}

// LoadUserRegs fills regs from a sample of this attr using the architecture's
// perf register order (arch.Arch.LoadPerf). It leaves regs empty when the
// sample has no user registers (ABI none).
func (a *Attr) LoadUserRegs(ar arch.Arch, s *Sample, regs *arch.Regs, poisonAllOnes bool) {
	if s.RegsABI == RegsABINone {
		regs.Reset()
		return
	}
	ar.LoadPerf(regs, s.RegsMask, s.Regs, poisonAllOnes)
}

// prepare computes the derived layout of samples and trailers.
func (a *Attr) prepare() {
	st := a.SampleType
	a.idPos = sampleIDPos(st)
	// sample_id_all trailer.
	a.trailerLen, a.trailerID = 0, -1
	if !a.SampleIDAll() {
		return
	}
	n := 0
	for _, f := range []uint64{SampleTID, SampleTime, SampleID, SampleStreamID, SampleCPU, SampleIdentifier} {
		if st&f != 0 {
			n += 8
		}
	}
	a.trailerLen = n
	if st&SampleIdentifier != 0 {
		a.trailerID = 8
	} else if st&SampleID != 0 {
		// id, then stream_id and cpu follow it.
		p := 8
		if st&SampleStreamID != 0 {
			p += 8
		}
		if st&SampleCPU != 0 {
			p += 8
		}
		a.trailerID = p
	}
}

// decodeAttr decodes a perf_event_attr from b, whose length is the attr's
// size (at least AttrSizeVer0).
func decodeAttr(b []byte) *Attr {
	le := binary.LittleEndian
	a := &Attr{}
	a.Type = le.Uint32(b[0:])
	a.Size = le.Uint32(b[4:])
	a.Config = le.Uint64(b[8:])
	a.SamplePeriod = le.Uint64(b[16:])
	a.SampleType = le.Uint64(b[24:])
	a.ReadFormat = le.Uint64(b[32:])
	a.Flags = le.Uint64(b[40:])
	a.WakeupEvents = le.Uint32(b[48:])
	a.BPType = le.Uint32(b[52:])
	a.Config1 = le.Uint64(b[56:])
	n := len(b)
	if n >= AttrSizeVer1 {
		a.Config2 = le.Uint64(b[64:])
	}
	if n >= AttrSizeVer2 {
		a.BranchSampleType = le.Uint64(b[72:])
	}
	if n >= AttrSizeVer3 {
		a.SampleRegsUser = le.Uint64(b[80:])
		a.SampleStackUser = le.Uint32(b[88:])
		a.ClockID = int32(le.Uint32(b[92:]))
	}
	if n >= AttrSizeVer4 {
		a.SampleRegsIntr = le.Uint64(b[96:])
	}
	if n >= AttrSizeVer5 {
		a.AuxWatermark = le.Uint32(b[104:])
		a.SampleMaxStack = le.Uint16(b[108:])
	}
	if n >= AttrSizeVer6 {
		a.AuxSampleSize = le.Uint32(b[112:])
	}
	if n >= AttrSizeVer7 {
		a.SigData = le.Uint64(b[120:])
	}
	if n >= AttrSizeVer8 {
		a.Config3 = le.Uint64(b[128:])
	}
	if n > attrSizeMax {
		a.Extra = append([]byte(nil), b[attrSizeMax:]...)
	}
	return a
}

// encodeAttr appends the attr encoded in size bytes (AttrSizeVer0 or more) to dst.
func encodeAttr(dst []byte, a *Attr, size int) []byte {
	le := binary.LittleEndian
	b := make([]byte, max(size, attrSizeMax))
	le.PutUint32(b[0:], a.Type)
	le.PutUint32(b[4:], uint32(size))
	le.PutUint64(b[8:], a.Config)
	le.PutUint64(b[16:], a.SamplePeriod)
	le.PutUint64(b[24:], a.SampleType)
	le.PutUint64(b[32:], a.ReadFormat)
	le.PutUint64(b[40:], a.Flags)
	le.PutUint32(b[48:], a.WakeupEvents)
	le.PutUint32(b[52:], a.BPType)
	le.PutUint64(b[56:], a.Config1)
	le.PutUint64(b[64:], a.Config2)
	le.PutUint64(b[72:], a.BranchSampleType)
	le.PutUint64(b[80:], a.SampleRegsUser)
	le.PutUint32(b[88:], a.SampleStackUser)
	le.PutUint32(b[92:], uint32(a.ClockID))
	le.PutUint64(b[96:], a.SampleRegsIntr)
	le.PutUint32(b[104:], a.AuxWatermark)
	le.PutUint16(b[108:], a.SampleMaxStack)
	le.PutUint32(b[112:], a.AuxSampleSize)
	le.PutUint64(b[120:], a.SigData)
	le.PutUint64(b[128:], a.Config3)
	if size > attrSizeMax {
		copy(b[attrSizeMax:], a.Extra)
	}
	return append(dst, b[:size]...)
}

// defaultName returns a name for an attr without one, like perf's for the
// common hardware and software events.
func defaultName(a *Attr) string {
	hw := []string{"cycles", "instructions", "cache-references", "cache-misses",
		"branches", "branch-misses", "bus-cycles", "stalled-cycles-frontend",
		"stalled-cycles-backend", "ref-cycles"}
	sw := []string{"cpu-clock", "task-clock", "page-faults", "context-switches",
		"cpu-migrations", "minor-faults", "major-faults", "alignment-faults",
		"emulation-faults", "dummy", "bpf-output", "cgroup-switches"}
	switch a.Type {
	case TypeHardware:
		if a.Config < uint64(len(hw)) {
			return hw[a.Config]
		}
	case TypeSoftware:
		if a.Config < uint64(len(sw)) {
			return sw[a.Config]
		}
	}
	return fmt.Sprintf("type%d/config%#x", a.Type, a.Config)
}
