package capture

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/ustack/ustack/archive"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/jitdump"
	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/procmaps"
	"golang.org/x/sys/unix"
)

// maxObjectSize bounds the size of an object file copied into the archive.
const maxObjectSize = 1 << 30

// objectSet collects the executable objects the recorded processes map:
// their build-ids for the BUILD_ID feature and, when archiving, their
// contents in the archive. Files are read in a background goroutine as soon
// as they are first mapped (they may be deleted or replaced later).
type objectSet struct {
	mu      sync.Mutex
	cond    *sync.Cond
	seen    map[string]bool
	pending []pendingObj
	done    bool
	ids     []perfdata.BuildID
	aw      *archive.Writer
	err     error
	n       int
	log     io.Writer
	wg      sync.WaitGroup
	buf     []byte
	// jitdumps are the JITs' dumps (jit-PID.dump marker mappings),
	// archived when the recording ends: the JIT appends to them while
	// it runs.
	jitdumps []pendingObj
}

type pendingObj struct {
	pid  uint32
	path string
	id   fileID
	// start and end bound one mapping of the file: a file deleted while
	// mapped, or a memfd, is opened through it (procmaps.MappedFile).
	start, end uint64
	// f, when set, is the file opened when it was mapped (size its
	// size), so that a process that exits at once (a process in a chroot
	// or container, whose files only /proc/PID/root reaches) still has
	// its files read.
	f    *os.File
	size int64
}

// fileID identifies a mapped file as the kernel's mmap records do: its
// device's major and minor numbers and its inode; ino 0 for unknown.
type fileID struct {
	maj, min uint32
	ino      uint64
}

// preOpen bounds the files add keeps open for the worker.
const preOpen = 256

func newObjectSet(archivePath string, withArchive bool, log io.Writer) *objectSet {
	s := &objectSet{seen: map[string]bool{}, log: log}
	s.cond = sync.NewCond(&s.mu)
	if withArchive {
		meta := archive.Meta{Arch: archName(hostArch())}
		var u unix.Utsname
		if unix.Uname(&u) == nil {
			meta.Hostname = cString(u.Nodename[:])
			meta.OSRelease = cString(u.Release[:])
		}
		if id := kernelBuildID(); id != nil {
			meta.KernelBuildID = hex.EncodeToString(id)
		}
		aw, err := archive.Create(archivePath, meta, false)
		if err != nil {
			s.err = err
		} else {
			s.aw = aw
		}
	}
	// The kernel's symbols and the vDSO are the same for every process:
	// store them before the recording starts, so that reading the large
	// /proc/kallsyms does not compete with the ring reader.
	s.seen["[vdso]"] = true
	s.process(pendingObj{path: "[kallsyms]"})
	s.process(pendingObj{path: "[vdso]"})
	s.wg.Add(1)
	go s.worker()
	return s
}

// add queues the object mapped at [start, end) by pid from path, the file
// id its mmap record gives: one per path and inode (a path may name another
// file in another process's root). The file is opened now, through the
// process's root, while the process lives; the worker reads it.
func (s *objectSet) add(pid uint32, path string, id fileID, start, end uint64) {
	if path == "" || path == "//anon" || strings.HasPrefix(path, "[") ||
		strings.HasPrefix(path, "/dev/") || strings.HasPrefix(path, "//") {
		return
	}
	key := path + "\x00" + strconv.FormatUint(id.ino, 10)
	s.mu.Lock()
	if s.seen[key] || s.done {
		s.mu.Unlock()
		return
	}
	s.seen[key] = true
	open := pid != 0 && len(s.pending) < preOpen
	s.mu.Unlock()
	p := pendingObj{pid: pid, path: path, id: id, start: start, end: end}
	if open {
		if f, size, err := openObject(p); err == nil {
			p.f, p.size = f, size
		}
	}
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		if p.f != nil {
			p.f.Close()
		}
		return
	}
	s.pending = append(s.pending, p)
	s.mu.Unlock()
	s.cond.Signal()
}

func (s *objectSet) worker() {
	defer s.wg.Done()
	// The worker only copies files into the (uncompressed) archive while
	// recording; compression waits for the end (archive.Compact). It runs
	// at normal priority: a lowered one stalls the garbage collector's
	// stop-the-world behind it, and the ring reader with it.
	for {
		s.mu.Lock()
		for len(s.pending) == 0 && !s.done {
			s.cond.Wait()
		}
		if len(s.pending) == 0 && s.done {
			s.mu.Unlock()
			return
		}
		p := s.pending[0]
		s.pending = s.pending[1:]
		s.mu.Unlock()
		s.process(p)
	}
}

func (s *objectSet) logf(format string, args ...any) {
	if s.log != nil {
		fmt.Fprintf(s.log, format, args...)
	}
}

func (s *objectSet) process(p pendingObj) {
	switch p.path {
	case "[kallsyms]":
		if id := kernelBuildID(); id != nil {
			s.addID(perfdata.BuildID{Misc: perfdata.MiscKernel, Pid: -1, BuildID: id, Filename: "[kernel.kallsyms]"})
		}
		if s.aw != nil {
			// An unprivileged reader sees every address as zero: such a
			// table names nothing, so it is not archived.
			if b, err := os.ReadFile("/proc/kallsyms"); err == nil && kallsymsHasAddresses(b) {
				if err := s.aw.AddKallsyms(b); err != nil {
					s.setErr(err)
				}
			}
		}
		return
	case "[vdso]":
		data, err := ReadVDSO()
		if err != nil {
			s.logf("ustack record: vdso: %v\n", err)
			return
		}
		obj, err := elfcache.OpenBytes("[vdso]", data, elfcache.Options{NoDebugFile: true})
		if err != nil {
			return
		}
		id := append([]byte(nil), obj.BuildID()...)
		obj.Close()
		if id != nil {
			s.addID(perfdata.BuildID{Misc: perfdata.MiscUser, Pid: -1, BuildID: id, Filename: "[vdso]"})
		}
		if s.aw != nil {
			if err := s.aw.AddVDSO(id, data); err != nil {
				s.setErr(err)
			}
		}
		return
	}
	if _, ok := jitdump.IsMarkerPath(p.path); ok {
		// Read when the recording ends (the JIT appends to it), through
		// the file opened now if the process has gone by then.
		s.mu.Lock()
		s.jitdumps = append(s.jitdumps, p)
		s.mu.Unlock()
		return
	}
	f, size, err := p.f, p.size, error(nil)
	if f == nil {
		f, size, err = openObject(p)
	}
	if err != nil {
		s.logf("ustack record: cannot archive %s: %v\n", p.path, err)
		return
	}
	defer f.Close()
	// The build-id from the file's headers (mapped, not read into memory).
	obj, err := elfcache.OpenReader(p.path, f, size, elfcache.Options{NoDebugFile: true})
	if err != nil {
		return // not ELF (a script, a JIT dump): nothing to unwind with
	}
	id := append([]byte(nil), obj.BuildID()...)
	obj.Close()
	if len(id) > 0 {
		s.addID(perfdata.BuildID{Misc: perfdata.MiscUser, Pid: -1, BuildID: id, Filename: p.path})
	}
	if s.aw == nil {
		return
	}
	if s.buf == nil {
		s.buf = make([]byte, 256<<10)
	}
	if err := s.aw.AddObjectFile(id, p.path, io.NewSectionReader(f, 0, size), size, s.buf); err != nil {
		s.setErr(err)
		return
	}
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
	if len(id) > 0 {
		// A separate debug file found by build-id travels too.
		h := hex.EncodeToString(id)
		dbg := filepath.Join(elfcache.DefaultDebugDir, ".build-id", h[:2], h[2:]+".debug")
		if df, dsize, err := openObject(pendingObj{path: dbg}); err == nil {
			s.aw.AddDebugFileStream(id, dbg, df, dsize, s.buf)
			df.Close()
		}
	}
}

func (s *objectSet) addID(b perfdata.BuildID) {
	s.mu.Lock()
	s.ids = append(s.ids, b)
	s.mu.Unlock()
}

func (s *objectSet) setErr(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

// finish waits for the queued objects, closes the archive and returns the
// BUILD_ID entries and the number of archived objects.
func (s *objectSet) finish() ([]perfdata.BuildID, int, error) {
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
	s.cond.Broadcast()
	s.wg.Wait()
	var err error
	if s.aw != nil {
		s.archiveJITDumps()
		path := s.aw.Path()
		err = s.aw.Close()
		s.aw = nil
		if err == nil {
			err = archive.Compact(path)
		}
	}
	return s.ids, s.n, errors.Join(s.err, err)
}

// archiveJITDumps stores each JIT's dump, as it is now that the recording
// ends, in the archive like an object without a build-id (by its path),
// for a report on another machine.
func (s *objectSet) archiveJITDumps() {
	for _, p := range s.jitdumps {
		f, size, err := p.f, int64(0), error(nil)
		if f != nil {
			var st os.FileInfo
			if st, err = f.Stat(); err == nil {
				size = st.Size()
			}
		} else {
			f, size, err = openObject(p)
		}
		if err != nil {
			s.logf("ustack record: cannot archive the jitdump %s: %v; a report elsewhere cannot name its JIT code\n", p.path, err)
			continue
		}
		if s.buf == nil {
			s.buf = make([]byte, 256<<10)
		}
		if err := s.aw.AddObjectFile(nil, p.path, io.NewSectionReader(f, 0, size), size, s.buf); err != nil {
			s.setErr(err)
		} else {
			s.n++
		}
		f.Close()
	}
}

// abort stops the worker without finishing the archive (error paths).
func (s *objectSet) abort() {
	s.mu.Lock()
	s.done = true
	s.pending = nil
	s.mu.Unlock()
	s.cond.Broadcast()
	s.wg.Wait()
	if s.aw != nil {
		s.aw.Close()
		s.aw = nil
	}
}

// openObject opens the file of mapping p, through /proc/PID/root first (the
// process may live in another mount namespace, or a chroot), then by its
// path; with the mapping's file id known, a file that is not the inode
// mapped is refused (the process exited and the path here is another
// file, or the pid was reused). A file no path reaches (deleted while
// mapped, a memfd: procmaps.Unlinked) is opened through the mapping itself
// while the process lives (procmaps.MappedFile), as is a file whose path
// now names another.
func openObject(p pendingObj) (*os.File, int64, error) {
	var try []string
	byMapping := ""
	if p.pid != 0 && p.start < p.end {
		byMapping = procmaps.MappedFile(int(p.pid), p.start, p.end)
	}
	if byMapping != "" && procmaps.Unlinked(p.path) {
		try = append(try, byMapping)
	}
	if p.pid != 0 {
		try = append(try, filepath.Join("/proc", strconv.Itoa(int(p.pid)), "root", p.path))
	}
	try = append(try, p.path)
	if byMapping != "" && !procmaps.Unlinked(p.path) {
		try = append(try, byMapping)
	}
	var lastErr, mapErr error
	for _, name := range try {
		f, err := os.Open(name)
		if err != nil {
			if name == byMapping {
				mapErr = err // EPERM without CAP_SYS_ADMIN
			} else {
				lastErr = err
			}
			continue
		}
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() {
			f.Close()
			return nil, 0, fmt.Errorf("not a regular file")
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && p.id.ino != 0 &&
			(sys.Ino != p.id.ino || unix.Major(uint64(sys.Dev)) != p.id.maj || unix.Minor(uint64(sys.Dev)) != p.id.min) {
			f.Close()
			lastErr = fmt.Errorf("%s is inode %d of device %d:%d, not the file the process mapped (inode %d of device %d:%d): the process was gone before its file could be read",
				name, sys.Ino, unix.Major(uint64(sys.Dev)), unix.Minor(uint64(sys.Dev)), p.id.ino, p.id.maj, p.id.min)
			continue
		}
		if st.Size() > maxObjectSize {
			f.Close()
			return nil, 0, fmt.Errorf("larger than %d bytes", maxObjectSize)
		}
		return f, st.Size(), nil
	}
	if mapErr != nil && (lastErr == nil || procmaps.Unlinked(p.path)) {
		return nil, 0, mapErr
	}
	return nil, 0, lastErr
}

// ReadVDSO returns the vDSO image of the calling process, which is the
// kernel's vDSO for this architecture (the same in every 64-bit process).
func ReadVDSO() ([]byte, error) {
	maps, err := procmaps.Read(os.Getpid())
	if err != nil {
		return nil, err
	}
	for _, m := range maps {
		if m.Path == "[vdso]" {
			f, err := os.Open("/proc/self/mem")
			if err != nil {
				return nil, err
			}
			defer f.Close()
			b := make([]byte, m.End-m.Start)
			if _, err := f.ReadAt(b, int64(m.Start)); err != nil {
				return nil, err
			}
			return b, nil
		}
	}
	return nil, errors.New("no [vdso] mapping")
}

// kernelBuildID reads the running kernel's build-id from /sys/kernel/notes.
func kernelBuildID() []byte {
	b, err := os.ReadFile("/sys/kernel/notes")
	if err != nil {
		return nil
	}
	return noteBuildID(b)
}

// noteBuildID finds the NT_GNU_BUILD_ID note in a sequence of ELF notes.
func noteBuildID(b []byte) []byte {
	le := binary.LittleEndian
	for len(b) >= 12 {
		nsz, dsz, typ := le.Uint32(b), le.Uint32(b[4:]), le.Uint32(b[8:])
		na := (uint64(nsz) + 3) &^ 3
		da := (uint64(dsz) + 3) &^ 3
		if 12+na+da > uint64(len(b)) {
			return nil
		}
		name := b[12 : 12+nsz]
		desc := b[12+na : 12+na+uint64(dsz)]
		if typ == 3 && bytes.Equal(bytes.TrimRight(name, "\x00"), []byte("GNU")) {
			return append([]byte(nil), desc...)
		}
		b = b[12+na+da:]
	}
	return nil
}

// kallsymsHasAddresses reports whether a kallsyms table shows real
// addresses (kptr_restrict hides them from unprivileged readers as zeros).
func kallsymsHasAddresses(b []byte) bool {
	for n := 0; len(b) > 0 && n < 64; n++ {
		if len(b) >= 16 && string(b[:16]) != "0000000000000000" && b[0] != ' ' {
			return true
		}
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break
		}
		b = b[i+1:]
	}
	return false
}
