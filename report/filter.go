package report

import (
	"fmt"
	"strconv"
	"strings"
)

// SampleFilter keeps the samples that perf script's --pid, --tid, --comms,
// --cpu and --time keep; a nil or empty field keeps every sample. Samples
// it drops are neither unwound nor handed to the writer.
type SampleFilter struct {
	Pids, Tids map[uint32]bool
	Comms      map[string]bool
	CPUs       map[uint32]bool
	// Times are the time ranges a sample must fall in (any of them).
	Times []TimeRange
}

// TimeRange is a closed interval of sample times in nanoseconds, as perf's
// --time start,stop; a zero bound is open.
type TimeRange struct{ Start, End uint64 }

// Keep reports whether a sample with these values passes the filter.
func (f *SampleFilter) Keep(pid, tid, cpu uint32, time uint64, comm string) bool {
	if f == nil {
		return true
	}
	if len(f.Pids) > 0 && !f.Pids[pid] || len(f.Tids) > 0 && !f.Tids[tid] ||
		len(f.CPUs) > 0 && !f.CPUs[cpu] || len(f.Comms) > 0 && !f.Comms[comm] {
		return false
	}
	if len(f.Times) == 0 {
		return true
	}
	for _, r := range f.Times {
		if (r.Start == 0 || time >= r.Start) && (r.End == 0 || time <= r.End) {
			return true
		}
	}
	return false
}

// ParseIDList parses a comma-separated list of pids or tids, as perf
// script's --pid and --tid take them.
func ParseIDList(s string) (map[uint32]bool, error) {
	out := map[uint32]bool{}
	for _, tok := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		v, err := strconv.ParseUint(tok, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%q is not a process or thread id", tok)
		}
		out[uint32(v)] = true
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty id list")
	}
	return out, nil
}

// ParseCPUList parses a CPU list such as "0-2,5", as perf's --cpu takes it.
func ParseCPUList(s string) (map[uint32]bool, error) {
	const maxCPUs = 1 << 16 // bounds the work a long list can ask for
	out := map[uint32]bool{}
	n := uint64(0)
	for _, tok := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(tok), "-")
		a, err := strconv.ParseUint(lo, 10, 32)
		b := a
		if err == nil && isRange {
			b, err = strconv.ParseUint(hi, 10, 32)
		}
		if err != nil || b < a {
			return nil, fmt.Errorf("%q is not a CPU or CPU range", tok)
		}
		if n += b - a + 1; n > maxCPUs {
			return nil, fmt.Errorf("CPU list %q names more than %d CPUs", s, maxCPUs)
		}
		for c := a; c <= b; c++ {
			out[uint32(c)] = true
		}
	}
	return out, nil
}

// ParseTimeRanges parses perf's --time argument: one or more ranges
// separated by spaces, each "start,stop" with times in seconds and up to
// nine decimals ("309.5,310.25"); a missing start or stop is open
// ("309.5," or ",310").
func ParseTimeRanges(s string) ([]TimeRange, error) {
	var out []TimeRange
	for _, r := range strings.Fields(s) {
		start, stop, ok := strings.Cut(r, ",")
		if !ok {
			return nil, fmt.Errorf("time range %q: want start,stop", r)
		}
		var tr TimeRange
		var err error
		if tr.Start, err = parseNsecTime(start); err != nil {
			return nil, fmt.Errorf("time range %q: %v", r, err)
		}
		if tr.End, err = parseNsecTime(stop); err != nil {
			return nil, fmt.Errorf("time range %q: %v", r, err)
		}
		if tr.End != 0 && tr.Start > tr.End {
			return nil, fmt.Errorf("time range %q: start after stop", r)
		}
		out = append(out, tr)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty time range")
	}
	return out, nil
}

// parseNsecTime parses seconds with up to nine decimals into nanoseconds,
// as perf's parse_nsec_time does; "" is 0.
func parseNsecTime(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	secs, frac, _ := strings.Cut(s, ".")
	sec, err := strconv.ParseUint(secs, 10, 64)
	if err != nil || sec > 1<<33 {
		return 0, fmt.Errorf("%q is not a time in seconds", s)
	}
	var ns uint64
	if frac != "" {
		if len(frac) > 9 {
			return 0, fmt.Errorf("%q: at most nanosecond precision", s)
		}
		ns, err = strconv.ParseUint((frac + "000000000")[:9], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a time in seconds", s)
		}
	}
	return sec*1e9 + ns, nil
}
