package minidump

import (
	"bytes"
	"strconv"
	"strings"
	"unicode"

	"github.com/ustack/ustack/coredump"
)

// decodeLinux reads Breakpad's Linux streams.
func (d *Dump) decodeLinux() {
	if b, off, ok := d.stream(StreamLinuxMaps); ok {
		d.Maps = d.parseMaps(b, off)
	}
	if b, off, ok := d.stream(StreamLinuxAuxv); ok {
		if len(b)%16 != 0 {
			d.warnf(off, "LinuxAuxv has %d bytes, not a whole number of 16-byte entries", len(b))
		}
		for i := 0; i+16 <= len(b); i += 16 {
			t, v := le.Uint64(b[i:]), le.Uint64(b[i+8:])
			if t == coredump.AT_NULL {
				break
			}
			d.Auxv = append(d.Auxv, coredump.AuxvEntry{Type: t, Value: v})
		}
	}
	if b, _, ok := d.stream(StreamLinuxCmdLine); ok {
		d.CmdLine = nulStrings(b)
	}
	if b, _, ok := d.stream(StreamLinuxEnviron); ok {
		d.Environ = nulStrings(b)
	}
	if b, off, ok := d.stream(StreamLinuxStatus); ok {
		d.Status = d.parseStatus(b, off)
	}
	if b, off, ok := d.stream(StreamLinuxDSODebug); ok {
		d.DSODebug = d.parseDSODebug(b, off)
	}
}

func nulStrings(b []byte) []string {
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(b), "\x00")
}

// parseMaps reads /proc/PID/maps lines:
// start-end perms offset dev inode [path].
func (d *Dump) parseMaps(b []byte, off int64) []MapEntry {
	var out []MapEntry
	lineOff := off
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		here := lineOff
		lineOff += int64(len(line)) + 1
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		f := strings.Fields(string(line))
		if len(f) < 5 {
			d.warnf(here, "LinuxMaps line %q has %d fields, want at least 5", clip(line), len(f))
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		pgoff, err3 := strconv.ParseUint(f[2], 16, 64)
		inode, err4 := strconv.ParseUint(f[4], 10, 64)
		if !ok || err1 != nil || err2 != nil || err3 != nil || err4 != nil || end < start || len(f[1]) < 4 {
			d.warnf(here, "LinuxMaps line %q is not start-end perms offset dev inode [path]", clip(line))
			continue
		}
		e := MapEntry{Start: start, End: end, Offset: pgoff, Dev: f[3], Inode: inode,
			Read: f[1][0] == 'r', Write: f[1][1] == 'w', Exec: f[1][2] == 'x', Shared: f[1][3] == 's'}
		if len(f) > 5 {
			// The path is the rest of the line after the inode's
			// padding; it may hold spaces (and " (deleted)").
			// Fields as strings.Fields splits them: at any white space
			// (a damaged line's \v or \r too).
			rest := string(line)
			for k := 0; k < 5 && rest != ""; k++ {
				rest = strings.TrimLeftFunc(rest, unicode.IsSpace)
				if i := strings.IndexFunc(rest, unicode.IsSpace); i >= 0 {
					rest = rest[i:]
				} else {
					rest = ""
				}
			}
			e.Path = strings.TrimLeftFunc(rest, unicode.IsSpace)
		}
		out = append(out, e)
	}
	return out
}

func clip(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}

// parseStatus reads the fields of /proc/PID/status the report uses.
func (d *Dump) parseStatus(b []byte, off int64) ProcStatus {
	s := ProcStatus{Known: true}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "Name":
			s.Name = v
		case "Pid":
			s.PID, _ = strconv.Atoi(v)
		case "PPid":
			s.PPID, _ = strconv.Atoi(v)
		case "State":
			if v != "" {
				s.State = v[0]
			}
		case "Uid", "Gid":
			if f := strings.Fields(v); len(f) > 0 {
				n, _ := strconv.ParseUint(f[0], 10, 32)
				if k == "Uid" {
					s.UID = uint32(n)
				} else {
					s.GID = uint32(n)
				}
			}
		}
	}
	if s.PID == 0 {
		d.warnf(off, "LinuxProcStatus has no Pid line")
	}
	return s
}

// parseDSODebug reads MDRawDebug64 (natural alignment, as 64-bit
// Breakpad writes it: version, map, dso_count, 4 bytes of padding, brk,
// ldbase, dynamic) and its MDRawLinkMap64 entries (addr, name, padding,
// ld: 24 bytes each).
func (d *Dump) parseDSODebug(b []byte, off int64) *DSODebug {
	if len(b) < 40 {
		d.warnf(off, "LinuxDSODebug has %d bytes, want at least 40", len(b))
		return nil
	}
	dd := &DSODebug{Version: le.Uint32(b), Brk: le.Uint64(b[16:]), LDBase: le.Uint64(b[24:]), Dynamic: le.Uint64(b[32:])}
	mapRVA, n := le.Uint32(b[4:]), uint64(le.Uint32(b[8:]))
	if n > maxCount {
		d.warnf(off+8, "LinuxDSODebug lists %d objects; reading none", n)
		return dd
	}
	maps, ok := d.bytes(int64(mapRVA), n*24)
	if !ok {
		d.warnf(off+4, "LinuxDSODebug's %d link map entries at %#x run past the end of the file", n, mapRVA)
		return dd
	}
	for i := uint64(0); i < n; i++ {
		e := maps[i*24:]
		lm := LinkMap{Addr: le.Uint64(e), LD: le.Uint64(e[16:])}
		if rva := le.Uint32(e[8:]); rva != 0 {
			name, err := d.string(int64(rva))
			if err != nil {
				d.warnf(int64(mapRVA)+int64(i*24)+8, "link map entry %d's name: %v", i, err)
			}
			lm.Name = name
		}
		dd.Objects = append(dd.Objects, lm)
	}
	return dd
}
