package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/term"
)

// showProgress decides whether ustack report may draw a progress line on
// stderr: only when stderr is a terminal and the report does not go to that
// same terminal (stdout redirected to a file or pipe, or -o given), so that
// the line can never land inside the report.
func showProgress(stdout, stderr io.Writer, reportToFile bool) bool {
	ef, ok := stderr.(*os.File)
	if !ok || !term.IsTerminal(int(ef.Fd())) {
		return false
	}
	if reportToFile {
		return true
	}
	of, ok := stdout.(*os.File)
	if !ok {
		return true // the report goes to memory, not to a terminal
	}
	return !sameFile(of, ef)
}

// sameFile reports whether two open files are the same file (device and
// inode), as two descriptors of one terminal are.
func sameFile(a, b *os.File) bool {
	sa, err := a.Stat()
	if err != nil {
		return true // unknown: assume the worst
	}
	sb, err := b.Stat()
	if err != nil {
		return true
	}
	return os.SameFile(sa, sb)
}

// progress draws "unwinding: 45% 120.0 MB of 260.0 MB, 35.1 MB/s" on one
// terminal line, at most five times a second. The rate is the bytes read
// since the first update over the time since then: a true average, which
// jumps of the offset cannot inflate.
type progress struct {
	w     io.Writer
	total int64
	now   func() time.Time

	start    time.Time
	startOff int64
	last     time.Time
	drawn    bool
}

func newProgress(w io.Writer, total int64, now func() time.Time) *progress {
	return &progress{w: w, total: total, now: now, startOff: -1}
}

// update records that the input was read up to off.
func (p *progress) update(off int64) {
	t := p.now()
	if p.startOff < 0 {
		p.start, p.startOff, p.last = t, off, t
		return
	}
	if t.Sub(p.last) < 200*time.Millisecond {
		return
	}
	p.last = t
	fmt.Fprintf(p.w, "\r\033[K%s", p.line(off, t))
	p.drawn = true
}

// line formats the progress at offset off and time t.
func (p *progress) line(off int64, t time.Time) string {
	pct := 0
	if p.total > 0 {
		pct = int(100 * off / p.total)
	}
	s := fmt.Sprintf("unwinding: %d%% %s of %s", pct, mb(off), mb(p.total))
	if el := t.Sub(p.start).Seconds(); el >= 0.5 && off > p.startOff {
		s += fmt.Sprintf(", %s/s", mb(int64(float64(off-p.startOff)/el)))
	}
	return s
}

// finish clears the line. It does nothing on a nil progress.
func (p *progress) finish() {
	if p != nil && p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
