package perfdata

import "fmt"

// RecordType is the type field of a perf record header (perf_event_header.type).
type RecordType uint32

// Kernel record types (enum perf_event_type).
const (
	RecordMmap          RecordType = 1
	RecordLost          RecordType = 2
	RecordComm          RecordType = 3
	RecordExit          RecordType = 4
	RecordThrottle      RecordType = 5
	RecordUnthrottle    RecordType = 6
	RecordFork          RecordType = 7
	RecordRead          RecordType = 8
	RecordSample        RecordType = 9
	RecordMmap2         RecordType = 10
	RecordAux           RecordType = 11
	RecordItraceStart   RecordType = 12
	RecordLostSamples   RecordType = 13
	RecordSwitch        RecordType = 14
	RecordSwitchCPUWide RecordType = 15
	RecordNamespaces    RecordType = 16
	RecordKsymbol       RecordType = 17
	RecordBPFEvent      RecordType = 18
	RecordCgroup        RecordType = 19
	RecordTextPoke      RecordType = 20
	RecordAuxOutputHWID RecordType = 21
)

// Record types synthesized by perf itself (enum perf_user_event_type).
const (
	RecordHeaderAttr        RecordType = 64
	RecordHeaderEventType   RecordType = 65
	RecordHeaderTracingData RecordType = 66
	RecordHeaderBuildID     RecordType = 67
	RecordFinishedRound     RecordType = 68
	RecordIDIndex           RecordType = 69
	RecordAuxtraceInfo      RecordType = 70
	RecordAuxtrace          RecordType = 71
	RecordAuxtraceError     RecordType = 72
	RecordThreadMap         RecordType = 73
	RecordCPUMap            RecordType = 74
	RecordStatConfig        RecordType = 75
	RecordStat              RecordType = 76
	RecordStatRound         RecordType = 77
	RecordEventUpdate       RecordType = 78
	RecordTimeConv          RecordType = 79
	RecordHeaderFeature     RecordType = 80
	RecordCompressed        RecordType = 81
	RecordFinishedInit      RecordType = 82
	// RecordCompressed2 is perf 6.x's 8-byte aligned RecordCompressed: a
	// u64 data_size, the zstd bytes, then padding.
	RecordCompressed2 RecordType = 83
)

var recordNames = map[RecordType]string{
	RecordMmap: "MMAP", RecordLost: "LOST", RecordComm: "COMM", RecordExit: "EXIT",
	RecordThrottle: "THROTTLE", RecordUnthrottle: "UNTHROTTLE", RecordFork: "FORK",
	RecordRead: "READ", RecordSample: "SAMPLE", RecordMmap2: "MMAP2", RecordAux: "AUX",
	RecordItraceStart: "ITRACE_START", RecordLostSamples: "LOST_SAMPLES",
	RecordSwitch: "SWITCH", RecordSwitchCPUWide: "SWITCH_CPU_WIDE",
	RecordNamespaces: "NAMESPACES", RecordKsymbol: "KSYMBOL", RecordBPFEvent: "BPF_EVENT",
	RecordCgroup: "CGROUP", RecordTextPoke: "TEXT_POKE", RecordAuxOutputHWID: "AUX_OUTPUT_HW_ID",
	RecordHeaderAttr: "ATTR", RecordHeaderEventType: "EVENT_TYPE",
	RecordHeaderTracingData: "TRACING_DATA", RecordHeaderBuildID: "BUILD_ID",
	RecordFinishedRound: "FINISHED_ROUND", RecordIDIndex: "ID_INDEX",
	RecordAuxtraceInfo: "AUXTRACE_INFO", RecordAuxtrace: "AUXTRACE",
	RecordAuxtraceError: "AUXTRACE_ERROR", RecordThreadMap: "THREAD_MAP",
	RecordCPUMap: "CPU_MAP", RecordStatConfig: "STAT_CONFIG", RecordStat: "STAT",
	RecordStatRound: "STAT_ROUND", RecordEventUpdate: "EVENT_UPDATE",
	RecordTimeConv: "TIME_CONV", RecordHeaderFeature: "FEATURE",
	RecordCompressed: "COMPRESSED", RecordFinishedInit: "FINISHED_INIT",
	RecordCompressed2: "COMPRESSED2",
}

// String returns perf's name for the record type, as in perf's statistics
// ("MMAP2", "FINISHED_ROUND"), or "type(N)" for an unknown type.
func (t RecordType) String() string {
	if s, ok := recordNames[t]; ok {
		return s
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// Bits of perf_event_attr.sample_type (enum perf_event_sample_format).
const (
	SampleIP           uint64 = 1 << 0
	SampleTID          uint64 = 1 << 1
	SampleTime         uint64 = 1 << 2
	SampleAddr         uint64 = 1 << 3
	SampleRead         uint64 = 1 << 4
	SampleCallchain    uint64 = 1 << 5
	SampleID           uint64 = 1 << 6
	SampleCPU          uint64 = 1 << 7
	SamplePeriod       uint64 = 1 << 8
	SampleStreamID     uint64 = 1 << 9
	SampleRaw          uint64 = 1 << 10
	SampleBranchStack  uint64 = 1 << 11
	SampleRegsUser     uint64 = 1 << 12
	SampleStackUser    uint64 = 1 << 13
	SampleWeight       uint64 = 1 << 14
	SampleDataSrc      uint64 = 1 << 15
	SampleIdentifier   uint64 = 1 << 16
	SampleTransaction  uint64 = 1 << 17
	SampleRegsIntr     uint64 = 1 << 18
	SamplePhysAddr     uint64 = 1 << 19
	SampleAux          uint64 = 1 << 20
	SampleCgroup       uint64 = 1 << 21
	SampleDataPageSize uint64 = 1 << 22
	SampleCodePageSize uint64 = 1 << 23
	SampleWeightStruct uint64 = 1 << 24
)

// Bits of perf_event_attr.read_format.
const (
	FormatTotalTimeEnabled uint64 = 1 << 0
	FormatTotalTimeRunning uint64 = 1 << 1
	FormatID               uint64 = 1 << 2
	FormatGroup            uint64 = 1 << 3
	FormatLost             uint64 = 1 << 4
)

// BranchHWIndex is PERF_SAMPLE_BRANCH_HW_INDEX in attr.branch_sample_type:
// branch stacks then carry a hw_idx u64 after nr.
const BranchHWIndex uint64 = 1 << 17

// Bits of perf_event_header.misc.
const (
	MiscCPUModeMask    uint16 = 7
	MiscCPUModeUnknown uint16 = 0
	MiscKernel         uint16 = 1
	MiscUser           uint16 = 2
	MiscHypervisor     uint16 = 3
	MiscGuestKernel    uint16 = 4
	MiscGuestUser      uint16 = 5
	// MiscProcMapParseTimeout marks a synthesized MMAP whose /proc maps read timed out.
	MiscProcMapParseTimeout uint16 = 1 << 12
	// MiscMmapData marks MMAP/MMAP2 records of non-executable (data) mappings.
	MiscMmapData uint16 = 1 << 13
	// MiscCommExec marks a COMM record caused by exec.
	MiscCommExec uint16 = 1 << 13
	// MiscForkExec marks a FORK record caused by exec (perf-internal).
	MiscForkExec uint16 = 1 << 13
	// MiscSwitchOut marks a SWITCH record for a task leaving the CPU.
	MiscSwitchOut uint16 = 1 << 13
	// MiscExactIP marks a SAMPLE whose ip is exact (PEBS and similar).
	MiscExactIP uint16 = 1 << 14
	// MiscSwitchOutPreempt marks a switch-out by preemption.
	MiscSwitchOutPreempt uint16 = 1 << 14
	// MiscMmapBuildID marks an MMAP2 record carrying a build id instead of maj/min/ino.
	MiscMmapBuildID uint16 = 1 << 14
	// MiscBuildIDSize marks a build-id record whose size byte is valid.
	MiscBuildIDSize uint16 = 1 << 15
)

// Callchain context markers: callchain entries at or above ContextMax are not
// addresses but say which context the following entries belong to.
const (
	ContextHV          uint64 = 0xffffffffffffffe0 // (u64)-32
	ContextKernel      uint64 = 0xffffffffffffff80 // (u64)-128
	ContextUser        uint64 = 0xfffffffffffffe00 // (u64)-512
	ContextGuest       uint64 = 0xfffffffffffff800 // (u64)-2048
	ContextGuestKernel uint64 = 0xfffffffffffff780 // (u64)-2176
	ContextGuestUser   uint64 = 0xfffffffffffff600 // (u64)-2560
	ContextMax         uint64 = 0xfffffffffffff001 // (u64)-4095
)

// Feature is the bit number of a feature section in the file header's
// adds_features bitmap (and the feat_id of a pipe-mode HEADER_FEATURE record).
type Feature int

// Feature bits (HEADER_* in perf's header.h).
const (
	FeatTracingData    Feature = 1
	FeatBuildID        Feature = 2
	FeatHostname       Feature = 3
	FeatOSRelease      Feature = 4
	FeatVersion        Feature = 5
	FeatArch           Feature = 6
	FeatNrCPUs         Feature = 7
	FeatCPUDesc        Feature = 8
	FeatCPUID          Feature = 9
	FeatTotalMem       Feature = 10
	FeatCmdline        Feature = 11
	FeatEventDesc      Feature = 12
	FeatCPUTopology    Feature = 13
	FeatNUMATopology   Feature = 14
	FeatBranchStack    Feature = 15
	FeatPMUMappings    Feature = 16
	FeatGroupDesc      Feature = 17
	FeatAuxtrace       Feature = 18
	FeatStat           Feature = 19
	FeatCache          Feature = 20
	FeatSampleTime     Feature = 21
	FeatMemTopology    Feature = 22
	FeatClockID        Feature = 23
	FeatDirFormat      Feature = 24
	FeatBPFProgInfo    Feature = 25
	FeatBPFBTF         Feature = 26
	FeatCompressed     Feature = 27
	FeatCPUPMUCaps     Feature = 28
	FeatClockData      Feature = 29
	FeatHybridTopology Feature = 30
	FeatPMUCaps        Feature = 31
	// featBits is the size of the adds_features bitmap.
	featBits = 256
)

// Attr types (perf_event_attr.type).
const (
	TypeHardware   uint32 = 0
	TypeSoftware   uint32 = 1
	TypeTracepoint uint32 = 2
	TypeHWCache    uint32 = 3
	TypeRaw        uint32 = 4
	TypeBreakpoint uint32 = 5
)

// Register ABIs of PERF_SAMPLE_REGS_USER / REGS_INTR (enum perf_sample_regs_abi).
const (
	RegsABINone uint64 = 0
	RegsABI32   uint64 = 1
	RegsABI64   uint64 = 2
)
