package report

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBrowserTallFlameGraphOpensAtBase: a flame graph taller than the
// window (a 150-frame recursion) opens scrolled to its base, where "all"
// and the wide boxes are; an icicle graph, whose base is its top, opens at
// the top. The browser says where "all" is on the screen.
func TestBrowserTallFlameGraphOpensAtBase(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test: skipped in -short mode")
	}
	spec := []string{}
	for i := 0; i < 150; i++ {
		spec = append(spec, fmt.Sprintf("f%d", i))
	}
	ss := []*Sample{{Pid: 1, Tid: 1, Comm: "deep", Event: "cpu-clock", Period: 1, Frames: frames(spec...)}}
	pictures := map[string][]byte{
		"/flame.svg":  writeFlame(t, ss, WriterOptions{}),
		"/icicle.svg": writeFlame(t, ss, WriterOptions{Inverted: true}),
	}
	mux := http.NewServeMux()
	for path, b := range pictures {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "image/svg+xml")
			w.Write(b)
		})
	}
	mux.HandleFunc("/favicon.ico", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	// Where the root box "all" is, relative to the window's height.
	const allOnScreen = `(function () {
		var r = document.getElementById("frames").children[0].querySelector("rect").getBoundingClientRect();
		return [r.top, r.bottom, window.innerHeight, document.documentElement.getBoundingClientRect().height];
	})()`
	for _, c := range []struct {
		name   string
		atBase bool
	}{{"flame", true}, {"icicle", false}} {
		require.NoError(t, chromedp.Do(b.ctx, chromedp.Navigate(srv.URL+"/"+c.name+".svg")))
		pos := eval[[]float64](t, b, allOnScreen)
		require.Greater(t, pos[3], 2*pos[2], "%s: the picture (%v px) is not taller than the window (%v px)", c.name, pos[3], pos[2])
		assert.True(t, pos[0] >= 0 && pos[1] <= pos[2], "%s: the root box is off screen (top %v, bottom %v, window %v px)", c.name, pos[0], pos[1], pos[2])
		b.checkQuiet(t, c.name)
	}
}
