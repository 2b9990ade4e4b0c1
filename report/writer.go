package report

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/ustack/ustack/perfdata"
)

// Writer receives a report's samples in sample order and writes them in one
// output format. Every format ustack prints is a Writer made by NewWriter.
type Writer interface {
	// Write takes one sample. Streaming formats print it at once;
	// aggregating formats (folded, pprof) keep what they need of it.
	// The sample and its frames are not retained after Write returns.
	Write(s *Sample) error
	// Close writes whatever the format holds back until the end and
	// flushes. It does not close the io.Writer given to NewWriter.
	Close() error
}

// WriterOptions configure NewWriter. The zero value works for every format.
type WriterOptions struct {
	// Events are the recording's event names; the text format pads the
	// event column to the longest.
	Events []string
	// Raw prints symbol names as the object spells them (no demangling).
	Raw bool
	// Srcline makes the text format print each frame's source line, like
	// perf script -F +srcline.
	Srcline bool
	// Attrs are the recording's events. With them the text format prints
	// what perf script prints for each event (its default fields, or
	// those of Fields); without, those of perf script -F
	// comm,tid,time,event,ip,sym,symoff,dso. pprof chooses its sample
	// types by them.
	Attrs []*perfdata.Attr
	// Session, when set instead of Attrs, gives the events when the first
	// sample arrives: a pipe's events come with its first records.
	Session *perfdata.Session
	// Fields is the text format's -F, as perf script takes it.
	Fields FieldSpec

	// Title heads the flame graph (default "Flame Graph", or "Icicle
	// Graph" when Inverted) and names the speedscope file.
	Title string
	// Inverted draws the flame graph as an icicle graph: callers at the
	// top, callees hanging below.
	Inverted bool
	// Width is the flame graph's width in pixels (default 1200).
	Width int
	// MinWidth leaves out flame graph boxes narrower than this many
	// pixels (default 0.1), with everything they call.
	MinWidth float64
	// GroupBy says what the flame graph's boxes under "all" are:
	// GroupComm (the default, as folded stacks), GroupProcess,
	// GroupThread or GroupNone.
	GroupBy string

	// LastSample is the wall-clock time of the recording's last sample
	// (for a core dump, the dump's time): the otlp formats' timestamps,
	// which are Unix time, are the samples' times moved to end there.
	// The zero value means when the writer is closed.
	LastSample time.Time
	// FPAudit fades the flame graph's boxes a frame-pointer walk would
	// have lost in most of their samples (Sample.FPLost).
	FPAudit bool
}

// check rejects options no format can honour.
func (o *WriterOptions) check() error {
	switch o.GroupBy {
	case "", GroupComm, GroupProcess, GroupThread, GroupNone:
	default:
		return fmt.Errorf("unknown grouping %q (want %s, %s, %s or %s)", o.GroupBy, GroupComm, GroupProcess, GroupThread, GroupNone)
	}
	if o.Width < 0 || o.Width > 1<<20 {
		return fmt.Errorf("flame graph width %d pixels is out of range", o.Width)
	}
	if o.MinWidth < 0 || o.MinWidth != o.MinWidth {
		return fmt.Errorf("flame graph minimum box width %v is not a width in pixels", o.MinWidth)
	}
	return nil
}

// writerMakers holds the constructor of every output format, by name.
var writerMakers = map[string]func(w io.Writer, o WriterOptions) Writer{
	"text": func(w io.Writer, o WriterOptions) Writer {
		tw := NewTextWriter(w, EventWidth(o.Events), o.Raw)
		if o.Attrs != nil {
			tw, _ = NewTextWriterFor(w, o.Attrs, o.Fields, o.Raw) // checked by NewWriter
		}
		tw.Srcline = o.Srcline
		tw.PerfMapNames = o.Attrs != nil || o.Session != nil // a recording's, not a core's
		if o.Attrs == nil && o.Session != nil {
			return &lazyText{tw: tw, w: w, o: o}
		}
		return textWriter{tw}
	},
	"json":   func(w io.Writer, o WriterOptions) Writer { return jsonWriter{NewJSONWriter(w, o.Raw)} },
	"folded": func(w io.Writer, o WriterOptions) Writer { return &foldedWriter{f: NewFolder(o.Raw), w: w} },
	"pprof": func(w io.Writer, o WriterOptions) Writer {
		b := NewPprofBuilder(o.Raw)
		if o.Attrs != nil {
			b.SetEvents(o.Attrs)
		}
		return &pprofWriter{b: b, w: w, session: o.Session}
	},
	"flamegraph": func(w io.Writer, o WriterOptions) Writer { return newFlameWriter(w, o) },
	"otlp":       func(w io.Writer, o WriterOptions) Writer { return newOTLPWriter(w, o, false) },
	"otlp-json":  func(w io.Writer, o WriterOptions) Writer { return newOTLPWriter(w, o, true) },
	"speedscope": func(w io.Writer, o WriterOptions) Writer { return newSpeedscopeWriter(w, o) },
}

// Formats returns the names NewWriter accepts, sorted.
func Formats() []string {
	names := make([]string, 0, len(writerMakers))
	for n := range writerMakers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NewWriter returns the Writer of the named format ("" is text) writing to w.
func NewWriter(format string, w io.Writer, opts WriterOptions) (Writer, error) {
	if format == "" {
		format = "text"
	}
	mk, ok := writerMakers[format]
	if !ok {
		return nil, fmt.Errorf("unknown format %q (want %s)", format, strings.Join(Formats(), ", "))
	}
	if err := opts.check(); err != nil {
		return nil, err
	}
	if format == "text" && opts.Attrs != nil {
		if _, err := eventLayouts(opts.Attrs, opts.Fields, false); err != nil {
			return nil, err
		}
	}
	return mk(w, opts), nil
}

type textWriter struct{ t *TextWriter }

func (t textWriter) Write(s *Sample) error { return t.t.Write(s) }
func (t textWriter) Close() error          { return t.t.Flush() }

// SummaryWriter is a Writer whose output can end with the report's
// summary: JSON's summary record (ustack report --verbose).
type SummaryWriter interface {
	Writer
	// WriteSummary writes the summary; call it after the last Write and
	// before Close.
	WriteSummary(s *Summary) error
}

type jsonWriter struct{ j *JSONWriter }

func (j jsonWriter) Write(s *Sample) error         { return j.j.Write(s) }
func (j jsonWriter) WriteSummary(s *Summary) error { return j.j.WriteSummary(s) }
func (j jsonWriter) Close() error                  { return j.j.Flush() }

type foldedWriter struct {
	f *Folder
	w io.Writer
}

func (f *foldedWriter) Write(s *Sample) error { f.f.Add(s); return nil }
func (f *foldedWriter) Close() error          { _, err := f.f.WriteTo(f.w); return err }

type pprofWriter struct {
	b       *PprofBuilder
	w       io.Writer
	session *perfdata.Session // events to take at the first sample
}

func (p *pprofWriter) Write(s *Sample) error {
	if p.session != nil {
		p.b.SetEvents(p.session.Attrs)
		p.session = nil
	}
	p.b.Add(s)
	return nil
}

// lazyText is the text writer of a recording whose events are known only
// once its first sample arrives (a pipe).
type lazyText struct {
	tw *TextWriter
	w  io.Writer
	o  WriterOptions
}

func (l *lazyText) Write(s *Sample) error {
	if l.o.Session != nil {
		tw, err := newTextWriterFor(l.w, l.o.Session.Attrs, l.o.Fields, l.o.Raw, true)
		if err != nil {
			return err
		}
		tw.Srcline = l.o.Srcline
		l.tw, l.o.Session = tw, nil
	}
	return l.tw.Write(s)
}

func (l *lazyText) Close() error    { return l.tw.Flush() }
func (p *pprofWriter) Close() error { return p.b.Write(p.w) }
