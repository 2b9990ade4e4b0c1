package capture

import (
	"bufio"
	"bytes"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/procmaps"
)

// ProcMap is one line of /proc/PID/maps.
type ProcMap struct {
	Start, End uint64
	Perms      string // "r-xp"
	PgOff      uint64
	Maj, Min   uint32
	Ino        uint64
	Path       string
}

// Exec reports whether the mapping is executable.
func (m *ProcMap) Exec() bool { return len(m.Perms) > 2 && m.Perms[2] == 'x' }

// Prot returns the PROT_* bits of the mapping.
func (m *ProcMap) Prot() uint32 {
	var p uint32
	if len(m.Perms) >= 3 {
		if m.Perms[0] == 'r' {
			p |= procmaps.ProtRead
		}
		if m.Perms[1] == 'w' {
			p |= procmaps.ProtWrite
		}
		if m.Perms[2] == 'x' {
			p |= procmaps.ProtExec
		}
	}
	return p
}

// Flags returns MAP_SHARED (1) or MAP_PRIVATE (2).
func (m *ProcMap) Flags() uint32 {
	if len(m.Perms) >= 4 && m.Perms[3] == 's' {
		return 1
	}
	return 2
}

// ReadProcMaps parses /proc/PID/maps.
func ReadProcMaps(pid int) ([]ProcMap, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return nil, err
	}
	return ParseProcMaps(b), nil
}

// ParseProcMaps parses the text of a /proc/PID/maps file; malformed lines
// are skipped.
func ParseProcMaps(b []byte) []ProcMap {
	var out []ProcMap
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		var m ProcMap
		a, e, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		var err error
		if m.Start, err = strconv.ParseUint(a, 16, 64); err != nil {
			continue
		}
		if m.End, err = strconv.ParseUint(e, 16, 64); err != nil {
			continue
		}
		m.Perms = f[1]
		m.PgOff, _ = strconv.ParseUint(f[2], 16, 64)
		if ma, mi, ok := strings.Cut(f[3], ":"); ok {
			v, _ := strconv.ParseUint(ma, 16, 32)
			m.Maj = uint32(v)
			v, _ = strconv.ParseUint(mi, 16, 32)
			m.Min = uint32(v)
		}
		m.Ino, _ = strconv.ParseUint(f[4], 10, 64)
		if len(f) >= 6 {
			// The path is the rest of the line after the fifth field
			// (it may hold spaces).
			rest := line
			for i := 0; i < 5; i++ {
				rest = strings.TrimLeft(rest, " \t")
				if j := strings.IndexAny(rest, " \t"); j >= 0 {
					rest = rest[j:]
				} else {
					rest = ""
				}
			}
			m.Path = strings.TrimSpace(rest)
		}
		out = append(out, m)
	}
	return out
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
	maps, err := ReadProcMaps(pid)
	if err != nil {
		return nil // a kernel thread or gone: no maps
	}
	for i := range maps {
		m := &maps[i]
		// Like perf with mmap_data (which --call-graph dwarf sets):
		// executable mappings and readable data mappings.
		if !m.Exec() && (len(m.Perms) == 0 || m.Perms[0] != 'r') {
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
			PgOff: m.PgOff, Maj: m.Maj, Min: m.Min, Ino: m.Ino, Prot: m.Prot(), Flags: m.Flags(), Filename: name}
		rec.Misc = perfdata.MiscUser
		if !m.Exec() {
			rec.Misc |= perfdata.MiscMmapData
		}
		rec.RecordHeader.Pid, rec.RecordHeader.Tid = uint32(pid), uint32(pid)
		if err := s.w.WriteMmap(rec); err != nil {
			return err
		}
		s.rec.noteMmap(uint32(pid), m.Start, m.End-m.Start, m.PgOff, m.Prot(), name, fileID{maj: m.Maj, min: m.Min, ino: m.Ino})
	}
	return nil
}
