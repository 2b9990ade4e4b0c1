package kernellab

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ustack/ustack/perfdata"
)

// fpAuditJobs are the recordings the frame-pointer audit is checked on,
// and the program each samples.
var fpAuditJobs = []struct {
	name, comm string
	// exact: some samples must end their walk inside the snapshot (the
	// program's own chain down to main, whose caller's frame pointer is
	// zero or no user address); without frame pointers the chain may
	// leave the snapshot through any register value.
	exact bool
}{
	{"fpaudit_nofp_spin", "lab-dyn", false},
	{"fpaudit_fp_spin", "lab-dyn-fp", true},
	{"fpaudit_nofp_signal", "lab-dyn", false},
	{"fpaudit_fp_signal", "lab-dyn-fp", false},
	{"fpaudit_nofp_uprobe", "lab-dyn", false},
	{"fpaudit_fp_uprobe", "lab-dyn-fp", true},
}

// fpAuditFigures is one recording's comparison of the audit with the
// kernel's chain.
type fpAuditFigures struct {
	samples  int // of the program, with the kernel's user chain
	audited  int // with fp_frames
	exact    int // whose audit ended where the snapshot still covered the walk
	same     int // of those, fp_frames equal to the kernel's user chain length
	beyond   int // not exact: the walk left the snapshot (truncated, outside)
	shorter  int // of those, a kernel chain shorter than the audit's
	kernelFr int // user frames of the kernel's chains, summed over the exact samples
	diffs    []string
}

// kernelUserChains reads the user part of the kernel's call chain of every
// sample of a recording, by time and thread.
func kernelUserChains(t *testing.T, data string) map[string][]uint64 {
	t.Helper()
	r, err := perfdata.Open(data)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	chains := map[string][]uint64{}
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		s, ok := rec.(*perfdata.Sample)
		if !ok {
			continue
		}
		var user []uint64
		for _, ip := range perfdata.UserCallchain(s.Callchain) {
			if ip < perfdata.ContextMax {
				user = append(user, ip)
			}
		}
		if user != nil {
			chains[fmt.Sprint(s.Time, "/", s.Tid)] = user
		}
	}
	return chains
}

// fpAuditRecording compares, for every sample of comm in the recording
// data, the audit's fp_frames (the host's ustack report) with the length of
// the user part of the call chain the guest's kernel recorded for the same
// sample (ustack record keeps it beside the stack copy).
func fpAuditRecording(t *testing.T, lr *labRun, host, data, comm string) fpAuditFigures {
	t.Helper()
	chains := kernelUserChains(t, data)
	var f fpAuditFigures
	for _, s := range lr.samplesOf(t, host, data) {
		if s.Comm != comm || s.Time == nil {
			continue
		}
		k, ok := chains[fmt.Sprint(*s.Time, "/", s.Tid)]
		if !ok {
			continue
		}
		f.samples++
		if s.FPFrames == nil || s.FPStop == nil {
			continue
		}
		f.audited++
		if *s.FPStop != "end" && *s.FPStop != "depth" {
			// The kernel read on, in memory the snapshot does not
			// hold: it found at least as many frames.
			f.beyond++
			if len(k) < *s.FPFrames {
				f.shorter++
			}
			continue
		}
		f.exact++
		f.kernelFr += len(k)
		if len(k) == *s.FPFrames {
			f.same++
		} else if len(f.diffs) < 5 {
			f.diffs = append(f.diffs, fmt.Sprintf("sample at %d (thread %d, %s): the kernel's user chain %#x (%d frames), the audit %d frames (%s); CFI's stack %v",
				*s.Time, s.Tid, s.Event, k, len(k), *s.FPFrames, *s.FPStop, s.user()))
		}
	}
	return f
}

// fpAudit checks the frame-pointer audit against the guest kernel's own
// frame-pointer walk: for every sample of lab.c built without and with
// frame pointers whose audit is exact (the snapshot covers the walk),
// fp_frames must equal the length of the user part of the kernel's chain
// of the same sample, in at least 99% of them.
func (lr *labRun) fpAudit(t *testing.T, host string) {
	for _, j := range fpAuditJobs {
		t.Run(j.name, func(t *testing.T) {
			data := filepath.Join(lr.out, j.name+".data")
			lr.report(t, host, j.name) // the guest made it, or say what ustack record said
			f := fpAuditRecording(t, lr, host, data, j.comm)
			pct := 0.0
			if f.exact > 0 {
				pct = 100 * float64(f.same) / float64(f.exact)
			}
			mean := 0.0
			if f.exact > 0 {
				mean = float64(f.kernelFr) / float64(f.exact)
			}
			t.Logf("%s %s: %d samples of %s with the kernel's user chain, %d audited; %d exact, of which %d (%.1f%%) have fp_frames equal to the kernel's chain length (%.2f user frames a chain); %d left the snapshot, %d of them with a kernel chain shorter than the audit's",
				lr.k, j.name, f.samples, j.comm, f.audited, f.exact, f.same, pct, mean, f.beyond, f.shorter)
			for _, d := range f.diffs {
				t.Logf("%s: %s", j.name, d)
			}
			if f.audited == 0 {
				t.Errorf("%s: %d samples of %s with the kernel's user chain, none audited", j.name, f.samples, j.comm)
			}
			if j.exact && f.exact == 0 {
				t.Errorf("%s: no sample whose snapshot covers the frame-pointer walk", j.name)
			}
			if float64(f.same) < 0.99*float64(f.exact) {
				t.Errorf("%s: fp_frames equals the kernel's user chain length in %d of %d exact samples, want at least 99%%:\n%s", j.name, f.same, f.exact, strings.Join(f.diffs, "\n"))
			}
			if float64(f.shorter) > 0.01*float64(f.beyond) {
				t.Errorf("%s: %d of %d samples whose walk left the snapshot have a kernel chain shorter than the audit's", j.name, f.shorter, f.beyond)
			}
		})
	}
}
