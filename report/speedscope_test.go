package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// speedscopeFile is the part of speedscope's file format
// (https://www.speedscope.app/file-format-schema.json) ustack writes.
type speedscopeFile struct {
	Schema             string `json:"$schema"`
	Exporter           string
	Name               string
	ActiveProfileIndex *int
	Shared             struct {
		Frames []struct {
			Name string
			File string
			Line int
		}
	}
	Profiles []struct {
		Type       string
		Name       string
		Unit       string
		StartValue *float64
		EndValue   *float64
		Samples    [][]int
		Weights    []float64
	}
}

func writeSpeedscope(t testing.TB, ss []*Sample, o WriterOptions) (speedscopeFile, []byte) {
	t.Helper()
	raw := writeFormat(t, "speedscope", ss, o)
	return parseSpeedscope(t, raw), raw
}

// parseSpeedscope decodes a speedscope file, refusing fields the format
// does not have.
func parseSpeedscope(t testing.TB, raw []byte) speedscopeFile {
	t.Helper()
	var f speedscopeFile
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&f), "%s", raw)
	return f
}

// speedscopeFolded turns the profiles back into folded stacks (group: the
// comm, the profile name's first word) counted in samples.
func speedscopeFolded(f speedscopeFile) map[string]int {
	out := map[string]int{}
	for _, p := range f.Profiles {
		comm, _, _ := strings.Cut(p.Name, " ")
		for _, st := range p.Samples {
			parts := []string{comm}
			for _, id := range st {
				parts = append(parts, strings.ReplaceAll(f.Shared.Frames[id].Name, ";", ":"))
			}
			out[strings.Join(parts, ";")]++
		}
	}
	return out
}

func TestSpeedscope(t *testing.T) {
	ss := flameSamples()
	// A tracepoint's samples weigh one each; cpu-clock's their period in
	// nanoseconds.
	ss = append(ss, &Sample{Pid: 10, Tid: 10, Comm: "prog", Event: "syscalls:sys_enter_close", Period: 1,
		Frames: frames("close", "leaf", "mid", "main", "_start")})
	// leaf is seen at lines 14 and 12 (the 30 samples of one stack share
	// its frames), inl at line 9.
	ss[0].Frames[0].File, ss[0].Frames[0].Line = "/src/prog.c", 14
	ss[30].Frames[0].File, ss[30].Frames[0].Line = "/src/prog.c", 9
	ss[50].Frames[3].File, ss[50].Frames[3].Line = "/src/prog.c", 12
	ss[len(ss)-1].Frames[1].File = "/src/prog.c"
	require.Equal(t, "leaf", ss[50].Frames[3].Symbol)
	f, raw := writeSpeedscope(t, ss, WriterOptions{Title: "my run"})

	assert.Equal(t, "https://www.speedscope.app/file-format-schema.json", f.Schema)
	assert.Equal(t, "my run", f.Name)
	assert.Equal(t, "ustack", f.Exporter)
	// Same stacks and names as the folded output.
	assert.Equal(t, parseFolded(t, folded(t, ss)), speedscopeFolded(f))

	type prof struct {
		name, unit string
		samples    int
		end        float64
	}
	var got []prof
	for _, p := range f.Profiles {
		assert.Equal(t, "sampled", p.Type)
		require.NotNil(t, p.StartValue)
		require.NotNil(t, p.EndValue)
		assert.Zero(t, *p.StartValue)
		assert.Len(t, p.Weights, len(p.Samples))
		sum := 0.0
		for _, w := range p.Weights {
			sum += w
		}
		assert.Equal(t, sum, *p.EndValue, p.Name)
		got = append(got, prof{p.Name, p.Unit, len(p.Samples), *p.EndValue})
	}
	// Ordered by pid, tid, event; one per thread and event.
	assert.Equal(t, []prof{
		{"prog 10/10 cpu-clock", "nanoseconds", 50, 50000},
		{"prog 10/10 syscalls:sys_enter_close", "none", 1, 1},
		{"prog 10/11 cpu-clock", "nanoseconds", 20, 20000},
		{"other 10/20 cpu-clock", "nanoseconds", 30, 30000},
	}, got)
	require.NotNil(t, f.ActiveProfileIndex)
	assert.Equal(t, 0, *f.ActiveProfileIndex, "the profile with the most samples opens first")

	// Frames are shared: one "main" user frame for every profile; the
	// kernel and inlined ones carry the folded suffix; file and line where
	// known, the line the lowest seen.
	byName := map[string]int{}
	for _, fr := range f.Shared.Frames {
		byName[fr.Name]++
		if fr.Name == "leaf" {
			assert.Equal(t, "/src/prog.c", fr.File, "every leaf frame has a file: one frame")
			assert.Equal(t, 12, fr.Line)
		}
		if fr.Name == "inl_[i]" {
			assert.Equal(t, 9, fr.Line)
		}
	}
	assert.Equal(t, 1, byName["main"])
	assert.Equal(t, 1, byName["leaf"])
	assert.Equal(t, 1, byName["do_syscall_64_[k]"])
	assert.Equal(t, 1, byName["foo::bar"])
	assert.NotContains(t, string(raw), `"line":0`)

	// The first cpu-clock sample of thread 10: outermost frame first.
	p := f.Profiles[0]
	var names []string
	for _, id := range p.Samples[0] {
		names = append(names, f.Shared.Frames[id].Name)
	}
	assert.Equal(t, []string{"_start", "main", "mid", "leaf"}, names)
	assert.Equal(t, 1000.0, p.Weights[0])
}

func TestSpeedscopeEmpty(t *testing.T) {
	f, _ := writeSpeedscope(t, nil, WriterOptions{})
	assert.Empty(t, f.Profiles)
	assert.NotNil(t, f.Shared.Frames)
}

func TestIsTimeEvent(t *testing.T) {
	for ev, want := range map[string]bool{"cpu-clock": true, "task-clock": true, "cpu-clock:u": true,
		"cycles": false, "syscalls:sys_enter_close": false, "": false} {
		assert.Equal(t, want, isTimeEvent(ev), ev)
	}
}
