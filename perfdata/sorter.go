package perfdata

import "io"

// DefaultSorterLimit is the queue size (in record bytes) at which a Sorter
// flushes the older half of its queue early, as perf's ordered_events does
// when it reaches its memory limit.
const DefaultSorterLimit = 64 << 20

// Sorter delivers a Reader's records in timestamp order, with the semantics
// of perf's ordered_events (what perf script and perf report do):
//
//   - Records with a timestamp (sample time or sample_id_all trailer) other
//     than 0 are queued. Records without one, time-0 records and
//     perf-synthesized records (type 64 and up) are delivered at once.
//   - At each FINISHED_ROUND the marker is delivered, then every queued
//     record with a timestamp up to the largest one seen before the
//     previous FINISHED_ROUND, in timestamp order (ties in file order).
//   - When the queued records exceed the memory limit, those in the older
//     half of the queued time range are delivered early.
//   - At the end of the input (or at an input error) every queued record is
//     delivered, then io.EOF (or the error).
//
// Queued records are clones and stay valid (with a mapped Reader, see
// OpenMapped, until the Reader is closed; with one reading in chunks, until
// Sample.Release); records delivered at once are the Reader's and valid
// until the next call to Next.
type Sorter struct {
	r         *Reader
	limit     int64
	q         recHeap
	bytes     int64
	seq       uint64
	maxTime   uint64
	nextFlush uint64
	out       []Record // ready records, delivered before reading more
	outPos    int
	err       error
	done      bool
	arena     sampleArena // the queued samples' memory
}

// NewSorter returns a Sorter over r that queues at most limit bytes of
// records (DefaultSorterLimit when limit <= 0).
func NewSorter(r *Reader, limit int64) *Sorter {
	if limit <= 0 {
		limit = DefaultSorterLimit
	}
	return &Sorter{r: r, limit: limit}
}

type queued struct {
	t    uint64
	seq  uint64
	rec  Record
	size int64
}

// recHeap is a binary min-heap of queued records by (time, seq), typed
// so that pushing and popping do not box each entry as container/heap's
// interface does (an allocation per record).
type recHeap []queued

func (h recHeap) less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].seq < h[j].seq
}

func (h *recHeap) push(x queued) {
	*h = append(*h, x)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *recHeap) pop() queued {
	q := *h
	n := len(q) - 1
	x := q[0]
	q[0] = q[n]
	q[n] = queued{}
	q = q[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && q.less(r, l) {
			m = r
		}
		if !q.less(m, i) {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return x
}

// flush moves queued records with time <= limit to the output.
func (s *Sorter) flush(limit uint64) {
	for len(s.q) > 0 && s.q[0].t <= limit {
		x := s.q.pop()
		s.bytes -= x.size
		s.out = append(s.out, x.rec)
	}
}

// Next returns the next record in delivery order, or io.EOF.
func (s *Sorter) Next() (Record, error) {
	for {
		if s.outPos < len(s.out) {
			rec := s.out[s.outPos]
			s.out[s.outPos] = nil
			s.outPos++
			return rec, nil
		}
		s.out, s.outPos = s.out[:0], 0
		if s.done {
			return nil, s.err
		}
		rec, err := s.r.Next()
		if err != nil {
			s.done = true
			if err != io.EOF {
				s.err = err
			} else {
				s.err = io.EOF
			}
			s.flush(^uint64(0))
			continue
		}
		h := rec.Header()
		if h.Type == RecordFinishedRound {
			s.flush(s.nextFlush)
			s.nextFlush = s.maxTime
			// Deliver the marker before the records it releases.
			s.out = append([]Record{rec.Clone()}, s.out...)
			continue
		}
		if h.Type >= RecordHeaderAttr || !h.HasTime() || h.Time == 0 {
			return rec, nil
		}
		sz := int64(h.Size) + 256
		s.q.push(queued{t: h.Time, seq: s.seq, rec: s.keep(rec), size: sz})
		s.seq++
		s.bytes += sz
		s.maxTime = max(s.maxTime, h.Time)
		if s.bytes > s.limit {
			first := s.q[0].t
			s.flush(first + (s.maxTime-first)/2)
		}
	}
}

// keep returns a copy of a record to queue. A sample that lies in a mapped
// file keeps its byte slices (the stack copy, raw data) in the mapping: only
// what the Reader decodes into its own buffers is copied.
func (s *Sorter) keep(rec Record) Record {
	if smp, ok := rec.(*Sample); ok && (s.r.inMap || s.r.inChunk) {
		return s.r.keepSample(smp, &s.arena)
	}
	return rec.Clone()
}
