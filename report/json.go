package report

import (
	"bufio"
	"encoding/json"
	"io"
)

// JSONWriter prints one JSON object per sample and line, with every frame's
// address, object, offset, symbol, source line, whether it was inlined, how
// it was recovered, and why the stack ended: the full truth, where the text
// format follows perf's conventions.
type JSONWriter struct {
	w     *bufio.Writer
	enc   *json.Encoder
	names *names
}

// NewJSONWriter returns a JSONWriter writing to w. Symbol names are
// demangled in full unless raw is set; the raw name is kept in "mangled".
func NewJSONWriter(w io.Writer, raw bool) *JSONWriter {
	bw := bufio.NewWriterSize(w, 1<<16)
	return &JSONWriter{w: bw, enc: json.NewEncoder(bw), names: newNames(raw)}
}

type jsonFrame struct {
	PC       string `json:"pc"`
	Addr     string `json:"addr"`
	Module   string `json:"module,omitempty"`
	Offset   string `json:"offset"`
	Symbol   string `json:"symbol,omitempty"`
	Mangled  string `json:"mangled,omitempty"`
	SymOff   uint64 `json:"symoff"`
	Function string `json:"function,omitempty"`
	File     string `json:"file,omitempty"`
	Line     int    `json:"line,omitempty"`
	Inlined  bool   `json:"inlined,omitempty"`
	Kernel   bool   `json:"kernel,omitempty"`
	How      string `json:"how"`
	Signal   bool   `json:"signal_trampoline,omitempty"`
}

type jsonSample struct {
	Index   int         `json:"index"`
	Pid     uint32      `json:"pid"`
	Tid     uint32      `json:"tid"`
	CPU     uint32      `json:"cpu"`
	Time    uint64      `json:"time"`
	Period  uint64      `json:"period,omitempty"`
	Comm    string      `json:"comm"`
	Event   string      `json:"event"`
	Frames  []jsonFrame `json:"frames"`
	Stop    string      `json:"stop,omitempty"`
	StopErr string      `json:"stop_error,omitempty"`
}

// Write prints one sample.
func (j *JSONWriter) Write(s *Sample) error {
	out := jsonSample{Index: s.Index, Pid: s.Pid, Tid: s.Tid, CPU: s.CPU, Time: s.Time,
		Period: s.Period, Comm: s.Comm, Event: s.Event, Stop: s.Stop, StopErr: s.StopErr,
		Frames: make([]jsonFrame, 0, len(s.Frames))}
	for i := range s.Frames {
		f := &s.Frames[i]
		jf := jsonFrame{PC: hexString(f.PC), Addr: hexString(f.Addr), Module: f.Module,
			Offset: hexString(f.Offset), Symbol: j.names.Full(f.Symbol), SymOff: f.SymOff,
			File: f.File, Line: f.Line, Inlined: f.Inlined, Kernel: f.Kernel, How: f.How, Signal: f.Signal}
		if jf.Symbol != f.Symbol {
			jf.Mangled = f.Symbol
		}
		out.Frames = append(out.Frames, jf)
	}
	return j.enc.Encode(&out)
}

// Flush writes buffered output.
func (j *JSONWriter) Flush() error { return j.w.Flush() }

func hexString(v uint64) string {
	const digits = "0123456789abcdef"
	var b [18]byte
	i := len(b)
	for {
		i--
		b[i] = digits[v&15]
		v >>= 4
		if v == 0 {
			break
		}
	}
	i -= 2
	b[i], b[i+1] = '0', 'x'
	return string(b[i:])
}
