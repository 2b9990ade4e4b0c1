package perfdata

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// perf's directory format: perf record --threads (and --dir) writes a
// directory holding data, a perf.data file with the header, attrs, feature
// sections and the records perf synthesized, and one file per recording
// thread (data.0, data.1, ...) holding nothing but records, those of the
// CPUs that thread read. A side-band record of a process (its MMAP2, COMM,
// FORK) is in the file of the CPU it happened on, its samples in those of
// the CPUs it ran on: only the records of all files in timestamp order
// make sense. perf reads the data file's records first, then every data.N
// file, always from the one it has read least of, through its
// ordered_events queue; Reader does the same, and a Sorter over it puts
// them in timestamp order.

// openDir opens the directory at path in perf's directory format: a
// Reader of its data file that reads the data.N files' records after its
// own. A directory that is not one is refused, saying what it is.
func openDir(path string) (*Reader, error) {
	main := filepath.Join(path, "data")
	if st, err := os.Stat(main); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is a directory, not a perf.data file", path)
	}
	r, err := Open(main)
	if err != nil {
		return nil, err
	}
	if r.s.Pipe {
		r.Close()
		return nil, fmt.Errorf("%s: %s is pipe-mode perf.data, not the header of perf's directory format", path, main)
	}
	parts, err := dataFiles(path)
	if err != nil {
		r.Close()
		return nil, err
	}
	for _, p := range parts {
		pr, err := r.openPart(p)
		if err != nil {
			r.Close()
			return nil, err
		}
		r.parts = append(r.parts, pr)
	}
	return r, nil
}

// dataFiles returns the data.N files of a directory in the order of N.
func dataFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type part struct {
		n    int
		path string
	}
	var parts []part
	for _, e := range ents {
		s, ok := strings.CutPrefix(e.Name(), "data.")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			parts = append(parts, part{n, filepath.Join(dir, e.Name())})
		}
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].n < parts[j].n })
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = p.path
	}
	return out, nil
}

// openPart returns a Reader of the records of one data.N file, decoded
// with r's attrs (the Session is shared). It reads through a buffer (not
// mapped, not in chunks): the Sorter copies what it queues of it.
func (r *Reader) openPart(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	p := &Reader{s: r.s, ra: f, closer: f, path: path, end: st.Size(), size: st.Size(), lastOff: -1}
	p.src = io.NewSectionReader(f, 0, st.Size())
	p.br = bufio.NewReaderSize(p.src, bufSize)
	p.layout()
	return p, nil
}

// nextPart returns the next record of the data.N files, from the one read
// least of; io.EOF once all are read. A file's damage ends that file's
// records (its error is kept for the end); the others are read on.
func (r *Reader) nextPart() (Record, error) {
	for {
		var p *Reader
		for _, q := range r.parts {
			if q.err == nil && (p == nil || q.off < p.off) {
				p = q
			}
		}
		if p == nil {
			for _, q := range r.parts {
				if q.err != nil && !errors.Is(q.err, io.EOF) {
					return nil, q.err
				}
			}
			return nil, io.EOF
		}
		rec, err := p.Next()
		if err != nil {
			continue // p.err is set: the others are read on
		}
		r.inMap, r.inChunk, r.last = false, false, p.last
		return rec, nil
	}
}
