// Package kallsyms symbolizes kernel addresses from a kallsyms table (the
// format of /proc/kallsyms: "ADDRESS TYPE NAME [MODULE]" per line), as perf
// does for the kernel part of a sample's call chain.
package kallsyms

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Symbol is one kernel text symbol.
type Symbol struct {
	Addr   uint64
	Name   string
	Module string // "" for the kernel image
}

// Table is a sorted kernel symbol table. It is immutable and safe for
// concurrent use.
type Table struct {
	syms []Symbol
}

// Load reads a kallsyms file such as /proc/kallsyms.
func Load(path string) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("kallsyms: %w", err)
	}
	defer f.Close()
	t, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("kallsyms: %s: %w", path, err)
	}
	return t, nil
}

// Parse reads kallsyms lines. Only text symbols (types t, T, w, W) are kept;
// malformed lines are skipped. A table whose addresses are all zero (read
// without privilege, kptr_restrict) is an error, since it cannot symbolize.
func Parse(r io.Reader) (*Table, error) {
	var syms []Symbol
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	nonzero := false
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) < 3 || len(f[1]) != 1 {
			continue
		}
		switch f[1][0] {
		case 't', 'T', 'w', 'W':
		default:
			continue
		}
		addr, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			continue
		}
		if addr != 0 {
			nonzero = true
		}
		s := Symbol{Addr: addr, Name: f[2]}
		if len(f) >= 4 {
			s.Module = strings.Trim(f[3], "[]")
		}
		syms = append(syms, s)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(syms) > 0 && !nonzero {
		return nil, fmt.Errorf("all addresses are zero (read as root, or lower kernel.kptr_restrict)")
	}
	// Among aliases at one address keep the last one listed: perf gives
	// kallsyms symbols the size up to the next symbol, so only the last
	// alias has a non-zero size, and perf prefers sized symbols.
	sort.SliceStable(syms, func(i, j int) bool { return syms[i].Addr < syms[j].Addr })
	out := syms[:0]
	for _, s := range syms {
		if len(out) > 0 && out[len(out)-1].Addr == s.Addr {
			out[len(out)-1] = s
			continue
		}
		out = append(out, s)
	}
	return &Table{syms: out}, nil
}

// Len returns the number of symbols.
func (t *Table) Len() int { return len(t.syms) }

// Lookup returns the symbol containing addr (the last symbol at or below
// it) and addr's offset from it.
func (t *Table) Lookup(addr uint64) (sym *Symbol, offset uint64, ok bool) {
	if t == nil {
		return nil, 0, false
	}
	i := sort.Search(len(t.syms), func(i int) bool { return t.syms[i].Addr > addr }) - 1
	if i < 0 {
		return nil, 0, false
	}
	return &t.syms[i], addr - t.syms[i].Addr, true
}
