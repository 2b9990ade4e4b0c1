package perfdata

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
)

// TestNoTaskSampleAgainstPerf writes a recording with a sample no task
// owns (pid and tid (u32)-1, as a system-wide recording catches from a
// task that is exiting) between samples of an ordinary thread, and checks
// the comparisons the live tests make against what perf prints for it:
// perf script -D's records and perf script's tid, time and ip, both of
// which print the ids as signed ints (-1).
func TestNoTaskSampleAgainstPerf(t *testing.T) {
	attr := &Attr{Type: TypeSoftware, Config: 0, SamplePeriod: 1000000,
		SampleType: SampleIdentifier | SampleIP | SampleTID | SampleTime | SampleCPU | SamplePeriod,
		Flags:      AttrSampleIDAll, Name: "cpu-clock"}
	path := filepath.Join(t.TempDir(), "notask.data")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	w, err := NewWriter(f, []*Attr{attr}, &Features{Arch: "x86_64"})
	require.NoError(t, err)
	const none = ^uint32(0)
	hdr := func(pid, tid uint32, tm uint64, misc uint16) RecordHeader {
		return RecordHeader{Misc: misc, SampleIDFields: SampleIDFields{Pid: pid, Tid: tid, Time: tm, CPU: 1}}
	}
	require.NoError(t, w.WriteComm(&Comm{RecordHeader: hdr(10, 11, 1e9, 0), Pid: 10, Tid: 11, Comm: "prog"}))
	require.NoError(t, w.WriteSample(&Sample{RecordHeader: hdr(10, 11, 1e9+1, MiscUser), IP: 0x401000, Period: 1000000}))
	require.NoError(t, w.WriteSample(&Sample{RecordHeader: hdr(none, none, 1e9+2, MiscKernel), IP: 0xffffffff81000000, Period: 1000000}))
	require.NoError(t, w.WriteExit(&Exit{RecordHeader: hdr(10, 11, 1e9+3, 0), Pid: 10, Ppid: 1, Tid: 11, Ptid: 1, Time: 1e9 + 3}))
	require.NoError(t, w.WriteSample(&Sample{RecordHeader: hdr(none, none, 1e9+4, MiscKernel), IP: 0xffffffff81000010, Period: 1000000}))
	require.NoError(t, w.Close())

	dump := parseDump(t, strings.NewReader(testprog.Script(t, path, "-D")))
	_, ns := compareWithDump(t, path, dump)
	require.Equal(t, 3, ns)

	want := scriptSamples(t, path)
	require.Equal(t, []string{"11 1.000000001 401000", "-1 1.000000002 ffffffff81000000", "-1 1.000000004 ffffffff81000010"}, want,
		"perf script -F tid,time,ip")
	r, err := Open(path)
	require.NoError(t, err)
	defer r.Close()
	require.Equal(t, want, samplesOf(t, r))
}
