package report

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"io"
	"sort"
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

// jsonFrame is one frame. Every key is present on every frame; unknown
// values are null (docs/report.schema.json).
type jsonFrame struct {
	PC       string  `json:"pc"`
	Addr     string  `json:"addr"`
	Module   *string `json:"module"`
	Offset   string  `json:"offset"`
	Symbol   *string `json:"symbol"`
	Mangled  *string `json:"mangled"`
	SymOff   uint64  `json:"symoff"`
	File     *string `json:"file"`
	Line     *int    `json:"line"`
	Inlined  bool    `json:"inlined"`
	Kernel   bool    `json:"kernel"`
	How      string  `json:"how"`
	Signal   bool    `json:"signal_trampoline"`
	Restored bool    `json:"restored_registers"`
}

type jsonSample struct {
	Index   int             `json:"index"`
	Pid     int64           `json:"pid"`
	Tid     int64           `json:"tid"`
	CPU     *uint32         `json:"cpu"`    // null for a core's thread
	Time    *uint64         `json:"time"`   // null for a core's thread
	Period  *uint64         `json:"period"` // null for a core's thread
	Comm    string          `json:"comm"`
	Event   string          `json:"event"`
	Signal  *string         `json:"signal"`
	IP      string          `json:"ip"`
	Fields  json.RawMessage `json:"fields"`
	Frames  []jsonFrame     `json:"frames"`
	Stop    *string         `json:"stop"`
	StopErr *string         `json:"stop_error"`
	// The frame-pointer audit (fpaudit.go); null without a stack.
	FPFrames *int    `json:"fp_frames"`
	FPStop   *string `json:"fp_stop"`
	// Goroutine is present on samples of event "goroutine" only.
	Goroutine *jsonGoroutine `json:"goroutine,omitempty"`
}

// jsonGoroutine describes a goroutine sample's goroutine.
type jsonGoroutine struct {
	ID          uint64  `json:"id"`
	Status      string  `json:"status"`
	WaitReason  *string `json:"wait_reason"`
	CreatedBy   *string `json:"created_by"`
	CreatedFile *string `json:"created_file"`
	CreatedLine *int    `json:"created_line"`
	CreatorID   *uint64 `json:"creator_id"`
	Thread      *uint32 `json:"thread"`
	G           string  `json:"g"`
}

func goroutineJSON(g *Goroutine) *jsonGoroutine {
	if g == nil {
		return nil
	}
	out := &jsonGoroutine{ID: g.ID, Status: g.Status, WaitReason: orNull(g.WaitReason), CreatedBy: orNull(g.CreatedBy),
		CreatedFile: orNull(g.CreatedFile), G: hexString(g.Addr)}
	if g.CreatedLine > 0 {
		l := g.CreatedLine
		out.CreatedLine = &l
	}
	if g.CreatorID != 0 {
		id := g.CreatorID
		out.CreatorID = &id
	}
	if g.Thread != 0 {
		t := g.Thread
		out.Thread = &t
	}
	return out
}

// orNull returns nil for "", so that an unknown value prints as null.
func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Write prints one sample.
func (j *JSONWriter) Write(s *Sample) error {
	out := jsonSample{Index: s.Index, Pid: printedID(s.Pid), Tid: printedID(s.Tid), Comm: s.Comm, Event: s.Event, Signal: orNull(s.Signal), IP: hexString(s.IP), Stop: orNull(s.Stop), StopErr: orNull(s.StopErr),
		Fields: traceFieldsJSON(s.TraceFields.List), Frames: make([]jsonFrame, 0, len(s.Frames)), Goroutine: goroutineJSON(s.Goroutine)}
	if s.Event != CoreEvent && s.Event != GoroutineEvent {
		// A core dump's threads were not sampled: no CPU, time or
		// event count.
		out.CPU, out.Time, out.Period = &s.CPU, &s.Time, &s.Period
	}
	if s.FPStop != "" {
		out.FPFrames, out.FPStop = &s.FPFrames, &s.FPStop
	}
	for i := range s.Frames {
		f := &s.Frames[i]
		jf := jsonFrame{PC: hexString(f.PC), Addr: hexString(f.Addr), Module: orNull(f.Module),
			Offset: hexString(f.Offset), Symbol: orNull(j.names.Short(f.Symbol)), SymOff: f.SymOff,
			File: orNull(f.File), Inlined: f.Inlined, Kernel: f.Kernel, How: string(f.How), Signal: f.Signal, Restored: f.Restored}
		if f.Line > 0 {
			line := f.Line
			jf.Line = &line
		}
		if jf.Symbol != nil && *jf.Symbol != f.Symbol {
			jf.Mangled = orNull(f.Symbol)
		}
		out.Frames = append(out.Frames, jf)
	}
	return j.enc.Encode(&out)
}

// traceFieldsJSON returns a tracepoint's fields as a JSON object in the
// format's order (integers as numbers, strings as strings, arrays as arrays
// of numbers), or null when the sample has none.
func traceFieldsJSON(list []TraceField) json.RawMessage {
	if len(list) == 0 {
		return json.RawMessage("null")
	}
	b := []byte{'{'}
	for i, f := range list {
		if i > 0 {
			b = append(b, ',')
		}
		k, _ := json.Marshal(f.Name)
		b = append(b, k...)
		b = append(b, ':')
		v := f.Value
		if raw, ok := v.([]byte); ok {
			ints := make([]int, len(raw))
			for i, c := range raw {
				ints[i] = int(c)
			}
			v = ints
		}
		vb, err := json.Marshal(v)
		if err != nil {
			vb = []byte("null")
		}
		b = append(b, vb...)
	}
	return append(b, '}')
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

// jsonSummaryRecord is the line a JSON report ends with when its summary
// is asked for (WriteSummary): {"summary": {...}}.
type jsonSummaryRecord struct {
	Summary jsonSummary `json:"summary"`
}

type jsonSummary struct {
	Samples  int           `json:"samples"`
	Filtered int           `json:"filtered"`
	Lost     uint64        `json:"lost"`
	Objects  []jsonObject  `json:"objects"`
	Missing  []jsonMissing `json:"missing"`
	// FPAudit is the frame-pointer audit (fpaudit.go).
	FPAudit jsonFPAudit `json:"fp_audit"`
	// What the text summary's lines count: the stacks by stop, those the
	// stack snapshot's size cut, the samples without user registers or
	// stack, or of processes the recording holds no maps of, or whose PC
	// lay in none of the maps it holds of their process, the stacks
	// that stopped for want of unwind information by object, the records
	// skipped, and the damage read past.
	Stops       map[string]int `json:"stops"`
	SnapshotCut int            `json:"snapshot_cut"`
	NoUserData  int            `json:"no_user_data"`
	NoMaps      int            `json:"no_maps"`
	UnmappedPC  int            `json:"unmapped_pc"`
	// SignalStackMissing: the stacks that stopped past a signal delivered
	// on an alternate stack, whose interrupted stack was not captured.
	SignalStackMissing int            `json:"signal_stack_missing"`
	NoUnwindIn         map[string]int `json:"no_unwind_in"`
	Skipped            map[string]int `json:"skipped_records"`
	Damage             []jsonDamage   `json:"damage"`
	DecodeError        *string        `json:"decode_error"`
}

// jsonDamage is a damaged stretch of a recording that reading resumed
// after (perfdata.Damage).
type jsonDamage struct {
	Offset int64  `json:"offset"`
	Resume int64  `json:"resume"`
	Error  string `json:"error"`
}

type jsonObject struct {
	Path          string   `json:"path"`
	BuildID       *string  `json:"build_id"`
	Object        string   `json:"object"`
	Unwind        string   `json:"unwind"`
	Symbols       string   `json:"symbols"`
	Lines         string   `json:"lines"`
	DebugFile     *string  `json:"debug_file"`
	Supplementary *string  `json:"supplementary"`
	SplitDWARF    []string `json:"split_dwarf"`
	File          *string  `json:"file"`
}

type jsonMissing struct {
	Path string `json:"path"`
	Why  string `json:"why"`
}

// WriteSummary prints the summary record: the sample counts, where each
// object's information came from (Summary.Objects, filled with
// Options.ObjectSources) and the objects that could not be used.
func (j *JSONWriter) WriteSummary(s *Summary) error {
	out := jsonSummary{Samples: s.Samples, Filtered: s.Filtered, Lost: s.Lost,
		Objects: make([]jsonObject, 0, len(s.Objects)), Missing: make([]jsonMissing, 0, len(s.Missing))}
	for _, o := range s.Objects {
		jo := jsonObject{Path: o.Path, Object: o.FoundIn, Unwind: o.Sources.Unwind.String(),
			Symbols: o.Sources.Symbols.String(), Lines: o.Sources.Lines.String(),
			DebugFile: orNull(o.Sources.DebugFile), Supplementary: orNull(o.Sources.Supplementary),
			SplitDWARF: append([]string{}, o.Sources.SplitDWARF...), File: orNull(o.File)}
		if len(o.BuildID) > 0 {
			jo.BuildID = orNull(hex.EncodeToString(o.BuildID))
		}
		out.Objects = append(out.Objects, jo)
	}
	for path, why := range s.Missing {
		out.Missing = append(out.Missing, jsonMissing{Path: path, Why: why})
	}
	sort.Slice(out.Missing, func(a, b int) bool { return out.Missing[a].Path < out.Missing[b].Path })
	out.FPAudit = fpAuditJSON(&s.FP)
	out.Stops = orEmpty(s.Stops)
	out.SnapshotCut, out.NoUserData, out.NoMaps = s.SnapshotCut, s.NoUserData, s.noMapsSamples
	out.SignalStackMissing = s.SignalStackMissing
	for _, n := range s.unmappedPC {
		out.UnmappedPC += n
	}
	out.NoUnwindIn, out.Skipped = orEmpty(s.NoUnwindIn), orEmpty(s.Skipped)
	out.Damage = make([]jsonDamage, 0, len(s.Damage))
	for _, d := range s.Damage {
		jd := jsonDamage{Offset: d.Offset, Resume: d.Resume}
		if d.Err != nil {
			jd.Error = d.Err.Error()
		}
		out.Damage = append(out.Damage, jd)
	}
	if s.DecodeError != nil {
		out.DecodeError = orNull(s.DecodeError.Error())
	}
	return j.enc.Encode(jsonSummaryRecord{out})
}

// orEmpty is m, or an empty map for nil (JSON's {} rather than null).
func orEmpty(m map[string]int) map[string]int {
	if m == nil {
		return map[string]int{}
	}
	return m
}
