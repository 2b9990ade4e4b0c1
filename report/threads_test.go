package report

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/perfdata"
)

// TestMappingsOutliveLeader: a process's mappings stay while a thread of
// it runs after its leader's EXIT (a group exit's threads exit in any
// order; a leader may pthread_exit). TestJavaPerfMap failed on a busy
// machine on such a sample: a JVM thread in get_signal after the leader's
// EXIT, its pc in no mapping for ustack while perf named it from the
// JIT's perf map. The process goes with its last known thread.
func TestMappingsOutliveLeader(t *testing.T) {
	const pid, forked, sampled, other = 4000, 4001, 4002, 5000
	const exe = "/nonexistent/prog"
	path := filepath.Join(t.TempDir(), "leader.data")
	out, err := os.Create(path)
	require.NoError(t, err)
	attr := &perfdata.Attr{Type: perfdata.TypeSoftware, Name: "cpu-clock", SamplePeriod: 1,
		SampleType: perfdata.SampleIP | perfdata.SampleTID | perfdata.SampleTime | perfdata.SamplePeriod,
		Flags:      perfdata.AttrSampleIDAll}
	w, err := perfdata.NewWriter(out, []*perfdata.Attr{attr}, &perfdata.Features{Arch: "x86_64"})
	require.NoError(t, err)
	tm := uint64(1000)
	hdr := func(p, tid uint32) perfdata.RecordHeader {
		tm++
		return perfdata.RecordHeader{SampleIDFields: perfdata.SampleIDFields{Pid: p, Tid: tid, Time: tm}}
	}
	sample := func(p, tid uint32) {
		h := hdr(p, tid)
		h.Misc = perfdata.MiscUser
		require.NoError(t, w.WriteSample(&perfdata.Sample{RecordHeader: h, IP: 0x400100, Period: 1}))
	}
	mmap := func(p uint32) {
		m := &perfdata.Mmap{RecordHeader: hdr(p, p), Pid: p, Tid: p, Start: 0x400000, Len: 0x1000, Prot: 5, Filename: exe}
		m.Misc = perfdata.MiscUser
		require.NoError(t, w.WriteMmap(m))
	}
	exit := func(p, tid uint32) {
		require.NoError(t, w.WriteExit(&perfdata.Exit{RecordHeader: hdr(p, tid), Pid: p, Ppid: 1, Tid: tid, Ptid: 1, Time: tm}))
	}
	require.NoError(t, w.WriteComm(&perfdata.Comm{RecordHeader: hdr(pid, pid), Pid: pid, Tid: pid, Comm: "prog", Exec: true}))
	mmap(pid)
	require.NoError(t, w.WriteFork(&perfdata.Fork{RecordHeader: hdr(pid, forked), Pid: pid, Ppid: pid, Tid: forked, Ptid: pid, Time: tm}))
	sample(pid, sampled) // a thread the recording shows only by its samples
	exit(pid, pid)       // the leader first
	sample(pid, forked)  // 1: mapped
	sample(pid, sampled) // 2: mapped
	exit(pid, forked)
	sample(pid, sampled) // 3: mapped
	exit(pid, sampled)   // the last known thread: the process is gone
	sample(pid, sampled) // 4: no mapping
	// A process whose leader exits with no other thread known goes at once.
	require.NoError(t, w.WriteComm(&perfdata.Comm{RecordHeader: hdr(other, other), Pid: other, Tid: other, Comm: "single", Exec: true}))
	mmap(other)
	sample(other, other) // 5: mapped
	exit(other, other)
	sample(other, other) // 6: no mapping
	require.NoError(t, w.Close())
	require.NoError(t, out.Close())

	r, err := perfdata.Open(path)
	require.NoError(t, err)
	defer r.Close()
	var modules []string
	_, err = Run(r, Options{Kallsyms: "-", Jobs: 1}, func(s *Sample) error {
		m := ""
		if len(s.Frames) > 0 {
			m = s.Frames[0].Module
		}
		modules = append(modules, m)
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, []string{exe, exe, exe, exe, "", exe, ""}, modules)
}
