package capture

import (
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/procmaps"
)

// mmapFlags returns a MMAP2 record's flags for m: MAP_SHARED (1) or
// MAP_PRIVATE (2).
func mmapFlags(m *procmaps.Map) uint32 {
	if m.Shared {
		return 1
	}
	return 2
}

// readComm returns /proc/PID/task/TID/comm.
func readComm(pid, tid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimRight(string(b), "\n")
}

// readPPid returns the PPid of /proc/PID/status.
func readPPid(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "PPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// ThreadsOf returns the thread ids of process pid, sorted.
func ThreadsOf(pid int) ([]int, error) {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out, nil
}

// allPids returns every process id in /proc.
func allPids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out
}

// synthesizer writes COMM, FORK and MMAP2 records describing already
// running processes, as perf does for -p and -a.
type synthesizer struct {
	w   *perfdata.Writer
	rec *Recorder
}

// process synthesizes one process: for each thread a FORK (from the parent
// process for the leader, from the leader for the others) then a COMM, and
// an MMAP2 for each executable or readable mapping.
func (s *synthesizer) process(pid int) error {
	tids, err := ThreadsOf(pid)
	if err != nil {
		return err
	}
	ppid := readPPid(pid)
	for _, tid := range tids {
		if tid != pid {
			f := &perfdata.Fork{Pid: uint32(pid), Ppid: uint32(pid), Tid: uint32(tid), Ptid: uint32(pid)}
			f.RecordHeader.Pid, f.RecordHeader.Tid = uint32(pid), uint32(tid)
			if err := s.w.WriteFork(f); err != nil {
				return err
			}
		} else if ppid > 0 {
			// perf synthesizes a FORK from the parent for the leader too.
			f := &perfdata.Fork{Pid: uint32(pid), Ppid: uint32(ppid), Tid: uint32(tid), Ptid: uint32(ppid)}
			f.RecordHeader.Pid, f.RecordHeader.Tid = uint32(pid), uint32(tid)
			if err := s.w.WriteFork(f); err != nil {
				return err
			}
		}
		// The COMM after the FORK, as perf does: a FORK makes the
		// thread anew with its parent's name.
		c := &perfdata.Comm{Pid: uint32(pid), Tid: uint32(tid), Comm: readComm(pid, tid)}
		c.RecordHeader.Pid, c.RecordHeader.Tid = uint32(pid), uint32(tid)
		if err := s.w.WriteComm(c); err != nil {
			return err
		}
	}
	maps, err := procmaps.Read(pid)
	if err != nil {
		return nil // a kernel thread or gone: no maps
	}
	for i := range maps {
		m := &maps[i]
		// Like perf with mmap_data (which --call-graph dwarf sets):
		// executable mappings and readable data mappings.
		if !m.Exec && m.Prot&procmaps.ProtRead == 0 {
			continue
		}
		name := m.Path
		if name == "" {
			name = "//anon"
		}
		if name == "[vvar]" || name == "[vsyscall]" || name == "[vvar_vclock]" {
			continue
		}
		rec := &perfdata.Mmap{Pid: uint32(pid), Tid: uint32(pid), Start: m.Start, Len: m.End - m.Start,
			PgOff: m.PgOff, Maj: m.Maj, Min: m.Min, Ino: m.Ino, Prot: m.Prot, Flags: mmapFlags(m), Filename: name}
		rec.Misc = perfdata.MiscUser
		if !m.Exec {
			rec.Misc |= perfdata.MiscMmapData
		}
		rec.RecordHeader.Pid, rec.RecordHeader.Tid = uint32(pid), uint32(pid)
		if err := s.w.WriteMmap(rec); err != nil {
			return err
		}
		s.rec.noteMmap(uint32(pid), m.Start, m.End-m.Start, m.PgOff, m.Prot, name, fileID{maj: m.Maj, min: m.Min, ino: m.Ino})
	}
	return nil
}
