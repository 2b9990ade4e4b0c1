package unwinder_test

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/unwinder"
)

// fpStack lays out a stack snapshot at base from words given by offset.
func fpStack(base uint64, size int, words map[uint64]uint64) *unwinder.Stack {
	data := make([]byte, size)
	for off, v := range words {
		binary.LittleEndian.PutUint64(data[off:], v)
	}
	return &unwinder.Stack{Addr: base, Data: data}
}

func fpRegs(a arch.Arch, pc, sp, fp uint64) *arch.Regs {
	var r arch.Regs
	r.Set(a.PC(), pc)
	r.Set(a.SP(), sp)
	r.Set(a.FP(), fp)
	return &r
}

// The cases follow the kernel's loops line by line (arch/x86/events/core.c
// perf_callchain_user, arch/arm64/kernel/stacktrace.c unwind_user_frame);
// each expectation is worked out by hand from the words laid out.
func TestWalkFramePointers(t *testing.T) {
	const base = 0x7ffc_0000_1000
	type want struct {
		pcs  []uint64
		recs []uint64
		stop unwinder.FPStop
		next uint64
	}
	cases := []struct {
		name  string
		a     arch.Arch
		fp    uint64
		words map[uint64]uint64
		buf   int
		want  want
	}{
		{
			// main <- f <- g: records at +0x10 and +0x40, the last one's
			// next record 0 (glibc's _start cleared rbp).
			name: "x86_64_chain_to_zero", a: arch.AMD64, fp: base + 0x10,
			words: map[uint64]uint64{0x10: base + 0x40, 0x18: 0x401111, 0x40: 0, 0x48: 0x401222},
			want:  want{pcs: []uint64{0x401000, 0x401111, 0x401222}, recs: []uint64{0, base + 0x10, base + 0x40}, stop: unwinder.FPStopEnd},
		},
		{
			// x86_64 stores a zero return address and does not ask the
			// chain to move up: a record pointing at itself repeats
			// until max_stack.
			name: "x86_64_loop_until_depth", a: arch.AMD64, fp: base + 0x20, buf: 4,
			words: map[uint64]uint64{0x20: base + 0x20, 0x28: 0},
			want:  want{pcs: []uint64{0x401000, 0, 0, 0}, recs: []uint64{0, base + 0x20, base + 0x20, base + 0x20}, stop: unwinder.FPStopDepth},
		},
		{
			// rbp used as a general register holding a small integer:
			// the kernel's read faults.
			name: "x86_64_small_integer", a: arch.AMD64, fp: 42,
			want: want{pcs: []uint64{0x401000}, recs: []uint64{0}, stop: unwinder.FPStopEnd},
		},
		{
			name: "x86_64_kernel_address", a: arch.AMD64, fp: 0xffff_8000_0000_0000,
			want: want{pcs: []uint64{0x401000}, recs: []uint64{0}, stop: unwinder.FPStopEnd},
		},
		{
			// The next record's return address straddles the end of
			// the snapshot (0x100 bytes): the kernel read on.
			name: "x86_64_truncated", a: arch.AMD64, fp: base + 0x10,
			words: map[uint64]uint64{0x10: base + 0xf0, 0x18: 0x401111, 0xf0: base + 0x200, 0xf8: 0x401222},
			want:  want{pcs: []uint64{0x401000, 0x401111, 0x401222}, recs: []uint64{0, base + 0x10, base + 0xf0}, stop: unwinder.FPStopTruncated, next: base + 0x200},
		},
		{
			name: "x86_64_record_below_sp", a: arch.AMD64, fp: base - 0x100,
			want: want{pcs: []uint64{0x401000}, recs: []uint64{0}, stop: unwinder.FPStopOutside, next: base - 0x100},
		},
		{
			name: "x86_64_straddles_snapshot_end", a: arch.AMD64, fp: base + 0xf8,
			want: want{pcs: []uint64{0x401000}, recs: []uint64{0}, stop: unwinder.FPStopTruncated, next: base + 0xf8},
		},
		{
			// arm64: the link register is not read (it holds 0x4005
			// here); each record's lr is stored before the check that
			// the next record lies above it ends the walk.
			name: "arm64_not_moving_up", a: arch.ARM64, fp: base + 0x40,
			words: map[uint64]uint64{0x40: base + 0x20, 0x48: 0x400111, 0x20: base + 0x80, 0x28: 0x400222},
			want:  want{pcs: []uint64{0x401000, 0x400111}, recs: []uint64{0, base + 0x40}, stop: unwinder.FPStopEnd},
		},
		{
			// PAC bits are stripped from lr; the chain ends at a zero x29.
			name: "arm64_pac_to_zero", a: arch.ARM64, fp: base + 0x10,
			words: map[uint64]uint64{0x10: base + 0x30, 0x18: 0x002a_0000_0040_0111, 0x30: 0, 0x38: 0x400222},
			want:  want{pcs: []uint64{0x401000, 0x400111, 0x400222}, recs: []uint64{0, base + 0x10, base + 0x30}, stop: unwinder.FPStopEnd},
		},
		{
			name: "arm64_misaligned", a: arch.ARM64, fp: base + 0x14,
			want: want{pcs: []uint64{0x401000}, recs: []uint64{0}, stop: unwinder.FPStopEnd},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := unwinder.New(tc.a, unwinder.Options{})
			regs := *fpRegs(tc.a, 0x401000, base, tc.fp)
			if tc.a == arch.ARM64 {
				regs.Set(arch.ARM64_X30, 0x4005)
			}
			buf := tc.buf
			if buf == 0 {
				buf = 16
			}
			frames := make([]unwinder.FPFrame, buf)
			res := u.WalkFramePointers(&regs, fpStack(base, 0x100, tc.words), frames)
			var pcs, recs []uint64
			for _, f := range frames[:res.Frames] {
				pcs = append(pcs, f.PC)
				recs = append(recs, f.Record)
			}
			assert.Equal(t, tc.want.pcs, pcs, "pcs")
			assert.Equal(t, tc.want.recs, recs, "records")
			assert.Equal(t, tc.want.stop, res.Stop, "stop %v", res.Stop)
			assert.Equal(t, tc.want.next, res.Next, "next")
			assert.Equal(t, tc.want.stop == unwinder.FPStopEnd || tc.want.stop == unwinder.FPStopDepth, res.Exact())
		})
	}
}

func TestWalkFramePointersUnknownRegisters(t *testing.T) {
	u := unwinder.New(arch.AMD64, unwinder.Options{})
	frames := make([]unwinder.FPFrame, 4)
	var regs arch.Regs
	res := u.WalkFramePointers(&regs, &unwinder.Stack{}, frames)
	assert.Equal(t, unwinder.FPResult{Stop: unwinder.FPStopUnknownRegister}, res)
	regs.Set(arch.AMD64.PC(), 0x401000)
	res = u.WalkFramePointers(&regs, &unwinder.Stack{}, frames)
	assert.Equal(t, unwinder.FPResult{Frames: 1, Stop: unwinder.FPStopUnknownRegister}, res)
	assert.Equal(t, "unknown_register", res.Stop.String())
}

// fpChain builds a stack of n frame records 0x30 bytes apart, the last one
// ending the chain.
func fpChain(n int) (*arch.Regs, *unwinder.Stack) {
	const base = 0x7ffc_0000_0000
	words := map[uint64]uint64{}
	for i := 0; i < n; i++ {
		off := uint64(0x10 + 0x30*i)
		next := base + off + 0x30
		if i == n-1 {
			next = 0
		}
		words[off], words[off+8] = next, 0x401000+uint64(i)
	}
	return fpRegs(arch.AMD64, 0x400000, base, base+0x10), fpStack(base, 0x30*n+0x10, words)
}

func TestWalkFramePointersAllocatesNothing(t *testing.T) {
	regs, st := fpChain(100)
	u := unwinder.New(arch.AMD64, unwinder.Options{})
	frames := make([]unwinder.FPFrame, 127)
	var mem unwinder.Memory = st
	allocs := testing.AllocsPerRun(100, func() {
		if res := u.WalkFramePointers(regs, mem, frames); res.Frames != 101 {
			t.Fatalf("%d frames", res.Frames)
		}
	})
	require.Zero(t, allocs)
}

func BenchmarkWalkFramePointers(b *testing.B) {
	regs, st := fpChain(100)
	u := unwinder.New(arch.AMD64, unwinder.Options{})
	frames := make([]unwinder.FPFrame, 127)
	b.ReportAllocs()
	total := 0
	for i := 0; i < b.N; i++ {
		total += u.WalkFramePointers(regs, st, frames).Frames
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(total), "ns/frame")
}

// FuzzWalkFramePointers walks fuzzed registers over a fuzzed snapshot on
// both architectures. Whatever the input: no more frames than the buffer,
// frame 0 the PC, every further PC the word at its record plus 8 in the
// snapshot (PAC stripped on arm64), records inside the snapshot and, on
// arm64, 8-byte aligned and strictly rising; Next inside or beyond the
// snapshot as the stop says.
func FuzzWalkFramePointers(f *testing.F) {
	regs, st := fpChain(5)
	fp, _ := regs.Get(arch.AMD64.FP())
	f.Add(false, uint64(0x400000), fp-st.Addr, st.Data, uint8(16), false)
	f.Add(true, uint64(0x400000), fp-st.Addr, st.Data, uint8(3), false)
	f.Add(false, uint64(0x400000), uint64(0xfffffffffffff000), []byte{}, uint8(8), false)
	f.Add(false, uint64(0x400000), fp-st.Addr, st.Data, uint8(16), true)
	f.Fuzz(func(t *testing.T, arm64 bool, pc, fpOff uint64, data []byte, buf uint8, probe bool) {
		const base = 0x7ffc_0000_0000
		a := arch.AMD64
		if arm64 {
			a = arch.ARM64
		}
		u := unwinder.New(a, unwinder.Options{})
		regs := fpRegs(a, pc, base, base+fpOff)
		st := &unwinder.Stack{Addr: base, Data: data}
		frames := make([]unwinder.FPFrame, buf)
		var res unwinder.FPResult
		if probe {
			// A uprobe at push %rbp: on x86_64 the word at SP first.
			res = u.WalkFramePointersAtProbe(regs, st, []byte{0x55}, frames)
		} else {
			res = u.WalkFramePointers(regs, st, frames)
		}
		probed := probe && !arm64 && res.Frames > 1 && frames[1].Record == base-8
		if res.Frames > len(frames) {
			t.Fatalf("%d frames in a buffer of %d", res.Frames, len(frames))
		}
		if res.Frames > 0 && (frames[0].PC != pc || frames[0].Record != 0) {
			t.Fatalf("frame 0 is %+v, not the PC %#x", frames[0], pc)
		}
		if probe && !arm64 && res.Frames > 1 && len(data) >= 8 {
			if want := binary.LittleEndian.Uint64(data); !probed || frames[1].PC != want {
				t.Fatalf("probed frame 1 is %+v, not the word %#x at SP", frames[1], want)
			}
		}
		for i := 1; i < res.Frames; i++ {
			fr := frames[i]
			if i == 1 && probed {
				continue
			}
			off := fr.Record - base
			if fr.Record < base || off+16 > uint64(len(data)) {
				t.Fatalf("frame %d's record %#x is outside the snapshot", i, fr.Record)
			}
			want := binary.LittleEndian.Uint64(data[off+8:])
			if arm64 {
				want = a.StripPAC(want, arch.PACMask(48))
				if fr.Record&7 != 0 || i > 1 && fr.Record <= frames[i-1].Record {
					t.Fatalf("arm64 frame %d's record %#x misaligned or not above %#x", i, fr.Record, frames[i-1].Record)
				}
			}
			if fr.PC != want {
				t.Fatalf("frame %d's PC %#x is not the word %#x at its record+8", i, fr.PC, want)
			}
		}
		switch res.Stop {
		case unwinder.FPStopTruncated:
			// The record (or, at a probe, the word at SP: Next+8)
			// reaches past the end of the snapshot.
			if res.Next+8 < base || res.Next+16 <= base+uint64(len(data)) {
				t.Fatalf("truncated at %#x, which the snapshot holds", res.Next)
			}
		case unwinder.FPStopOutside:
			if res.Next >= base {
				t.Fatalf("outside at %#x, at or above the snapshot", res.Next)
			}
		}
	})
}

// TestWalkFramePointersAtProbe: at a uprobe on an x86_64 function's push
// %rbp or endbr64 the return address at SP comes before the records; at
// another instruction, or on arm64, nothing changes.
func TestWalkFramePointersAtProbe(t *testing.T) {
	const base = 0x7ffc_0000_1000
	words := map[uint64]uint64{0: 0x401999, 0x10: 0, 0x18: 0x401222}
	for _, c := range []struct {
		name string
		a    arch.Arch
		insn []byte
		want []uint64
	}{
		{"push_rbp", arch.AMD64, []byte{0x55, 0x48, 0x89, 0xe5}, []uint64{0x401000, 0x401999, 0x401222}},
		{"endbr64", arch.AMD64, []byte{0xf3, 0x0f, 0x1e, 0xfa}, []uint64{0x401000, 0x401999, 0x401222}},
		{"other_instruction", arch.AMD64, []byte{0x48, 0x83, 0xec, 0x48}, []uint64{0x401000, 0x401222}},
		{"no_code", arch.AMD64, nil, []uint64{0x401000, 0x401222}},
		{"arm64", arch.ARM64, []byte{0x55, 0, 0, 0}, []uint64{0x401000, 0x401222}},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := unwinder.New(c.a, unwinder.Options{})
			frames := make([]unwinder.FPFrame, 8)
			res := u.WalkFramePointersAtProbe(fpRegs(c.a, 0x401000, base, base+0x10), fpStack(base, 0x40, words), c.insn, frames)
			var pcs []uint64
			for _, f := range frames[:res.Frames] {
				pcs = append(pcs, f.PC)
			}
			assert.Equal(t, c.want, pcs)
			if len(c.want) == 3 {
				assert.Equal(t, uint64(base-8), frames[1].Record, "the return address at SP is Record+8")
			}
		})
	}
}
