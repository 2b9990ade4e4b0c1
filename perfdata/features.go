package perfdata

import (
	"bytes"
	"encoding/binary"

	"github.com/ustack/ustack/arch"
)

// BuildID is one entry of the BUILD_ID feature (or a pipe-mode
// HEADER_BUILD_ID record): the build id of an object perf saw, by file name.
type BuildID struct {
	// Misc is the entry's header misc: cpumode bits (MiscKernel, MiscUser,
	// guest modes) and MiscBuildIDSize.
	Misc    uint16
	Pid     int32
	BuildID []byte
	// Filename is the object's path ("[kernel.kallsyms]" for the kernel).
	Filename string
}

// EventDesc is one event of the EVENT_DESC feature.
type EventDesc struct {
	Attr *Attr
	Name string
	IDs  []uint64
}

// Features holds the feature sections the package decodes. A zero field
// means the feature was absent (Has tells them apart).
type Features struct {
	Arch      string
	Hostname  string
	OSRelease string
	Version   string
	CPUDesc   string
	CPUID     string
	Cmdline   []string
	// NrCPUsAvail and NrCPUsOnline are the NRCPUS feature.
	NrCPUsAvail, NrCPUsOnline uint32
	// TotalMem is in kB.
	TotalMem  uint64
	BuildIDs  []BuildID
	EventDesc []EventDesc
	// ClockIDRes is the CLOCKID feature: the resolution of the sampling
	// clock in nanoseconds.
	ClockIDRes uint64
	// SampleTimeFirst and SampleTimeLast are the SAMPLE_TIME feature.
	SampleTimeFirst, SampleTimeLast uint64
	// Compression is the COMPRESSED feature (perf record -z).
	Compression Compression
	// TracingData is the TRACING_DATA feature (or the pipe-mode
	// TRACING_DATA record's payload), undecoded: the tracepoints' format
	// files that package tracefmt parses. It is nil when absent.
	TracingData []byte
	// present is the bitmap of features seen.
	present [featBits / 64]uint64
}

// Has reports whether the file carried feature f.
func (f *Features) Has(f2 Feature) bool {
	return f2 >= 0 && f2 < featBits && f.present[f2/64]&(1<<(uint(f2)%64)) != 0
}

func (f *Features) set(f2 Feature) {
	if f2 >= 0 && f2 < featBits {
		f.present[f2/64] |= 1 << (uint(f2) % 64)
	}
}

// Session is what a perf.data file says about itself: its mode, events and
// feature sections. In pipe mode it fills in as the header records stream by.
type Session struct {
	// Pipe is set for pipe-mode data (perf record -o -).
	Pipe bool
	// Attrs lists every event, in file order.
	Attrs    []*Attr
	Features Features
	// DataOffset and DataSize locate the data section (file mode).
	DataOffset, DataSize int64
	// HeaderSize is the file header's size field (104, or 16 in pipe mode).
	HeaderSize int64

	ids map[uint64]*Attr
}

// Arch returns the architecture named by the ARCH feature, or arch.Unknown.
func (s *Session) Arch() arch.Arch {
	a, err := arch.Parse(s.Features.Arch)
	if err != nil {
		return arch.Unknown
	}
	return a
}

// AttrByID returns the attr that sample id belongs to, or nil.
func (s *Session) AttrByID(id uint64) *Attr { return s.ids[id] }

// addAttr registers an attr and its ids.
func (s *Session) addAttr(a *Attr) {
	a.Index = len(s.Attrs)
	a.prepare()
	s.Attrs = append(s.Attrs, a)
	if s.ids == nil {
		s.ids = make(map[uint64]*Attr)
	}
	for _, id := range a.IDs {
		s.ids[id] = a
	}
	if a.Name == "" {
		a.Name = defaultName(a)
	}
}

// applyEventDesc names attrs from EVENT_DESC entries, by id, falling back to
// position.
func (s *Session) applyEventDesc() {
	for i, d := range s.Features.EventDesc {
		var a *Attr
		for _, id := range d.IDs {
			if x := s.ids[id]; x != nil {
				a = x
				break
			}
		}
		if a == nil && len(d.IDs) == 0 && i < len(s.Attrs) && len(s.Features.EventDesc) == len(s.Attrs) {
			a = s.Attrs[i]
		}
		if a != nil && d.Name != "" {
			a.Name = d.Name
		}
	}
}

// fdec decodes a feature section held in memory.
type fdec struct {
	b   []byte
	p   int
	bad bool
}

func (d *fdec) u32() uint32 {
	if d.p+4 > len(d.b) {
		d.bad = true
		d.p = len(d.b)
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b[d.p:])
	d.p += 4
	return v
}

func (d *fdec) u64() uint64 {
	if d.p+8 > len(d.b) {
		d.bad = true
		d.p = len(d.b)
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b[d.p:])
	d.p += 8
	return v
}

func (d *fdec) bytes(n uint64) []byte {
	if n > uint64(len(d.b)-d.p) {
		d.bad = true
		d.p = len(d.b)
		return nil
	}
	v := d.b[d.p : d.p+int(n)]
	d.p += int(n)
	return v
}

// str decodes a perf_header_string: u32 len, then len bytes holding a
// NUL-terminated, padded string.
func (d *fdec) str() string {
	n := d.u32()
	return cstring(d.bytes(uint64(n)))
}

// cstring returns b up to its first NUL.
func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// parseFeature decodes feature f from its section bytes into s. Unknown
// features are only marked present. off is the section's offset, for errors.
func (s *Session) parseFeature(f Feature, b []byte, off int64) error {
	s.Features.set(f)
	d := &fdec{b: b}
	ft := &s.Features
	switch f {
	case FeatHostname:
		ft.Hostname = d.str()
	case FeatOSRelease:
		ft.OSRelease = d.str()
	case FeatVersion:
		ft.Version = d.str()
	case FeatArch:
		ft.Arch = d.str()
	case FeatCPUDesc:
		ft.CPUDesc = d.str()
	case FeatCPUID:
		ft.CPUID = d.str()
	case FeatNrCPUs:
		ft.NrCPUsAvail = d.u32()
		ft.NrCPUsOnline = d.u32()
	case FeatTotalMem:
		ft.TotalMem = d.u64()
	case FeatClockID:
		ft.ClockIDRes = d.u64()
	case FeatSampleTime:
		ft.SampleTimeFirst = d.u64()
		ft.SampleTimeLast = d.u64()
	case FeatCmdline:
		n := d.u32()
		if uint64(n)*4 > uint64(len(b)) {
			return formatErr(off, "CMDLINE feature: %d strings in %d bytes", n, len(b))
		}
		ft.Cmdline = make([]string, 0, n)
		for i := uint32(0); i < n && !d.bad; i++ {
			ft.Cmdline = append(ft.Cmdline, d.str())
		}
	case FeatEventDesc:
		n := d.u32()
		asz := d.u32()
		if d.bad {
			break
		}
		if asz < AttrSizeVer0 || asz > attrSizeLimit {
			return formatErr(off, "EVENT_DESC feature: attr size %d", asz)
		}
		if uint64(n)*uint64(asz) > uint64(len(b)) {
			return formatErr(off, "EVENT_DESC feature: %d events of %d bytes in %d bytes", n, asz, len(b))
		}
		ft.EventDesc = make([]EventDesc, 0, n)
		for i := uint32(0); i < n && !d.bad; i++ {
			ab := d.bytes(uint64(asz))
			if d.bad {
				break
			}
			a := decodeAttr(ab[:attrLen(ab)])
			nids := d.u32()
			name := d.str()
			if uint64(nids)*8 > uint64(len(b)-d.p) {
				d.bad = true
				break
			}
			ids := make([]uint64, nids)
			for j := range ids {
				ids[j] = d.u64()
			}
			a.IDs = ids
			a.Name = name
			ft.EventDesc = append(ft.EventDesc, EventDesc{Attr: a, Name: name, IDs: ids})
		}
	case FeatBuildID:
		ft.BuildIDs = ft.BuildIDs[:0]
		for len(b)-d.p >= 8 {
			start := d.p
			size := int(binary.LittleEndian.Uint16(b[start+6:]))
			if size < 36 || start+size > len(b) {
				return formatErr(off+int64(start), "BUILD_ID feature: entry size %d", size)
			}
			ft.BuildIDs = append(ft.BuildIDs, decodeBuildID(b[start:start+size]))
			d.p = start + size
		}
	}
	if d.bad {
		return truncErr(off, "feature %d: section of %d bytes is too short", f, len(b))
	}
	return nil
}

// attrLen returns how many bytes of an attr buffer to decode: attr.size
// (0 meaning AttrSizeVer0) clamped to the buffer.
func attrLen(b []byte) int {
	sz := int(binary.LittleEndian.Uint32(b[4:]))
	if sz == 0 {
		sz = AttrSizeVer0
	}
	if sz < AttrSizeVer0 {
		sz = AttrSizeVer0
	}
	if sz > len(b) {
		sz = len(b)
	}
	return sz
}

// decodeBuildID decodes a build-id record of at least 36 bytes (header
// included): pid, 24 bytes of build id (20 + size byte + padding), file name.
func decodeBuildID(e []byte) BuildID {
	misc := binary.LittleEndian.Uint16(e[4:])
	bi := BuildID{Misc: misc, Pid: int32(binary.LittleEndian.Uint32(e[8:]))}
	n := 20
	if misc&MiscBuildIDSize != 0 {
		if sz := int(e[12+20]); sz <= 20 {
			n = sz
		}
	}
	bi.BuildID = append([]byte(nil), e[12:12+n]...)
	bi.Filename = cstring(e[36:])
	return bi
}
