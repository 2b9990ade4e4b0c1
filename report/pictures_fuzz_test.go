package report

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// FuzzPictures feeds the flame graph and speedscope writers stacks whose
// names come from the input (symbol names are whatever the objects hold):
// the SVG must stay well-formed with a box per frame named as the folded
// output names it, and the speedscope file valid JSON holding every sample.
func FuzzPictures(f *testing.F) {
	f.Add("main;foo;bar\nmain;foo\n", uint8(0))
	f.Add("a&b;<c>;\"d\";'e'\n]]>;x\n", uint8(1))
	f.Add("\xff\xfe;\x00\x01\x7f;_ZN3foo3barEv;_ZNKSt6vectorIiSaIiEE4sizeEv\n", uint8(2))
	f.Add("k:do_syscall_64;i:inl;j:jit;;;\n\n\n", uint8(3))
	f.Fuzz(func(t *testing.T, in string, opt uint8) {
		var ss []*Sample
		for i, line := range strings.Split(in, "\n") {
			if i >= 200 {
				break
			}
			var spec []string
			for j, name := range strings.Split(line, ";") {
				if j >= 100 {
					break
				}
				spec = append(spec, name)
			}
			ss = append(ss, &Sample{Pid: uint32(i % 3), Tid: uint32(i % 5), Comm: "c" + strconv.Itoa(i%4),
				Event: []string{"cpu-clock", "cycles"}[i%2], Period: uint64(i), Frames: frames(spec...)})
		}
		o := WriterOptions{Inverted: opt&1 != 0, GroupBy: []string{"", GroupProcess, GroupThread, GroupNone}[opt>>1&3],
			Title: in[:min(len(in), 20)], Width: 200 + int(opt)}
		svg := writeFormat(t, "flamegraph", ss, o)
		boxes, root := parseFlameSVG(t, svg)
		require.Equal(t, len(ss), root.Samples)
		require.Equal(t, len(ss), boxes[0].Count)
		for _, b := range boxes {
			require.True(t, utf8.ValidString(b.Name))
		}
		if o.GroupBy == "" && o.MinWidth == 0 && len(ss) > 0 && float64(o.Width-2*flamePadX)/float64(len(ss)) >= flameMinWidth {
			// XML holds no control characters: the SVG shows them as '?'.
			want := strings.Map(func(r rune) rune {
				if r < 0x20 && r != '\t' && r != '\n' {
					return '?'
				}
				return r
			}, string(bytes.ToValidUTF8(folded(t, ss), []byte("\uFFFD"))))
			require.Equal(t, parseFolded(t, []byte(want)), svgFolded(boxes))
		}
		js := writeFormat(t, "speedscope", ss, o)
		require.True(t, json.Valid(js), "speedscope output is not JSON")
		n := 0
		for _, p := range parseSpeedscope(t, js).Profiles {
			n += len(p.Samples)
		}
		require.Equal(t, len(ss), n)
	})
}
