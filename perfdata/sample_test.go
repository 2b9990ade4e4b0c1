package perfdata

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorderSampleType is the sample_type ustack record (and perf record
// --call-graph dwarf on a tracepoint) uses.
const recorderSampleType = SampleIdentifier | SampleIP | SampleTID | SampleTime | SampleCPU | SamplePeriod |
	SampleCallchain | SampleRaw | SampleRegsUser | SampleStackUser

// handSample lays out a sample of recorderSampleType field by field in the
// order of the kernel's perf_event.h (PERF_RECORD_SAMPLE), with 3 user
// registers, a 4-byte raw payload and a 24-byte stack of which 16 bytes
// were captured.
func handSample() []byte {
	var b []byte
	u64 := func(v uint64) { b = binary.LittleEndian.AppendUint64(b, v) }
	u32 := func(v uint32) { b = binary.LittleEndian.AppendUint32(b, v) }
	u64(77)            // identifier
	u64(0x401000)      // ip
	u32(10)            // pid
	u32(11)            // tid
	u64(123456789)     // time
	u32(3)             // cpu
	u32(0)             // res
	u64(1000)          // period
	u64(2)             // callchain nr
	u64(ContextKernel) // ips
	u64(0xffffffff81000000)
	u32(4) // raw size
	b = append(b, 'r', 'a', 'w', '!')
	u64(RegsABI64) // regs abi
	u64(0x10)      // regs (mask 0b111)
	u64(0x20)
	u64(0x30)
	u64(24) // stack size
	for i := 0; i < 24; i++ {
		b = append(b, byte(i))
	}
	u64(16) // dyn size
	return b
}

func TestDecodeSampleHandLaidOut(t *testing.T) {
	a := &Attr{SampleType: recorderSampleType, SampleRegsUser: 0b111, Name: "ev"}
	body := handSample()
	var s Sample
	require.NoError(t, DecodeSample(RecordHeader{Type: RecordSample, Offset: 0x40}, a, body, &s))
	assert.Equal(t, uint64(77), s.ID)
	assert.Equal(t, uint64(0x401000), s.IP)
	assert.Equal(t, [2]uint32{10, 11}, [2]uint32{s.Pid, s.Tid})
	assert.Equal(t, uint64(123456789), s.Time)
	assert.Equal(t, uint32(3), s.CPU)
	assert.Equal(t, uint64(1000), s.Period)
	assert.Equal(t, []uint64{ContextKernel, 0xffffffff81000000}, s.Callchain)
	assert.Equal(t, "raw!", string(s.Raw))
	assert.Equal(t, uint64(RegsABI64), s.RegsABI)
	assert.Equal(t, []uint64{0x10, 0x20, 0x30}, s.Regs)
	assert.Equal(t, uint64(0b111), s.RegsMask)
	assert.Len(t, s.StackData, 24)
	assert.Equal(t, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, s.Stack())
	assert.Same(t, a, s.Attr)
	assert.Equal(t, "ev", s.EventName)
	assert.Equal(t, SampleIdentifier|SampleID|SampleTID|SampleTime|SampleCPU, s.Has)
	id, ok := a.SampleID(body)
	assert.True(t, ok)
	assert.Equal(t, uint64(77), id)

	// Every cut short of the whole body is an error at the record's offset.
	for n := 0; n < len(body); n++ {
		err := DecodeSample(RecordHeader{Type: RecordSample, Offset: 0x40}, a, body[:n], &s)
		var fe *FormatError
		if assert.ErrorAs(t, err, &fe, "cut at %d", n) {
			assert.Equal(t, int64(0x40), fe.Offset)
		}
	}

	// A kernel-thread sample (regs ABI none) carries no register values.
	k := append([]byte(nil), body[:6*8+3*8+4+4]...) // up to the regs
	k = binary.LittleEndian.AppendUint64(k, RegsABINone)
	k = binary.LittleEndian.AppendUint64(k, 0) // no stack
	require.NoError(t, DecodeSample(RecordHeader{}, a, k, &s))
	assert.Empty(t, s.Regs)
	assert.Nil(t, s.StackData)
}

func TestSampleIDPosition(t *testing.T) {
	// PERF_SAMPLE_ID comes after IP, TID, TIME and ADDR.
	a := &Attr{SampleType: SampleIP | SampleTID | SampleTime | SampleID | SampleCPU}
	body := make([]byte, 40)
	binary.LittleEndian.PutUint64(body[24:], 99)
	id, ok := a.SampleID(body)
	assert.True(t, ok)
	assert.Equal(t, uint64(99), id)
	_, ok = a.SampleID(body[:31])
	assert.False(t, ok)
	_, ok = (&Attr{SampleType: SampleIP}).SampleID(body)
	assert.False(t, ok)
}

func TestDecodeSampleAllocFree(t *testing.T) {
	a := &Attr{SampleType: recorderSampleType, SampleRegsUser: 0b111}
	body := handSample()
	var s Sample
	require.NoError(t, DecodeSample(RecordHeader{}, a, body, &s))
	allocs := testing.AllocsPerRun(100, func() {
		if err := DecodeSample(RecordHeader{}, a, body, &s); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs, "DecodeSample allocates on a reused Sample")
}

// FuzzDecodeSample: no attr layout and body make DecodeSample panic or
// allocate beyond the body's size.
func FuzzDecodeSample(f *testing.F) {
	f.Add(uint64(recorderSampleType), uint64(0), uint64(0), uint64(0b111), uint64(0), handSample())
	f.Add(uint64(SampleRead|SampleBranchStack|SampleRegsIntr|SampleAux|SampleWeight|SampleDataSrc),
		uint64(FormatGroup|FormatID|FormatLost|FormatTotalTimeEnabled), uint64(BranchHWIndex), uint64(0), uint64(0xff), make([]byte, 200))
	f.Fuzz(func(t *testing.T, st, rf, bst, ru, ri uint64, body []byte) {
		a := &Attr{SampleType: st, ReadFormat: rf, BranchSampleType: bst, SampleRegsUser: ru, SampleRegsIntr: ri}
		var s Sample
		if DecodeSample(RecordHeader{}, a, body, &s) != nil {
			return
		}
		if 8*(len(s.Callchain)+len(s.Regs)+len(s.IntrRegs)+3*len(s.Branches)) > len(body) {
			t.Fatalf("decoded more values than the body holds")
		}
		s.Stack()
		a.SampleID(body)
	})
}

// BenchmarkDecodeSample decodes one sample of ustack record's layout with
// an 8 KiB stack into a reused Sample.
func BenchmarkDecodeSample(b *testing.B) {
	a := &Attr{SampleType: recorderSampleType, SampleRegsUser: 0xff0fff}
	body := handSample()[:6*8+3*8+8]
	body = binary.LittleEndian.AppendUint64(body, RegsABI64)
	for i := 0; i < 20; i++ {
		body = binary.LittleEndian.AppendUint64(body, uint64(i))
	}
	body = binary.LittleEndian.AppendUint64(body, 8192)
	body = append(body, make([]byte, 8192)...)
	body = binary.LittleEndian.AppendUint64(body, 8192)
	var s Sample
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for i := 0; i < b.N; i++ {
		if err := DecodeSample(RecordHeader{}, a, body, &s); err != nil {
			b.Fatal(err)
		}
	}
}
