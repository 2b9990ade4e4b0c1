package tracefmt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Error reports malformed tracing data or a malformed format file: where
// (the byte offset in the tracing data, and the event when known) and what
// was wrong.
type Error struct {
	// Offset is the byte offset in the tracing data.
	Offset int64
	// Event is "system:name" (or the system and the file's index) when the
	// error is inside one event's format file.
	Event string
	Msg   string
}

// Error formats the error as "tracefmt: offset 0x…: [event: ]message".
func (e *Error) Error() string {
	if e.Event != "" {
		return fmt.Sprintf("tracefmt: tracing data offset %#x: %s: %s", e.Offset, e.Event, e.Msg)
	}
	return fmt.Sprintf("tracefmt: tracing data offset %#x: %s", e.Offset, e.Msg)
}

func errAt(off int, format string, args ...any) error {
	return &Error{Offset: int64(off), Msg: fmt.Sprintf(format, args...)}
}

// Events is the parsed tracing data of a recording: the format of every
// tracepoint it recorded.
type Events struct {
	// Version is the tracing data version ("0.5", "0.6").
	Version string
	// LongSize is the size of a C long in the traced kernel (4 or 8).
	LongSize int
	// PageSize is the traced kernel's page size.
	PageSize uint32
	// Formats lists the event formats in file order (ftrace's own formats,
	// system "ftrace", first).
	Formats []*Format
	// Resolve, when set, names kernel addresses for %pS/%pF/%ps/%pf.
	// perf script resolves them from the kernel map of a file-mode
	// recording (kallsyms or vmlinux) and prints hex in pipe mode; set
	// Resolve to match. Without it they print as hex, as libtraceevent
	// does for an unknown address.
	Resolve func(addr uint64) (name string, off uint64, ok bool)

	byID   map[uint64]*Format
	printk map[uint64]string
}

var tracingMagic = []byte("\x17\x08\x44tracing")

// maxEvents bounds the format files of one recording.
const maxEvents = 1 << 16

// Parse parses tracing data: the TRACING_DATA feature of a perf.data file
// (perfdata.Features.TracingData). Format files that cannot be parsed are
// left out and reported in the error (errors.Join of *Error, one per
// file) while the others are returned: the caller can warn and go on. A
// damaged container (magic, sizes) returns nil and the error.
func Parse(data []byte) (*Events, error) {
	p := &tdReader{b: data}
	if !bytes.HasPrefix(data, tracingMagic) {
		return nil, errAt(0, "not tracing data: magic %q", data[:min(len(data), 10)])
	}
	p.p = len(tracingMagic)
	e := &Events{byID: map[uint64]*Format{}, printk: map[uint64]string{}}
	e.Version = p.cstr("version")
	if e.Version != "0.5" && e.Version != "0.6" && p.err == nil {
		return nil, errAt(len(tracingMagic), "tracing data version %q: only 0.5 and 0.6 are known", e.Version)
	}
	if big := p.byte1(); big != 0 && p.err == nil {
		return nil, errAt(p.p-1, "big-endian tracing data is not supported")
	}
	e.LongSize = int(p.byte1())
	if p.err == nil && e.LongSize != 4 && e.LongSize != 8 {
		return nil, errAt(p.p-1, "long size %d: want 4 or 8", e.LongSize)
	}
	e.PageSize = p.u32()
	for _, want := range []string{"header_page", "header_event"} {
		at := p.p
		if name := p.cstr("section name"); p.err == nil && name != want {
			return nil, errAt(at, "section %q where %q belongs", name, want)
		}
		p.bytes(p.u64(), want)
	}
	if p.err != nil {
		return nil, p.err
	}
	var errs []error
	add := func(system string, i int, at int, b []byte) {
		f, err := parseFormat(system, b, e)
		if err != nil {
			var fe *Error
			if errors.As(err, &fe) {
				fe.Offset += int64(at)
				if fe.Event == "" {
					fe.Event = fmt.Sprintf("%s format #%d", system, i)
				}
			}
			errs = append(errs, err)
			return
		}
		e.Formats = append(e.Formats, f)
		if _, dup := e.byID[f.ID]; !dup {
			e.byID[f.ID] = f
		}
	}
	n := p.count("ftrace formats", 8)
	for i := 0; i < n && p.err == nil; i++ {
		sz := p.u64()
		at := p.p
		if b := p.bytes(sz, "ftrace format"); p.err == nil {
			add("ftrace", i, at, b)
		}
	}
	nsys := p.count("event systems", 5) // name, NUL, u32 count
	for s := 0; s < nsys && p.err == nil; s++ {
		system := p.cstr("system name")
		n := p.count("event formats", 8)
		for i := 0; i < n && p.err == nil; i++ {
			sz := p.u64()
			at := p.p
			if b := p.bytes(sz, "event format"); p.err == nil {
				add(system, i, at, b)
			}
		}
	}
	if p.err != nil {
		return nil, errors.Join(append([]error{p.err}, errs...)...)
	}
	// kallsyms, printk formats, saved cmdlines (0.6): only the printk
	// formats matter for formatting (%s of a kernel string pointer).
	p.bytes(uint64(p.u32()), "kallsyms")
	at := p.p
	pk := p.bytes(uint64(p.u32()), "printk formats")
	if p.err == nil {
		e.parsePrintk(pk, at)
	}
	if e.Version == "0.6" && p.err == nil && p.p < len(data) {
		p.bytes(p.u64(), "saved cmdlines")
	}
	if p.err != nil {
		errs = append(errs, p.err)
	}
	return e, errors.Join(errs...)
}

// Lookup returns the format of the tracepoint with the given id (a
// tracepoint attr's config, or the common_type of its raw data), or nil.
func (e *Events) Lookup(id uint64) *Format { return e.byID[id] }

// ForRaw returns the format of a PERF_SAMPLE_RAW record by its
// common_type field, or nil.
func (e *Events) ForRaw(raw []byte) *Format {
	if len(raw) < 2 {
		return nil
	}
	return e.byID[uint64(binary.LittleEndian.Uint16(raw))]
}

// parsePrintk reads the printk formats section: lines of `0xADDR : "fmt"`.
func (e *Events) parsePrintk(b []byte, at int) {
	for _, line := range strings.Split(string(b), "\n") {
		addr, s, ok := strings.Cut(line, " : ")
		if !ok {
			continue
		}
		a, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(addr), "0x"), 16, 64)
		if err != nil {
			continue
		}
		s = strings.TrimSpace(s)
		s = strings.TrimSuffix(strings.TrimPrefix(s, `"`), `"`)
		e.printk[a] = s
	}
}

// tdReader reads the tracing data container with sticky bounds errors.
type tdReader struct {
	b   []byte
	p   int
	err error
}

func (r *tdReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = errAt(r.p, format, args...)
	}
	r.p = len(r.b)
}

func (r *tdReader) byte1() byte {
	if r.p >= len(r.b) {
		r.fail("tracing data ends in its header")
		return 0
	}
	r.p++
	return r.b[r.p-1]
}

func (r *tdReader) u32() uint32 {
	if len(r.b)-r.p < 4 {
		r.fail("tracing data ends inside a 4-byte size")
		return 0
	}
	r.p += 4
	return binary.LittleEndian.Uint32(r.b[r.p-4:])
}

func (r *tdReader) u64() uint64 {
	if len(r.b)-r.p < 8 {
		r.fail("tracing data ends inside an 8-byte size")
		return 0
	}
	r.p += 8
	return binary.LittleEndian.Uint64(r.b[r.p-8:])
}

// count reads a u32 count of entries of at least minSize bytes each.
func (r *tdReader) count(what string, minSize uint64) int {
	n := r.u32()
	if r.err == nil && (n > maxEvents || uint64(n)*minSize > uint64(len(r.b)-r.p)) {
		r.p -= 4
		r.fail("%d %s cannot fit in the %d bytes left", n, what, len(r.b)-r.p-4)
		return 0
	}
	return int(n)
}

func (r *tdReader) bytes(n uint64, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.p) {
		r.fail("%s of %d bytes runs past the end of the tracing data (%d bytes left)", what, n, len(r.b)-r.p)
		return nil
	}
	v := r.b[r.p : r.p+int(n)]
	r.p += int(n)
	return v
}

func (r *tdReader) cstr(what string) string {
	if r.err != nil {
		return ""
	}
	i := bytes.IndexByte(r.b[r.p:], 0)
	if i < 0 {
		r.fail("%s is not NUL-terminated", what)
		return ""
	}
	s := string(r.b[r.p : r.p+i])
	r.p += i + 1
	return s
}
