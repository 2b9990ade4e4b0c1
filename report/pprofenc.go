package report

// The part of profile.proto (github.com/google/pprof/proto/profile.proto)
// that PprofBuilder writes, and its encoding: the fields, their order and
// the string table's order are those of github.com/google/pprof/profile's
// encoder, so that the bytes are the ones it writes for the same profile
// (TestPprofEncodingMatchesLibrary).

type pprofProfile struct {
	sampleTypes       []pprofValueType
	samples           []*pprofSample
	mappings          []*pprofMapping
	locations         []*pprofLocation
	functions         []*pprofFunction
	periodType        *pprofValueType
	period            int64
	comments          []string
	defaultSampleType string
}

type pprofValueType struct{ typ, unit string }

// pprofSample is a sample with ustack's labels: comm and event (strings),
// pid and tid (numbers), and a goroutine's id and status.
type pprofSample struct {
	locations []*pprofLocation
	values    []int64
	comm      string
	event     string
	pid, tid  int64
	goroutine *pprofGoroutine
}

type pprofGoroutine struct {
	id     int64
	status string
}

// pprofMapping has functions (HasFunctions) and nothing else of pprof's
// flags.
type pprofMapping struct {
	id, start, limit, offset uint64
	file, buildID            string
}

type pprofLocation struct {
	id      uint64
	mapping *pprofMapping
	address uint64
	lines   []pprofLine
}

type pprofLine struct {
	function *pprofFunction
	line     int64
}

// pprofFunction's system name is its name.
type pprofFunction struct {
	id         uint64
	name, file string
}

// Field numbers of profile.proto's messages.
const (
	profSampleType, profSample, profMapping, profLocation, profFunction, profStringTable = 1, 2, 3, 4, 5, 6
	profPeriodType, profPeriod, profComment, profDefaultSampleType                       = 11, 12, 13, 14
)

// pprofStrings is the string table being built: indexes in the order
// strings are first met.
type pprofStrings struct {
	index map[string]int64
	table []string
}

func (s *pprofStrings) add(v string) int64 {
	if i, ok := s.index[v]; ok {
		return i
	}
	i := int64(len(s.table))
	s.index[v] = i
	s.table = append(s.table, v)
	return i
}

// pbuf appends protobuf fields; a message is written into a scratch pbuf
// and appended with its length.
type pbuf struct{ b []byte }

func (p *pbuf) varint(x uint64) {
	for x >= 0x80 {
		p.b = append(p.b, byte(x)|0x80)
		x >>= 7
	}
	p.b = append(p.b, byte(x))
}

// uint64 writes a varint field.
func (p *pbuf) uint64(field int, x uint64) {
	p.varint(uint64(field) << 3)
	p.varint(x)
}

// opt writes a varint field unless it is zero.
func (p *pbuf) opt(field int, x uint64) {
	if x != 0 {
		p.uint64(field, x)
	}
}

// bytes writes a length-delimited field.
func (p *pbuf) bytes(field int, b []byte) {
	p.varint(uint64(field)<<3 | 2)
	p.varint(uint64(len(b)))
	p.b = append(p.b, b...)
}

// str writes a string field.
func (p *pbuf) str(field int, s string) {
	p.varint(uint64(field)<<3 | 2)
	p.varint(uint64(len(s)))
	p.b = append(p.b, s...)
}

// repeated writes repeated varints: packed when more than two, as pprof's
// encoder does.
func (p *pbuf) repeated(field int, xs []uint64, scratch *pbuf) {
	if len(xs) <= 2 {
		for _, x := range xs {
			p.uint64(field, x)
		}
		return
	}
	scratch.b = scratch.b[:0]
	for _, x := range xs {
		scratch.varint(x)
	}
	p.bytes(field, scratch.b)
}

// marshal encodes the profile (uncompressed).
func (pr *pprofProfile) marshal() []byte {
	st := &pprofStrings{index: map[string]int64{}}
	st.add("")
	type vt struct{ typ, unit int64 }
	sampleTypes := make([]vt, len(pr.sampleTypes))
	for i, t := range pr.sampleTypes {
		sampleTypes[i] = vt{st.add(t.typ), st.add(t.unit)}
	}
	// A sample's labels, keys sorted as pprof sorts them: strings, then
	// numbers.
	type label struct{ key, str, num int64 }
	labels := make([][]label, len(pr.samples))
	for i, s := range pr.samples {
		ls := make([]label, 0, 6)
		ls = append(ls, label{key: st.add("comm"), str: st.add(s.comm)}, label{key: st.add("event"), str: st.add(s.event)})
		if s.goroutine != nil {
			ls = append(ls, label{key: st.add("status"), str: st.add(s.goroutine.status)})
			ls = append(ls, label{key: st.add("goroutine"), num: s.goroutine.id})
		}
		ls = append(ls, label{key: st.add("pid"), num: s.pid}, label{key: st.add("tid"), num: s.tid})
		labels[i] = ls
	}
	type mx struct{ file, buildID int64 }
	mappings := make([]mx, len(pr.mappings))
	for i, m := range pr.mappings {
		mappings[i] = mx{st.add(m.file), st.add(m.buildID)}
	}
	type fx struct{ name, system, file int64 }
	functions := make([]fx, len(pr.functions))
	for i, f := range pr.functions {
		functions[i] = fx{st.add(f.name), st.add(f.name), st.add(f.file)}
	}
	var period vt
	if pt := pr.periodType; pt != nil {
		period = vt{st.add(pt.typ), st.add(pt.unit)}
	}
	comments := make([]uint64, len(pr.comments))
	for i, c := range pr.comments {
		comments[i] = uint64(st.add(c))
	}
	defaultType := st.add(pr.defaultSampleType)

	out, msg, sub, scratch := &pbuf{}, &pbuf{}, &pbuf{}, &pbuf{}
	for _, t := range sampleTypes {
		msg.b = msg.b[:0]
		msg.opt(1, uint64(t.typ))
		msg.opt(2, uint64(t.unit))
		out.bytes(profSampleType, msg.b)
	}
	var ids []uint64
	for i, s := range pr.samples {
		msg.b = msg.b[:0]
		ids = ids[:0]
		for _, l := range s.locations {
			ids = append(ids, l.id)
		}
		msg.repeated(1, ids, scratch)
		vs := make([]uint64, len(s.values))
		for j, v := range s.values {
			vs[j] = uint64(v)
		}
		msg.repeated(2, vs, scratch)
		for _, l := range labels[i] {
			sub.b = sub.b[:0]
			sub.opt(1, uint64(l.key))
			sub.opt(2, uint64(l.str))
			sub.opt(3, uint64(l.num))
			msg.bytes(3, sub.b)
		}
		out.bytes(profSample, msg.b)
	}
	for i, m := range pr.mappings {
		msg.b = msg.b[:0]
		msg.opt(1, m.id)
		msg.opt(2, m.start)
		msg.opt(3, m.limit)
		msg.opt(4, m.offset)
		msg.opt(5, uint64(mappings[i].file))
		msg.opt(6, uint64(mappings[i].buildID))
		msg.uint64(7, 1) // has_functions
		out.bytes(profMapping, msg.b)
	}
	for _, l := range pr.locations {
		msg.b = msg.b[:0]
		msg.opt(1, l.id)
		if l.mapping != nil {
			msg.opt(2, l.mapping.id)
		}
		msg.opt(3, l.address)
		for _, ln := range l.lines {
			sub.b = sub.b[:0]
			if ln.function != nil {
				sub.opt(1, ln.function.id)
			}
			sub.opt(2, uint64(ln.line))
			msg.bytes(4, sub.b)
		}
		out.bytes(profLocation, msg.b)
	}
	for i, f := range pr.functions {
		msg.b = msg.b[:0]
		msg.opt(1, f.id)
		msg.opt(2, uint64(functions[i].name))
		msg.opt(3, uint64(functions[i].system))
		msg.opt(4, uint64(functions[i].file))
		out.bytes(profFunction, msg.b)
	}
	for _, s := range st.table {
		out.str(profStringTable, s)
	}
	if period.typ != 0 || period.unit != 0 {
		msg.b = msg.b[:0]
		msg.opt(1, uint64(period.typ))
		msg.opt(2, uint64(period.unit))
		out.bytes(profPeriodType, msg.b)
	}
	out.opt(profPeriod, uint64(pr.period))
	out.repeated(profComment, comments, scratch)
	out.uint64(profDefaultSampleType, uint64(defaultType))
	return out.b
}
