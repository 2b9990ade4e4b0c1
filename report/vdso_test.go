package report

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/internal/fixture"
	"github.com/ustack/ustack/perfdata"
)

// TestVDSOFromBuildIDCache writes the x86_64 vdso fixture (a program stopped
// inside the vdso's clock_gettime) as the perf.data perf records: the vdso
// mapped as "[vdso]" with its build-id in the BUILD_ID feature, and the vdso
// image only in perf's build-id cache (~/.debug/[vdso]/<id>/vdso). The
// report must find it there and give gdb's frames.
func TestVDSOFromBuildIDCache(t *testing.T) {
	f, err := fixture.Load(filepath.Join(fixture.Dir(), "fixtures/x86_64/vdso.json"))
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	var vdsoID []byte
	cache := t.TempDir()
	for _, m := range f.Maps {
		if m.Name != "[vdso]" {
			continue
		}
		obj, err := elfcache.Open(f.Abs(m.Object), elfcache.Options{})
		if err != nil {
			t.Fatal(err)
		}
		vdsoID = obj.BuildID()
		obj.Close()
		img, _ := os.ReadFile(f.Abs(m.Object))
		d := filepath.Join(cache, "[vdso]", obj.BuildIDHex())
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "vdso"), img, 0o644)
	}
	if vdsoID == nil {
		t.Fatal("fixture has no vdso with a build-id")
	}

	// Registers in perf's x86_64 order for the usual mask 0xff0fff.
	mask := arch.AMD64.PerfMask()
	var regs []uint64
	for b := 0; b < 64; b++ {
		if mask&(1<<uint(b)) == 0 {
			continue
		}
		v := uint64(0)
		if n := arch.AMD64.PerfToDWARF(b); n >= 0 {
			for _, r := range f.Regs {
				if r.Dwarf == n {
					v = r.Value
				}
			}
		}
		regs = append(regs, v)
	}
	attr := &perfdata.Attr{Type: 1, Config: 0,
		SampleType: perfdata.SampleIdentifier | perfdata.SampleIP | perfdata.SampleTID | perfdata.SampleTime |
			perfdata.SampleCPU | perfdata.SamplePeriod | perfdata.SampleRegsUser | perfdata.SampleStackUser,
		SamplePeriod: 4000, Flags: perfdata.AttrSampleIDAll | perfdata.AttrFreq,
		SampleRegsUser: mask, SampleStackUser: uint32(len(f.Stack.Data)), Name: "cpu-clock"}
	feat := &perfdata.Features{Arch: "x86_64", BuildIDs: []perfdata.BuildID{
		{Misc: perfdata.MiscUser, Pid: -1, BuildID: vdsoID, Filename: "[vdso]"}}}
	path := filepath.Join(dir, "vdso.data")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := perfdata.NewWriter(out, []*perfdata.Attr{attr}, feat)
	if err != nil {
		t.Fatal(err)
	}
	const pid = 777
	hdr := func(tm uint64) perfdata.RecordHeader {
		return perfdata.RecordHeader{SampleIDFields: perfdata.SampleIDFields{Pid: pid, Tid: pid, Time: tm}}
	}
	w.WriteComm(&perfdata.Comm{RecordHeader: hdr(1), Pid: pid, Tid: pid, Comm: "vdso", Exec: true})
	for i, m := range f.Maps {
		if m.Perms[2] != 'x' {
			continue
		}
		name := m.Name
		if m.Object != "" && name != "[vdso]" {
			name = f.Abs(m.Object)
		}
		mm := &perfdata.Mmap{RecordHeader: hdr(uint64(2 + i)), Pid: pid, Tid: pid, Start: m.Start,
			Len: m.End - m.Start, PgOff: m.Offset, Prot: 5, Flags: 2, Filename: name}
		mm.Misc = perfdata.MiscUser
		if err := w.WriteMmap(mm); err != nil {
			t.Fatal(err)
		}
	}
	ip, _ := f.PC()
	s := &perfdata.Sample{RecordHeader: hdr(1000), IP: ip, Period: 250000, RegsABI: perfdata.RegsABI64,
		Regs: regs, StackData: f.Stack.Data, StackDynSize: uint64(len(f.Stack.Data))}
	s.Misc = perfdata.MiscUser
	if err := w.WriteSample(s); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out.Close()

	r, err := perfdata.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var frames []Frame
	var stop string
	_, err = Run(r, Options{Kallsyms: "-", BuildIDDir: cache, Jobs: 1}, func(s *Sample) error {
		stop = s.Stop
		for _, fr := range s.Frames {
			if !fr.Inlined {
				frames = append(frames, fr)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != len(f.GDB) || stop != f.Expect.Stop {
		t.Fatalf("%d frames, stop %s; gdb has %d, want stop %s", len(frames), stop, len(f.GDB), f.Expect.Stop)
	}
	for i, g := range f.GDB {
		if frames[i].PC != g.PC {
			t.Errorf("frame %d: pc %#x; gdb %#x (%s)", i, frames[i].PC, g.PC, g.Function)
		}
	}
	if frames[0].Module != "[vdso]" || frames[0].Symbol == "" {
		t.Errorf("frame 0 = %s in %s; want a vdso function", frames[0].Symbol, frames[0].Module)
	}
}
