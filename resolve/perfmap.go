package resolve

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// perfMap is a JIT's symbol map, /tmp/perf-PID.map: one "START SIZE NAME"
// line (hex addresses) per generated function, the convention perf reads.
type perfMap struct {
	path string
	syms []perfMapSym
	// python: some name is a Python perf trampoline's (py::).
	python bool
}

type perfMapSym struct {
	start, end uint64
	name       string
}

// lookup returns the JIT function containing addr.
func (m *perfMap) lookup(addr uint64) (name string, off uint64, ok bool) {
	if i := m.index(addr); i >= 0 {
		return m.syms[i].name, addr - m.syms[i].start, true
	}
	return "", 0, false
}

// index returns the index in syms of the function containing addr, or -1.
func (m *perfMap) index(addr uint64) int {
	i := sort.Search(len(m.syms), func(i int) bool { return m.syms[i].end > addr })
	if i < len(m.syms) && m.syms[i].start <= addr {
		return i
	}
	return -1
}

// parsePerfMap reads a perf map; malformed lines are skipped. Later lines
// win for overlapping ranges (a JIT may reuse memory).
func parsePerfMap(path string) (*perfMap, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := &perfMap{path: path}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		fields := strings.SplitN(strings.TrimSpace(sc.Text()), " ", 3)
		if len(fields) != 3 {
			continue
		}
		start, err1 := strconv.ParseUint(strings.TrimPrefix(fields[0], "0x"), 16, 64)
		size, err2 := strconv.ParseUint(strings.TrimPrefix(fields[1], "0x"), 16, 64)
		if err1 != nil || err2 != nil || size == 0 || start+size < start {
			continue
		}
		m.syms = append(m.syms, perfMapSym{start: start, end: start + size, name: fields[2]})
		m.python = m.python || strings.HasPrefix(fields[2], "py::")
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// Sort by start, keeping input order for ties; then let later entries
	// replace the overlapped parts of earlier ones by dropping earlier
	// entries that a later one covers.
	sort.SliceStable(m.syms, func(i, j int) bool { return m.syms[i].start < m.syms[j].start })
	out := m.syms[:0]
	for _, s := range m.syms {
		for len(out) > 0 && out[len(out)-1].end > s.start {
			out = out[:len(out)-1]
		}
		out = append(out, s)
	}
	m.syms = out
	return m, nil
}
