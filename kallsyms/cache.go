package kallsyms

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ustack/ustack/internal/filestamp"
)

// Reading /proc/kallsyms costs 40-60 ms of CPU whatever the reader does:
// the kernel formats some 100,000 lines for it, about 300 ns each. The
// kernel image's own symbols cannot change while the machine runs (its
// addresses are randomized once per boot), so LoadProc keeps them on disk,
// keyed by the boot's id, and the next report reads a few MB of plain file
// instead. Modules, BPF programs and ftrace or kprobe trampolines come and
// go: they are not kept, and a table loaded from the cache says, through
// Covers, which addresses it answers exactly as the whole /proc/kallsyms
// would; for any other the caller loads the whole table.

// The files LoadProc reads; variables so that tests can stand in for the
// running kernel.
var (
	procKallsyms = "/proc/kallsyms"
	procBootID   = "/proc/sys/kernel/random/boot_id"
	kernelNotes  = "/sys/kernel/notes"
)

// DefaultCacheDir is where ustack keeps the running kernel's symbols:
// $XDG_CACHE_HOME/ustack/kallsyms, else ~/.cache/ustack/kallsyms.
func DefaultCacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "ustack", "kallsyms"), nil
}

// LoadProc returns the running kernel's symbol table (/proc/kallsyms).
// With a cache directory it first tries the entry of this boot there: it
// is used only when its copy of the first lines of /proc/kallsyms matches
// what the kernel shows now (so a table read with other privileges, or of
// another boot, is never used), and only for the kernel image (see
// Covers). A missing, stale or damaged entry is rebuilt: from the copy of
// /proc/kallsyms that perf record keeps in its build-id cache (perfCache,
// usually ~/.debug: [kernel.kallsyms]/BUILD-ID/kallsyms) when the running
// kernel's build-id names one and its first lines match too, else from a
// full read. An unusable cache directory only costs the speed-up. dir ""
// is Load.
//
// After a rebuild, store writes the new entry (a few MB, a few ms): the
// caller runs it once it has handed the table on, so that nobody waits
// for the write. store is nil when there is nothing to write.
func LoadProc(dir, perfCache string) (t *Table, store func(), err error) {
	if dir == "" {
		t, err = Load(procKallsyms)
		return t, nil, err
	}
	boot := bootID()
	if boot == "" {
		t, err = Load(procKallsyms)
		return t, nil, err
	}
	if t := loadEntry(filepath.Join(dir, boot)); t != nil {
		return t, nil, nil
	}
	// The table handed back is the entry's, as the next report loads it:
	// the text read and a Symbol per line (10 MB for a distribution
	// kernel, held for the whole report) give way to the entry's packed
	// arrays (4 MB), and this report answers as the next one will.
	storeTable := func(t *Table, prefix []byte) (*Table, func()) {
		syms, lo, hi, ok := t.core()
		if !ok {
			return t, nil
		}
		buf := encodeEntry(syms, lo, hi, prefix)
		if buf == nil {
			return t, nil
		}
		packed, _ := decodeEntry(buf, false)
		if packed == nil {
			return t, func() { storeEntry(dir, boot, buf) }
		}
		return packed, func() {
			if buf != nil && storeEntry(dir, boot, buf) {
				packed.moveOnto(filepath.Join(dir, boot), buf)
			}
			buf = nil // whoever keeps store does not keep the bytes
		}
	}
	if t, prefix := fromPerfCache(perfCache); t != nil {
		t, store := storeTable(t, prefix)
		return t, store, nil
	}
	procReads.Add(1)
	t, b, err := load(procKallsyms)
	if err != nil {
		return nil, nil, err
	}
	tab, store := storeTable(t, prefixOf(b))
	return tab, store, nil
}

// fromPerfCache returns the kernel image's symbols from perf's copy of
// /proc/kallsyms for the running kernel's build-id, when its first lines
// are what /proc/kallsyms shows now: the same build at the same addresses
// has the same image symbols. nil when there is no such copy.
func fromPerfCache(perfCache string) (*Table, []byte) {
	if perfCache == "" {
		return nil, nil
	}
	id := RunningBuildID()
	if id == "" {
		return nil, nil
	}
	path := PerfCachePath(perfCache, id)
	head, err := readHead(path)
	if err != nil || !procStartsWith(head) {
		return nil, nil
	}
	full, b, err := load(path)
	if err != nil || !bytes.HasPrefix(b, head) {
		return nil, nil
	}
	syms, lo, hi, ok := full.core()
	if !ok {
		return nil, nil
	}
	return &Table{syms: syms, partial: true, lo: lo, hi: hi, refs: full.refs}, head
}

// readHead returns the complete lines of a file's first prefixLen bytes.
func readHead(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, prefixLen)
	n, err := io.ReadFull(f, b)
	if err != nil && err != io.ErrUnexpectedEOF {
		return nil, err
	}
	return prefixOf(b[:n]), nil
}

// PerfCachePath returns where perf record keeps its copy of /proc/kallsyms
// for the kernel of build-id (hex) in the build-id cache dir (~/.debug, or
// an unpacked perf archive tarball): [kernel.kallsyms]/BUILD-ID/kallsyms.
func PerfCachePath(dir, buildID string) string {
	return filepath.Join(dir, "[kernel.kallsyms]", buildID, "kallsyms")
}

// RunningBuildID returns the running kernel's build-id in hex, from its
// GNU build-id note (/sys/kernel/notes); "" when there is none.
func RunningBuildID() string {
	b, err := os.ReadFile(kernelNotes)
	if err != nil {
		return ""
	}
	le := binary.LittleEndian // the notes are in the machine's order: little-endian here
	for len(b) >= 12 {
		namesz, descsz, typ := uint64(le.Uint32(b)), uint64(le.Uint32(b[4:])), le.Uint32(b[8:])
		name, desc := (namesz+3)&^3, (descsz+3)&^3
		if namesz > 1<<16 || descsz > 1<<16 || uint64(len(b)) < 12+name+desc {
			return ""
		}
		if typ == 3 && namesz == 4 && string(b[12:16]) == "GNU\x00" && descsz >= 8 && descsz <= 64 {
			return hex.EncodeToString(b[12+name : 12+name+descsz])
		}
		b = b[12+name+desc:]
	}
	return ""
}

// procStartsWith reports whether /proc/kallsyms starts with prefix now.
func procStartsWith(prefix []byte) bool {
	f, err := os.Open(procKallsyms)
	if err != nil {
		return false
	}
	defer f.Close()
	now := make([]byte, len(prefix))
	_, err = io.ReadFull(f, now)
	return err == nil && bytes.Equal(now, prefix)
}

// readTable reads a kallsyms file whole, in large reads into a buffer of
// about its size (io.ReadAll would start small and copy as it grows; the
// size of a /proc file is 0).
func readTable(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("kallsyms: %w", err)
	}
	defer f.Close()
	size := int64(8 << 20)
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		size = min(st.Size()+1, maxTable+1)
	}
	b := make([]byte, 0, size)
	for {
		if len(b) == cap(b) {
			if len(b) > maxTable {
				return nil, fmt.Errorf("kallsyms: %s: larger than %d MB: not a kallsyms table", path, maxTable>>20)
			}
			b = append(b, 0)[:len(b)]
		}
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, fmt.Errorf("kallsyms: %s: %w", path, err)
		}
	}
}

// bootID returns this boot's id, "" when there is none to key by.
func bootID() string {
	b, err := os.ReadFile(procBootID)
	if err != nil {
		return ""
	}
	id := strings.TrimSpace(string(b))
	if len(id) < 8 || len(id) > 64 || strings.Trim(id, "0123456789abcdef-") != "" {
		return ""
	}
	return id
}

// prefixLen bounds the first lines of /proc/kallsyms an entry keeps to
// check that it describes the kernel as the reader sees it now: a page,
// which the kernel formats in microseconds.
const prefixLen = 4096

// prefixOf returns the complete lines within the first prefixLen bytes.
func prefixOf(b []byte) []byte {
	b = b[:min(len(b), prefixLen)]
	return b[:bytes.LastIndexByte(b, '\n')+1]
}

// The entry layout (little-endian):
//
//	magic    [8]byte "USTKKSY2"
//	lo, hi   u64     the addresses the table answers (Covers)
//	count    u32     symbols
//	namesLen u32     bytes of names
//	prefix   u32     bytes of /proc/kallsyms's first lines
//	crc      u32     CRC-32C of everything after the header
//	the first lines, count addresses (u64), count name ends (u32), the names
const (
	entryMagic   = "USTKKSY2"
	entryHdrSize = 40
	maxEntrySyms = 1 << 24
	// maxEntryBytes bounds an entry's file (a kernel's is a few MB).
	maxEntryBytes = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errEntrySize is readEntry's answer for an empty or oversized entry.
var errEntrySize = errors.New("kallsyms: cache entry of impossible size")

// core returns the symbols of the kernel image in t (no module) and the
// range of addresses for which a lookup in them gives what a lookup in all
// of t gives, at any later time of the same boot: from the image's first
// symbol to its last (modules, BPF programs and trampolines loaded later
// go elsewhere; an address past the last symbol may be one of theirs). ok
// false when the image's symbols are interleaved with others'.
func (t *Table) core() (syms []Symbol, lo, hi uint64, ok bool) {
	first, last := -1, -1
	for i, s := range t.syms {
		if s.Module == "" {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return nil, 0, 0, false
	}
	for _, s := range t.syms[first : last+1] {
		if s.Module != "" {
			return nil, 0, 0, false
		}
	}
	return t.syms[first : last+1], t.syms[first].Addr, t.syms[last].Addr, true
}

// encodeEntry returns the entry of the kernel image's symbols, answering
// for lo-hi; nil when they cannot make one.
func encodeEntry(syms []Symbol, lo, hi uint64, prefix []byte) []byte {
	if len(syms) == 0 || len(syms) > maxEntrySyms || len(prefix) == 0 || len(prefix) > prefixLen {
		return nil
	}
	names := 0
	for _, s := range syms {
		names += len(s.Name)
	}
	if names > maxTable {
		return nil
	}
	buf := make([]byte, entryHdrSize, entryHdrSize+len(prefix)+12*len(syms)+names)
	le := binary.LittleEndian
	copy(buf, entryMagic)
	le.PutUint64(buf[8:], lo)
	le.PutUint64(buf[16:], hi)
	le.PutUint32(buf[24:], uint32(len(syms)))
	le.PutUint32(buf[28:], uint32(names))
	le.PutUint32(buf[32:], uint32(len(prefix)))
	buf = append(buf, prefix...)
	for _, s := range syms {
		buf = le.AppendUint64(buf, s.Addr)
	}
	end := 0
	for _, s := range syms {
		end += len(s.Name)
		buf = le.AppendUint32(buf, uint32(end))
	}
	for _, s := range syms {
		buf = append(buf, s.Name...)
	}
	le.PutUint32(buf[36:], crc32.Checksum(buf[entryHdrSize:], castagnoli))
	return buf
}

// moveOnto makes t, decoded from buf, use the entry at path instead,
// mapped (readEntry), when that holds buf: its pages stay in the page cache
// until a lookup touches them, where buf, on the heap, is 4 MB the garbage
// collector's headroom doubles. Lookups made meanwhile use either; the
// names they returned stay valid (the mapping is never unmapped). Only
// the header, whose checksum covers the rest, is compared: reading the
// whole entry would bring every page in.
func (t *Table) moveOnto(path string, buf []byte) {
	b, _, release, err := readEntry(path)
	if err != nil {
		return
	}
	if len(b) != len(buf) || !bytes.Equal(b[:entryHdrSize], buf[:entryHdrSize]) {
		release(false)
		return
	}
	m, _ := decodeEntry(b, false)
	if m == nil {
		release(false)
		return
	}
	t.packed.Store(m.packed.Load())
	release(true)
}

// storeEntry writes buf (encodeEntry's) as the entry of boot, through a
// temporary file renamed into place (concurrent reports never see a
// partial entry), and removes the entries of other boots. It reports
// whether the entry was written.
func storeEntry(dir, boot string, buf []byte) bool {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*") // 0600: kernel addresses are not for everyone
	if err != nil {
		return false
	}
	_, err = tmp.Write(buf)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, boot))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return false
	}
	// One entry per boot, and only this boot's is of any use.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		n := e.Name()
		if n == boot || e.IsDir() {
			continue
		}
		if strings.HasPrefix(n, ".tmp-") {
			// Another writer's file in progress, or one left behind.
			if info, err := e.Info(); err != nil || time.Since(info.ModTime()) < time.Hour {
				continue
			}
		}
		os.Remove(filepath.Join(dir, n))
	}
	return true
}

// procReads counts LoadProc's whole reads of /proc/kallsyms made to
// rebuild an entry (tests).
var procReads atomic.Int64

// entriesChecked counts the entries loadEntry read in full (tests).
var entriesChecked atomic.Int64

// loadEntry returns the table of an entry that is intact and matches the
// first lines of /proc/kallsyms now; nil otherwise (a damaged entry is
// removed, to be rebuilt). An entry read in full and found good before,
// and unchanged since (its stamp: internal/filestamp), is not read in full
// again: its checksum and the order of its addresses were checked then.
// Only its header and the first lines it holds are read, and later the
// pages lookups touch (first touches of a mapping's pages cost 1.5 us each
// on a VM, and the checks touched all of a kernel's 4 MB).
func loadEntry(path string) *Table {
	b, fi, release, err := readEntry(path)
	if err != nil {
		if err == errEntrySize {
			os.Remove(path)
		}
		return nil
	}
	var sum uint32
	if len(b) >= entryHdrSize {
		sum = binary.LittleEndian.Uint32(b[36:])
	}
	checked := filestamp.Checked(path, fi, sum)
	if !checked {
		entriesChecked.Add(1)
	}
	t, prefix := decodeEntry(b, !checked)
	if t == nil {
		release(false)
		os.Remove(path)
		return nil
	}
	// The kernel shows zeros for addresses to a reader without the
	// privilege, and other addresses after a reboot that kept the boot id
	// file (a container's view): compare what it shows now.
	if !procStartsWith(prefix) {
		release(false)
		return nil
	}
	if !checked {
		filestamp.Stamp(path, fi, sum)
	}
	release(true)
	return t
}

// decodeEntry checks an entry and returns its table (whose names are
// substrings of b: b must not change after) and the first lines
// of /proc/kallsyms it was made from; nil for anything damaged. With
// check false (an entry checked before, as it is now) it reads only the
// header and the first lines: the sizes the header gives must still add
// up to the entry's.
func decodeEntry(b []byte, check bool) (*Table, []byte) {
	if len(b) < entryHdrSize || string(b[:8]) != entryMagic {
		return nil, nil
	}
	le := binary.LittleEndian
	lo, hi := le.Uint64(b[8:]), le.Uint64(b[16:])
	count, names, plen := uint64(le.Uint32(b[24:])), uint64(le.Uint32(b[28:])), uint64(le.Uint32(b[32:]))
	if count == 0 || count > maxEntrySyms || plen == 0 || plen > prefixLen || lo > hi ||
		uint64(len(b)) != entryHdrSize+plen+12*count+names ||
		check && le.Uint32(b[36:]) != crc32.Checksum(b[entryHdrSize:], castagnoli) {
		return nil, nil
	}
	prefix := b[entryHdrSize : entryHdrSize+plen]
	addrs := b[entryHdrSize+plen:]
	ends := addrs[8*count:]
	// loadEntry's buffer is its own and never written again: the table
	// is the entry's arrays and names as they lie, without a copy.
	names4 := ends[4*count:]
	start, prev := uint64(0), uint64(0)
	for i := uint64(0); check && i < count; i++ {
		a := le.Uint64(addrs[8*i:])
		end := uint64(le.Uint32(ends[4*i:]))
		if end < start || end > names || (i > 0 && a <= prev) || a < lo || a > hi {
			return nil, nil
		}
		start, prev = end, a
	}
	if check && start != names {
		return nil, nil
	}
	// The reference symbols are among the first lines, kept whole.
	var refs []Symbol
	if head, err := parseText(string(prefix)); err == nil {
		refs = head.refs
	}
	text := unsafe.String(unsafe.SliceData(names4), len(names4))
	t := &Table{partial: true, lo: lo, hi: hi, refs: refs}
	t.packed.Store(&packedSyms{b: addrs[:12*count], names: text, n: int(count)})
	return t, prefix
}
