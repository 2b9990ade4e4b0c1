// Package filestamp lets a reader of a cache file trust it without reading
// it again. A file whose data a reader read in full and found matching its
// checksum gets a stamp file beside it (".ok-" and its name) recording the
// file's identity and status as they were then: device, inode, size,
// modification and change times, and the checksum. A later reader whose
// file is exactly as stamped may skip reading it again, as git trusts a
// file whose stat data its index holds: writing the file in place,
// renaming another over it or changing its times all change its change
// time (ctime), which no user can set back. A file changed less than
// MinAge ago is not stamped, so that a change within the filesystem's
// timestamp granularity after the stamp cannot go unseen (git's "racy"
// case). Where files have no change time (not unix), nothing is stamped
// and every reader checks the data.
//
// What a stamp does not catch that reading the data did: damage below the
// filesystem (the disk's own).
//
//	magic   [8]byte "USTKOK01"
//	dev, ino, size, mtime, ctime  u64 each (times in ns)
//	dataCRC u32
//
// The section cache (elfcache) and the kernel symbols' cache (kallsyms)
// stamp their entries.
package filestamp

import (
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"time"
)

const (
	// Magic begins a stamp.
	Magic = "USTKOK01"
	// Size is a stamp's length in bytes.
	Size = 52
)

// MinAge is how long ago a file must have changed for Stamp to stamp it
// (see the package documentation); tests shorten it.
var MinAge = 2 * time.Second

// Path is the stamp file of the file at p: beside it, ".ok-" and its name.
func Path(p string) string { return filepath.Join(filepath.Dir(p), ".ok-"+filepath.Base(p)) }

// Of is the stamp of a file st with data checksum sum; ok is false when
// the file's change time is not known.
func Of(st os.FileInfo, sum uint32) (b [Size]byte, ok bool) {
	ctime, ok := Changed(st)
	if !ok {
		return b, false
	}
	dev, ino := FileID(st)
	le := binary.LittleEndian
	copy(b[:], Magic)
	le.PutUint64(b[8:], dev)
	le.PutUint64(b[16:], ino)
	le.PutUint64(b[24:], uint64(st.Size()))
	le.PutUint64(b[32:], uint64(st.ModTime().UnixNano()))
	le.PutUint64(b[40:], uint64(ctime))
	le.PutUint32(b[48:], sum)
	return b, true
}

// Checked reports whether the file at p, whose status is st and whose
// data's checksum its header gives as sum, has a stamp that matches it
// exactly: it was read in full and found good as it is now.
func Checked(p string, st os.FileInfo, sum uint32) bool {
	want, ok := Of(st, sum)
	if !ok {
		return false
	}
	f, err := os.Open(Path(p))
	if err != nil {
		return false
	}
	defer f.Close()
	var got [Size + 1]byte
	n, _ := io.ReadFull(f, got[:])
	return n == Size && [Size]byte(got[:Size]) == want
}

// Stamp writes the stamp of the file at p, whose data was just read in
// full and matched sum, unless it changed less than MinAge ago. Failing
// to write it costs only the next reader's check of the data.
func Stamp(p string, st os.FileInfo, sum uint32) {
	b, ok := Of(st, sum)
	if ctime, _ := Changed(st); !ok || time.Since(time.Unix(0, ctime)) < MinAge {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return
	}
	_, err = tmp.Write(b[:])
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), Path(p))
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
}
