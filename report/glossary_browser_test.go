package report

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/resolve"
)

// glossaryHows reads the table of docs/GLOSSARY.md that explains each
// frame's "how": every value with its meaning.
func glossaryHows(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../docs/GLOSSARY.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(b), "## How a frame was recovered")
	require.True(t, ok, "GLOSSARY.md has no section on how a frame was recovered")
	section, _, _ := strings.Cut(rest, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([a-z]+)` \\| (.*) \\|$")
	hows := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		hows[m[1]] = m[2]
	}
	require.NotEmpty(t, hows, "no how values in GLOSSARY.md")
	return hows
}

// TestBrowserHowDrawing draws one box per "how" value the glossary lists
// (a flame graph of one sample per value, each frame named after its how)
// and checks in the browser that each is drawn as the glossary says: the
// values it says flame graphs outline in dashes are dashed, and their
// tooltip says they were recovered without CFI; the one it says is drawn
// violet (tailcall) is violet and its tooltip says "tail call"; every other
// value is neither dashed nor violet, nor said to be recovered without CFI.
func TestBrowserHowDrawing(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test: skipped in -short mode")
	}
	hows := glossaryHows(t)
	var svg bytes.Buffer
	w, err := NewWriter("flamegraph", &svg, WriterOptions{Title: "how"})
	require.NoError(t, err)
	for how := range hows {
		fr := Frame{Symbol: "how_" + how, Module: "/usr/bin/prog", How: resolve.How(how), Kernel: how == "kernel"}
		if fr.Kernel {
			fr.Module = "[kernel.kallsyms]"
		}
		require.NoError(t, w.Write(&Sample{Comm: "prog", Stop: "outermost", Frames: []Frame{
			fr, {Symbol: "main", Module: "/usr/bin/prog", How: "cfi"},
		}}))
	}
	require.NoError(t, w.Close())

	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/how.svg" {
			rw.WriteHeader(http.StatusNoContent)
			return
		}
		rw.Header().Set("Content-Type", "image/svg+xml")
		rw.Write(svg.Bytes())
	}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	require.NoError(t, chromedp.Do(b.ctx, chromedp.Navigate(srv.URL+"/how.svg")))
	screenshot(t, b, t.TempDir()+"/how.png")
	type drawn struct {
		Name, Fill, Dash string
		CX, CY           float64
	}
	boxes := eval[[]drawn](t, b, `Array.from(document.querySelectorAll("#frames > g")).map(g => {
		const r = g.querySelector("rect"), bb = r.getBoundingClientRect();
		return {Name: g.querySelector("title").textContent.replace(/ \(.*/, ""),
			Fill: getComputedStyle(r).fill, Dash: getComputedStyle(r).strokeDasharray,
			CX: bb.x + bb.width / 2, CY: bb.y + bb.height / 2};
	})`)
	seen := map[string]bool{}
	for _, bx := range boxes {
		how, ok := strings.CutPrefix(bx.Name, "how_")
		if !ok {
			continue
		}
		seen[how] = true
		meaning := hows[how]
		wantDashed := strings.Contains(meaning, "in dashes") || strings.Contains(meaning, "Dashed")
		wantViolet := strings.Contains(meaning, "violet")
		var r, g, bl int
		_, err := fmt.Sscanf(bx.Fill, "rgb(%d, %d, %d)", &r, &g, &bl)
		require.NoError(t, err, "%s: fill %q", how, bx.Fill)
		violet := bl > r && r > g
		dashed := bx.Dash != "none" && bx.Dash != ""
		assert.Equal(t, wantDashed, dashed, "%s: dashed outline (%q); the glossary says: %s", how, bx.Dash, meaning)
		assert.Equal(t, wantViolet, violet, "%s: violet (fill %s); the glossary says: %s", how, bx.Fill, meaning)

		// The tooltip (the details line) as the mouse shows it.
		require.NoError(t, chromedp.Do(b.ctx, chromedp.MouseEvent("mouseMoved", bx.CX, bx.CY)))
		details := eval[string](t, b, `document.getElementById("details").textContent`)
		assert.Contains(t, details, bx.Name, "%s: the details line names the box", how)
		assert.Equal(t, wantDashed, strings.Contains(details, "recovered without CFI"), "%s: details %q", how, details)
		assert.Equal(t, wantViolet, strings.Contains(details, "tail call"), "%s: details %q", how, details)
	}
	for how := range hows {
		assert.True(t, seen[how], "no box for how %q", how)
	}
	b.checkQuiet(t, "how.svg")
}
