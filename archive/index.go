package archive

import (
	"archive/tar"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// block is the tar block size: headers start at multiples of it.
const block = 512

// Why a walk over consecutive members stopped.
const (
	stopEnd       = iota // an end-of-archive marker (zero blocks)
	stopEOF              // the file ends at a member boundary
	stopHeader           // a header that does not parse
	stopTruncated        // a member whose data runs past the end of the file
)

// index finds every member, walking consecutive headers and scanning past
// damage for the next intact header.
func (a *Reader) index() error {
	off := int64(0)
	sawManifest := false
	for off < a.size {
		stop, resume, why, err := a.walk(off)
		for _, e := range a.entries {
			sawManifest = sawManifest || e.Kind == KindManifest
		}
		if why == stopEOF || why == stopTruncated {
			if why == stopEOF && !sawManifest && len(a.entries) > 0 {
				a.report(stop, "", "the archive ends here, without its manifest (truncated: was the recorder killed?); any member written after this point is missing")
			}
			break
		}
		next := a.findHeader(max(stop+block, resume))
		if why == stopEnd {
			if next < 0 {
				break // the end: nothing but the trailer (or zeros) follows
			}
			a.report(stop, "", "%d bytes of zeros where a member header belongs; resuming at the next intact member header at %#x", next-stop, next)
			a.gaps = append(a.gaps, gap{stop, next, len(a.damage) - 1})
		} else if next < 0 {
			a.report(stop, "", "unreadable member header (%v); no intact member header follows in the last %d bytes", err, a.size-stop)
			a.gaps = append(a.gaps, gap{stop, a.size, len(a.damage) - 1})
			break
		} else {
			a.report(stop, "", "unreadable member header (%v); skipped %d bytes to the next intact member header at %#x", err, next-stop, next)
			a.gaps = append(a.gaps, gap{stop, next, len(a.damage) - 1})
		}
		off = next
	}
	if len(a.entries) == 0 {
		return fmt.Errorf("archive %s: %w: no intact member header in its %d bytes", a.opts.Name, ErrNotArchive, a.size)
	}
	a.readMeta()
	a.checkManifest()
	return nil
}

// gap is a stretch of the archive skipped for damage, and the report that
// says so (which the manifest's account of the lost members completes).
type gap struct {
	lo, hi int64
	report int
}

// walk indexes the members that follow one another from the header at off
// and returns where and why it stopped, and how far it read (no intact
// header starts before that).
func (a *Reader) walk(off int64) (stop, read int64, why int, err error) {
	sr := io.NewSectionReader(a.ra, off, a.size-off)
	tr := tar.NewReader(sr)
	next := off // where the next header starts
	for {
		h, err := tr.Next()
		pos, _ := sr.Seek(0, io.SeekCurrent)
		if err == io.EOF {
			if next >= a.size {
				return next, off + pos, stopEOF, nil
			}
			if !a.zeros(next, min(a.size, next+2*block)) {
				// tar stops quietly when the file ends exactly after a
				// PAX header: not an end-of-archive marker, a cut.
				a.report(next, "", "the archive ends inside a member header (truncated); any member from here on is missing")
				return next, off + pos, stopTruncated, io.ErrUnexpectedEOF
			}
			return next, next + block, stopEnd, nil
		}
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				a.report(next, "", "the archive ends inside a member header (truncated); any member from here on is missing")
				return next, off + pos, stopTruncated, err
			}
			return next, off + pos, stopHeader, err
		}
		dataOff := off + pos
		if h.Size > a.size-dataOff {
			a.report(dataOff, h.Name, "the archive ends %d bytes into this member's %d bytes of data (truncated); this member and any after it are missing",
				a.size-dataOff, h.Size)
			return next, off + pos, stopTruncated, io.ErrUnexpectedEOF
		}
		if h.Typeflag == tar.TypeReg {
			a.addEntry(h, next, dataOff)
		}
		next = dataOff + (h.Size+block-1)/block*block
	}
}

// addEntry indexes a regular member whose header starts at hdrOff and data
// at dataOff, checking what its header says against its checksum.
func (a *Reader) addEntry(h *tar.Header, hdrOff, dataOff int64) {
	rec := h.PAXRecords
	e := Entry{Kind: rec[paxKind], BuildID: strings.ToLower(rec[paxBuildID]), Path: rec[paxPath], Member: h.Name,
		hdrOff: hdrOff, off: dataOff, csize: h.Size, Gzip: strings.HasSuffix(h.Name, ".gz"), Size: -1}
	if e.Kind == "" {
		// The PAX records were lost (a damaged extended header, skipped):
		// the member's name still says what it holds.
		if !kindFromName(&e) {
			return
		}
		e.noPAXRecord = true
	} else if s, ok := rec[paxSize]; ok {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			a.report(hdrOff, e.Member, "bad %s record %q; member not used", paxSize, s)
			a.rejected[e.Member] = true
			return
		}
		e.Size = n
	}
	if !e.Gzip {
		e.Size = h.Size
	}
	if e.Size > maxMember {
		a.report(hdrOff, e.Member, "%d bytes is larger than any member this reader accepts (%d); member not used", e.Size, int64(maxMember))
		a.rejected[e.Member] = true
		return
	}
	if sum, ok := rec[paxSum]; ok && sum != unsetSum {
		v, err := strconv.ParseUint(sum, 16, 32)
		if err != nil || len(sum) != 8 {
			a.report(hdrOff, e.Member, "bad %s record %q; member not used", paxSum, sum)
			a.rejected[e.Member] = true
			return
		}
		e.sum, e.hasSum = uint32(v), true
		if hs, ok := rec[paxHSum]; ok && hs != unsetSum {
			want := hex8(hsum(e.Member, e.Kind, e.BuildID, e.Path, mustSize(rec[paxSize]), sum))
			if hs != want {
				a.report(hdrOff, e.Member, "its header records fail their CRC-32C check (%s %s, computed %s); member not used", paxHSum, hs, want)
				a.rejected[e.Member] = true
				return
			}
		}
	}
	a.entries = append(a.entries, e)
}

// mustSize parses the USTACK.size record for the header checksum (which
// covers the record's value as the writer formatted it).
func mustSize(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// kindFromName fills an entry's kind (and build-id) from its member name,
// as the writer names members; false for a name it does not make.
func kindFromName(e *Entry) bool {
	name := strings.TrimSuffix(e.Member, ".gz")
	switch name {
	case "ustack-archive.json":
		e.Kind = KindMeta
		return true
	case "manifest.json":
		e.Kind = KindManifest
		return true
	case "kallsyms":
		e.Kind, e.Path = KindKallsyms, "/proc/kallsyms"
		return true
	}
	dir, rest, ok := strings.Cut(name, "/")
	if !ok {
		return false
	}
	switch dir {
	case "objects":
		e.Kind = KindObject
	case "debug":
		e.Kind = KindDebug
	case "vdso":
		e.Kind, e.Path = KindVDSO, "[vdso]"
	default:
		return false
	}
	if _, err := hex.DecodeString(rest); err == nil && rest != "" {
		e.BuildID = strings.ToLower(rest)
	}
	return true
}

// zeros reports whether the bytes [from, to) are all zero.
func (a *Reader) zeros(from, to int64) bool {
	b := make([]byte, to-from)
	n, _ := a.ra.ReadAt(b, from)
	for _, c := range b[:n] {
		if c != 0 {
			return false
		}
	}
	return true
}

// findHeader returns the offset of the first block at or after from that
// holds an intact member header, or -1.
func (a *Reader) findHeader(from int64) int64 {
	from = (from + block - 1) / block * block
	buf := make([]byte, 64<<10)
	for off := from; off+block <= a.size; {
		n, err := a.ra.ReadAt(buf, off)
		n = n / block * block
		for i := 0; i < n; i += block {
			if headerLike(buf[i : i+block]) {
				return off + int64(i)
			}
		}
		if n == 0 || (err != nil && err != io.EOF) {
			return -1
		}
		off += int64(n)
	}
	return -1
}

// headerLike reports whether blk is a POSIX tar header of a kind the writer
// makes (regular file or PAX extended header, of sane size), with a valid
// checksum.
func headerLike(blk []byte) bool {
	if !bytes.Equal(blk[257:263], []byte("ustar\x00")) {
		return false
	}
	switch blk[156] {
	case tar.TypeReg, tar.TypeRegA:
	case tar.TypeXHeader:
		if n, ok := octal(blk[124:136]); !ok || n > 64<<10 {
			return false
		}
	default:
		return false
	}
	want, ok := octal(blk[148:156])
	if !ok {
		return false
	}
	var sum int64
	for i, c := range blk {
		if i >= 148 && i < 156 {
			c = ' '
		}
		sum += int64(c)
	}
	return sum == want
}

// octal parses a NUL- or space-terminated octal field.
func octal(b []byte) (int64, bool) {
	s := strings.Trim(string(b), " \x00")
	if s == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 8, 64)
	return n, err == nil
}

// readMeta reads ustack-archive.json, which must be the first member.
func (a *Reader) readMeta() {
	for i := range a.entries {
		e := &a.entries[i]
		if e.Kind != KindMeta {
			continue
		}
		if e.csize > 1<<20 {
			a.report(e.off, e.Member, "%d bytes is too large for the archive's metadata", e.csize)
			return
		}
		b, err := a.read(i)
		if err != nil {
			return // read reported it
		}
		if err := json.Unmarshal(b, &a.meta); err != nil {
			a.report(e.off, e.Member, "%v", err)
		}
		return
	}
	a.report(0, "ustack-archive.json", "missing (the archive's metadata: version, host, arch); reading the members found")
}

// gapAt returns the skipped stretch that holds off.
func (a *Reader) gapAt(off int64) *gap {
	for i := range a.gaps {
		if g := &a.gaps[i]; off >= g.lo && off < g.hi {
			return g
		}
	}
	return nil
}

// checkManifest names the members that the manifest lists and that were
// not found intact.
func (a *Reader) checkManifest() {
	mi := -1
	for i := range a.entries {
		if a.entries[i].Kind == KindManifest {
			mi = i
		}
	}
	if mi < 0 || a.entries[mi].csize > 64<<20 {
		return
	}
	b, err := a.read(mi)
	if err != nil {
		return
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		a.report(a.entries[mi].off, a.entries[mi].Member, "%v", err)
		return
	}
	found := map[string]int{}
	for i, e := range a.entries {
		found[e.Member] = i
	}
	where := int64(0) // where the next listed member should start
	for _, me := range m.Entries {
		if i, ok := found[me.Member]; ok {
			e := &a.entries[i]
			where = e.off + (e.csize+block-1)/block*block
			if e.noPAXRecord && me.Kind == e.Kind {
				// Its PAX records were lost: the manifest still says
				// what they said.
				e.BuildID, e.Path, e.noPAXRecord = strings.ToLower(me.BuildID), me.Path, false
				if e.Gzip && me.Size >= 0 {
					e.Size = me.Size
				}
			}
			continue
		}
		if a.rejected[me.Member] {
			continue // addEntry said why
		}
		what := me.Member + " (" + me.Kind
		if me.Path != "" {
			what += " " + me.Path
		}
		what = fmt.Sprintf("%s, %d bytes)", what, me.Size)
		if g := a.gapAt(where); g != nil {
			// Name it in the report of the damage that cost it.
			a.mu.Lock()
			fe := a.damage[g.report].(*FormatError)
			if strings.Contains(fe.Msg, "; lost ") {
				fe.Msg += ", " + what
			} else {
				fe.Msg += "; lost " + what
			}
			a.mu.Unlock()
			continue
		}
		a.report(where, me.Member, "%s, listed in the manifest, was lost to the damage", what)
	}
}
