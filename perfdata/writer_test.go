package perfdata

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ustack/ustack/internal/testprog"
)

// copyFile reads src and writes every record to a new file with the typed
// Write helpers where there is one and WriteRecord otherwise.
func copyFile(t *testing.T, src, dst string) (*Session, []Record) {
	r, err := Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := r.Session()
	feat := s.Features
	w, err := NewWriter(f, s.Attrs, &feat)
	if err != nil {
		t.Fatal(err)
	}
	var recs []Record
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec.Clone())
		switch x := rec.(type) {
		case *Sample:
			err = w.WriteSample(x)
		case *Mmap:
			err = w.WriteMmap(x)
		case *Comm:
			err = w.WriteComm(x)
		case *Fork:
			err = w.WriteFork(x)
		case *Exit:
			err = w.WriteExit(x)
		case *Lost:
			err = w.WriteLost(x)
		default:
			if x.Header().Type == RecordFinishedRound {
				err = w.WriteFinishedRound()
			} else {
				raw := r.RawRecord()
				err = w.WriteRecord(x.Header().Type, x.Header().Misc, raw[8:])
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return s, recs
}

func TestWriterRoundTrip(t *testing.T) {
	src := filepath.Join("testdata", "dwarf.data")
	dst := filepath.Join(t.TempDir(), "copy.data")
	s, recs := copyFile(t, src, dst)

	// The data section is byte-identical: the typed encoders are exact
	// inverses of the decoders for what the kernel and perf write.
	orig, _ := os.ReadFile(src)
	cp, _ := os.ReadFile(dst)
	r2, err := Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	s2 := r2.Session()
	od := orig[s.DataOffset : s.DataOffset+s.DataSize]
	cd := cp[s2.DataOffset : s2.DataOffset+s2.DataSize]
	if !bytes.Equal(od, cd) {
		t.Errorf("data sections differ: %d vs %d bytes", len(od), len(cd))
	}
	got, err := readAll(r2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(recs) {
		t.Fatalf("%d records read back, wrote %d", len(got), len(recs))
	}
	for i := range got {
		a, b := got[i], recs[i]
		ha, hb := a.Header(), b.Header()
		if ha.Offset-s2.DataOffset != hb.Offset-s.DataOffset || ha.Type != hb.Type || ha.Size != hb.Size || ha.SampleIDFields != hb.SampleIDFields {
			t.Fatalf("record %d: %+v vs %+v", i, *ha, *hb)
		}
		if sa, ok := a.(*Sample); ok {
			sb := b.(*Sample)
			sa.RecordHeader, sb.RecordHeader = RecordHeader{}, RecordHeader{}
			if !reflect.DeepEqual(sa, sb) {
				t.Fatalf("sample %d differs", i)
			}
		}
	}
	f1, f2 := s.Features, s2.Features
	if f1.Arch != f2.Arch || f1.Hostname != f2.Hostname || f1.OSRelease != f2.OSRelease ||
		f1.NrCPUsAvail != f2.NrCPUsAvail || f1.NrCPUsOnline != f2.NrCPUsOnline ||
		!reflect.DeepEqual(f1.Cmdline, f2.Cmdline) || !reflect.DeepEqual(f1.BuildIDs, f2.BuildIDs) ||
		f1.TotalMem != f2.TotalMem || f1.CPUDesc != f2.CPUDesc || f1.Version != f2.Version {
		t.Errorf("features differ:\n%+v\n%+v", f1, f2)
	}
	if s2.Attrs[0].Name != s.Attrs[0].Name || !reflect.DeepEqual(s2.Attrs[0].IDs, s.Attrs[0].IDs) {
		t.Errorf("attr %+v vs %+v", s2.Attrs[0], s.Attrs[0])
	}

	// perf itself accepts the file and sees the same records and header.
	testprog.Perf(t)
	dump, hdr := perfDump(t, dst)
	n, ns := compareWithDump(t, dst, dump)
	t.Logf("written file: %d records, %d samples match perf script -D", n, ns)
	compareHeader(t, dst, s2, hdr)
	testprog.Output(t, testprog.PerfCommand(t, "report", "--stdio", "-i", dst))
}

// TestWriterSynthetic writes records from scratch, with a sample_type
// covering every field, and reads them back.
func TestWriterSynthetic(t *testing.T) {
	attr := &Attr{
		Type: TypeSoftware, Config: 0, SamplePeriod: 1000,
		SampleType: SampleIdentifier | SampleIP | SampleTID | SampleTime | SampleAddr | SampleID |
			SampleStreamID | SampleCPU | SamplePeriod | SampleRead | SampleCallchain | SampleRaw |
			SampleBranchStack | SampleRegsUser | SampleStackUser | SampleWeight | SampleDataSrc |
			SampleTransaction | SampleRegsIntr | SamplePhysAddr | SampleCgroup | SampleDataPageSize |
			SampleCodePageSize | SampleAux,
		ReadFormat:       FormatGroup | FormatID | FormatTotalTimeEnabled | FormatTotalTimeRunning | FormatLost,
		Flags:            AttrSampleIDAll | AttrMmap2 | AttrCommExec | AttrDisabled,
		BranchSampleType: BranchHWIndex,
		SampleRegsUser:   0xff0fff,
		SampleStackUser:  64,
		SampleRegsIntr:   0x3,
		IDs:              []uint64{7, 8},
		Name:             "cpu-clock",
	}
	attr2 := &Attr{Type: TypeSoftware, Config: 1, SamplePeriod: 1, SampleType: SampleIdentifier | SampleIP | SampleTID | SampleTime,
		Flags: AttrSampleIDAll, Name: "task-clock"}
	feat := &Features{Arch: "x86_64", Hostname: "h", OSRelease: "6.1", Version: "6.1.0", NrCPUsAvail: 4, NrCPUsOnline: 2,
		Cmdline: []string{"ustack", "record"}, TotalMem: 1234,
		BuildIDs: []BuildID{{Misc: MiscUser, Pid: -1, BuildID: bytes.Repeat([]byte{0xab}, 20), Filename: "/bin/true"}}}
	path := filepath.Join(t.TempDir(), "syn.data")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(f, []*Attr{attr, attr2}, feat)
	if err != nil {
		t.Fatal(err)
	}
	wa := w.Attrs()
	regs := make([]uint64, 20)
	for i := range regs {
		regs[i] = uint64(i * 3)
	}
	stack := make([]byte, 64)
	for i := range stack {
		stack[i] = byte(i)
	}
	smp := &Sample{
		RecordHeader: RecordHeader{Misc: MiscUser, Attr: wa[0], SampleIDFields: SampleIDFields{Pid: 10, Tid: 11, Time: 500, ID: 8, StreamID: 9, CPU: 1}},
		IP:           0x401000, Addr: 0x10, Period: 1000,
		Read:      ReadValues{TimeEnabled: 5, TimeRunning: 4, Values: []ReadValue{{Value: 1, ID: 7, Lost: 0}, {Value: 2, ID: 8, Lost: 1}}},
		Callchain: []uint64{ContextKernel, 0xffffffff81000000, ContextUser, 0x401000, 0x402000},
		Raw:       []byte{1, 2, 3, 4}, BranchHWIndex: 3,
		Branches: []BranchEntry{{From: 1, To: 2, Flags: 3}},
		RegsABI:  RegsABI64, RegsMask: 0xff0fff, Regs: regs,
		StackData: stack, StackDynSize: 48,
		Weight: 9, DataSrc: 10, Transaction: 11,
		IntrRegsABI: RegsABI64, IntrRegsMask: 3, IntrRegs: []uint64{100, 200},
		PhysAddr: 12, Cgroup: 13, DataPageSize: 4096, CodePageSize: 4096, AuxData: make([]byte, 16),
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	hdr := func(a *Attr, tm uint64) RecordHeader {
		return RecordHeader{Attr: a, SampleIDFields: SampleIDFields{Pid: 10, Tid: 11, Time: tm}}
	}
	must(w.WriteComm(&Comm{RecordHeader: hdr(wa[0], 100), Pid: 10, Tid: 11, Comm: "prog", Exec: true}))
	must(w.WriteMmap(&Mmap{RecordHeader: hdr(wa[0], 200), Pid: 10, Tid: 11, Start: 0x400000, Len: 0x1000, PgOff: 0, Maj: 8, Min: 1, Ino: 99, Prot: 5, Flags: 2, Filename: "/bin/prog"}))
	must(w.WriteMmap(&Mmap{RecordHeader: hdr(wa[1], 300), Pid: 10, Tid: 11, Start: 0x500000, Len: 0x2000, PgOff: 0x1000, BuildID: bytes.Repeat([]byte{1}, 20), Filename: "/lib/x.so"}))
	must(w.WriteFork(&Fork{RecordHeader: hdr(wa[0], 350), Pid: 12, Ppid: 10, Tid: 12, Ptid: 11, Time: 350}))
	must(w.WriteSample(smp))
	must(w.WriteFinishedRound())
	must(w.WriteExit(&Exit{RecordHeader: hdr(wa[1], 600), Pid: 12, Ppid: 10, Tid: 12, Ptid: 11, Time: 600}))
	must(w.WriteLost(&Lost{RecordHeader: hdr(wa[0], 700), LostID: 7, Lost: 3}))
	must(w.Close())
	f.Close()

	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := readAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 8 {
		t.Fatalf("%d records", len(got))
	}
	gs := got[4].(*Sample)
	if gs.Attr == nil || gs.Attr.Name != "cpu-clock" || gs.ID != 8 {
		t.Fatalf("sample attr %v id %d", gs.Attr, gs.ID)
	}
	want := *smp
	want.RecordHeader = RecordHeader{}
	want.EventName = "cpu-clock"
	gs2 := *gs
	gs2.RecordHeader = RecordHeader{}
	if !reflect.DeepEqual(&gs2, &want) {
		t.Errorf("sample:\n got %+v\nwant %+v", gs2, want)
	}
	if gs.Time != 500 || gs.Pid != 10 || gs.CPU != 1 || gs.StreamID != 9 {
		t.Errorf("sample ids %+v", gs.SampleIDFields)
	}
	if m := got[2].(*Mmap); m.Attr == nil || m.Attr.Name != "task-clock" || len(m.BuildID) != 20 || m.Filename != "/lib/x.so" || m.Time != 300 {
		t.Errorf("mmap %+v", m)
	}
	if c := got[0].(*Comm); !c.Exec || c.Comm != "prog" || c.Time != 100 {
		t.Errorf("comm %+v", c)
	}
	k, u := SplitCallchain(gs.Callchain)
	if !reflect.DeepEqual(k, []uint64{0xffffffff81000000}) || !reflect.DeepEqual(u, []uint64{0x401000, 0x402000}) {
		t.Errorf("split %x %x", k, u)
	}
	if u2 := UserCallchain(gs.Callchain); !reflect.DeepEqual(u2, u) {
		t.Errorf("user chain %x", u2)
	}
	if len(gs.Stack()) != 48 {
		t.Errorf("stack %d", len(gs.Stack()))
	}
	sf := r.Session().Features
	if sf.Hostname != "h" || sf.NrCPUsAvail != 4 || sf.NrCPUsOnline != 2 || len(sf.BuildIDs) != 1 ||
		sf.BuildIDs[0].Filename != "/bin/true" || sf.BuildIDs[0].Pid != -1 || !bytes.Equal(sf.BuildIDs[0].BuildID, feat.BuildIDs[0].BuildID) {
		t.Errorf("features %+v", sf)
	}
	if perf, err := exec.LookPath("perf"); err == nil {
		out, err := exec.Command(perf, "report", "--header-only", "-i", path).CombinedOutput()
		if err != nil {
			t.Fatalf("perf report --header-only: %v\n%s", err, out)
		}
		r2, _ := Open(path)
		readAll(r2)
		compareHeader(t, path, r2.Session(), string(out))
		r2.Close()
		if !bytes.Contains(out, []byte("ababababababababababababababababababab")) {
			// build ids are shown by perf buildid-list, not the header; check there.
			bl, err := exec.Command(perf, "buildid-list", "-i", path).CombinedOutput()
			if err != nil || !bytes.Contains(bl, []byte("abababababababababababababababababababab /bin/true")) {
				t.Errorf("perf buildid-list: %v\n%s", err, bl)
			}
		}
	}
}

// TestWriteRaw: records copied as raw bytes (as a recorder copies a ring)
// read back exactly like records written one by one.
func TestWriteRaw(t *testing.T) {
	dir := t.TempDir()
	attr := &Attr{Type: 1, SampleType: SampleTID | SampleTime, Flags: AttrSampleIDAll, Name: "cpu-clock"}
	// Two COMM records as the kernel lays them out: header, pid, tid,
	// name with its NUL padded to 8 bytes, then the sample_id trailer
	// (pid/tid, time).
	var raw []byte
	for i, name := range []string{"first", "second"} {
		body := make([]byte, 8+8+16)
		le.PutUint32(body[0:], 42)
		le.PutUint32(body[4:], 42)
		copy(body[8:], name)
		le.PutUint32(body[16:], 42)
		le.PutUint32(body[20:], 42)
		le.PutUint64(body[24:], uint64(1000+i))
		var h [8]byte
		le.PutUint32(h[:], uint32(RecordComm))
		le.PutUint16(h[6:], uint16(8+len(body)))
		raw = append(append(raw, h[:]...), body...)
	}
	path := filepath.Join(dir, "raw.data")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(f, []*Attr{attr}, &Features{Arch: "x86_64"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteRaw(raw[:40]); err != nil { // the first record
		t.Fatal(err)
	}
	if err := w.WriteRaw(raw[40:]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []string
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		if c, ok := rec.(*Comm); ok {
			got = append(got, fmt.Sprintf("%s@%d", c.Comm, c.Time))
		}
	}
	if strings.Join(got, ",") != "first@1000,second@1001" {
		t.Errorf("read back %v", got)
	}
}
