package report

import (
	"bytes"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/unwinder"
)

// TestMatchFP compares a frame-pointer walk with CFI frames worked out by
// hand: a libc leaf without a frame record, called by a program function
// without one (X), called by one with a frame record (Y), called by main,
// called by libc's start. rbp at the sample is still Y's record, so the
// walk finds the PC, then main's return address (read from Y's record,
// inside Y's frame), then the start's (from main's record): X and Y are
// lost, the chain having broken in the leaf's frame.
func TestMatchFP(t *testing.T) {
	cfi := []unwinder.Frame{
		{PC: 0x1000, SP: 0x100, CFA: 0x110}, // leaf (libc)
		{PC: 0x2000, SP: 0x110, CFA: 0x140}, // X
		{PC: 0x3000, SP: 0x140, CFA: 0x180}, // Y
		{PC: 0x4000, SP: 0x180, CFA: 0x1c0}, // main
		{PC: 0x5000, SP: 0x1c0},             // __libc_start_call_main
	}
	mods := []string{"libc", "prog", "prog", "prog", "libc"}
	for _, tc := range []struct {
		name      string
		fp        []unwinder.FPFrame
		lost      []bool
		found     int
		cut       int
		breaks    map[string][2]int // object: breaks, lost
		throughFP map[string]int
	}{
		{
			name:   "skips_two_frames",
			fp:     []unwinder.FPFrame{{PC: 0x1000}, {PC: 0x4000, Record: 0x170}, {PC: 0x5000, Record: 0x1b0}},
			lost:   []bool{false, true, true, false, false},
			found:  3,
			breaks: map[string][2]int{"libc": {1, 2}, "prog": {0, 0}},
		},
		{
			// The same return addresses read from records that are
			// not in the callee's frame: not the same frames.
			name:   "records_elsewhere",
			fp:     []unwinder.FPFrame{{PC: 0x1000}, {PC: 0x2000, Record: 0x300}, {PC: 0x3000, Record: 0x90}},
			lost:   []bool{false, true, true, true, true},
			found:  1,
			cut:    1,
			breaks: map[string][2]int{"libc": {1, 4}, "prog": {0, 0}},
		},
		{
			// Every frame found: each record lies in the frame below.
			name: "complete",
			fp: []unwinder.FPFrame{{PC: 0x1000}, {PC: 0x2000, Record: 0x100}, {PC: 0x3000, Record: 0x130},
				{PC: 0x4000, Record: 0x170}, {PC: 0x5000, Record: 0x1b0}},
			lost:   []bool{false, false, false, false, false},
			found:  5,
			breaks: map[string][2]int{"libc": {0, 0}, "prog": {0, 0}},
		},
		{
			// Main's record gone bad: the start is lost above a
			// break in main's object.
			name:   "cut_at_main",
			fp:     []unwinder.FPFrame{{PC: 0x1000}, {PC: 0x2000, Record: 0x100}, {PC: 0x3000, Record: 0x130}, {PC: 0x4000, Record: 0x170}},
			lost:   []bool{false, false, false, false, true},
			found:  4,
			cut:    1,
			breaks: map[string][2]int{"libc": {0, 0}, "prog": {1, 1}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lost []bool
			found := matchFP(cfi, tc.fp, &lost)
			assert.Equal(t, tc.lost, lost)
			assert.Equal(t, tc.found, found)
			var sum Summary
			sum.addFP(&fpSample{done: true, fpFrames: len(tc.fp), found: found, mods: mods, lost: lost})
			assert.Equal(t, 1, sum.FP.Stacks)
			assert.Equal(t, 5, sum.FP.CFIFrames)
			assert.Equal(t, tc.found, sum.FP.Found)
			assert.Equal(t, tc.cut, sum.FP.CutShort)
			for mod, want := range tc.breaks {
				o := sum.FP.Objects[mod]
				if assert.NotNil(t, o, mod) {
					assert.Equal(t, want, [2]int{o.Breaks, o.Lost}, "%s: breaks, lost", mod)
				}
			}
			assert.Equal(t, 3, sum.FP.Objects["prog"].Frames)
			assert.Equal(t, 2, sum.FP.Objects["libc"].Frames)
		})
	}
}

// TestFPAuditLines checks the summary's line and the table's layout.
func TestFPAuditLines(t *testing.T) {
	var sum Summary
	var b bytes.Buffer
	sum.WriteFPAuditLine(&b)
	assert.Empty(t, b.String(), "no line without an audited stack")
	sum.FP = FPAudit{Stacks: 4, CFIFrames: 19, Found: 4, CutShort: 4, Objects: map[string]*FPObject{
		"/bin/prog": {Path: "/bin/prog", Frames: 15, Breaks: 4, Lost: 15},
		"":          {Frames: 4},
	}}
	sum.WriteFPAuditLine(&b)
	assert.Equal(t, "ustack: a frame-pointer walk would have found 4 of the 19 user frames CFI found (21.1%) and stopped 4 of 4 stacks short of their outermost frame\n", b.String())
	b.Reset()
	sum.WriteFPAuditTable(&b)
	assert.Equal(t, "ustack: frame-pointer audit of 4 stacks, by object (frames: CFI frames in it; breaks: frames whose caller the chain missed; lost: frames missed above those breaks):\n"+
		"    frames   breaks     lost  object\n"+
		"        15        4       15  /bin/prog\n"+
		"         4        0        0  [unknown]\n", b.String())
}

// BenchmarkReportFPAudit reports a recording (USTACK_BENCH_DATA, else
// perfdata's committed dwarf.data) with and without the frame-pointer
// audit, on one worker, and gives the CPU time per sample of each: the
// audit's cost is the difference.
func BenchmarkReportFPAudit(b *testing.B) {
	path, sc := benchRecording(b)
	for _, c := range []struct {
		name    string
		noAudit bool
	}{{"audit", false}, {"no_audit", true}} {
		b.Run(c.name, func(b *testing.B) {
			opts := Options{Kallsyms: "-", SectionCache: sc, Jobs: 1, NoFPAudit: c.noAudit}
			once := func() int {
				r, err := perfdata.OpenMapped(path)
				if err != nil {
					b.Fatal(err)
				}
				defer r.Close()
				sum, err := Run(r, opts, func(*Sample) error { return nil })
				if err != nil {
					b.Fatal(err)
				}
				return sum.Samples
			}
			n := once()
			b.ResetTimer()
			var ru0, ru1 syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			for i := 0; i < b.N; i++ {
				once()
			}
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/sample")
			b.ReportMetric(float64(cpu)/float64(b.N*n), "cpu-ns/sample")
		})
	}
}

// TestFPAuditJSON: a sample's fp_frames and fp_stop and the summary
// record's fp_audit, as the schema describes them.
func TestFPAuditJSON(t *testing.T) {
	var b bytes.Buffer
	w, err := NewWriter("json", &b, WriterOptions{})
	require.NoError(t, err)
	require.NoError(t, w.Write(&Sample{Event: "cpu-clock", IP: 0x401000, Stop: "outermost", FPFrames: 3, FPStop: "end",
		Frames: []Frame{{Addr: 0x401000, PC: 0x401000, Offset: 0x401000, How: "context"}}}))
	sum := &Summary{Samples: 1, FP: FPAudit{Stacks: 1, CFIFrames: 5, Found: 3, CutShort: 1, Objects: map[string]*FPObject{
		"/bin/prog": {Path: "/bin/prog", Frames: 4, Breaks: 1, Lost: 2}, "": {Frames: 1}}}}
	require.NoError(t, w.(SummaryWriter).WriteSummary(sum))
	require.NoError(t, w.Close())
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 2)
	assert.Contains(t, lines[0], `"fp_frames":3,"fp_stop":"end"`)
	assert.Contains(t, lines[1], `"fp_audit":{"stacks":1,"cfi_frames":5,"fp_found":3,"cut_short":1,"objects":[`+
		`{"path":"/bin/prog","frames":4,"breaks":1,"lost":2},{"path":null,"frames":1,"breaks":0,"lost":0}]}`)
	validateLines(t, reportSchema(t), b.Bytes())
}

// TestFPLostFollowsAudit: on a committed recording, the frames Sample.FPLost
// marks, counted once per physical frame, are the frames the audit's
// summary says a frame-pointer walk missed; kernel frames are never marked.
func TestFPLostFollowsAudit(t *testing.T) {
	r, err := perfdata.Open(filepath.Join("..", "perfdata", "testdata", "dwarf.data"))
	require.NoError(t, err)
	defer r.Close()
	marked, audited := 0, 0
	sum, err := Run(r, Options{Kallsyms: "-"}, func(s *Sample) error {
		if s.FPStop == "" {
			assert.Nil(t, s.FPLost)
			return nil
		}
		audited++
		for i, lost := range s.FPLost {
			f := &s.Frames[i]
			assert.False(t, lost && f.Kernel, "kernel frame %d marked lost", i)
			if lost && !f.Inlined && f.How != "tailcall" {
				marked++
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.NotZero(t, audited)
	assert.Equal(t, sum.FP.Stacks, audited)
	t.Logf("%d stacks audited, %d of their %d frames marked lost", audited, marked, sum.FP.CFIFrames)
	assert.NotZero(t, marked, "the recording's stacks lose frames to a frame-pointer walk")
	assert.Equal(t, sum.FP.CFIFrames-sum.FP.Found, marked)
}
