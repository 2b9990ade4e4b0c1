package kallsyms

import (
	"os"
	"sync"

	"github.com/ustack/ustack/internal/mmapfile"
)

// mappedEntry is the cache entry mapped last, reused while its file is the
// same: a table's names are substrings of the mapping, so a mapping is
// never unmapped once a table came from it, and a process that loads the
// same entry again and again (a tracer running report after report) maps
// it once.
var mappedEntry struct {
	sync.Mutex
	fi   os.FileInfo
	data []byte
}

// readEntry returns the bytes of the cache entry at path, mapped read-only
// rather than read (where files can be mapped): the 4 MB of a kernel's
// table then stay out of the Go heap (whose collector would let the heap
// grow by as much again before collecting), and only the pages a lookup
// touches are resident; and the file's status, for its stamp. release
// says the caller is done with the bytes: keep (a table now refers to
// them; their pages leave the resident set until used again) or drop.
func readEntry(path string) (b []byte, fi os.FileInfo, release func(keep bool), err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, nil, err
	}
	defer f.Close()
	fi, err = f.Stat()
	if err != nil {
		return nil, nil, nil, err
	}
	size := fi.Size()
	if size <= 0 || size > maxEntryBytes {
		return nil, nil, nil, errEntrySize
	}
	mappedEntry.Lock()
	defer mappedEntry.Unlock()
	m := &mappedEntry
	if m.data != nil && os.SameFile(m.fi, fi) && m.fi.Size() == size && m.fi.ModTime().Equal(fi.ModTime()) {
		// Tables from before may use it: never unmapped.
		data := m.data
		return data, fi, func(bool) { mmapfile.Drop(data) }, nil
	}
	data, unmap, err := mmapfile.MapOrRead(f, size, false)
	if err != nil {
		return nil, nil, nil, err
	}
	if unmap == nil { // read, not mapped
		return data, fi, func(bool) {}, nil
	}
	return data, fi, func(keep bool) {
		if !keep {
			unmap()
			return
		}
		// The checks read every page; lookups need few of them.
		mmapfile.Drop(data)
		mappedEntry.Lock()
		m.fi, m.data = fi, data
		mappedEntry.Unlock()
	}, nil
}
