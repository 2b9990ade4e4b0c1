package report

import (
	"bufio"
	"encoding/json"
	"io"
	"sort"
	"strconv"
	"strings"
)

// speedscopeSchema is the $schema of speedscope's file format
// (https://github.com/jlfwong/speedscope/wiki/Importing-from-custom-sources).
const speedscopeSchema = "https://www.speedscope.app/file-format-schema.json"

// speedscopeWriter is the "speedscope" format: one "sampled" profile per
// thread and event (weights of different events do not add up), the
// samples in recording order, frames shared between profiles. A frame is a
// function by name and source file; its line is the lowest line the
// recording saw in it, the nearest to where the function starts.
type speedscopeWriter struct {
	w        io.Writer
	o        WriterOptions
	names    *names
	frames   []speedscopeFrame
	frameIDs map[speedscopeFrameKey]int
	profiles map[speedscopeProfileKey]*speedscopeProfile
}

type speedscopeFrameKey struct {
	name, file string
	kind       frameKind
}

type speedscopeFrame struct {
	Name string `json:"name"`
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
}

type speedscopeProfileKey struct {
	pid, tid  uint32
	event     string
	goroutine uint64 // a goroutine sample's goroutine: a profile each
}

type speedscopeProfile struct {
	key  speedscopeProfileKey
	comm string
	// goroutine names a goroutine sample's goroutine ("goroutine 7 [chan
	// receive]"); "" for other samples.
	goroutine string
	// signalled: a core's thread that received the signal, the one
	// speedscope opens on.
	signalled bool
	time      bool // weights are nanoseconds of cpu-clock or task-clock
	// The samples' stacks, outermost frame first, one after the other in
	// frames; stack i ends at ends[i].
	frames  []int32
	ends    []int
	weights []uint64
	total   uint64
}

func newSpeedscopeWriter(w io.Writer, o WriterOptions) *speedscopeWriter {
	return &speedscopeWriter{w: w, o: o, names: newNames(o.Raw), frameIDs: map[speedscopeFrameKey]int{},
		profiles: map[speedscopeProfileKey]*speedscopeProfile{}}
}

// isTimeEvent reports whether an event's period is time in nanoseconds.
func isTimeEvent(event string) bool {
	base, _, _ := strings.Cut(event, ":")
	return base == "cpu-clock" || base == "task-clock"
}

func (sw *speedscopeWriter) Write(s *Sample) error {
	k := speedscopeProfileKey{pid: s.Pid, tid: s.Tid, event: s.Event}
	if s.Goroutine != nil {
		k.goroutine = s.Goroutine.ID
	}
	p := sw.profiles[k]
	if p == nil {
		p = &speedscopeProfile{key: k, comm: s.Comm, time: isTimeEvent(s.Event)}
		if g := s.Goroutine; g != nil {
			p.goroutine = "goroutine " + strconv.FormatUint(g.ID, 10) + " [" + g.bracket() + "]"
		}
		sw.profiles[k] = p
	}
	p.signalled = p.signalled || s.Signal != ""
	for i := len(s.Frames) - 1; i >= 0; i-- {
		fr := &s.Frames[i]
		name := sw.names.Frame(fr)
		fk := speedscopeFrameKey{name, fr.File, kindOf(fr)}
		id, ok := sw.frameIDs[fk]
		if !ok {
			id = len(sw.frames)
			sw.frames = append(sw.frames, speedscopeFrame{Name: name + kindSuffix(fr), File: fr.File, Line: fr.Line})
			sw.frameIDs[fk] = id
		} else if l := fr.Line; l > 0 && (sw.frames[id].Line == 0 || l < sw.frames[id].Line) {
			sw.frames[id].Line = l
		}
		p.frames = append(p.frames, int32(id))
	}
	p.ends = append(p.ends, len(p.frames))
	weight := uint64(1)
	if p.time {
		weight = s.Period
	}
	p.weights = append(p.weights, weight)
	p.total += weight
	return nil
}

// Close writes the file. Profiles are ordered by process, thread and
// event; the one opened first is a core's signalled thread, else the one
// with the most samples.
func (sw *speedscopeWriter) Close() error {
	list := make([]*speedscopeProfile, 0, len(sw.profiles))
	for _, p := range sw.profiles {
		list = append(list, p)
	}
	sort.Slice(list, func(i, j int) bool {
		a, b := list[i].key, list[j].key
		if a.pid != b.pid {
			return printedID(a.pid) < printedID(b.pid)
		}
		if a.goroutine != b.goroutine {
			return a.goroutine < b.goroutine
		}
		if a.tid != b.tid {
			return printedID(a.tid) < printedID(b.tid)
		}
		return a.event < b.event
	})
	active := 0
	for i, p := range list {
		if p.signalled && !list[active].signalled || p.signalled == list[active].signalled && len(p.ends) > len(list[active].ends) {
			active = i
		}
	}
	name := sw.o.Title
	if name == "" {
		name = "ustack report"
	}
	bw := bufio.NewWriterSize(sw.w, 64<<10)
	bw.WriteString(`{"$schema":"` + speedscopeSchema + `","exporter":"ustack","name":`)
	writeJSONString(bw, name)
	bw.WriteString(`,"activeProfileIndex":` + strconv.Itoa(active) + `,"shared":{"frames":`)
	frames, err := json.Marshal(sw.frames)
	if err != nil {
		return err
	}
	if sw.frames == nil {
		frames = []byte("[]")
	}
	bw.Write(frames)
	bw.WriteString(`},"profiles":[`)
	var b []byte
	for i, p := range list {
		if i > 0 {
			bw.WriteByte(',')
		}
		unit := "none"
		if p.time {
			unit = "nanoseconds"
		}
		bw.WriteString(`{"type":"sampled","name":`)
		name := p.comm + " " + strconv.FormatInt(printedID(p.key.pid), 10) + "/" +
			strconv.FormatInt(printedID(p.key.tid), 10) + " " + p.key.event
		if p.goroutine != "" {
			name = p.comm + " " + strconv.FormatInt(printedID(p.key.pid), 10) + " " + p.goroutine
		}
		writeJSONString(bw, name)
		bw.WriteString(`,"unit":"` + unit + `","startValue":0,"endValue":` + strconv.FormatUint(p.total, 10) + `,"samples":[`)
		start := 0
		for j, end := range p.ends {
			b = b[:0]
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, '[')
			for k, id := range p.frames[start:end] {
				if k > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendInt(b, int64(id), 10)
			}
			b = append(b, ']')
			bw.Write(b)
			start = end
		}
		bw.WriteString(`],"weights":[`)
		for j, wt := range p.weights {
			b = b[:0]
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, wt, 10)
			bw.Write(b)
		}
		bw.WriteString("]}")
	}
	bw.WriteString("]}\n")
	return bw.Flush()
}

func writeJSONString(w *bufio.Writer, s string) {
	b, _ := json.Marshal(s)
	w.Write(b)
}
