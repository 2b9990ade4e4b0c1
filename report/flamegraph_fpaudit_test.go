package report

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestFlameGraphFPAudit: with WriterOptions.FPAudit a box whose frame a
// frame-pointer walk would have lost in most of its samples is faded (class
// fpl), every box with such samples says how many (data-fplost), the legend
// names it; the boxes themselves, and the graph without the option, are
// unchanged.
func TestFlameGraphFPAudit(t *testing.T) {
	lost := [][]bool{
		{false, true, false, true}, // boom, mid, main, _start
		{false, true, false, true},
		{false, true, false, false},
		{false, false, false, false},
	}
	var ss []*Sample
	for i, l := range lost {
		ss = append(ss, &Sample{Index: i, Pid: 1, Tid: 1, Comm: "prog", Event: "cpu-clock", Period: 1,
			Frames: frames("boom", "mid", "main", "_start"), FPLost: l})
	}
	plain := writeFlame(t, ss, WriterOptions{})
	audit := writeFlame(t, ss, WriterOptions{FPAudit: true})
	boxes, root := parseFlameSVG(t, audit)
	checkFlameGeometry(t, boxes, root, len(ss))
	plainBoxes, _ := parseFlameSVG(t, plain)
	assert.Equal(t, plainBoxes, boxes, "the same boxes")

	g := regexp.MustCompile(`<g class="([a-z ]+)"(?: data-fplost="(\d+)")?><title>([a-z_]+) \(`)
	got := map[string][2]string{}
	for _, m := range g.FindAllStringSubmatch(string(audit), -1) {
		got[m[3]] = [2]string{m[1], m[2]}
	}
	assert.Equal(t, map[string][2]string{
		"all": {"g", ""}, "prog": {"g", ""}, "_start": {"u", "2"}, "main": {"u", ""}, "mid": {"u fpl", "3"}, "boom": {"u", ""},
	}, got, "classes and data-fplost by box (mid lost in 3 of 4 samples, _start in 2)")
	assert.Contains(t, string(audit), ">lost by frame pointers</text>")
	assert.NotRegexp(t, `<g class="[a-z ]*fpl|data-fplost="\d`, string(plain))
	assert.NotContains(t, string(plain), ">lost by frame pointers</text>")
}
