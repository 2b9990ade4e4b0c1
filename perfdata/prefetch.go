package perfdata

import "github.com/ustack/ustack/internal/mmapfile"

// prefetcher maps the pages of a mapped recording a few MB ahead of the
// reader, on a goroutine of its own (MADV_POPULATE_READ): otherwise the
// reader takes a page fault at the first touch of every 64 KB, and on the
// large bench recording (367 MB) those faults were a fifth of its CPU time
// and the reader, which every unwinding worker waits on, was the slowest
// stage. The pages behind are dropped as before (mmapfile.Drop), so the
// resident set stays bounded.
type prefetcher struct {
	reqs  chan []byte
	done  chan struct{}
	ahead int64 // the offset up to which pages were handed to the goroutine
}

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
	if p.reqs == nil {
		p.reqs = make(chan []byte, 4)
		p.done = make(chan struct{})
		go func(reqs <-chan []byte, done chan<- struct{}) {
			defer close(done)
			ok := true
			for b := range reqs {
				if ok {
					ok = mmapfile.Populate(b) // an older kernel: stop asking
				}
			}
		}(p.reqs, p.done)
	}
	select {
	case p.reqs <- mm[start:end]:
	default: // the goroutine is behind: the reader's own faults map these
	}
	p.ahead = end
}

// stop ends the goroutine, before the mapping goes.
func (p *prefetcher) stop() {
	if p.reqs != nil {
		close(p.reqs)
		<-p.done
		p.reqs = nil
	}
}
