package report

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// perfJITSample is one sample of perf script on an injected recording:
// its thread, its time as perf prints it, and its frames' names in the
// jitted-PID-N.so objects perf inject made from the dump.
type perfJITSample struct {
	tid  uint32
	time string
	jit  []string
}

// injectedDSO: the objects perf inject --jit makes of a jitdump.
func injectedDSO(dso string) bool { return strings.Contains(filepath.Base(dso), "jitted-") }

// perfMapDSO: perf's name for code it names from /tmp/perf-PID.map.
func perfMapDSO(dso string) bool {
	b := filepath.Base(dso)
	return strings.HasPrefix(b, "perf-") && strings.HasSuffix(b, ".map")
}

// parsePerfJIT reads perf script -F tid,time,ip,sym,dso output, keeping
// the frames in the objects jitDSO accepts. A frame line is
// "IP NAME (DSO)"; JIT names hold spaces.
func parsePerfJIT(t *testing.T, out string, jitDSO func(dso string) bool) []perfJITSample {
	var samples []perfJITSample
	for _, block := range strings.Split(out, "\n\n") {
		lines := strings.Split(strings.Trim(block, "\n"), "\n")
		if len(lines) == 0 || strings.TrimSpace(lines[0]) == "" {
			continue
		}
		head := strings.Fields(lines[0])
		require.GreaterOrEqual(t, len(head), 2, "perf script header %q", lines[0])
		tid, err := strconv.ParseUint(head[0], 10, 32)
		require.NoError(t, err, "perf script header %q", lines[0])
		s := perfJITSample{tid: uint32(tid), time: strings.TrimSuffix(head[1], ":")}
		for _, l := range lines[1:] {
			l = strings.TrimSpace(l)
			sp := strings.IndexByte(l, ' ')
			open := strings.LastIndex(l, " (")
			if sp < 0 || open < sp || !strings.HasSuffix(l, ")") {
				continue
			}
			if jitDSO(l[open+2 : len(l)-1]) {
				s.jit = append(s.jit, l[sp+1:open])
			}
		}
		samples = append(samples, s)
	}
	return samples
}
