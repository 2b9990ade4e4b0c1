package perfdata

import (
	"sync/atomic"

	"github.com/ustack/ustack/internal/mmapfile"
)

// prefetcher maps the pages of a mapped recording a few MB ahead of the
// reader, on a goroutine of its own (MADV_POPULATE_READ), and reads a byte
// of each: otherwise the reader takes a page fault at the first touch of
// every 64 KB, and on the large bench recording (367 MB) those faults were
// a fifth of its CPU time and the reader, which every unwinding worker
// waits on, was the slowest stage. Mapping them is not always enough: where
// the first read of each page of a process costs something of its own (a
// hypervisor's shadow page tables: 1.5 us a page on the machine the
// benchmarks run on, after MADV_POPULATE_READ as before it) the goroutine
// takes that too. It also drops the pages the reader has left behind
// (mmapfile.Drop, 12% of the reader's time), so that the resident set stays
// bounded.
type prefetcher struct {
	reqs  chan prefetch
	done  chan struct{}
	ahead int64 // the offset up to which pages were handed to the goroutine
}

// prefetch is a request to the goroutine: map and touch b, or drop it.
type prefetch struct {
	b    []byte
	drop bool
}

// touched is where the goroutines leave the sum of the bytes they read, so
// that the reads are not optimized away.
var touched atomic.Uint32

const (
	// A request maps the pages up to prefetchAhead past the record being
	// read, made when fewer than prefetchLow are left.
	prefetchAhead = 2 << 20
	prefetchLow   = 1 << 20
)

// advance asks for the pages of mm ahead of off, when few are left.
func (p *prefetcher) advance(mm []byte, off int64) {
	if off+prefetchLow <= p.ahead || p.ahead >= int64(len(mm)) || !mmapfile.CanPopulate {
		return
	}
	start := max(p.ahead, off&^(1<<12-1))
	end := min(int64(len(mm)), (off+prefetchAhead)&^(1<<16-1))
	if end <= start {
		return
	}
	p.start()
	select {
	case p.reqs <- prefetch{b: mm[start:end]}:
	default: // the goroutine is behind: the reader's own faults map these
	}
	p.ahead = end
}

// drop drops the pages of b from memory: on the goroutine when it is
// running and keeping up, or at once.
func (p *prefetcher) drop(b []byte) {
	if p.reqs != nil {
		select {
		case p.reqs <- prefetch{b: b, drop: true}:
			return
		default:
		}
	}
	mmapfile.Drop(b)
}

// start starts the goroutine, if it is not running.
func (p *prefetcher) start() {
	if p.reqs != nil {
		return
	}
	p.reqs = make(chan prefetch, 4)
	p.done = make(chan struct{})
	go func(reqs <-chan prefetch, done chan<- struct{}) {
		defer close(done)
		ok := true
		var sum byte
		for r := range reqs {
			if r.drop {
				mmapfile.Drop(r.b)
				continue
			}
			if ok {
				ok = mmapfile.Populate(r.b) // an older kernel: stop asking
			}
			for i := 0; i < len(r.b); i += 4096 {
				sum += r.b[i]
			}
		}
		touched.Add(uint32(sum))
	}(p.reqs, p.done)
}

// stop ends the goroutine, before the mapping goes.
func (p *prefetcher) stop() {
	if p.reqs != nil {
		close(p.reqs)
		<-p.done
		p.reqs = nil
	}
}
