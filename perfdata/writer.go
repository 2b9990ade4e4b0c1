package perfdata

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/bits"
)

// writerAttrSize is the perf_event_attr size the Writer emits
// (PERF_ATTR_SIZE_VER7, what perf 6.1 writes).
const writerAttrSize = AttrSizeVer7

// Writer writes a file-mode perf.data: the header, the attrs with their ids,
// a data section of records and, on Close, the feature sections. The header
// is rewritten with the final sizes by Close.
type Writer struct {
	w       io.WriteSeeker
	bw      *bufio.Writer
	attrs   []*Attr
	feat    *Features
	dataOff int64
	off     int64
	buf     []byte
	err     error
	closed  bool
	// raw holds feature sections given as bytes (SetFeatureSection).
	raw map[Feature][]byte
}

// NewWriter starts a perf.data file on w with the given events. Attrs
// without IDs are given one each (so samples can be attributed); their
// SampleType and other fields define how WriteSample encodes samples. feat
// (which may be nil) supplies the feature sections, written at Close: the
// caller may keep filling it until then. The EVENT_DESC feature is always
// written, from attrs.
func NewWriter(w io.WriteSeeker, attrs []*Attr, feat *Features) (*Writer, error) {
	if len(attrs) == 0 {
		return nil, errors.New("perfdata: NewWriter needs at least one attr")
	}
	if feat == nil {
		feat = &Features{}
	}
	wr := &Writer{w: w, feat: feat}
	next := uint64(1)
	for _, a := range attrs {
		for _, id := range a.IDs {
			next = max(next, id+1)
		}
	}
	for i, a := range attrs {
		c := *a
		c.Index = i
		if len(c.IDs) == 0 {
			c.IDs = []uint64{next}
			next++
		} else {
			c.IDs = append([]uint64(nil), a.IDs...)
		}
		if c.Name == "" {
			c.Name = defaultName(&c)
		}
		c.prepare()
		wr.attrs = append(wr.attrs, &c)
	}
	if _, err := w.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	// Header placeholder, ids arrays, then the attrs section.
	var b []byte
	b = append(b, make([]byte, fileHeaderSize)...)
	idsOff := make([]int64, len(wr.attrs))
	for i, a := range wr.attrs {
		idsOff[i] = int64(len(b))
		for _, id := range a.IDs {
			b = le.AppendUint64(b, id)
		}
	}
	for i, a := range wr.attrs {
		b = encodeAttr(b, a, writerAttrSize)
		b = le.AppendUint64(b, uint64(idsOff[i]))
		b = le.AppendUint64(b, uint64(8*len(a.IDs)))
	}
	if _, err := w.Write(b); err != nil {
		return nil, err
	}
	wr.dataOff = int64(len(b))
	wr.off = wr.dataOff
	wr.bw = bufio.NewWriterSize(w, 1<<16)
	return wr, nil
}

// Attrs returns the writer's events (copies of those passed to NewWriter,
// with ids assigned). Pass one of them as a record's Attr to choose the
// layout its sample id is written in.
func (w *Writer) Attrs() []*Attr { return w.attrs }

// Features returns the feature data that Close will write.
func (w *Writer) Features() *Features { return w.feat }

// WriteRecord writes one record with the given type, misc and body (the
// bytes after the 8-byte header, sample_id trailer included). The body
// length must be a multiple of 8 and at most 65527 bytes.
func (w *Writer) WriteRecord(typ RecordType, misc uint16, body []byte) error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return errors.New("perfdata: write to closed Writer")
	}
	if len(body)%8 != 0 {
		return fmt.Errorf("perfdata: record %v body of %d bytes is not 8-byte aligned", typ, len(body))
	}
	if len(body) > 0xffff-8 {
		return fmt.Errorf("perfdata: record %v body of %d bytes exceeds the 64 KiB record limit", typ, len(body))
	}
	var h [8]byte
	le.PutUint32(h[:], uint32(typ))
	le.PutUint16(h[4:], misc)
	le.PutUint16(h[6:], uint16(8+len(body)))
	if _, err := w.bw.Write(h[:]); err != nil {
		w.err = err
		return err
	}
	if _, err := w.bw.Write(body); err != nil {
		w.err = err
		return err
	}
	w.off += int64(8 + len(body))
	return nil
}

// WriteRaw appends p, which must hold whole records exactly as the kernel
// writes them into a perf ring buffer (each starting with its 8-byte
// header), to the data section. It lets a recorder copy a ring's contents
// to the file in one write instead of record by record.
func (w *Writer) WriteRaw(p []byte) error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return errors.New("perfdata: write to closed Writer")
	}
	if _, err := w.bw.Write(p); err != nil {
		w.err = err
		return err
	}
	w.off += int64(len(p))
	return nil
}

// Flush writes the records buffered so far to the underlying writer, so
// that a reader of the file sees every record written before the call even
// if the writing process dies before Close.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return nil
	}
	if err := w.bw.Flush(); err != nil {
		w.err = err
		return err
	}
	return nil
}

// SetFeatureSection makes Close write data, already encoded, as the
// section of feature f (for features Features has no field for, such as
// TRACING_DATA). It replaces what Features would write for f.
func (w *Writer) SetFeatureSection(f Feature, data []byte) {
	if w.raw == nil {
		w.raw = map[Feature][]byte{}
	}
	w.raw[f] = append([]byte(nil), data...)
}

// DataOffset returns the file offset of the data section (where the first
// record is written).
func (w *Writer) DataOffset() int64 { return w.dataOff }

// attrFor returns the writer attr a record's Attr designates: the same
// pointer, or the one with the same index, or the first.
func (w *Writer) attrFor(a *Attr) *Attr {
	if a != nil {
		for _, x := range w.attrs {
			if x == a {
				return x
			}
		}
		if a.Index >= 0 && a.Index < len(w.attrs) {
			return w.attrs[a.Index]
		}
	}
	return w.attrs[0]
}

// appendTrailer appends the sample_id_all trailer for h's id fields.
func (w *Writer) appendTrailer(b []byte, h *RecordHeader) []byte {
	a := w.attrFor(h.Attr)
	if !a.SampleIDAll() {
		return b
	}
	st := a.SampleType
	id := h.ID
	if id == 0 && len(a.IDs) > 0 {
		id = a.IDs[0]
	}
	if st&SampleTID != 0 {
		b = le.AppendUint32(b, h.Pid)
		b = le.AppendUint32(b, h.Tid)
	}
	if st&SampleTime != 0 {
		b = le.AppendUint64(b, h.Time)
	}
	if st&SampleID != 0 {
		b = le.AppendUint64(b, id)
	}
	if st&SampleStreamID != 0 {
		b = le.AppendUint64(b, h.StreamID)
	}
	if st&SampleCPU != 0 {
		b = le.AppendUint32(b, h.CPU)
		b = le.AppendUint32(b, 0)
	}
	if st&SampleIdentifier != 0 {
		b = le.AppendUint64(b, id)
	}
	return b
}

// appendString appends s NUL-terminated and padded to 8 bytes.
func appendString(b []byte, s string) []byte {
	b = append(b, s...)
	n := 8 - len(s)%8
	return append(b, make([]byte, n)...)
}

// WriteMmap writes an MMAP2 record (or MMAP when m.Type is RecordMmap) with
// m's sample id fields as its trailer. A non-empty BuildID selects the
// build-id form of MMAP2.
func (w *Writer) WriteMmap(m *Mmap) error {
	b := w.buf[:0]
	b = le.AppendUint32(b, m.Pid)
	b = le.AppendUint32(b, m.Tid)
	b = le.AppendUint64(b, m.Start)
	b = le.AppendUint64(b, m.Len)
	b = le.AppendUint64(b, m.PgOff)
	typ, misc := RecordMmap2, m.Misc
	if m.Type == RecordMmap {
		typ = RecordMmap
	} else {
		if len(m.BuildID) > 0 {
			misc |= MiscMmapBuildID
			var u [24]byte
			u[0] = byte(min(len(m.BuildID), 20))
			copy(u[4:], m.BuildID)
			b = append(b, u[:]...)
		} else {
			misc &^= MiscMmapBuildID
			b = le.AppendUint32(b, m.Maj)
			b = le.AppendUint32(b, m.Min)
			b = le.AppendUint64(b, m.Ino)
			b = le.AppendUint64(b, m.InoGen)
		}
		b = le.AppendUint32(b, m.Prot)
		b = le.AppendUint32(b, m.Flags)
	}
	b = appendString(b, m.Filename)
	b = w.appendTrailer(b, &m.RecordHeader)
	w.buf = b
	return w.WriteRecord(typ, misc, b)
}

// WriteComm writes a COMM record (misc MiscCommExec when c.Exec).
func (w *Writer) WriteComm(c *Comm) error {
	b := w.buf[:0]
	b = le.AppendUint32(b, c.Pid)
	b = le.AppendUint32(b, c.Tid)
	b = appendString(b, c.Comm)
	b = w.appendTrailer(b, &c.RecordHeader)
	w.buf = b
	misc := c.Misc &^ MiscCommExec
	if c.Exec {
		misc |= MiscCommExec
	}
	return w.WriteRecord(RecordComm, misc, b)
}

func (w *Writer) writeTask(typ RecordType, h *RecordHeader, pid, ppid, tid, ptid uint32, t uint64) error {
	b := w.buf[:0]
	b = le.AppendUint32(b, pid)
	b = le.AppendUint32(b, ppid)
	b = le.AppendUint32(b, tid)
	b = le.AppendUint32(b, ptid)
	b = le.AppendUint64(b, t)
	b = w.appendTrailer(b, h)
	w.buf = b
	return w.WriteRecord(typ, h.Misc, b)
}

// WriteFork writes a FORK record.
func (w *Writer) WriteFork(f *Fork) error {
	return w.writeTask(RecordFork, &f.RecordHeader, f.Pid, f.Ppid, f.Tid, f.Ptid, f.Time)
}

// WriteExit writes an EXIT record.
func (w *Writer) WriteExit(e *Exit) error {
	return w.writeTask(RecordExit, &e.RecordHeader, e.Pid, e.Ppid, e.Tid, e.Ptid, e.Time)
}

// WriteLost writes a LOST record.
func (w *Writer) WriteLost(l *Lost) error {
	b := w.buf[:0]
	b = le.AppendUint64(b, l.LostID)
	b = le.AppendUint64(b, l.Lost)
	b = w.appendTrailer(b, &l.RecordHeader)
	w.buf = b
	return w.WriteRecord(RecordLost, l.Misc, b)
}

// WriteLostSamples writes a LOST_SAMPLES record.
func (w *Writer) WriteLostSamples(l *LostSamples) error {
	b := w.buf[:0]
	b = le.AppendUint64(b, l.Lost)
	b = w.appendTrailer(b, &l.RecordHeader)
	w.buf = b
	return w.WriteRecord(RecordLostSamples, l.Misc, b)
}

// WriteFinishedRound writes a FINISHED_ROUND marker: every record written
// before it has a timestamp no later than any record written after the
// next marker.
func (w *Writer) WriteFinishedRound() error {
	return w.WriteRecord(RecordFinishedRound, 0, nil)
}

// WriteSample encodes s in the layout of its attr (s.Attr, matched to the
// writer's attrs; the first attr when nil): every field of the attr's
// sample_type, in the kernel's order. A zero ID is replaced by the attr's
// first id. Regs must hold one value per bit of the attr's
// sample_regs_user when RegsABI is not RegsABINone.
func (w *Writer) WriteSample(s *Sample) error {
	a := w.attrFor(s.Attr)
	st := a.SampleType
	id := s.ID
	if id == 0 && len(a.IDs) > 0 {
		id = a.IDs[0]
	}
	b := w.buf[:0]
	if st&SampleIdentifier != 0 {
		b = le.AppendUint64(b, id)
	}
	if st&SampleIP != 0 {
		b = le.AppendUint64(b, s.IP)
	}
	if st&SampleTID != 0 {
		b = le.AppendUint32(b, s.Pid)
		b = le.AppendUint32(b, s.Tid)
	}
	if st&SampleTime != 0 {
		b = le.AppendUint64(b, s.Time)
	}
	if st&SampleAddr != 0 {
		b = le.AppendUint64(b, s.Addr)
	}
	if st&SampleID != 0 {
		b = le.AppendUint64(b, id)
	}
	if st&SampleStreamID != 0 {
		b = le.AppendUint64(b, s.StreamID)
	}
	if st&SampleCPU != 0 {
		b = le.AppendUint32(b, s.CPU)
		b = le.AppendUint32(b, 0)
	}
	if st&SamplePeriod != 0 {
		b = le.AppendUint64(b, s.Period)
	}
	if st&SampleRead != 0 {
		b = appendRead(b, a.ReadFormat, &s.Read)
	}
	if st&SampleCallchain != 0 {
		b = le.AppendUint64(b, uint64(len(s.Callchain)))
		for _, ip := range s.Callchain {
			b = le.AppendUint64(b, ip)
		}
	}
	if st&SampleRaw != 0 {
		// u32 size + data, padded so the pair ends 8-byte aligned.
		n := len(s.Raw)
		pad := (8 - (4+n)%8) % 8
		b = le.AppendUint32(b, uint32(n+pad))
		b = append(b, s.Raw...)
		b = append(b, make([]byte, pad)...)
	}
	if st&SampleBranchStack != 0 {
		b = le.AppendUint64(b, uint64(len(s.Branches)))
		if a.BranchSampleType&BranchHWIndex != 0 {
			b = le.AppendUint64(b, s.BranchHWIndex)
		}
		for _, e := range s.Branches {
			b = le.AppendUint64(b, e.From)
			b = le.AppendUint64(b, e.To)
			b = le.AppendUint64(b, e.Flags)
		}
	}
	if st&SampleRegsUser != 0 {
		var err error
		if b, err = appendRegs(b, s.RegsABI, a.SampleRegsUser, s.Regs); err != nil {
			return err
		}
	}
	if st&SampleStackUser != 0 {
		n := len(s.StackData)
		if n%8 != 0 {
			return fmt.Errorf("perfdata: WriteSample: stack data of %d bytes is not 8-byte aligned", n)
		}
		b = le.AppendUint64(b, uint64(n))
		if n != 0 {
			b = append(b, s.StackData...)
			b = le.AppendUint64(b, s.StackDynSize)
		}
	}
	if st&(SampleWeight|SampleWeightStruct) != 0 {
		b = le.AppendUint64(b, s.Weight)
	}
	if st&SampleDataSrc != 0 {
		b = le.AppendUint64(b, s.DataSrc)
	}
	if st&SampleTransaction != 0 {
		b = le.AppendUint64(b, s.Transaction)
	}
	if st&SampleRegsIntr != 0 {
		var err error
		if b, err = appendRegs(b, s.IntrRegsABI, a.SampleRegsIntr, s.IntrRegs); err != nil {
			return err
		}
	}
	if st&SamplePhysAddr != 0 {
		b = le.AppendUint64(b, s.PhysAddr)
	}
	if st&SampleCgroup != 0 {
		b = le.AppendUint64(b, s.Cgroup)
	}
	if st&SampleDataPageSize != 0 {
		b = le.AppendUint64(b, s.DataPageSize)
	}
	if st&SampleCodePageSize != 0 {
		b = le.AppendUint64(b, s.CodePageSize)
	}
	if st&SampleAux != 0 {
		n := len(s.AuxData)
		if n%8 != 0 {
			return fmt.Errorf("perfdata: WriteSample: aux data of %d bytes is not 8-byte aligned", n)
		}
		b = le.AppendUint64(b, uint64(n))
		b = append(b, s.AuxData...)
	}
	w.buf = b
	return w.WriteRecord(RecordSample, s.Misc, b)
}

func appendRegs(b []byte, abi, mask uint64, regs []uint64) ([]byte, error) {
	b = le.AppendUint64(b, abi)
	if abi == RegsABINone {
		return b, nil
	}
	if n := bits.OnesCount64(mask); len(regs) != n {
		return b, fmt.Errorf("perfdata: WriteSample: %d register values for a mask of %d registers", len(regs), n)
	}
	for _, v := range regs {
		b = le.AppendUint64(b, v)
	}
	return b, nil
}

func appendRead(b []byte, rf uint64, r *ReadValues) []byte {
	val := func(v ReadValue) {
		b = le.AppendUint64(b, v.Value)
		if rf&FormatID != 0 {
			b = le.AppendUint64(b, v.ID)
		}
		if rf&FormatLost != 0 {
			b = le.AppendUint64(b, v.Lost)
		}
	}
	if rf&FormatGroup != 0 {
		b = le.AppendUint64(b, uint64(len(r.Values)))
		if rf&FormatTotalTimeEnabled != 0 {
			b = le.AppendUint64(b, r.TimeEnabled)
		}
		if rf&FormatTotalTimeRunning != 0 {
			b = le.AppendUint64(b, r.TimeRunning)
		}
		for _, v := range r.Values {
			val(v)
		}
		return b
	}
	var v ReadValue
	if len(r.Values) > 0 {
		v = r.Values[0]
	}
	b = le.AppendUint64(b, v.Value)
	if rf&FormatTotalTimeEnabled != 0 {
		b = le.AppendUint64(b, r.TimeEnabled)
	}
	if rf&FormatTotalTimeRunning != 0 {
		b = le.AppendUint64(b, r.TimeRunning)
	}
	if rf&FormatID != 0 {
		b = le.AppendUint64(b, v.ID)
	}
	if rf&FormatLost != 0 {
		b = le.AppendUint64(b, v.Lost)
	}
	return b
}

// appendHeaderString appends a perf_header_string: u32 length then the
// string NUL-terminated and padded to 64 bytes.
func appendHeaderString(b []byte, s string) []byte {
	n := (len(s) + 1 + 63) &^ 63
	b = le.AppendUint32(b, uint32(n))
	b = append(b, s...)
	return append(b, make([]byte, n-len(s))...)
}

// featureSections encodes the features to write, by feature bit.
func (w *Writer) featureSections() map[Feature][]byte {
	f := w.feat
	m := map[Feature][]byte{}
	str := func(id Feature, s string) {
		if s != "" {
			m[id] = appendHeaderString(nil, s)
		}
	}
	str(FeatHostname, f.Hostname)
	str(FeatOSRelease, f.OSRelease)
	str(FeatVersion, f.Version)
	str(FeatArch, f.Arch)
	str(FeatCPUDesc, f.CPUDesc)
	str(FeatCPUID, f.CPUID)
	if f.NrCPUsAvail != 0 || f.NrCPUsOnline != 0 {
		b := le.AppendUint32(nil, f.NrCPUsAvail)
		m[FeatNrCPUs] = le.AppendUint32(b, f.NrCPUsOnline)
	}
	if f.TotalMem != 0 {
		m[FeatTotalMem] = le.AppendUint64(nil, f.TotalMem)
	}
	if f.ClockIDRes != 0 {
		m[FeatClockID] = le.AppendUint64(nil, f.ClockIDRes)
	}
	if f.SampleTimeFirst != 0 || f.SampleTimeLast != 0 {
		b := le.AppendUint64(nil, f.SampleTimeFirst)
		m[FeatSampleTime] = le.AppendUint64(b, f.SampleTimeLast)
	}
	if f.Cmdline != nil {
		b := le.AppendUint32(nil, uint32(len(f.Cmdline)))
		for _, s := range f.Cmdline {
			b = appendHeaderString(b, s)
		}
		m[FeatCmdline] = b
	}
	// EVENT_DESC from the attrs.
	b := le.AppendUint32(nil, uint32(len(w.attrs)))
	b = le.AppendUint32(b, writerAttrSize)
	for _, a := range w.attrs {
		b = encodeAttr(b, a, writerAttrSize)
		b = le.AppendUint32(b, uint32(len(a.IDs)))
		b = appendHeaderString(b, a.Name)
		for _, id := range a.IDs {
			b = le.AppendUint64(b, id)
		}
	}
	m[FeatEventDesc] = b
	if len(f.BuildIDs) > 0 || f.Has(FeatBuildID) {
		var b []byte
		for _, bi := range f.BuildIDs {
			name := (len(bi.Filename) + 1 + 63) &^ 63
			size := 36 + name
			b = le.AppendUint32(b, 0)
			b = le.AppendUint16(b, bi.Misc|MiscBuildIDSize)
			b = le.AppendUint16(b, uint16(size))
			b = le.AppendUint32(b, uint32(bi.Pid))
			var id [24]byte
			copy(id[:20], bi.BuildID)
			id[20] = byte(min(len(bi.BuildID), 20))
			b = append(b, id[:]...)
			b = append(b, bi.Filename...)
			b = append(b, make([]byte, name-len(bi.Filename))...)
		}
		m[FeatBuildID] = b
	}
	for id, b := range w.raw {
		m[id] = b
	}
	return m
}

// Close writes the feature sections and the final header. It does not
// close the underlying writer.
func (w *Writer) Close() error {
	if w.closed {
		return w.err
	}
	w.closed = true
	if w.err != nil {
		return w.err
	}
	if err := w.bw.Flush(); err != nil {
		w.err = err
		return err
	}
	dataSize := w.off - w.dataOff
	secs := w.featureSections()
	var feat [4]uint64
	var order []Feature
	for f := Feature(0); f < featBits; f++ {
		if _, ok := secs[f]; ok {
			feat[f/64] |= 1 << (uint(f) % 64)
			order = append(order, f)
		}
	}
	table := make([]byte, 0, 16*len(order))
	body := []byte{}
	pos := w.off + int64(16*len(order))
	for _, f := range order {
		s := secs[f]
		table = le.AppendUint64(table, uint64(pos))
		table = le.AppendUint64(table, uint64(len(s)))
		body = append(body, s...)
		pos += int64(len(s))
	}
	if _, err := w.w.Write(append(table, body...)); err != nil {
		w.err = err
		return err
	}
	h := make([]byte, 0, fileHeaderSize)
	h = le.AppendUint64(h, magicLE)
	h = le.AppendUint64(h, fileHeaderSize)
	h = le.AppendUint64(h, writerAttrSize+16)
	attrsOff := w.dataOff - int64(len(w.attrs)*(writerAttrSize+16))
	h = le.AppendUint64(h, uint64(attrsOff))
	h = le.AppendUint64(h, uint64(len(w.attrs)*(writerAttrSize+16)))
	h = le.AppendUint64(h, uint64(w.dataOff))
	h = le.AppendUint64(h, uint64(dataSize))
	h = le.AppendUint64(h, 0) // event_types: unused
	h = le.AppendUint64(h, 0)
	for _, x := range feat {
		h = le.AppendUint64(h, x)
	}
	if _, err := w.w.Seek(0, io.SeekStart); err != nil {
		w.err = err
		return err
	}
	if _, err := w.w.Write(h); err != nil {
		w.err = err
		return err
	}
	if _, err := w.w.Seek(0, io.SeekEnd); err != nil {
		w.err = err
		return err
	}
	return nil
}
