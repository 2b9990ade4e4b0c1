package perfdata

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// dumpRec is one record as `perf script -D` prints it.
type dumpRec struct {
	off       int64
	size      int
	typ       int
	time      uint64
	name      string // PERF_RECORD_ name from the summary line
	summary   string
	misc      uint64
	pid, tid  int64
	ip        uint64
	period    uint64
	addr      uint64
	hasChain  bool
	chain     []uint64
	regsMask  uint64
	regsABI   string
	regs      []uint64
	hasStack  bool
	stackSize uint64
}

var (
	reEvent   = regexp.MustCompile(`^(0x[0-9a-f]+|0)@\S+ \[0x([0-9a-f]+)\]: event: (\d+)$`)
	reSummary = regexp.MustCompile(`^((?:-?\d+ )+)(0x[0-9a-f]+|0) \[0x[0-9a-f]+\]: PERF_RECORD_(\w+)(.*)$`)
	reSample  = regexp.MustCompile(`^\((?:IP|\w+), 0x([0-9a-f]+)\): (-?\d+)/(-?\d+): 0x([0-9a-f]+) period: (\d+) addr: (?:0x)?([0-9a-f]+)`)
	reChain   = regexp.MustCompile(`^\.\.\. (?:FP )?chain: nr:(\d+)$`)
	reChainE  = regexp.MustCompile(`^\.\.\.\.\.\s+\d+: ([0-9a-f]+)$`)
	reRegs    = regexp.MustCompile(`^\.\.\. user regs: mask 0x([0-9a-f]+) ABI (.*)$`)
	reReg     = regexp.MustCompile(`^\.\.\.\. (\w+)\s+0x([0-9a-f]+)$`)
	reUstack  = regexp.MustCompile(`^\.\.\. ustack: size (\d+), offset 0x[0-9a-f]+$`)
)

// parseDump parses `perf script -D` (or perf report -D) output into records
// in the order perf delivered them.
func parseDump(t testing.TB, rd io.Reader) []*dumpRec {
	t.Helper()
	var out []*dumpRec
	var cur *dumpRec
	inRegs := false
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	hex := func(s string) uint64 {
		v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
		if err != nil {
			t.Fatalf("bad hex %q", s)
		}
		return v
	}
	for sc.Scan() {
		line := sc.Text()
		if m := reEvent.FindStringSubmatch(line); m != nil {
			typ, _ := strconv.Atoi(m[3])
			cur = &dumpRec{off: int64(hex(m[1])), size: int(hex(m[2])), typ: typ}
			out = append(out, cur)
			inRegs = false
			continue
		}
		if cur == nil {
			continue
		}
		if m := reSummary.FindStringSubmatch(line); m != nil {
			nums := strings.Fields(m[1])
			cur.time, _ = strconv.ParseUint(nums[len(nums)-1], 10, 64)
			cur.name = m[3]
			cur.summary = m[4]
			if m[3] == "SAMPLE" {
				sm := reSample.FindStringSubmatch(m[4])
				if sm == nil {
					t.Fatalf("unparsed sample line %q", line)
				}
				cur.misc = hex(sm[1])
				cur.pid, _ = strconv.ParseInt(sm[2], 10, 64)
				cur.tid, _ = strconv.ParseInt(sm[3], 10, 64)
				cur.ip = hex(sm[4])
				cur.period, _ = strconv.ParseUint(sm[5], 10, 64)
				cur.addr = hex(sm[6])
			}
			continue
		}
		if m := reChain.FindStringSubmatch(line); m != nil {
			cur.hasChain = true
			cur.chain = []uint64{}
			inRegs = false
			continue
		}
		if m := reChainE.FindStringSubmatch(line); m != nil && cur.hasChain {
			cur.chain = append(cur.chain, hex(m[1]))
			continue
		}
		if m := reRegs.FindStringSubmatch(line); m != nil {
			cur.regsMask = hex(m[1])
			cur.regsABI = m[2]
			inRegs = true
			continue
		}
		if m := reReg.FindStringSubmatch(line); m != nil && inRegs {
			cur.regs = append(cur.regs, hex(m[2]))
			continue
		}
		if m := reUstack.FindStringSubmatch(line); m != nil {
			cur.hasStack = true
			cur.stackSize, _ = strconv.ParseUint(m[1], 10, 64)
			inRegs = false
			continue
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// compareWithDump reads the perf.data in path through a Sorter (perf's
// delivery order) and checks every record against perf's dump: offset,
// type, size, timestamps, and for samples pid/tid/ip/period/addr, the
// callchain, the user registers and the captured stack size. It returns
// the number of records and samples compared.
func compareWithDump(t *testing.T, path string, dump []*dumpRec) (nrec, nsamp int) {
	t.Helper()
	nrec, nsamp = compareWithDumpUsing(t, Open, path, dump)
	// The mapped reader decodes the same records in place.
	compareWithDumpUsing(t, OpenMapped, path, dump)
	return nrec, nsamp
}

func compareWithDumpUsing(t *testing.T, open func(string) (*Reader, error), path string, dump []*dumpRec) (nrec, nsamp int) {
	t.Helper()
	r, err := open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	pipeAdj := int64(0)
	if r.Session().Pipe {
		pipeAdj = pipeHeaderSize // perf counts pipe offsets after the pipe header
	}
	s := NewSorter(r, 0)
	i := 0
	for ; ; i++ {
		rec, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if i >= len(dump) {
			t.Fatalf("record %d (%v at %#x): perf dumped only %d records", i, rec.Header().Type, rec.Header().Offset, len(dump))
		}
		d := dump[i]
		h := rec.Header()
		where := fmt.Sprintf("%s: record %d at %#x", path, i, d.off)
		if h.Offset-pipeAdj != d.off || int(h.Type) != d.typ || int(h.Size) != d.size {
			t.Fatalf("%s: got %v at %#x size %d, perf has type %d at %#x size %d", where, h.Type, h.Offset-pipeAdj, h.Size, d.typ, d.off, d.size)
		}
		if d.name != "" && h.Type < RecordHeaderAttr && h.HasTime() && h.Time != d.time {
			t.Errorf("%s: time %d, perf %d", where, h.Time, d.time)
		}
		switch x := rec.(type) {
		case *Sample:
			nsamp++
			if uint64(x.Misc) != d.misc || int64(int32(x.Pid)) != d.pid || int64(int32(x.Tid)) != d.tid || x.IP != d.ip || x.Period != d.period || x.Addr != d.addr {
				t.Errorf("%s: sample misc %#x %d/%d ip %#x period %d addr %#x; perf %#x %d/%d %#x %d %#x",
					where, x.Misc, int32(x.Pid), int32(x.Tid), x.IP, x.Period, x.Addr, d.misc, d.pid, d.tid, d.ip, d.period, d.addr)
			}
			if d.hasChain && !equalU64(x.Callchain, d.chain) {
				t.Errorf("%s: callchain %x, perf %x", where, x.Callchain, d.chain)
			}
			if d.regsABI != "" {
				if x.RegsMask != d.regsMask || !equalU64(x.Regs, d.regs) {
					t.Errorf("%s: regs mask %#x %x, perf %#x %x", where, x.RegsMask, x.Regs, d.regsMask, d.regs)
				}
			} else if x.Attr != nil && x.Attr.SampleType&SampleRegsUser != 0 && x.RegsABI != RegsABINone {
				t.Errorf("%s: regs ABI %d but perf printed no user regs", where, x.RegsABI)
			}
			if d.hasStack {
				if len(x.StackData) == 0 && d.stackSize != 0 || len(x.StackData) != 0 && x.StackDynSize != d.stackSize {
					t.Errorf("%s: stack dyn size %d (%d bytes), perf %d", where, x.StackDynSize, len(x.StackData), d.stackSize)
				}
			}
		case *Mmap:
			want := fmt.Sprintf("[%#x(%#x) @ ", x.Start, x.Len)
			if !strings.Contains(d.summary, want) || !strings.HasSuffix(d.summary, " "+x.Filename) {
				t.Errorf("%s: mmap %s%s, perf %q", where, want, x.Filename, d.summary)
			}
		case *Comm:
			want := fmt.Sprintf("%s:%d/%d", x.Comm, int32(x.Pid), int32(x.Tid))
			if !strings.HasSuffix(d.summary, want) || x.Exec != strings.HasPrefix(d.summary, " exec") {
				t.Errorf("%s: comm %s exec=%v, perf %q", where, want, x.Exec, d.summary)
			}
		case *Fork:
			want := fmt.Sprintf("(%d:%d):(%d:%d)", int32(x.Pid), int32(x.Tid), int32(x.Ppid), int32(x.Ptid))
			if d.summary != want {
				t.Errorf("%s: fork %s, perf %q", where, want, d.summary)
			}
		case *Exit:
			want := fmt.Sprintf("(%d:%d):(%d:%d)", int32(x.Pid), int32(x.Tid), int32(x.Ppid), int32(x.Ptid))
			if d.summary != want {
				t.Errorf("%s: exit %s, perf %q", where, want, d.summary)
			}
		}
	}
	if i != len(dump) {
		t.Fatalf("%s: read %d records, perf dumped %d", path, i, len(dump))
	}
	return i, nsamp
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// compareHeader checks the Session's features against `perf report
// --header-only` output.
func compareHeader(t *testing.T, path string, s *Session, hdr string) {
	t.Helper()
	kv := map[string]string{}
	var events []string
	for _, line := range strings.Split(hdr, "\n") {
		line = strings.TrimPrefix(line, "# ")
		k, v, ok := strings.Cut(line, " : ")
		if !ok {
			continue
		}
		k = strings.TrimSpace(k)
		if k == "event" {
			events = append(events, v)
			continue
		}
		kv[k] = v
	}
	f := &s.Features
	check := func(key, got string) {
		if want, ok := kv[key]; ok && strings.TrimSpace(want) != strings.TrimSpace(got) {
			t.Errorf("%s: %s = %q, perf says %q", path, key, got, want)
		} else if !ok && got != "" && got != "0" {
			t.Errorf("%s: %s = %q, perf shows none", path, key, got)
		}
	}
	check("hostname", f.Hostname)
	check("os release", f.OSRelease)
	check("perf version", f.Version)
	check("arch", f.Arch)
	check("cpudesc", f.CPUDesc)
	check("cpuid", f.CPUID)
	check("nrcpus online", strconv.Itoa(int(f.NrCPUsOnline)))
	check("nrcpus avail", strconv.Itoa(int(f.NrCPUsAvail)))
	if f.TotalMem != 0 {
		check("total memory", fmt.Sprintf("%d kB", f.TotalMem))
	}
	if f.Cmdline != nil {
		check("cmdline", strings.Join(f.Cmdline, " "))
	}
	if len(events) != len(s.Attrs) {
		t.Fatalf("%s: %d attrs, perf lists %d events", path, len(s.Attrs), len(events))
	}
	for i, ev := range events {
		a := s.Attrs[i]
		if !strings.HasPrefix(ev, "name = "+a.Name+",") {
			t.Errorf("%s: event %d name %q, perf %q", path, i, a.Name, ev)
		}
		if len(a.IDs) > 0 {
			ids := make([]string, len(a.IDs))
			for j, id := range a.IDs {
				ids[j] = strconv.FormatUint(id, 10)
			}
			if want := "id = { " + strings.Join(ids, ", ") + " }"; !strings.Contains(ev, want) {
				t.Errorf("%s: event %d ids %s, perf %q", path, i, want, ev)
			}
		}
		if want := fmt.Sprintf("type = %d, size = %d,", a.Type, a.Size); !strings.Contains(ev, want) {
			t.Errorf("%s: event %d: %q not in perf's %q", path, i, want, ev)
		}
		if a.SampleRegsUser != 0 && !strings.Contains(ev, fmt.Sprintf("sample_regs_user = %#x", a.SampleRegsUser)) {
			t.Errorf("%s: event %d sample_regs_user %#x, perf %q", path, i, a.SampleRegsUser, ev)
		}
	}
}
