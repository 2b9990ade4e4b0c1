package procmaps

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Read returns the mappings of live process pid, from /proc/PID/maps.
func Read(pid int) ([]Map, error) {
	name := "/proc/" + strconv.Itoa(pid) + "/maps"
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return Parse(name, b)
}

// Parse parses the text of a /proc/PID/maps file (name names it in
// errors): each line becomes a Map with Start, End, PgOff, Maj, Min, Ino,
// Prot, Exec, Shared and Path (everything after the inode, spaces
// included; "" for anonymous memory). Lines that are not a mapping are
// left out, and the error names the first of them by file, line and byte
// offset; the maps of the other lines are returned with it.
func Parse(name string, b []byte) ([]Map, error) {
	var out []Map
	var first error
	for off, line := 0, 0; off < len(b); line++ {
		end := bytes.IndexByte(b[off:], '\n')
		if end < 0 {
			end = len(b) - off
		}
		text := b[off : off+end]
		if m, what := parseLine(text); what == "" {
			out = append(out, m)
		} else if len(bytes.TrimSpace(text)) > 0 && first == nil {
			first = fmt.Errorf("%s: line %d (offset %d): %s: %q", name, line+1, off, what, text)
		}
		off += end + 1
	}
	return out, first
}

// parseLine parses one line "start-end perms offset maj:min inode [path]",
// or says what is wrong with it.
func parseLine(l []byte) (m Map, what string) {
	var f [5][]byte
	rest := l
	for i := range f {
		rest = bytes.TrimLeft(rest, " \t")
		j := bytes.IndexAny(rest, " \t")
		if j < 0 {
			j = len(rest)
		}
		f[i], rest = rest[:j], rest[j:]
		if len(f[i]) == 0 {
			return m, "fewer than 5 fields"
		}
	}
	a, e, ok := bytes.Cut(f[0], []byte("-"))
	if !ok {
		return m, "no start-end range"
	}
	var err error
	if m.Start, err = strconv.ParseUint(string(a), 16, 64); err != nil {
		return m, "bad start address"
	}
	if m.End, err = strconv.ParseUint(string(e), 16, 64); err != nil || m.End < m.Start {
		return m, "bad end address"
	}
	p := f[1]
	if len(p) != 4 {
		return m, "permissions are not 4 characters"
	}
	if p[0] == 'r' {
		m.Prot |= ProtRead
	}
	if p[1] == 'w' {
		m.Prot |= ProtWrite
	}
	if p[2] == 'x' {
		m.Prot |= ProtExec
		m.Exec = true
	}
	m.Shared = p[3] == 's'
	if m.PgOff, err = strconv.ParseUint(string(f[2]), 16, 64); err != nil {
		return m, "bad offset"
	}
	ma, mi, ok := bytes.Cut(f[3], []byte(":"))
	if !ok {
		return m, "device is not major:minor"
	}
	v, err1 := strconv.ParseUint(string(ma), 16, 32)
	w, err2 := strconv.ParseUint(string(mi), 16, 32)
	if err1 != nil || err2 != nil {
		return m, "bad device"
	}
	m.Maj, m.Min = uint32(v), uint32(w)
	if m.Ino, err = strconv.ParseUint(string(f[4]), 10, 64); err != nil {
		return m, "bad inode"
	}
	m.Path = string(bytes.TrimSpace(rest))
	return m, ""
}
