package report

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/internal/fixture"
	"github.com/ustack/ustack/perfdata"
)

// The arm64 end-to-end tests turn each committed arm64 fixture (registers,
// stack snapshot and maps of a program stopped under qemu-aarch64 + gdb)
// into the perf.data an arm64 machine would have written for the same
// moment, run report.Run on it, and compare the user frames with gdb's
// backtrace (testdata/FORMAT.md), the way unwinder.TestFixtures does.

const (
	arm64TestPid = 4242
	protRead     = 1
	protWrite    = 2
	protExec     = 4
	mapPrivate   = 2
)

// arm64PerfData writes, into a file under dir, a perf.data holding f's
// capture as `perf record -e cpu-clock --call-graph dwarf` on an arm64
// machine records it: HEADER_ARCH aarch64, one cpu-clock attr with
// REGS_USER (perf's arm64 register order: x0..x28, x29, lr, sp, pc) and
// STACK_USER, a COMM, an MMAP2 per mapping and one SAMPLE of regs (perf's
// order) and stack. Mappings with a committed object are recorded
// with the object's absolute path as their file name; anonymous and pseudo
// mappings ([stack], qemu's [sigpage]) keep their names and have no object.
func arm64PerfData(t *testing.T, dir string, f *fixture.Fixture, regs []uint64, stack []byte, maps []fixture.Map) string {
	t.Helper()
	path := filepath.Join(dir, f.Name+".data")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	attr := &perfdata.Attr{
		Type:   1, // PERF_TYPE_SOFTWARE
		Config: 0, // PERF_COUNT_SW_CPU_CLOCK
		SampleType: perfdata.SampleIdentifier | perfdata.SampleIP | perfdata.SampleTID |
			perfdata.SampleTime | perfdata.SampleCPU | perfdata.SamplePeriod |
			perfdata.SampleRegsUser | perfdata.SampleStackUser,
		SamplePeriod:    4000,
		Flags:           perfdata.AttrSampleIDAll | perfdata.AttrFreq,
		SampleRegsUser:  arch.ARM64.PerfMask(),
		SampleStackUser: uint32(len(stack)),
		Name:            "cpu-clock",
	}
	feat := &perfdata.Features{Arch: "aarch64", Hostname: "arm64-fixture", OSRelease: "6.1.0-arm64"}
	w, err := perfdata.NewWriter(out, []*perfdata.Attr{attr}, feat)
	if err != nil {
		t.Fatal(err)
	}
	hdr := func(tm uint64) perfdata.RecordHeader {
		return perfdata.RecordHeader{SampleIDFields: perfdata.SampleIDFields{Pid: arm64TestPid, Tid: arm64TestPid, Time: tm}}
	}
	tm := uint64(1000)
	if err := w.WriteComm(&perfdata.Comm{RecordHeader: hdr(tm), Pid: arm64TestPid, Tid: arm64TestPid, Comm: f.Name, Exec: true}); err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		tm++
		name := m.Name
		if m.Object != "" {
			name = f.ObjectPath(m)
		}
		if name == "" {
			name = "//anon"
		}
		prot := uint32(0)
		for i, b := range []uint32{protRead, protWrite, protExec} {
			if m.Perms[i] != '-' {
				prot |= b
			}
		}
		mm := &perfdata.Mmap{RecordHeader: hdr(tm), Pid: arm64TestPid, Tid: arm64TestPid,
			Start: m.Start, Len: m.End - m.Start, PgOff: m.Offset, Prot: prot, Flags: mapPrivate, Filename: name}
		mm.Misc = perfdata.MiscUser
		if prot&protExec == 0 {
			mm.Misc |= perfdata.MiscMmapData
		}
		if err := w.WriteMmap(mm); err != nil {
			t.Fatal(err)
		}
	}
	tm++
	s := &perfdata.Sample{RecordHeader: hdr(tm), IP: regs[arch.PerfRegARM64PC], Period: 250000,
		RegsABI: perfdata.RegsABI64, Regs: regs, StackData: stack, StackDynSize: uint64(len(stack))}
	s.Misc = perfdata.MiscUser
	if err := w.WriteSample(s); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// arm64PerfRegs returns f's registers as perf's arm64 sample_regs_user
// values (bits 0..32: x0..x28, x29, lr, sp, pc; the same numbers as DWARF).
func arm64PerfRegs(f *fixture.Fixture) []uint64 {
	regs := make([]uint64, arch.PerfRegARM64PC+1)
	for _, r := range f.Regs {
		if r.Dwarf >= 0 && r.Dwarf < len(regs) {
			regs[r.Dwarf] = r.Value
		}
	}
	return regs
}

// runReport runs report.Run on a recording and returns its one sample's
// user frames, inlined frames folded into the function they were inlined
// into (gdb's fixtures have none; the unwinder's frames are physical).
func runReport(t *testing.T, path string, opts Options) ([]Frame, string) {
	t.Helper()
	r, err := perfdata.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if a := r.Session().Arch(); a != arch.ARM64 {
		t.Fatalf("session arch %v; want arm64", a)
	}
	opts.Kallsyms = "-"
	opts.BuildIDDir = t.TempDir()
	opts.Jobs = 1
	var frames []Frame
	stop, n := "", 0
	sum, err := Run(r, opts, func(s *Sample) error {
		n++
		stop = s.Stop
		for _, fr := range s.Frames {
			if !fr.Kernel && !fr.Inlined {
				frames = append(frames, fr)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || sum.Samples != 1 {
		t.Fatalf("%d samples emitted, summary %d; want 1", n, sum.Samples)
	}
	for k, v := range sum.Missing {
		if !strings.HasPrefix(k, "[") && k != "//anon" {
			t.Errorf("object %s missing: %s", k, v)
		}
	}
	return frames, stop
}

func TestARM64PerfDataFixtures(t *testing.T) {
	paths, err := fixture.Glob("aarch64")
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Skip("no arm64 fixtures")
	}
	for _, path := range paths {
		name := strings.TrimSuffix(filepath.Base(path), ".json")
		t.Run(name, func(t *testing.T) {
			f, err := fixture.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(f.ExtraStacks) > 0 {
				t.Skip("perf.data holds one stack snapshot per sample")
			}
			data := arm64PerfData(t, t.TempDir(), f, arm64PerfRegs(f), f.Stack.Data, f.Maps)
			got, stop := runReport(t, data, Options{})
			checkARM64Frames(t, f, got, stop, 0)
		})
	}
}

// checkARM64Frames compares report frames with the fixture's gdb frames
// (their PCs shifted by delta where they lie in relocated code; 0 for
// none).
func checkARM64Frames(t *testing.T, f *fixture.Fixture, got []Frame, stop string, delta uint64) {
	t.Helper()
	want := f.GDB
	if f.Expect.Frames > 0 && f.Expect.Frames < len(want) && f.Expect.Stop != "truncated" {
		want = want[:f.Expect.Frames]
	}
	wantStop := f.Expect.Stop
	// qemu's [sigpage] has no ELF file: in a perf.data it is an anonymous
	// executable mapping whose bytes the report cannot read, so the
	// trampoline cannot be recognised there (an arm64 kernel's trampoline
	// is in the vdso, whose image perf keeps in its build-id cache; see
	// a64_vdso_sigreturn). Check the frames up to the trampoline frame.
	for i, w := range want {
		if m, ok := f.FindMap(w.PC); ok && w.Signal && m.Object == "" && m.Code != "" {
			want, wantStop = want[:i+1], ""
			break
		}
	}
	bad := false
	for i := 0; i < min(len(got), len(want)); i++ {
		g, w := got[i], want[i]
		wpc := w.PC
		if delta != 0 {
			if m, ok := f.FindMap(wpc); ok && m.Object != "" {
				wpc += delta
			}
		}
		switch {
		case g.PC != wpc:
			t.Errorf("frame %d: pc %#x (%s, %s); gdb %#x (%s)", i, g.PC, g.Symbol, g.How, wpc, w.Function)
			bad = true
		case w.Signal != g.Signal && wantStop != "":
			t.Errorf("frame %d: signal trampoline %v; gdb %v", i, g.Signal, w.Signal)
		case w.Function != "" && !frameNamed(g, w.Function):
			t.Errorf("frame %d: pc %#x symbol %q; gdb %q", i, g.PC, g.Symbol, w.Function)
		}
		if bad {
			break
		}
	}
	switch {
	case wantStop == "truncated":
		if len(got) < f.Expect.Frames || len(got) > len(f.GDB) {
			t.Errorf("%d frames before the snapshot ran out; want between %d and %d", len(got), f.Expect.Frames, len(f.GDB))
		}
	case wantStop == "":
		if len(got) < len(want) {
			t.Errorf("%d frames; want at least gdb's %d up to the trampoline", len(got), len(want))
		}
	case len(got) != len(want):
		t.Errorf("%d frames; gdb has %d", len(got), len(want))
	}
	if wantStop != "" && stop != wantStop {
		t.Errorf("stop %s; want %s", stop, wantStop)
	}
	if t.Failed() {
		for i, g := range got {
			t.Logf("  got #%d pc %#x %s+%#x (%s) %s", i, g.PC, g.Symbol, g.SymOff, g.Module, g.How)
		}
		for i, w := range f.GDB {
			t.Logf("  gdb #%d pc %#x %s", i, w.PC, w.Function)
		}
	}
}

// frameNamed reports whether gdb's function name names the report frame:
// the name report chose, or another symbol
// of the object covering the same address (glibc's aliases such as __close
// and close).
func frameNamed(g Frame, name string) bool {
	if g.Symbol == name {
		return true
	}
	// Frames carry linkage (mangled) names; gdb prints them demangled.
	if elfcache.Demangle(g.Symbol) == name {
		return true
	}
	if g.Module == "" || strings.HasPrefix(g.Module, "[") {
		return false
	}
	ef, err := elf.Open(g.Module)
	if err != nil {
		return false
	}
	defer ef.Close()
	syms, _ := ef.Symbols()
	dyn, _ := ef.DynamicSymbols()
	// The link-time address: the object's symbol g.Symbol is at Addr-SymOff.
	var base uint64
	found := false
	for _, s := range append(syms, dyn...) {
		if s.Name == g.Symbol && g.Symbol != "" {
			base, found = s.Value+g.SymOff, true
			break
		}
	}
	if !found {
		return false
	}
	for _, s := range append(syms, dyn...) {
		n := s.Name
		if i := strings.IndexByte(n, '@'); i >= 0 {
			n = n[:i]
		}
		if n == name && base >= s.Value && (base < s.Value+s.Size || base == s.Value) {
			return true
		}
	}
	return false
}

// PAC masks and virtual address sizes. perf.data does not record the PAC
// mask, so report takes it from Options.PACMask (ustack report --pac-mask),
// by default arch.PACMask(48): every bit from 48 up.
//
// The trade-off of that default on a kernel with 52-bit user VAs (LVA):
// the PAC field then starts at bit 52, and bits 48..51 are address bits.
// Linux hands out addresses above 2^48 only to a process that asks for them
// with an mmap hint above 2^48; in the default layout every user address is
// below 2^48, bits 48..51 of a signed pointer are zero, and the 48-bit mask
// strips exactly the PAC. Only code mapped above 2^48 needs --pac-mask
// va:52, where the 48-bit mask would clear real address bits. The other way
// round, a 52-bit mask on a 48-bit system leaves PAC bits 48..51 in the
// address, so 48 is the safe default.

// pacVariant rewrites the a64_pac fixture as on a 52-bit-VA system: every
// mapping with an object moves up by delta (0 or 1<<48: code above 2^48),
// and every PAC-signed return address (in x30 or on the stack) is re-signed
// with a PAC in bits 52..62 (bit 55 clear, as for a user address) instead of
// the 48..54 qemu produced; unsigned code pointers move with their code.
func pacVariant(t *testing.T, f *fixture.Fixture, delta uint64) ([]uint64, []byte, []fixture.Map) {
	t.Helper()
	strip48 := arch.PACMask(48)
	var maps []fixture.Map
	for _, m := range f.Maps {
		if m.Object != "" {
			m.Start += delta
			m.End += delta
		}
		maps = append(maps, m)
	}
	signed := 0
	fix := func(v uint64) uint64 {
		a := v &^ strip48
		m, ok := f.FindMap(a)
		if !ok || m.Object == "" || !strings.Contains(m.Perms, "x") {
			return v
		}
		a += delta
		if v&strip48 != 0 {
			signed++
			a |= 0x2a<<56 | 0x5<<52 // a PAC in bits 52..54 and 56..62
		}
		return a
	}
	regs := arm64PerfRegs(f)
	for i := range regs {
		if i != arch.PerfRegARM64SP && i != arch.PerfRegARM64X29 {
			regs[i] = fix(regs[i])
		}
	}
	stack := bytes.Clone(f.Stack.Data)
	for off := 0; off+8 <= len(stack); off += 8 {
		v := fix(leUint64(stack[off:]))
		putLeUint64(stack[off:], v)
	}
	if signed < 2 {
		t.Fatalf("only %d signed return addresses found in %s", signed, f.Name)
	}
	return regs, stack, maps
}

func leUint64(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

func putLeUint64(b []byte, v uint64) {
	for i := 0; i < 8; i++ {
		b[i] = byte(v >> (8 * i))
	}
}

func loadPACFixture(t *testing.T) *fixture.Fixture {
	t.Helper()
	f, err := fixture.Load(filepath.Join(fixture.Dir(), "fixtures", "aarch64", "a64_pac.json"))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestARM64PACMask52BitVAHighCodeNeedsVA52 covers code mapped above 2^48
// on a 52-bit-VA kernel: --pac-mask va:52 strips the PAC and gives gdb's
// frames; the default 48-bit mask also clears address bit 48, so the first
// signed return address lands in no mapping (the documented limitation of
// the default).
func TestARM64PACMask52BitVAHighCodeNeedsVA52(t *testing.T) {
	f := loadPACFixture(t)
	const delta = 1 << 48
	regs, stack, maps := pacVariant(t, f, delta)
	data := arm64PerfData(t, t.TempDir(), f, regs, stack, maps)

	got, stop := runReport(t, data, Options{PACMask: arch.PACMask(52)})
	checkARM64Frames(t, f, got, stop, delta) // gdb PCs in relocated code, shifted

	got, stop = runReport(t, data, Options{}) // default: 48-bit VA
	if stop == "outermost" && len(got) == len(f.GDB) {
		t.Fatalf("the 48-bit mask unwound code above 2^48 completely; it should clear address bit 48")
	}
	// The over-stripped return address ends the walk and is no frame.
	if stop != "no_mapping" {
		t.Errorf("stop %s after %d frames; want no_mapping at the over-stripped return address", stop, len(got))
	}
	for i, g := range got {
		if g.PC < delta && i > 0 {
			t.Errorf("frame %d: the over-stripped return address %#x printed as a frame", i, g.PC)
		}
	}
}

// TestARM64PACMask52BitVALowCodeEitherMask covers the default layout on a
// 52-bit-VA kernel (all code below 2^48, PAC in bits 52 and up): both the
// 52-bit mask and the default 48-bit one strip it exactly.
func TestARM64PACMask52BitVALowCodeEitherMask(t *testing.T) {
	f := loadPACFixture(t)
	regs, stack, maps := pacVariant(t, f, 0)
	data := arm64PerfData(t, t.TempDir(), f, regs, stack, maps)
	for _, o := range []Options{{PACMask: arch.PACMask(52)}, {}} {
		got, stop := runReport(t, data, o)
		checkARM64Frames(t, f, got, stop, 0)
	}
}

// TestARM64PACMask48BitVANotVA52 covers the recorded case (qemu, 48-bit VA,
// PAC in bits 48..54): the default strips it; va:52 leaves PAC bits 48..51
// in the first signed return address, which then lies in no mapping.
func TestARM64PACMask48BitVANotVA52(t *testing.T) {
	f := loadPACFixture(t)
	data := arm64PerfData(t, t.TempDir(), f, arm64PerfRegs(f), f.Stack.Data, f.Maps)
	got, stop := runReport(t, data, Options{PACMask: arch.PACMask(48)})
	checkARM64Frames(t, f, got, stop, 0)
	got, stop = runReport(t, data, Options{PACMask: arch.PACMask(52)})
	if stop == "outermost" && len(got) == len(f.GDB) {
		t.Errorf("va:52 unwound a 48-bit capture completely; PAC bits 48..51 should remain")
	}
}
