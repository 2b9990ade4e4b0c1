package perfdata

import (
	"math/bits"
)

// dec reads little-endian fields from a record body, remembering whether it
// ran out of bytes instead of failing at each step.
type dec struct {
	b   []byte
	p   int
	bad bool
}

func (d *dec) u64() uint64 {
	if len(d.b)-d.p < 8 {
		d.bad = true
		d.p = len(d.b)
		return 0
	}
	v := le.Uint64(d.b[d.p:])
	d.p += 8
	return v
}

func (d *dec) u32() uint32 {
	if len(d.b)-d.p < 4 {
		d.bad = true
		d.p = len(d.b)
		return 0
	}
	v := le.Uint32(d.b[d.p:])
	d.p += 4
	return v
}

func (d *dec) u16() uint16 {
	if len(d.b)-d.p < 2 {
		d.bad = true
		d.p = len(d.b)
		return 0
	}
	v := le.Uint16(d.b[d.p:])
	d.p += 2
	return v
}

func (d *dec) bytes(n uint64) []byte {
	if n > uint64(len(d.b)-d.p) {
		d.bad = true
		d.p = len(d.b)
		return nil
	}
	v := d.b[d.p : d.p+int(n)]
	d.p += int(n)
	return v
}

// u64s decodes n u64 values into buf (reused), checking the length first.
func (d *dec) u64s(n uint64, buf []uint64) []uint64 {
	if n > uint64(len(d.b)-d.p)/8 {
		d.bad = true
		d.p = len(d.b)
		return buf[:0]
	}
	buf = buf[:0]
	for i := uint64(0); i < n; i++ {
		buf = append(buf, le.Uint64(d.b[d.p:]))
		d.p += 8
	}
	return buf
}

// str returns the remaining bytes as a C string and consumes them.
func (d *dec) str() string {
	s := cstring(d.b[d.p:])
	d.p = len(d.b)
	return s
}

// padded reports whether a name of n bytes took the rest of a body of
// size bytes from p: the kernel and perf pad a record's name with its NUL
// to 8 bytes and no further, so more means the record's size is wrong.
func padded(n, p, size int) bool { return p+(n+8)&^7 == size }

// decode turns one record (body = the bytes after the 8-byte header) into a
// typed Record.
func (r *Reader) decode(h RecordHeader, body []byte) (Record, error) {
	if h.Type == RecordSample {
		return r.decodeSample(h, body)
	}
	if h.Type < RecordHeaderAttr {
		var err error
		body, err = r.trailer(&h, body)
		if err != nil {
			return nil, err
		}
	}
	d := &dec{b: body}
	var rec Record
	switch h.Type {
	case RecordMmap, RecordMmap2:
		m := &r.rec.mmap
		*m = Mmap{RecordHeader: h}
		m.Pid, m.Tid = d.u32(), d.u32()
		m.Start, m.Len, m.PgOff = d.u64(), d.u64(), d.u64()
		if h.Type == RecordMmap2 {
			u := d.bytes(24)
			if !d.bad {
				if h.Misc&MiscMmapBuildID != 0 {
					n := min(int(u[0]), 20)
					m.BuildID = u[4 : 4+n]
				} else {
					m.Maj, m.Min = le.Uint32(u), le.Uint32(u[4:])
					m.Ino, m.InoGen = le.Uint64(u[8:]), le.Uint64(u[16:])
				}
			}
			m.Prot, m.Flags = d.u32(), d.u32()
		}
		if !d.bad {
			p := d.p
			m.Filename = d.str()
			if !padded(len(m.Filename), p, len(body)) {
				return nil, formatErr(h.Offset, "record %v: its %d-byte file name takes %d bytes, the record has %d", h.Type, len(m.Filename), (len(m.Filename)+8)&^7, len(body)-p)
			}
		}
		rec = m
	case RecordComm:
		c := &r.rec.comm
		*c = Comm{RecordHeader: h, Exec: h.Misc&MiscCommExec != 0}
		c.Pid, c.Tid = d.u32(), d.u32()
		if !d.bad {
			p := d.p
			c.Comm = d.str()
			if !padded(len(c.Comm), p, len(body)) {
				return nil, formatErr(h.Offset, "record COMM: its %d-byte name takes %d bytes, the record has %d", len(c.Comm), (len(c.Comm)+8)&^7, len(body)-p)
			}
		}
		rec = c
	case RecordFork:
		f := &r.rec.fork
		*f = Fork{RecordHeader: h}
		f.Pid, f.Ppid, f.Tid, f.Ptid = d.u32(), d.u32(), d.u32(), d.u32()
		f.Time = d.u64()
		rec = f
	case RecordExit:
		f := &r.rec.exit
		*f = Exit{RecordHeader: h}
		f.Pid, f.Ppid, f.Tid, f.Ptid = d.u32(), d.u32(), d.u32(), d.u32()
		f.Time = d.u64()
		rec = f
	case RecordLost:
		l := &r.rec.lost
		*l = Lost{RecordHeader: h}
		l.LostID, l.Lost = d.u64(), d.u64()
		rec = l
	case RecordLostSamples:
		l := &r.rec.lostS
		*l = LostSamples{RecordHeader: h}
		l.Lost = d.u64()
		rec = l
	case RecordThrottle, RecordUnthrottle:
		t := &r.rec.throttle
		*t = Throttle{RecordHeader: h}
		t.ThrottleTime, t.ThrottleID, t.ThrottleStreamID = d.u64(), d.u64(), d.u64()
		rec = t
	case RecordRead:
		x := &r.rec.read
		vals := x.Values.Values
		*x = Read{RecordHeader: h}
		x.Pid, x.Tid = d.u32(), d.u32()
		var rf uint64
		if h.Attr != nil {
			rf = h.Attr.ReadFormat
		} else if r.nonSamp != nil {
			rf = r.nonSamp.ReadFormat
		}
		x.Values.Values = vals
		decodeRead(d, rf, &x.Values)
		rec = x
	case RecordAux:
		x := &r.rec.aux
		*x = Aux{RecordHeader: h}
		x.AuxOffset, x.AuxSize, x.Flags = d.u64(), d.u64(), d.u64()
		rec = x
	case RecordSwitch, RecordSwitchCPUWide:
		x := &r.rec.sw
		*x = Switch{RecordHeader: h, Out: h.Misc&MiscSwitchOut != 0}
		if h.Type == RecordSwitchCPUWide {
			x.NextPrevPid, x.NextPrevTid = d.u32(), d.u32()
		}
		rec = x
	case RecordKsymbol:
		x := &r.rec.ksym
		*x = Ksymbol{RecordHeader: h}
		x.Addr, x.Len, x.KsymType, x.Flags = d.u64(), d.u32(), d.u16(), d.u16()
		if !d.bad {
			x.Name = d.str()
		}
		rec = x
	case RecordBPFEvent:
		x := &r.rec.bpf
		*x = BPFEvent{RecordHeader: h}
		x.EventType, x.Flags, x.ProgID = d.u16(), d.u16(), d.u32()
		copy(x.Tag[:], d.bytes(8))
		rec = x
	case RecordCgroup:
		x := &r.rec.cgroup
		*x = Cgroup{RecordHeader: h}
		x.CgroupID = d.u64()
		if !d.bad {
			x.Path = d.str()
		}
		rec = x
	case RecordTextPoke:
		x := &r.rec.poke
		*x = TextPoke{RecordHeader: h}
		x.Addr = d.u64()
		ol, nl := d.u16(), d.u16()
		x.Old = d.bytes(uint64(ol))
		x.New = d.bytes(uint64(nl))
		rec = x
	case RecordIDIndex:
		x := &r.rec.idx
		ents := x.Entries[:0]
		*x = IDIndex{RecordHeader: h}
		n := d.u64()
		if n > uint64(len(body))/32 {
			d.bad = true
			break
		}
		// nr entries of 32 bytes, and perf's id_index_entry_2 (16
		// bytes each) after them for guest machines.
		if sz := uint64(len(body)); sz != 8+32*n && sz != 8+48*n {
			return nil, formatErr(h.Offset, "ID_INDEX: %d entries do not fill its %d-byte body", n, sz)
		}
		for i := uint64(0); i < n; i++ {
			e := IDIndexEntry{ID: d.u64(), Idx: d.u64(), CPU: d.u64(), Tid: d.u64()}
			ents = append(ents, e)
			if e.Idx < uint64(len(r.s.Attrs)) {
				if r.s.ids == nil {
					r.s.ids = make(map[uint64]*Attr)
				}
				if r.s.ids[e.ID] == nil {
					r.s.ids[e.ID] = r.s.Attrs[e.Idx]
				}
			}
		}
		x.Entries = ents
		rec = x
	case RecordThreadMap:
		x := &r.rec.tmap
		*x = ThreadMap{RecordHeader: h}
		n := d.u64()
		if n > uint64(len(body))/24 {
			d.bad = true
			break
		}
		for i := uint64(0); i < n; i++ {
			pid := d.u64()
			x.Threads = append(x.Threads, ThreadMapEntry{Pid: pid, Comm: cstring(d.bytes(16))})
		}
		rec = x
	case RecordCPUMap:
		x := &r.rec.cmap
		*x = CPUMap{RecordHeader: h}
		cpus, ok := decodeCPUMap(body, r.cpuBuf[:0])
		r.cpuBuf = cpus
		if !ok {
			d.bad = true
			break
		}
		x.CPUs = cpus
		rec = x
	case RecordStat:
		x := &r.rec.stat
		*x = Stat{RecordHeader: h}
		x.StatID, x.StatCPU, x.Thread = d.u64(), d.u32(), d.u32()
		x.Val, x.Ena, x.Run = d.u64(), d.u64(), d.u64()
		rec = x
	case RecordAuxtrace:
		x := &r.rec.auxtrace
		*x = Auxtrace{RecordHeader: h}
		x.AuxSize, x.AuxOffset, x.Reference = d.u64(), d.u64(), d.u64()
		x.Idx, x.Tid, x.AuxCPU = d.u32(), d.u32(), d.u32()
		x.DataOffset = r.off
		if !d.bad {
			if x.AuxSize > 1<<62 {
				return nil, formatErr(h.Offset, "AUXTRACE: absurd aux data size %d", x.AuxSize)
			}
			r.pendSkip = int64(x.AuxSize)
		}
		rec = x
	case RecordTimeConv:
		x := &r.rec.tconv
		*x = TimeConv{RecordHeader: h}
		x.TimeShift, x.TimeMult, x.TimeZero = d.u64(), d.u64(), d.u64()
		if len(body) >= 42 {
			x.TimeCycles, x.TimeMask = d.u64(), d.u64()
			x.CapUserTimeZero = body[40] != 0
			x.CapUserTimeShort = body[41] != 0
		}
		rec = x
	default:
		if err := r.userRecord(h, body); err != nil {
			return nil, err
		}
		x := &r.rec.raw
		*x = Raw{RecordHeader: h, Data: body}
		rec = x
	}
	if d.bad {
		return nil, formatErr(h.Offset, "record %v: %d-byte body is too short", h.Type, len(body))
	}
	return rec, nil
}

// userRecord applies pipe-mode header records and other perf-synthesized
// records that describe the session.
func (r *Reader) userRecord(h RecordHeader, body []byte) error {
	switch h.Type {
	case RecordHeaderAttr:
		if len(body) < AttrSizeVer0 {
			return formatErr(h.Offset, "HEADER_ATTR: %d-byte body is shorter than an attr", len(body))
		}
		n := attrLen(body)
		a := decodeAttr(body[:n])
		if asz := le.Uint32(body[4:]); asz > uint32(len(body)) {
			return formatErr(h.Offset, "HEADER_ATTR: attr size %d exceeds the record", asz)
		}
		ids := body[n:]
		a.IDs = make([]uint64, len(ids)/8)
		for i := range a.IDs {
			a.IDs[i] = le.Uint64(ids[8*i:])
		}
		r.s.addAttr(a)
		r.s.applyEventDesc()
		r.layout()
	case RecordHeaderTracingData:
		if len(body) < 4 {
			return formatErr(h.Offset, "TRACING_DATA: %d-byte body", len(body))
		}
		r.pendSkip = int64(le.Uint32(body))
	case RecordHeaderBuildID:
		if len(body) < 28 {
			return formatErr(h.Offset, "HEADER_BUILD_ID: %d-byte body", len(body))
		}
		full := make([]byte, 8+len(body))
		le.PutUint32(full, uint32(h.Type))
		le.PutUint16(full[4:], h.Misc)
		le.PutUint16(full[6:], h.Size)
		copy(full[8:], body)
		r.s.Features.set(FeatBuildID)
		r.s.Features.BuildIDs = append(r.s.Features.BuildIDs, decodeBuildID(full))
	case RecordHeaderFeature:
		if len(body) < 8 {
			return formatErr(h.Offset, "HEADER_FEATURE: %d-byte body", len(body))
		}
		f := le.Uint64(body)
		if f >= featBits {
			return formatErr(h.Offset, "HEADER_FEATURE: feature id %d", f)
		}
		if knownFeature(Feature(f)) {
			if err := r.s.parseFeature(Feature(f), body[8:], h.Offset+16); err != nil && r.featErr == nil {
				r.featErr = err
			}
			if Feature(f) == FeatEventDesc {
				r.s.applyEventDesc()
			}
		} else {
			r.s.Features.set(Feature(f))
		}
	case RecordEventUpdate:
		if len(body) < 16 {
			return formatErr(h.Offset, "EVENT_UPDATE: %d-byte body", len(body))
		}
		const eventUpdateName = 2
		if le.Uint64(body) == eventUpdateName {
			if a := r.s.ids[le.Uint64(body[8:])]; a != nil {
				a.Name = cstring(body[16:])
			}
		}
	}
	return nil
}

// trailer parses the sample_id_all trailer of a non-sample kernel record
// into h and returns the body without it.
func (r *Reader) trailer(h *RecordHeader, body []byte) ([]byte, error) {
	a := r.nonSamp
	if a == nil {
		return body, nil
	}
	if r.multi {
		found := false
		if a.SampleIDAll() && a.trailerID > 0 && len(body) >= a.trailerID {
			if x := r.s.ids[le.Uint64(body[len(body)-a.trailerID:])]; x != nil {
				a, found = x, true
			}
		}
		if !found {
			// Unknown id: use the first attr's layout but name no attr.
			if !a.SampleIDAll() || len(body) < a.trailerLen {
				return body, nil
			}
			body, err := parseTrailer(h, a, body)
			h.Attr = nil
			return body, err
		}
	}
	if !a.SampleIDAll() {
		h.Attr = a
		return body, nil
	}
	return parseTrailer(h, a, body)
}

func parseTrailer(h *RecordHeader, a *Attr, body []byte) ([]byte, error) {
	n := a.trailerLen
	if len(body) < n {
		return nil, formatErr(h.Offset, "record %v: %d-byte body is too short for its %d-byte sample_id trailer", h.Type, len(body), n)
	}
	h.Attr = a
	t := &dec{b: body[len(body)-n:]}
	st := a.SampleType
	if st&SampleTID != 0 {
		h.Pid, h.Tid = t.u32(), t.u32()
	}
	if st&SampleTime != 0 {
		h.Time = t.u64()
	}
	if st&SampleID != 0 {
		h.ID = t.u64()
	}
	if st&SampleStreamID != 0 {
		h.StreamID = t.u64()
	}
	if st&SampleCPU != 0 {
		h.CPU = t.u32()
		t.u32()
	}
	if st&SampleIdentifier != 0 {
		h.ID = t.u64()
	}
	h.Has = st & (SampleTID | SampleTime | SampleID | SampleStreamID | SampleCPU | SampleIdentifier)
	if h.Has&SampleIdentifier != 0 {
		h.Has |= SampleID
	}
	return body[:len(body)-n], nil
}

// decodeRead decodes a read_format value block.
func decodeRead(d *dec, rf uint64, out *ReadValues) {
	vals := out.Values[:0]
	out.TimeEnabled, out.TimeRunning = 0, 0
	one := func() ReadValue {
		v := ReadValue{Value: d.u64()}
		if rf&FormatID != 0 {
			v.ID = d.u64()
		}
		if rf&FormatLost != 0 {
			v.Lost = d.u64()
		}
		return v
	}
	if rf&FormatGroup != 0 {
		nr := d.u64()
		if rf&FormatTotalTimeEnabled != 0 {
			out.TimeEnabled = d.u64()
		}
		if rf&FormatTotalTimeRunning != 0 {
			out.TimeRunning = d.u64()
		}
		per := uint64(8 * (1 + bits.OnesCount64(rf&(FormatID|FormatLost))))
		if nr > uint64(len(d.b)-d.p)/per {
			d.bad = true
			out.Values = vals
			return
		}
		for i := uint64(0); i < nr; i++ {
			vals = append(vals, one())
		}
	} else {
		v := ReadValue{Value: d.u64()}
		if rf&FormatTotalTimeEnabled != 0 {
			out.TimeEnabled = d.u64()
		}
		if rf&FormatTotalTimeRunning != 0 {
			out.TimeRunning = d.u64()
		}
		if rf&FormatID != 0 {
			v.ID = d.u64()
		}
		if rf&FormatLost != 0 {
			v.Lost = d.u64()
		}
		vals = append(vals, v)
	}
	out.Values = vals
}

// decodeCPUMap decodes perf_record_cpu_map_data into a list of CPUs.
func decodeCPUMap(b []byte, out []int) ([]int, bool) {
	if len(b) < 2 {
		return out, false
	}
	switch le.Uint16(b) {
	case 0: // list of u16 CPUs
		if len(b) < 4 {
			return out, false
		}
		n := int(le.Uint16(b[2:]))
		if 4+2*n > len(b) {
			return out, false
		}
		for i := 0; i < n; i++ {
			c := int(le.Uint16(b[4+2*i:]))
			if c == 0xffff {
				c = -1
			}
			out = append(out, c)
		}
	case 1: // bit mask
		if len(b) < 6 {
			return out, false
		}
		n, lsz := int(le.Uint16(b[2:])), int(le.Uint16(b[4:]))
		start := 6
		if lsz == 8 {
			start = 10
		} else if lsz != 4 {
			return out, false
		}
		if start+n*lsz > len(b) {
			return out, false
		}
		for i := 0; i < n; i++ {
			var w uint64
			if lsz == 8 {
				w = le.Uint64(b[start+8*i:])
			} else {
				w = uint64(le.Uint32(b[start+4*i:]))
			}
			for w != 0 {
				bit := bits.TrailingZeros64(w)
				out = append(out, i*lsz*8+bit)
				w &= w - 1
			}
		}
	case 2: // range
		if len(b) < 8 {
			return out, false
		}
		if b[2] != 0 {
			out = append(out, -1)
		}
		lo, hi := int(le.Uint16(b[4:])), int(le.Uint16(b[6:]))
		for c := lo; c <= hi; c++ {
			out = append(out, c)
		}
	default:
		return out, false
	}
	return out, true
}

// decodeSample decodes a PERF_RECORD_SAMPLE in the kernel's field order,
// finding its attr by the sample id when the file has several.
func (r *Reader) decodeSample(h RecordHeader, b []byte) (Record, error) {
	a := r.nonSamp
	if a == nil {
		return nil, formatErr(h.Offset, "SAMPLE record before any event attr")
	}
	found := !r.multi
	if r.multi && a.idPos >= 0 && len(b) >= a.idPos+8 {
		if x := r.s.ids[le.Uint64(b[a.idPos:])]; x != nil {
			a, found = x, true
		}
	}
	s := &r.rec.sample
	n, err := decodeSample(h, a, b, s)
	if err != nil {
		return nil, err
	}
	if n != len(b) && a.SampleType&^knownSampleType == 0 {
		// The kernel sizes a sample to its fields: bytes left over mean
		// the size field is wrong (the record runs into the next one).
		return nil, formatErr(h.Offset, "SAMPLE: sample_type %#x lays out %d bytes, the record claims %d", a.SampleType, n+8, len(b)+8)
	}
	if !found {
		// Unknown id: decoded with the first attr's layout, naming no attr.
		s.Attr, s.EventName = nil, ""
	}
	return s, nil
}

// SampleID returns the sample id of a PERF_RECORD_SAMPLE body laid out by
// a's sample_type (IDENTIFIER, or ID after the fields that precede it), and
// false when the sample_type has no id or the body is too short for it.
// It finds the attr of a sample among several before DecodeSample.
func (a *Attr) SampleID(body []byte) (uint64, bool) {
	p := sampleIDPos(a.SampleType)
	if p < 0 || len(body) < p+8 {
		return 0, false
	}
	return le.Uint64(body[p:]), true
}

// sampleIDPos is the byte offset of the id in a sample of sample_type st,
// -1 if it has none.
func sampleIDPos(st uint64) int {
	if st&SampleIdentifier != 0 {
		return 0
	}
	if st&SampleID == 0 {
		return -1
	}
	return 8 * bits.OnesCount64(st&(SampleIP|SampleTID|SampleTime|SampleAddr))
}

// DecodeSample decodes body, the bytes of a PERF_RECORD_SAMPLE after its
// 8-byte header, laid out as attr a says (sample_type, read_format,
// branch_sample_type, sample_regs_user and sample_regs_intr), into s, which
// the caller owns: s becomes the sample with header h and Attr a, every
// field absent from the sample_type zero. The slices of s keep their
// storage (Callchain, Regs, IntrRegs, Branches and Read.Values are decoded
// into it, so a reused s allocates nothing once they are large enough);
// Raw, StackData and AuxData alias body. A body too short for the
// sample_type yields a *FormatError at h.Offset.
func DecodeSample(h RecordHeader, a *Attr, body []byte, s *Sample) error {
	_, err := decodeSample(h, a, body, s)
	return err
}

// knownSampleType is every sample_type bit whose layout decodeSample knows:
// a sample of only these fields is laid out to its last byte.
const knownSampleType = SampleWeightStruct<<1 - 1

// decodeSample is DecodeSample; it also returns how many bytes of body the
// sample_type's fields took.
func decodeSample(h RecordHeader, a *Attr, body []byte, s *Sample) (int, error) {
	cc, regs, iregs, brs, rv := s.Callchain, s.Regs, s.IntrRegs, s.Branches, s.Read.Values
	*s = Sample{RecordHeader: h}
	s.Attr = a
	s.EventName = a.Name
	b := body
	st := a.SampleType
	d := &dec{b: b}
	if st&SampleIdentifier != 0 {
		s.ID = d.u64()
	}
	if st&SampleIP != 0 {
		s.IP = d.u64()
	}
	if st&SampleTID != 0 {
		s.Pid, s.Tid = d.u32(), d.u32()
	}
	if st&SampleTime != 0 {
		s.Time = d.u64()
	}
	if st&SampleAddr != 0 {
		s.Addr = d.u64()
	}
	if st&SampleID != 0 {
		s.ID = d.u64()
	}
	if st&SampleStreamID != 0 {
		s.StreamID = d.u64()
	}
	if st&SampleCPU != 0 {
		s.CPU = d.u32()
		d.u32()
	}
	if st&SamplePeriod != 0 {
		s.Period = d.u64()
	} else {
		s.Period = a.SamplePeriod // as perf does for a fixed period
	}
	s.Read.Values = rv[:0]
	if st&SampleRead != 0 {
		decodeRead(d, a.ReadFormat, &s.Read)
	}
	s.Callchain = cc[:0]
	if st&SampleCallchain != 0 {
		n := d.u64()
		s.Callchain = d.u64s(n, cc)
	}
	if st&SampleRaw != 0 {
		n := d.u32()
		s.Raw = d.bytes(uint64(n))
	}
	s.Branches = brs[:0]
	if st&SampleBranchStack != 0 {
		n := d.u64()
		if a.BranchSampleType&BranchHWIndex != 0 {
			s.BranchHWIndex = d.u64()
		}
		if n > uint64(len(b)-d.p)/24 {
			d.bad = true
		} else {
			for i := uint64(0); i < n; i++ {
				s.Branches = append(s.Branches, BranchEntry{From: d.u64(), To: d.u64(), Flags: d.u64()})
			}
		}
	}
	s.Regs = regs[:0]
	if st&SampleRegsUser != 0 {
		s.RegsABI = d.u64()
		if s.RegsABI != 0 {
			s.RegsMask = a.SampleRegsUser
			s.Regs = d.u64s(uint64(bits.OnesCount64(a.SampleRegsUser)), regs)
		}
	}
	if st&SampleStackUser != 0 {
		n := d.u64()
		if n != 0 {
			s.StackData = d.bytes(n)
			s.StackDynSize = d.u64()
		}
	}
	if st&(SampleWeight|SampleWeightStruct) != 0 {
		s.Weight = d.u64()
	}
	if st&SampleDataSrc != 0 {
		s.DataSrc = d.u64()
	}
	if st&SampleTransaction != 0 {
		s.Transaction = d.u64()
	}
	s.IntrRegs = iregs[:0]
	if st&SampleRegsIntr != 0 {
		s.IntrRegsABI = d.u64()
		if s.IntrRegsABI != 0 {
			s.IntrRegsMask = a.SampleRegsIntr
			s.IntrRegs = d.u64s(uint64(bits.OnesCount64(a.SampleRegsIntr)), iregs)
		}
	}
	if st&SamplePhysAddr != 0 {
		s.PhysAddr = d.u64()
	}
	if st&SampleCgroup != 0 {
		s.Cgroup = d.u64()
	}
	if st&SampleDataPageSize != 0 {
		s.DataPageSize = d.u64()
	}
	if st&SampleCodePageSize != 0 {
		s.CodePageSize = d.u64()
	}
	if st&SampleAux != 0 {
		n := d.u64()
		s.AuxData = d.bytes(n)
	}
	if d.bad {
		return d.p, formatErr(h.Offset, "SAMPLE: %d-byte body is too short for sample_type %#x", len(b), st)
	}
	s.Has = st & (SampleTID | SampleTime | SampleID | SampleStreamID | SampleCPU | SampleIdentifier)
	if s.Has&SampleIdentifier != 0 {
		s.Has |= SampleID
	}
	return d.p, nil
}
