//go:build unix

package kallsyms

import (
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// mappedEntry is the cache entry mapped last, reused while its file is the
// same: a table's names are substrings of the mapping, so a mapping is
// never unmapped once a table came from it, and a process that loads the
// same entry again and again (a tracer running report after report) maps
// it once.
var mappedEntry struct {
	sync.Mutex
	dev, ino uint64
	size     int64
	mtime    int64
	data     []byte
}

// readEntry returns the bytes of the cache entry at path, mapped read-only
// rather than read: the 4 MB of a kernel's table then stay out of the Go
// heap (whose collector would let the heap grow by as much again before
// collecting), and only the pages a lookup touches are resident. release
// says the caller is done with the bytes: keep (a table now refers to
// them; their pages leave the resident set until used again) or drop.
func readEntry(path string) (b []byte, release func(keep bool), err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, nil, err
	}
	size := st.Size
	if size <= 0 || size > maxEntryBytes {
		return nil, nil, errEntrySize
	}
	mappedEntry.Lock()
	defer mappedEntry.Unlock()
	m := &mappedEntry
	if m.data != nil && m.dev == uint64(st.Dev) && m.ino == st.Ino && m.size == size && m.mtime == st.Mtim.Nano() {
		// Tables from before may use it: never unmapped.
		data := m.data
		return data, func(bool) { unix.Madvise(data, unix.MADV_DONTNEED) }, nil
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		return nil, nil, err
	}
	return data, func(keep bool) {
		if !keep {
			unix.Munmap(data)
			return
		}
		// The checks read every page; lookups need few of them.
		unix.Madvise(data, unix.MADV_DONTNEED)
		mappedEntry.Lock()
		m.dev, m.ino, m.size, m.mtime, m.data = uint64(st.Dev), st.Ino, size, st.Mtim.Nano(), data
		mappedEntry.Unlock()
	}, nil
}
