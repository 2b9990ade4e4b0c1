package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ustack/ustack/capture"
	"github.com/ustack/ustack/kallsyms"
	"github.com/ustack/ustack/otlpexport"
	"github.com/ustack/ustack/report"
)

// defaultBacklog is how many interval profiles wait for the endpoint at
// most (--otlp-backlog); past it the oldest is dropped, and counted.
const defaultBacklog = 32

// otlpAgent is ustack record --unwind --otlp-endpoint: it names each sample
// as it is unwound and adds it to the interval's profile; every interval
// the profile is encoded and queued for a sender that retries with
// backoff, so the ring buffers never wait for the network. What it holds
// of the profiles is bounded: one interval's profile (its stacks
// interned) and at most backlog encoded ones. What it holds to name
// frames is bounded by --cache-budget: the objects of processes that
// exited are closed past it (capture.Options.CacheBudget; measured in
// README.md).
type otlpAgent struct {
	cfg      otlpexport.Config
	interval time.Duration
	backlog  int
	clock    map[string]int64 // clock events and their periods
	offset   int64            // Unix time minus CLOCK_MONOTONIC, ns
	stderr   io.Writer

	mu      sync.Mutex // the builder, the namer, the sample
	b       *report.OTLPBuilder
	namer   *report.LiveNamer
	sample  report.Sample
	samples int

	qmu     sync.Mutex
	queue   [][]byte
	wake    chan struct{}
	dropped int // intervals dropped since the last delivered one
	stats   agentStats
	done    chan struct{}
	stopped chan struct{}
}

type agentStats struct {
	intervals, delivered, dropped, samples int
	lastErr                                error
}

func newOTLPAgent(cfg otlpexport.Config, interval time.Duration, backlog int, clock map[string]int64, stderr io.Writer) *otlpAgent {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	a := &otlpAgent{cfg: cfg, interval: interval, backlog: backlog, clock: clock, stderr: stderr,
		offset: time.Now().UnixNano() - ts.Nano(), wake: make(chan struct{}, 1),
		done: make(chan struct{}), stopped: make(chan struct{})}
	ksyms, _, _ := kallsyms.LoadProc("", "")
	a.namer = report.NewLiveNamer(ksyms)
	a.b = a.newBuilder()
	return a
}

func (a *otlpAgent) newBuilder() *report.OTLPBuilder {
	b := report.NewOTLPBuilder(false)
	b.WallClock = func(t uint64) uint64 { return uint64(int64(t) + a.offset) }
	for ev, period := range a.clock {
		b.SetClockEvent(ev, period)
	}
	return b
}

// add is capture's OnUnwound: it runs in the recorder's draining loop.
func (a *otlpAgent) add(u *capture.UnwoundSample) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := &a.sample
	s.Pid, s.Tid, s.Time, s.Period, s.Comm, s.Event = u.Pid, u.Tid, u.Time, u.Period, u.Comm, u.Event
	a.namer.Name(s, u.Space, u.Kernel, u.User)
	a.b.Add(s)
	a.samples++
}

// run exports an interval's profile every interval until stop.
func (a *otlpAgent) run() {
	go a.send()
	t := time.NewTicker(a.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			a.rotate()
			if f := os.Getenv("USTACK_MEMPROFILE"); f != "" {
				a.writeHeapProfile(f)
			}
		case <-a.done:
			return
		}
	}
}

// writeHeapProfile replaces file with a Go heap profile of the agent (as
// of the last collection): USTACK_MEMPROFILE, for the soak
// (scripts/soak-agent.sh), to see what holds its memory.
func (a *otlpAgent) writeHeapProfile(file string) {
	tmp := file + ".tmp"
	f, err := os.Create(tmp)
	if err == nil {
		err = pprof.WriteHeapProfile(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.Rename(tmp, file)
	}
	if err != nil {
		fmt.Fprintf(a.stderr, "ustack record: warning: USTACK_MEMPROFILE: %v\n", err)
	}
}

// rotate closes the interval: its profile, with the count of intervals
// dropped before it, goes to the queue; a new one starts.
func (a *otlpAgent) rotate() {
	a.mu.Lock()
	b, n := a.b, a.samples
	if n == 0 {
		a.mu.Unlock()
		return
	}
	a.b, a.samples = a.newBuilder(), 0
	// The namer's memo would keep the string tables of objects the
	// budget closed since.
	a.namer.Forget()
	a.mu.Unlock()
	a.qmu.Lock()
	if a.dropped > 0 {
		b.SetProfileAttribute("ustack.dropped_intervals", int64(a.dropped))
	}
	a.qmu.Unlock()
	data, err := report.MarshalOTLP(b.Profiles(), false)
	if err != nil {
		fmt.Fprintf(a.stderr, "ustack record: warning: encoding the interval's profile: %v\n", err)
		return
	}
	a.qmu.Lock()
	a.stats.intervals++
	a.stats.samples += n
	if len(a.queue) >= a.backlog {
		a.queue = a.queue[1:]
		a.dropped++
		a.stats.dropped++
	}
	a.queue = append(a.queue, data)
	a.qmu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// send delivers the queue's head, retrying with backoff while the
// endpoint refuses or cannot be reached; it stops when stop closes
// stopped's wait.
func (a *otlpAgent) send() {
	defer close(a.stopped)
	backoff := time.Second
	warned := false
	for {
		a.qmu.Lock()
		var head []byte
		if len(a.queue) > 0 {
			head = a.queue[0]
		}
		a.qmu.Unlock()
		if head == nil {
			select {
			case <-a.wake:
				continue
			case <-a.done:
				return
			}
		}
		_, err := otlpexport.Send(context.Background(), a.cfg, head)
		a.qmu.Lock()
		if err == nil {
			if len(a.queue) > 0 && &a.queue[0][0] == &head[0] {
				a.queue = a.queue[1:]
			}
			a.stats.delivered++
			a.dropped = 0
			backoff = time.Second
			if warned {
				fmt.Fprintf(a.stderr, "ustack record: OTLP endpoint %s takes profiles again\n", a.cfg.Endpoint)
				warned = false
			}
			a.qmu.Unlock()
			continue
		}
		a.stats.lastErr = err
		a.qmu.Unlock()
		if !warned {
			fmt.Fprintf(a.stderr, "ustack record: warning: %v; trying again with backoff (at most %d intervals kept)\n", err, a.backlog)
			warned = true
		}
		select {
		case <-time.After(backoff):
		case <-a.done:
			return
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// finish closes the last interval and gives the sender the timeout to
// deliver what is queued; what it could not deliver is counted dropped.
func (a *otlpAgent) finish() agentStats {
	a.rotate()
	deadline := time.Now().Add(max(a.cfg.Timeout, otlpexport.DefaultTimeout))
	for time.Now().Before(deadline) {
		a.qmu.Lock()
		left := len(a.queue)
		a.qmu.Unlock()
		if left == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(a.done)
	<-a.stopped
	a.qmu.Lock()
	defer a.qmu.Unlock()
	a.stats.dropped += len(a.queue)
	return a.stats
}
