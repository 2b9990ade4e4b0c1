package cfi

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"math/rand"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/ustack/ustack/arch"
)

const (
	libcPath  = "/lib/x86_64-linux-gnu/libc.so.6"
	cc1Path   = "/usr/lib/gcc/x86_64-linux-gnu/12/cc1"
	arm64Libc = "/usr/aarch64-linux-gnu/lib/libc.so.6"
)

// loadSections reads the CFI sections of an ELF file (debug/elf is used in
// tests only).
func loadSections(tb testing.TB, path string) (Sections, arch.Arch) {
	tb.Helper()
	f, err := elf.Open(path)
	if err != nil {
		tb.Skipf("%s: %v", path, err)
	}
	defer f.Close()
	var s Sections
	read := func(name string) Section {
		sec := f.Section(name)
		if sec == nil || sec.Type == elf.SHT_NOBITS {
			return Section{Name: name}
		}
		d, err := sec.Data()
		if err != nil {
			tb.Fatalf("%s %s: %v", path, name, err)
		}
		return Section{Name: name, Data: d, Addr: sec.Addr}
	}
	s.EHFrame = read(".eh_frame")
	s.EHFrameHdr = read(".eh_frame_hdr")
	s.DebugFrame = read(".debug_frame")
	s.DebugFrame.Addr = 0
	if t := f.Section(".text"); t != nil {
		s.TextAddr = t.Addr
	}
	if g := f.Section(".got"); g != nil {
		s.DataAddr = g.Addr
	}
	a := arch.AMD64
	if f.Machine == elf.EM_AARCH64 {
		a = arch.ARM64
	}
	return s, a
}

type hdrFDE struct {
	start, end uint64
	off        int // offset in .eh_frame
}

// hdrFDEs decodes the .eh_frame_hdr table and each listed FDE's range
// independently of the package: it assumes the encodings that GNU ld and
// GCC use (table datarel|sdata4, FDE pointers pcrel|sdata4).
func hdrFDEs(tb testing.TB, s Sections) []hdrFDE {
	h := s.EHFrameHdr.Data
	if len(h) < 12 || h[0] != 1 || h[2] != 0x03 || h[3] != 0x3b {
		tb.Skip("unusual .eh_frame_hdr")
	}
	le := binary.LittleEndian
	n := int(le.Uint32(h[8:]))
	eh := s.EHFrame.Data
	var out []hdrFDE
	for i := 0; i < n; i++ {
		start := s.EHFrameHdr.Addr + uint64(int64(int32(le.Uint32(h[12+8*i:]))))
		fdeAddr := s.EHFrameHdr.Addr + uint64(int64(int32(le.Uint32(h[16+8*i:]))))
		off := int(fdeAddr - s.EHFrame.Addr)
		if le.Uint32(eh[off:]) == 0xffffffff {
			tb.Fatalf("64-bit FDE at %#x", off)
		}
		cieOff := off + 4 - int(le.Uint32(eh[off+4:]))
		// The CIE's augmentation must give pcrel|sdata4 FDE pointers.
		aug := eh[cieOff+9:]
		aug = aug[:bytes.IndexByte(aug, 0)]
		if !bytes.HasPrefix(aug, []byte("z")) || !bytes.Contains(aug, []byte("R")) {
			tb.Fatalf("CIE at %#x has augmentation %q", cieOff, aug)
		}
		loc := s.EHFrame.Addr + uint64(off+8) + uint64(int64(int32(le.Uint32(eh[off+8:]))))
		length := uint64(le.Uint32(eh[off+12:]))
		if loc != start {
			tb.Fatalf("hdr entry %d: start %#x, FDE says %#x", i, start, loc)
		}
		out = append(out, hdrFDE{start: start, end: start + length, off: off})
	}
	return out
}

func testCoverage(t *testing.T, path string) {
	s, a := loadSections(t, path)
	tab, err := NewTable(a, s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !tab.useHdr {
		t.Fatal(".eh_frame_hdr not used")
	}
	fdes := hdrFDEs(t, s)
	starts := map[uint64]bool{}
	for _, f := range fdes {
		starts[f.start] = true
	}
	var row Row
	checked := 0
	for _, f := range fdes {
		if f.end == f.start {
			continue
		}
		for _, pc := range []uint64{f.start, f.end - 1} {
			if err := tab.Lookup(pc, &row); err != nil {
				t.Fatalf("Lookup(%#x) for FDE [%#x, %#x) at %#x: %v", pc, f.start, f.end, f.off, err)
			}
			if row.FDEStart != f.start || row.Start > pc || row.End <= pc || row.End > f.end {
				t.Fatalf("Lookup(%#x): FDE [%#x, %#x) row [%#x, %#x) FDEStart %#x", pc, f.start, f.end, row.Start, row.End, row.FDEStart)
			}
		}
		// Just past the end: not this function.
		err := tab.Lookup(f.end, &row)
		if err == nil && row.FDEStart == f.start {
			t.Fatalf("Lookup(%#x) just past [%#x, %#x) attributed to it", f.end, f.start, f.end)
		}
		if err != nil && !errors.Is(err, ErrNoFDE) {
			t.Fatalf("Lookup(%#x): %v", f.end, err)
		}
		checked++
	}
	t.Logf("%s: %d FDEs checked", path, checked)
}

func TestCoverageLibc(t *testing.T)  { testCoverage(t, libcPath) }
func TestCoverageCC1(t *testing.T)   { testCoverage(t, cc1Path) }
func TestCoverageARM64(t *testing.T) { testCoverage(t, arm64Libc) }

// TestIndexMatchesHdr checks that the sorted index built when there is no
// .eh_frame_hdr gives the same rows as the hdr search.
func TestIndexMatchesHdr(t *testing.T) {
	s, a := loadSections(t, libcPath)
	withHdr, _ := NewTable(a, s, Options{})
	s.EHFrameHdr = Section{}
	noHdr, _ := NewTable(a, s, Options{})
	if noHdr.useHdr {
		t.Fatal("hdr used")
	}
	r := rand.New(rand.NewSource(1))
	fdes := hdrFDEs(t, withHdr.hdrSections())
	var r1, r2 Row
	for i := 0; i < 20000; i++ {
		f := fdes[r.Intn(len(fdes))]
		pc := f.start + uint64(r.Int63n(int64(f.end-f.start)+16))
		e1 := withHdr.Lookup(pc, &r1)
		e2 := noHdr.Lookup(pc, &r2)
		if (e1 == nil) != (e2 == nil) || (e1 == nil && !rowsEqual(&r1, &r2)) {
			t.Fatalf("pc %#x: hdr %v %+v\nindex %v %+v", pc, e1, r1, e2, r2)
		}
	}
}

func rowsEqual(a, b *Row) bool {
	return a.Start == b.Start && a.End == b.End && a.CFA == b.CFA && a.Regs == b.Regs && a.FDEStart == b.FDEStart
}

func (t *Table) hdrSections() Sections {
	return Sections{EHFrame: Section{Data: t.eh.data, Addr: t.eh.addr}, EHFrameHdr: Section{Data: hdrBytes(t), Addr: t.hdr.addr}}
}

func hdrBytes(t *Table) []byte {
	// Rebuild a minimal header around the in-place table.
	b := []byte{1, 0x1b, 0x03, 0x3b, 0, 0, 0, 0}
	b = binary.LittleEndian.AppendUint32(b, uint32(t.hdr.count))
	return append(b, t.hdr.table...)
}

// TestReadelf compares rows with binutils' readelf --debug-dump=frames-interp,
// the independent truth: at each row start readelf prints, the CFA rule and
// every register rule it shows must match.
func TestReadelf(t *testing.T) {
	if _, err := exec.LookPath("readelf"); err != nil {
		t.Skip("no readelf")
	}
	s, a := loadSections(t, libcPath)
	// readelf may exit non-zero over unrelated warnings; use its output.
	out, err := exec.Command("readelf", "--debug-dump=frames-interp", libcPath).Output()
	if len(out) == 0 {
		t.Skipf("readelf: %v", err)
	}
	tab, _ := NewTable(a, s, Options{})
	regNum := map[string]int{}
	for i := 0; i <= 16; i++ {
		regNum[a.RegName(i)] = i
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	var cols []string
	inEH := false
	var fdeLo, fdeHi uint64
	inFDE := false
	rows, fdes := 0, 0
	var row Row
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "Contents of the .eh_frame section") {
			inEH = true
			continue
		}
		if strings.HasPrefix(line, "Contents of the") {
			inEH = false
		}
		if !inEH {
			continue
		}
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0:
			inFDE = false
			continue
		case len(fields) >= 6 && fields[3] == "FDE":
			pcs := strings.TrimPrefix(fields[5], "pc=")
			lo, hi, _ := strings.Cut(pcs, "..")
			fdeLo, _ = strconv.ParseUint(lo, 16, 64)
			fdeHi, _ = strconv.ParseUint(hi, 16, 64)
			inFDE = true
			fdes++
			continue
		case fields[0] == "LOC":
			cols = fields[1:]
			continue
		}
		if !inFDE || len(fields) != len(cols)+1 {
			continue
		}
		loc, err := strconv.ParseUint(fields[0], 16, 64)
		if err != nil || loc < fdeLo || loc >= fdeHi {
			continue
		}
		if err := tab.Lookup(loc, &row); err != nil {
			t.Fatalf("Lookup(%#x): %v", loc, err)
		}
		if row.Start != loc || row.FDEStart != fdeLo {
			t.Errorf("Lookup(%#x): row starts at %#x, FDE %#x; readelf row at %#x in FDE %#x", loc, row.Start, row.FDEStart, loc, fdeLo)
		}
		for i, col := range cols {
			v := fields[i+1]
			switch col {
			case "CFA":
				if got := cfaString(a, row.CFA); got != v {
					t.Errorf("pc %#x: CFA %s, readelf %s", loc, got, v)
				}
				continue
			case "ra":
				col = a.RegName(int(row.RA))
			}
			n, ok := regNum[col]
			if !ok {
				continue
			}
			if got := ruleString(a, row.Regs[n]); got != v {
				t.Errorf("pc %#x: %s %s, readelf %s", loc, col, got, v)
			}
		}
		rows++
	}
	if rows < 1000 {
		t.Fatalf("only %d readelf rows compared", rows)
	}
	t.Logf("compared %d rows of %d FDEs with readelf", rows, fdes)
}

func cfaString(a arch.Arch, r Rule) string {
	switch r.Kind {
	case RuleCFAOffset:
		return a.RegName(int(r.Reg)) + signed(r.Offset)
	case RuleCFAExpression:
		return "exp"
	}
	return "?"
}

func signed(v int64) string {
	if v >= 0 {
		return "+" + strconv.FormatInt(v, 10)
	}
	return strconv.FormatInt(v, 10)
}

// ruleString renders a rule the way readelf's frames-interp does.
func ruleString(a arch.Arch, r Rule) string {
	switch r.Kind {
	case RuleUnspecified, RuleUndefined:
		return "u"
	case RuleSameValue:
		return "s"
	case RuleOffset:
		return "c" + signed(r.Offset)
	case RuleValOffset:
		return "v" + signed(r.Offset)
	case RuleRegister:
		return a.RegName(int(r.Reg))
	case RuleExpression:
		return "exp"
	case RuleValExpression:
		return "vexp"
	}
	return "?"
}

func TestLookupAllocs(t *testing.T) {
	s, a := loadSections(t, libcPath)
	tab, _ := NewTable(a, s, Options{})
	fdes := hdrFDEs(t, s)
	var row Row
	i := 0
	n := testing.AllocsPerRun(1000, func() {
		f := fdes[i%len(fdes)]
		i += 7
		if err := tab.Lookup(f.start+(f.end-f.start)/2, &row); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Fatalf("Lookup allocates %v times per call", n)
	}
	// The index path, too.
	s.EHFrameHdr = Section{}
	tab, _ = NewTable(a, s, Options{})
	tab.Lookup(fdes[0].start, &row)
	n = testing.AllocsPerRun(1000, func() {
		f := fdes[i%len(fdes)]
		i += 7
		if err := tab.Lookup(f.start, &row); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Fatalf("index Lookup allocates %v times per call", n)
	}
}

// TestNewTableFirstLookupFast: NewTable and a first Lookup in a large
// object (cc1, tens of thousands of FDEs) do little work: the lookup goes
// through .eh_frame_hdr's table, no sorted index of the FDEs is built,
// and the two allocate a few kilobytes, not memory in proportion to the
// FDEs. (Counted, not timed: a busy machine makes any time bound flaky;
// BenchmarkNewTableFirstLookup measures the time.)
func TestNewTableFirstLookupFast(t *testing.T) {
	s, a := loadSections(t, cc1Path)
	fdes := hdrFDEs(t, s)
	var row Row
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	tab, err := NewTable(a, s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tab.Lookup(fdes[len(fdes)/2].start, &row); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if !tab.useHdr {
		t.Fatal("the lookup did not use .eh_frame_hdr")
	}
	if tab.ehIdx.entries != nil || tab.dfIdx.entries != nil {
		t.Fatalf("a first lookup built a sorted index of %d+%d FDEs", len(tab.ehIdx.entries), len(tab.dfIdx.entries))
	}
	if b := after.TotalAlloc - before.TotalAlloc; b > 64<<10 {
		t.Fatalf("NewTable + first Lookup allocated %d bytes for %d FDEs", b, len(fdes))
	}
}

func BenchmarkLookup(b *testing.B) {
	s, a := loadSections(b, cc1Path)
	tab, _ := NewTable(a, s, Options{})
	fdes := hdrFDEs(b, s)
	r := rand.New(rand.NewSource(1))
	pcs := make([]uint64, 4096)
	for i := range pcs {
		f := fdes[r.Intn(len(fdes))]
		for f.end == f.start {
			f = fdes[r.Intn(len(fdes))]
		}
		pcs[i] = f.start + uint64(r.Int63n(int64(f.end-f.start)))
	}
	var row Row
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := tab.Lookup(pcs[i&4095], &row); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLookupIndex(b *testing.B) {
	s, a := loadSections(b, cc1Path)
	fdes := hdrFDEs(b, s)
	s.EHFrameHdr = Section{}
	tab, _ := NewTable(a, s, Options{})
	r := rand.New(rand.NewSource(1))
	pcs := make([]uint64, 4096)
	for i := range pcs {
		f := fdes[r.Intn(len(fdes))]
		pcs[i] = f.start
	}
	var row Row
	tab.Lookup(pcs[0], &row)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := tab.Lookup(pcs[i&4095], &row); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNewTableFirstLookup(b *testing.B) {
	s, a := loadSections(b, cc1Path)
	fdes := hdrFDEs(b, s)
	pc := fdes[len(fdes)/2].start
	var row Row
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		tab, _ := NewTable(a, s, Options{})
		if err := tab.Lookup(pc, &row); err != nil {
			b.Fatal(err)
		}
	}
}
