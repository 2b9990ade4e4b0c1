package perfdata

import (
	"fmt"
	"io"
)

// Resynchronisation after damage.
//
// A record that cannot be read (a size field that lies, overwritten bytes,
// a chunk cut out of the file) does not end a file-mode data section: the
// Reader scans forward, byte by byte, for the next offset where
// resyncChain consecutive records validate (or fewer that end exactly at
// the end of the data), and resumes there. A record validates when its
// type is one perf writes, its size is a multiple of 8 (COMPRESSED aside)
// within the data, its misc bits are ones the kernel sets, and, for kernel
// records, it decodes by the attrs' layout with the sample fields
// consistent: a sample laid out to its last byte, pid and tid possible
// pids, a known sample id, a cpu below the recording's count and a time
// within the recording's bounds. Each resumption is a Damage.
//
// The scan starts just after the last record read rather than at the bad
// record: when that record's own size lied by a multiple of 8 it looked
// whole, and the records after it start inside its claimed extent.

// resyncChain is how many consecutive records must validate at an offset
// before reading resumes there.
const resyncChain = 4

// winSize is the window read at once while scanning: the longest chain
// of records checked from one offset (resyncChain records of at most 64
// KiB) fits.
const winSize = (resyncChain + 1) << 16

// maxDamages bounds the Damages kept; Damaged counts them all.
const maxDamages = 100

// maxPid is the kernel's PID_MAX_LIMIT: no pid or tid is larger (-1
// aside).
const maxPid = 4 << 20

// timeSlack is how far before the earliest time seen (or the SAMPLE_TIME
// feature's first) a record after damage may be: records of different
// CPUs reach the file out of order, by up to one flush of the buffers.
const timeSlack = 600e9

// Damage is a stretch of a file-mode data section that could not be read
// as records, and where reading resumed.
type Damage struct {
	// Path is the file name when the Reader was made by Open.
	Path string
	// Offset is where the damage was found: the record that failed to
	// read, or, when reading resumed before it, the record before it,
	// whose size was wrong.
	Offset int64
	// Resume is the offset of the record where reading resumed.
	Resume int64
	// Err says what was wrong with the record that failed to read.
	Err error
}

// Skipped is the number of bytes between the damage and the record where
// reading resumed.
func (d Damage) Skipped() int64 { return max(0, d.Resume-d.Offset) }

// String names the file, the offset of the damage, what was wrong and how
// many bytes were skipped.
func (d Damage) String() string {
	where := ""
	if d.Path != "" {
		where = d.Path + ": "
	}
	return fmt.Sprintf("%sdamaged data at offset %#x: %v; skipped %d bytes to the next valid record at %#x",
		where, d.Offset, d.Err, d.Skipped(), d.Resume)
}

// Damages returns the damage met so far (at most the first 100), in file
// order; Damaged counts them all.
func (r *Reader) Damages() []Damage {
	if len(r.parts) == 0 {
		return r.damages
	}
	out := append([]Damage(nil), r.damages...)
	for _, p := range r.parts {
		out = append(out, p.damages...)
	}
	return out[:min(len(out), maxDamages)]
}

// Damaged returns how many times reading resumed after damage.
func (r *Reader) Damaged() int {
	n := r.nDamaged
	for _, p := range r.parts {
		n += p.nDamaged
	}
	return n
}

// damaged handles a record at off that could not be read: reading resumes
// at the next valid record when there is one (nil, nil: Next reads on),
// else err ends the records.
func (r *Reader) damaged(off int64, err error) (Record, error) {
	at, ok := r.resync(off)
	if !ok {
		return r.fail(err)
	}
	d := Damage{Path: r.path, Offset: off, Resume: at, Err: err}
	if at <= off && r.lastOff >= 0 {
		d.Offset = r.lastOff
	}
	if len(r.damages) < maxDamages {
		r.damages = append(r.damages, d)
	}
	r.nDamaged++
	r.off, r.resumed = at, at
	r.pendSkip, r.pendTrace = 0, false
	if r.mm == nil && r.free == nil {
		r.src = io.NewSectionReader(r.ra, at, r.limit()-at)
		r.br.Reset(r.src)
	}
	return nil, nil
}

// resync finds the first offset after the record last read (or after off)
// where records validate again.
func (r *Reader) resync(off int64) (int64, bool) {
	if r.end < 0 || r.ra == nil && r.mm == nil {
		return 0, false // a stream: nothing to scan ahead in
	}
	start := off + 1
	if r.lastOff >= 0 && r.lastOff+8 < start {
		start = r.lastOff + 8
	}
	if r.nDamaged > 0 && r.lastOff < r.resumed {
		// Nothing was read where reading last resumed (a record that
		// scans as valid but does not read): move past it.
		start = max(start, r.resumed+1)
	}
	for o := start; o+8 <= r.limit(); o++ {
		if o == off {
			// The record that just failed to read, whatever its
			// header says (a type validAt takes on trust).
			continue
		}
		r.scan = o
		if r.chainAt(o) {
			return o, true
		}
	}
	return 0, false
}

// limit is where the data ends: the data section's end or the file's.
func (r *Reader) limit() int64 {
	if r.mm != nil {
		return min(r.end, int64(len(r.mm)))
	}
	return min(r.end, r.size)
}

// chainAt reports whether resyncChain records validate one after the other
// from off, or fewer that end exactly where the data ends.
func (r *Reader) chainAt(off int64) bool {
	for range resyncChain {
		size := r.validAt(off)
		if size == 0 {
			return false
		}
		off += int64(size)
		if off >= r.limit() {
			return off == r.limit()
		}
	}
	return true
}

// validAt returns the size of the record at off when it validates, else 0.
// It decodes into the Reader's record values: only call it when the record
// last returned is no longer needed.
func (r *Reader) validAt(off int64) int {
	hb := r.bytesAt(off, 8)
	if len(hb) < 8 {
		return 0
	}
	typ := RecordType(le.Uint32(hb))
	misc := le.Uint16(hb[4:])
	size := int(le.Uint16(hb[6:]))
	if !knownType(typ) || size < 8 || size%8 != 0 && typ != RecordCompressed {
		return 0
	}
	// Bits 3 to 11 of misc are unused; cpumode is at most guest user (5).
	if misc&0x0ff8 != 0 || misc&MiscCPUModeMask > 5 {
		return 0
	}
	b := r.bytesAt(off, size)
	if len(b) < size {
		return 0
	}
	switch {
	case typ == RecordFinishedRound || typ == RecordFinishedInit:
		if size != 8 {
			return 0
		}
	case typ < RecordHeaderAttr:
		rec, err := r.decode(RecordHeader{Type: typ, Misc: misc, Size: uint16(size), Offset: off}, b[8:])
		if err != nil || !r.plausible(rec.Header(), true) {
			return 0
		}
	}
	return size
}

// plausible checks the sample id fields of a kernel record: pid and tid
// always; with strict (a record found by scanning) also the sample id,
// cpu and time.
func (r *Reader) plausible(h *RecordHeader, strict bool) bool {
	if h.Has&SampleTID != 0 && (!pidOK(h.Pid) || !pidOK(h.Tid)) {
		return false
	}
	if !strict {
		return true
	}
	if h.Has&SampleID != 0 && len(r.s.ids) > 0 && r.s.ids[h.ID] == nil {
		return false
	}
	if h.Has&SampleCPU != 0 {
		ncpu := uint32(1 << 16)
		if n := r.s.Features.NrCPUsAvail; n > 0 {
			ncpu = n
		}
		if h.CPU >= ncpu {
			return false
		}
	}
	if h.Has&SampleTime != 0 && (h.Time != 0 || h.Type == RecordSample) {
		lo, hi := r.tmin, r.tmin+1<<50 // about 13 days
		if f := &r.s.Features; f.SampleTimeLast != 0 {
			lo, hi = f.SampleTimeFirst, f.SampleTimeLast
		}
		if lo != 0 && (h.Time+timeSlack < lo || h.Time > hi+timeSlack) {
			return false
		}
	}
	return true
}

// knownType reports whether perf writes records of type t (the kernel's
// and perf's own, recordNames).
func knownType(t RecordType) bool {
	return RecordMmap <= t && t <= RecordAuxOutputHWID || RecordHeaderAttr <= t && t <= RecordCompressed2
}

func pidOK(p uint32) bool { return p <= maxPid || p == ^uint32(0) }

// bytesAt returns up to n bytes of the data at off, fewer where the data
// ends. Reading from an io.ReaderAt goes through a window of winSize
// bytes, refilled from the offset being scanned (r.scan) so that it holds
// the whole chain of records checked from there: each byte is read about
// once per scan.
func (r *Reader) bytesAt(off int64, n int) []byte {
	lim := r.limit()
	if off >= lim {
		return nil
	}
	n = int(min(int64(n), lim-off))
	if r.mm != nil {
		return r.mm[off : off+int64(n)]
	}
	if off >= r.winOff && off+int64(n) <= r.winOff+int64(len(r.win)) {
		return r.win[off-r.winOff:][:n]
	}
	if r.winBuf == nil {
		r.winBuf = make([]byte, winSize)
	}
	from := off
	if r.scan <= off && off+int64(n)-r.scan <= winSize {
		from = r.scan
	}
	k, _ := r.ra.ReadAt(r.winBuf[:min(winSize, lim-from)], from)
	r.win, r.winOff = r.winBuf[:k], from
	if off-from >= int64(k) {
		return nil
	}
	return r.win[off-from:][:min(int64(n), int64(k)-(off-from))]
}
