package report

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/perfdata"
)

// The browser tests open the pictures the way a user does: the flame graph
// and the speedscope file of a recording the test makes, in Debian's
// chromium driven headless through the DevTools protocol, every request
// outside the test's own 127.0.0.1 server refused. Screenshots go to
// $USTACK_ARTIFACTS (default: a new directory under $TMPDIR, printed in
// the log).

const chromiumPath = "/usr/bin/chromium"

// browserProgram is the chain program with a JIT detour (the JIT test's
// program, its callback made busy): main also calls cb through a
// trampoline in anonymous memory named by /tmp/perf-PID.map, so the
// picture has user, kernel, inlined (libc) and JIT boxes, and a main
// recovered by the frame-pointer fallback under the JIT frame.
func browserProgram(t *testing.T) string {
	var chain []string
	for _, l := range strings.Split(chainSrc, "\n") {
		if strings.HasPrefix(l, "__attribute__") {
			chain = append(chain, l)
		}
	}
	src := strings.NewReplacer(
		"__attribute__((noinline)) void cb(void) { close(-1);",
		strings.Join(chain, "\n")+"\n__attribute__((noinline)) void cb(void) { for (long i = 0; i < 200000; i++) sink += i; close(-1);",
		"int main(void) {", "int main(void) {\n\tfor (int i = 0; i < 150; i++) top(i);",
		"i < 10;", "i < 50;",
	).Replace(jitSrc)
	require.Contains(t, src, "top(i);")
	require.Contains(t, src, "void leaf(int n)")
	require.Contains(t, src, "i < 50;")
	return src
}

// browserRecording returns a recording to draw: one the test makes with
// perf where it can (jit is then true), else the bundled
// perfdata/testdata/dwarf.data.
func browserRecording(t *testing.T) (data string, opts Options, jit bool) {
	t.Helper()
	_, perfErr := exec.LookPath("perf")
	_, gccErr := exec.LookPath("gcc")
	if perfErr == nil && gccErr == nil && os.Geteuid() == 0 && runtime.GOARCH == "amd64" {
		dir := t.TempDir()
		bin := build(t, dir, "chainjit", browserProgram(t), "-O2", "-g", "-fno-omit-frame-pointer")
		t.Setenv("JIT_MAP_DIR", dir) // the JIT writes its perf-PID.map there
		data := record(t, dir, bin)
		return data, Options{PerfMapDir: dir}, true
	}
	t.Logf("perf, gcc, root or amd64 missing: drawing the bundled perfdata/testdata/dwarf.data")
	return "../perfdata/testdata/dwarf.data", Options{Kallsyms: "-"}, false
}

// reportPictures reports a recording into the folded, flamegraph (flame
// and icicle) and speedscope writers at once; the pictures are returned by
// file name.
func reportPictures(t *testing.T, data string, opts Options) (folded []byte, files map[string][]byte, samples int) {
	t.Helper()
	r, err := perfdata.Open(data)
	require.NoError(t, err)
	defer r.Close()
	outputs := []struct {
		file, format string
		o            WriterOptions
	}{
		{"folded.txt", "folded", WriterOptions{}},
		{"flame.svg", "flamegraph", WriterOptions{Title: "ustack browser test"}},
		{"icicle.svg", "flamegraph", WriterOptions{Inverted: true}},
		{"profile.speedscope.json", "speedscope", WriterOptions{Title: "ustack browser test"}},
	}
	bufs := make([]bytes.Buffer, len(outputs))
	writers := make([]Writer, len(outputs))
	for i, o := range outputs {
		writers[i], err = NewWriter(o.format, &bufs[i], o.o)
		require.NoError(t, err)
	}
	_, err = Run(r, opts, func(s *Sample) error {
		samples++
		for _, w := range writers {
			if err := w.Write(s); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	files = map[string][]byte{}
	for i, w := range writers {
		require.NoError(t, w.Close())
		files[outputs[i].file] = bufs[i].Bytes()
	}
	require.NotZero(t, samples, "the recording has no samples")
	return files["folded.txt"], files, samples
}

func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("USTACK_ARTIFACTS")
	if dir == "" {
		var err error
		dir, err = os.MkdirTemp("", "ustack-browser-")
		require.NoError(t, err)
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	t.Logf("artifacts (pictures and screenshots) in %s", dir)
	return dir
}

// speedscopeRelease returns the directory of speedscope's built release
// (index.html), from $USTACK_SPEEDSCOPE or the npm package installed in
// the user's cache directory (installed there with npm when missing).
func speedscopeRelease(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("USTACK_SPEEDSCOPE"); d != "" {
		for _, c := range []string{d, filepath.Join(d, "dist", "release"), filepath.Join(d, "node_modules", "speedscope", "dist", "release")} {
			if _, err := os.Stat(filepath.Join(c, "index.html")); err == nil {
				return c
			}
		}
		t.Fatalf("USTACK_SPEEDSCOPE=%s holds no speedscope release (index.html)", d)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Skipf("speedscope: no cache directory to install it in: %v", err)
	}
	prefix := filepath.Join(cache, "ustack-test", "speedscope")
	release := filepath.Join(prefix, "node_modules", "speedscope", "dist", "release")
	if _, err := os.Stat(filepath.Join(release, "index.html")); err == nil {
		return release
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skipf("speedscope is not installed in %s and npm is missing (apt-get install npm)", prefix)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "npm", "install", "--prefix", prefix, "--no-audit", "--no-fund", "speedscope").CombinedOutput()
	if err != nil {
		t.Skipf("speedscope: npm install --prefix %s speedscope failed: %v\n%s", prefix, err, out)
	}
	return release
}

// browser is a headless chromium whose only reachable server is the
// test's: other requests fail and are remembered.
type browser struct {
	ctx     context.Context
	mu      sync.Mutex
	console []chromedp.ConsoleMessage
	blocked []string
	prompt  chan string // answers to window.prompt, in order
}

func newBrowser(t *testing.T, allowed string) *browser {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("browser test: %s is missing (apt-get install chromium)", chromiumPath)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("no-default-browser-check", true),
		// Names resolve to nothing but the test server's address.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	b := &browser{ctx: ctx, prompt: make(chan string, 4)}
	// Start the browser, then intercept every request: ours go on, the
	// others fail.
	_, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void]("1"))
	require.NoError(t, err, "cannot start %s", chromiumPath)
	paused := chromedp.Events(ctx, fetch.RequestPaused)
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	console := chromedp.Console(ctx)
	_, err = chromedp.Call(ctx, log.Enable, cdp.Empty{})
	require.NoError(t, err)
	_, err = chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{})
	require.NoError(t, err)
	go func() {
		for ev, err := range paused {
			if err != nil {
				return
			}
			if strings.HasPrefix(ev.Request.URL, allowed+"/") {
				chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
				continue
			}
			b.mu.Lock()
			b.blocked = append(b.blocked, ev.Request.URL)
			b.mu.Unlock()
			chromedp.Call(ctx, fetch.FailRequest, fetch.FailRequestParams{RequestID: ev.RequestID, ErrorReason: network.ErrorReasonBlockedByClient})
		}
	}()
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			p := page.HandleJavaScriptDialogParams{Accept: ev.Type == page.DialogTypePrompt}
			if ev.Type == page.DialogTypePrompt {
				select {
				case p.PromptText = <-b.prompt:
				default:
					p.Accept = false
				}
			}
			chromedp.Call(ctx, page.HandleJavaScriptDialog, p)
		}
	}()
	go func() {
		for m, err := range console {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.console = append(b.console, m)
			b.mu.Unlock()
		}
	}()
	return b
}

// checkQuiet fails the test for console errors, uncaught exceptions and
// requests that left the test server.
func (b *browser) checkQuiet(t *testing.T, what string) {
	t.Helper()
	time.Sleep(200 * time.Millisecond) // let the last events arrive
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.console {
		t.Logf("%s console: %s", what, m)
		if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
			t.Errorf("%s: %s (%s:%d)", what, m, m.URL, m.Line)
		}
	}
	for _, u := range b.blocked {
		t.Errorf("%s asked for %s, outside the test server", what, u)
	}
	b.console, b.blocked = nil, nil
}

func eval[T any](t *testing.T, b *browser, js string) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js))
	require.NoError(t, err, "evaluating %s", js)
	return v
}

func screenshot(t *testing.T, b *browser, path string) {
	t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot %s", path)
}

// liveBox is a box as the page shows it now.
type liveBox struct {
	Title, Class, Fill string
	X, W               float64
	Y                  int
	Hidden             bool
	CX, CY             float64 // the centre of its rect on screen
}

const liveBoxesJS = `Array.from(document.querySelectorAll("#frames > g")).map(g => {
	const r = g.querySelector("rect"), bb = r.getBoundingClientRect();
	return {Title: g.querySelector("title").textContent, Class: g.getAttribute("class"),
		Fill: r.getAttribute("fill"), X: +r.getAttribute("x"), W: +r.getAttribute("width"),
		Y: +r.getAttribute("y"), Hidden: getComputedStyle(g).display === "none",
		CX: bb.x + bb.width / 2, CY: bb.y + bb.height / 2};
})`

func liveBoxes(t *testing.T, b *browser) ([]liveBox, []svgBox) {
	t.Helper()
	live := eval[[]liveBox](t, b, liveBoxesJS)
	boxes := make([]svgBox, len(live))
	for i, l := range live {
		boxes[i] = newSVGBox(t, l.Title, l.Class, l.X, l.W, l.Y)
	}
	return live, boxes
}

func TestBrowserFlameGraphAndSpeedscope(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test: skipped in -short mode")
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("browser test: %s is missing (apt-get install chromium)", chromiumPath)
	}
	data, opts, jit := browserRecording(t)
	folded, files, samples := reportPictures(t, data, opts)
	art := artifactsDir(t)
	mux := http.NewServeMux()
	for name, b := range files {
		require.NoError(t, os.WriteFile(filepath.Join(art, name), b, 0o644))
		mux.HandleFunc("/"+name, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", map[string]string{".svg": "image/svg+xml", ".json": "application/json", ".txt": "text/plain"}[filepath.Ext(name)])
			w.Write(b)
		})
	}
	// Browsers ask for the site's icon on their own; the pictures do not.
	mux.HandleFunc("/favicon.ico", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	var speedscopeDir string
	mux.Handle("/speedscope/", http.StripPrefix("/speedscope/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.FileServer(http.Dir(speedscopeDir)).ServeHTTP(w, r)
	})))
	srv := httptest.NewServer(mux) // 127.0.0.1, a free port
	defer srv.Close()
	b := newBrowser(t, srv.URL)

	t.Run("flamegraph", func(t *testing.T) {
		checkFlameInBrowser(t, b, srv.URL, "flame", folded, samples, jit, art)
	})
	t.Run("icicle", func(t *testing.T) {
		checkFlameInBrowser(t, b, srv.URL, "icicle", folded, samples, jit, art)
	})
	t.Run("speedscope", func(t *testing.T) {
		speedscopeDir = speedscopeRelease(t)
		checkSpeedscopeInBrowser(t, b, srv.URL, files["profile.speedscope.json"], art)
	})
}

// checkFlameInBrowser opens base/name.svg, a flame graph (or, for
// "icicle", an inverted one) of the samples whose folded output is folded.
func checkFlameInBrowser(t *testing.T, b *browser, base, name string, folded []byte, samples int, jit bool, art string) {
	require.NoError(t, chromedp.Do(b.ctx, chromedp.Navigate(base+"/"+name+".svg")))
	require.Equal(t, "svg", eval[string](t, b, "document.documentElement.localName"))
	live, boxes := liveBoxes(t, b)
	linkBoxes(t, boxes, name == "icicle")
	screenshot(t, b, filepath.Join(art, name+".png"))

	// The root title counts every sample; the boxes hold the folded stacks.
	assert.Equal(t, fmt.Sprintf("all (%s samples, 100.00%%)", thousands(samples)), live[0].Title)
	want := parseFolded(t, folded)
	assert.Equal(t, want, svgFolded(boxes), "the boxes' counts are not the folded output's")

	// The kinds read apart: the JIT trampoline is green, the main under it
	// was recovered by the frame-pointer fallback and is outlined in
	// dashes, the main reached by CFI is not.
	if jit {
		kinds := eval[[]struct{ Name, Class, Fill, Dash string }](t, b, `Array.from(document.querySelectorAll("#frames > g")).map(g => {
			const r = g.querySelector("rect");
			return {Name: g.querySelector("title").textContent.replace(/ \(.*/, ""), Class: g.getAttribute("class"),
				Fill: getComputedStyle(r).fill, Dash: getComputedStyle(r).strokeDasharray};
		})`)
		seen := map[string]bool{}
		for _, k := range kinds {
			var r, g, bl int
			fmt.Sscanf(k.Fill, "rgb(%d, %d, %d)", &r, &g, &bl)
			switch {
			case k.Name == "jitted_trampoline":
				seen["jit"] = true
				assert.Equal(t, "j", k.Class, "the JIT frame's kind")
				assert.True(t, g > r && g > bl, "the JIT box is not green: %s", k.Fill)
			case strings.Contains(k.Class, "fb"):
				seen["fallback"] = true
				assert.NotEqual(t, "none", k.Dash, "fallback box %q has no dashed outline", k.Name)
			case k.Class == "i":
				// Aqua, never JIT's green.
				assert.True(t, bl > g && g > r, "inlined box %q is not aqua: %s", k.Name, k.Fill)
			case k.Class == "k":
				seen["kernel"] = true
				assert.Equal(t, "none", k.Dash)
			case k.Class == "u":
				seen["user"] = true
				assert.True(t, r > g && r > bl, "user box %q is not red: %s", k.Name, k.Fill)
				assert.Equal(t, "none", k.Dash, "CFI box %q is dashed", k.Name)
			}
		}
		assert.Equal(t, map[string]bool{"jit": true, "fallback": true, "kernel": true, "user": true}, seen)
	}

	// Zoom: click the widest box two levels or more above the root that
	// holds less than most samples; it fills the width, its callers fade,
	// boxes beside it hide.
	z := -1
	for i, bx := range boxes {
		if bx.Depth >= 2 && bx.Count < samples*9/10 && bx.W > 30 && (z < 0 || bx.Count > boxes[z].Count) {
			z = i
		}
	}
	require.GreaterOrEqual(t, z, 0, "no box to zoom to")
	t.Logf("zooming to %q (%d samples)", boxes[z].Name, boxes[z].Count)
	require.NoError(t, chromedp.Do(b.ctx, chromedp.MouseClickXY(live[z].CX, live[z].CY)))
	after, _ := liveBoxes(t, b)
	full := boxes[0].W
	assert.InDelta(t, full, after[z].W, 0.01, "the clicked box does not fill the width")
	assert.InDelta(t, boxes[0].X, after[z].X, 0.01)
	ratio := full / boxes[z].W
	hidden := 0
	for i, bx := range boxes {
		inside := bx.Depth >= boxes[z].Depth && bx.X >= boxes[z].X-0.01 && bx.X+bx.W <= boxes[z].X+boxes[z].W+0.01
		caller := bx.Depth < boxes[z].Depth && bx.X <= boxes[z].X+0.01 && bx.X+bx.W >= boxes[z].X+boxes[z].W-0.01
		switch {
		case inside:
			assert.False(t, after[i].Hidden, "callee %q hidden", bx.Name)
			assert.InDelta(t, bx.W*ratio, after[i].W, 0.01, "callee %q not scaled", bx.Name)
		case caller:
			assert.InDelta(t, full, after[i].W, 0.01, "caller %q does not span the width", bx.Name)
			assert.Contains(t, after[i].Class, "parent")
		default:
			assert.True(t, after[i].Hidden, "%q is shown beside the zoomed box", bx.Name)
			hidden++
		}
	}
	t.Logf("zoomed: %d boxes hidden", hidden)
	assert.False(t, eval[bool](t, b, `document.getElementById("unzoom").classList.contains("hide")`), "no Reset Zoom")
	screenshot(t, b, filepath.Join(art, name+"-zoomed.png"))
	// Reset Zoom puts every box back.
	rz := eval[[]float64](t, b, `(() => { const bb = document.getElementById("unzoom").getBoundingClientRect(); return [bb.x + bb.width/2, bb.y + bb.height/2]; })()`)
	require.NoError(t, chromedp.Do(b.ctx, chromedp.MouseClickXY(rz[0], rz[1])))
	reset, _ := liveBoxes(t, b)
	for i := range reset {
		assert.False(t, reset[i].Hidden)
		assert.InDelta(t, live[i].W, reset[i].W, 0.001)
	}

	// Search with Ctrl-F, then with the button: the matching boxes turn
	// magenta, the others keep their colour, and the share of the samples
	// under a match is shown.
	term := boxes[z].Name
	b.prompt <- term
	require.NoError(t, chromedp.Do(b.ctx, chromedp.KeyEvent("f", chromedp.KeyModifiers(chromedp.ModifierCtrl))))
	checkSearch(t, b, live, boxes, term, want, samples)
	screenshot(t, b, filepath.Join(art, name+"-search.png"))
	// Then the name with the most boxes, through the button.
	perName := map[string]int{}
	other := ""
	for _, bx := range boxes[1:] {
		perName[bx.Name]++
		if n := perName[bx.Name]; bx.Name != term && (other == "" || n > perName[other]) {
			other = bx.Name
		}
	}
	if other != "" {
		b.prompt <- regexp.QuoteMeta(other)
		sb := eval[[]float64](t, b, `(() => { const bb = document.getElementById("search").getBoundingClientRect(); return [bb.x + bb.width/2, bb.y + bb.height/2]; })()`)
		require.NoError(t, chromedp.Do(b.ctx, chromedp.MouseClickXY(sb[0], sb[1])))
		checkSearch(t, b, live, boxes, regexp.QuoteMeta(other), want, samples)
	}
	b.checkQuiet(t, name+".svg")
}

// checkSearch checks the page after a search for re: the boxes whose name
// matches are painted, and "Matched:" shows the share of the samples whose
// folded stack has a matching frame.
func checkSearch(t *testing.T, b *browser, before []liveBox, boxes []svgBox, re string, folded map[string]int, samples int) {
	t.Helper()
	rx := regexp.MustCompile(re)
	now, _ := liveBoxes(t, b)
	matches := 0
	for i, bx := range boxes {
		if i > 0 && rx.MatchString(bx.Name) {
			matches++
			assert.Equal(t, "rgb(230,0,230)", now[i].Fill, "match %q not highlighted", bx.Name)
		} else {
			assert.Equal(t, before[i].Fill, now[i].Fill, "%q highlighted but does not match %s", bx.Name, re)
		}
	}
	require.NotZero(t, matches, "nothing matches %s", re)
	// A sample matches when a box on its path does: the comm's or a
	// frame's (names without the folded suffixes).
	n := 0
	for stack, c := range folded {
		for _, f := range strings.Split(stack, ";") {
			if rx.MatchString(strings.TrimSuffix(strings.TrimSuffix(f, "_[k]"), "_[i]")) {
				n += c
				break
			}
		}
	}
	text := eval[string](t, b, `document.getElementById("matched").textContent`)
	wantPct := 100 * float64(n) / float64(samples)
	m := regexp.MustCompile(`^Matched: (\d+\.\d\d)%$`).FindStringSubmatch(text)
	require.NotNil(t, m, "matched text %q", text)
	got, _ := strconv.ParseFloat(m[1], 64)
	assert.InDelta(t, wantPct, got, 0.006, "searching %s: %d of %d samples match", re, n, samples)
	t.Logf("search %s: %d boxes, %s", re, matches, text)
}

func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func checkSpeedscopeInBrowser(t *testing.T, b *browser, base string, profile []byte, art string) {
	f := parseSpeedscope(t, profile)
	require.NotEmpty(t, f.Profiles)
	active := f.Profiles[*f.ActiveProfileIndex].Name
	u := base + "/speedscope/index.html#profileURL=" + url.QueryEscape(base+"/profile.speedscope.json")
	require.NoError(t, chromedp.Do(b.ctx, chromedp.Navigate(u)))
	// Wait for speedscope to fetch, parse and draw the profile: the
	// profile's name in the toolbar and a flame chart canvas.
	deadline := time.Now().Add(testprog.Timeout) // a busy machine is slow to draw
	var text string
	for {
		text = eval[string](t, b, `document.body ? document.body.innerText : ""`)
		canvases := eval[int](t, b, `document.querySelectorAll("canvas").length`)
		if strings.Contains(text, active) && canvases > 0 {
			break
		}
		if time.Now().After(deadline) {
			screenshot(t, b, filepath.Join(art, "speedscope.png"))
			t.Fatalf("speedscope did not show profile %q; page text:\n%s", active, text)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // let it paint
	for _, bad := range []string{"went wrong", "Failed to", "rror"} {
		assert.NotContains(t, text, bad, "speedscope shows an error")
	}
	screenshot(t, b, filepath.Join(art, "speedscope.png"))
	t.Logf("speedscope shows %q", strings.ReplaceAll(text, "\n", " | "))
	b.checkQuiet(t, "speedscope")
}
