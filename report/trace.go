package report

import (
	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/tracefmt"
)

// traceFormats finds the tracefmt.Format of tracepoint samples for the
// reader goroutine. The recording's tracing data is parsed at the first
// tracepoint sample: in pipe mode it arrives in a record, before the
// samples. Every gap (no tracing data, data that does not parse, an event
// without a format, a print fmt perf evaluates and tracefmt does not) is
// warned about once, naming the event.
type traceFormats struct {
	p      *processor
	parsed bool
	events *tracefmt.Events
	byAttr map[*perfdata.Attr]*tracefmt.Format // nil: the event has none
}

// format returns the format of a tracepoint sample's event, or nil (then
// the sample prints no fields, as warned).
func (t *traceFormats) format(s *perfdata.Sample) *tracefmt.Format {
	a := s.Attr
	if f, ok := t.byAttr[a]; ok {
		return f
	}
	if !t.parsed {
		t.parse()
	}
	if t.byAttr == nil {
		t.byAttr = map[*perfdata.Attr]*tracefmt.Format{}
	}
	var f *tracefmt.Format
	if t.events != nil {
		f = t.events.Lookup(a.Config)
		if f == nil {
			f = t.events.ForRaw(s.Raw)
		}
		switch {
		case f == nil:
			t.p.warn("tracepoint %s (id %d): the recording's tracing data has no format for it; its samples print no fields", a.Name, a.Config)
		case f.PrintErr != nil:
			t.p.warn("tracepoint %s: its print fmt could not be evaluated (%v); its fields print as name=value, not as perf script prints them", a.Name, f.PrintErr)
		}
	}
	t.byAttr[a] = f
	return f
}

func (t *traceFormats) parse() {
	t.parsed = true
	td := t.p.session.Features.TracingData
	if len(td) == 0 {
		t.p.warn("the recording has tracepoint samples but no tracing data (event formats): their fields are not printed")
		return
	}
	ev, err := tracefmt.Parse(td)
	if err != nil {
		// A damaged container gives nil; a damaged format file costs
		// only its event, named in the error.
		t.p.warn("tracing data: %v", err)
	}
	if ev == nil {
		return
	}
	if !t.p.session.Pipe {
		// perf script names %pS/%ps addresses from the kernel map of a
		// file-mode recording; in pipe mode it prints them in hex.
		ev.Resolve = t.p.resolveKernel
	}
	t.events = ev
}

// resolveKernel names a kernel address for tracefmt's %pS, from the kernel
// symbol table once it is loaded.
func (p *processor) resolveKernel(addr uint64) (string, uint64, bool) {
	sym, off, ok := p.lookupKernel(p.kernelSyms(), addr)
	if !ok {
		return "", 0, false
	}
	return sym.Name, off, true
}

// setTraceFields fills a job's TraceFields on the worker: the text from its
// copy of the raw data into its own buffer, and, when asked for, the list
// of values.
func (j *job) setTraceFields(values bool) {
	f := j.trace
	if f == nil {
		return
	}
	j.traceText = f.Append(j.traceText[:0], j.raw)
	j.out.TraceFields.Text = j.traceText
	if values {
		list := j.out.TraceFields.List[:0]
		for name, v := range f.Fields(j.raw) {
			list = append(list, TraceField{Name: name, Value: v})
		}
		j.out.TraceFields.List = list
	}
}
