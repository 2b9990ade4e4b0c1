package report

import (
	"bufio"
	_ "embed"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ustack/ustack/jitdump"
	"github.com/ustack/ustack/resolve"
)

// The flame graph follows the conventions of Brendan Gregg's flamegraph.pl,
// so that people and tools who know those graphs feel at home: one <g> per
// box holding a <title> "NAME (N samples, P%)" and a <rect>, the root box
// "all" covering every sample, boxes of a stack stacked on their caller,
// children in name order, numbers with thousands separators. The SVG is
// self-contained: the script that zooms and searches is embedded and
// nothing is loaded from anywhere else.

//go:embed flamegraph.js
var flameScript string

// Flame graph defaults, as flamegraph.pl has them.
const (
	flameWidth    = 1200 // pixels
	flameMinWidth = 0.1  // pixels: narrower boxes are left out
	flameBoxH     = 16   // height of one stack level
	flameFontSize = 12
	flameFontW    = 0.59 // average glyph width, in font sizes
	flamePadX     = 10
	flamePadTop   = flameFontSize * 4 // the title, the buttons and the legend
	flamePadBot   = flameFontSize*2 + 10
)

// Group-by values of WriterOptions.GroupBy: what the box under "all" is.
const (
	GroupComm    = "comm"    // the command name, as folded stacks have it (default)
	GroupProcess = "process" // "comm-PID", like stackcollapse-perf.pl --pid
	GroupThread  = "thread"  // "comm-PID/TID", like stackcollapse-perf.pl --tid
	GroupNone    = "none"    // no group box: stacks start under "all"
)

// frameKind is what a box's colour says about its frame.
type frameKind uint8

const (
	kindUser frameKind = iota
	kindKernel
	kindInlined
	kindJIT
	kindGroup    // "all" and the comm/process/thread boxes
	kindTailCall // a frame recovered from DWARF call sites (resolve.HowTailCall)
)

// kindClass is the class a box's <g> carries for its kind.
var kindClass = [...]string{kindUser: "u", kindKernel: "k", kindInlined: "i", kindJIT: "j", kindGroup: "g", kindTailCall: "t"}

func kindOf(fr *Frame) frameKind {
	switch {
	case fr.Kernel:
		return kindKernel
	case fr.How == resolve.HowTailCall:
		return kindTailCall
	case fr.Inlined:
		return kindInlined
	case fr.Module != "" && (resolve.IsAnonymous(fr.Module) || isJITModule(fr.Module)):
		return kindJIT
	}
	return kindUser
}

// isJITModule reports whether a frame's module is what names JIT code: a
// perf map (perf-PID.map) or a jitdump (jit-PID.dump).
func isJITModule(path string) bool {
	b := baseName(path)
	if _, ok := jitdump.IsMarkerPath(path); ok {
		return true
	}
	return strings.HasPrefix(b, "perf-") && strings.HasSuffix(b, ".map")
}

// isFallback reports whether a frame was recovered by a rule other than
// CFI: a frame pointer or link register heuristic, the return address a
// call into no code left (bad_call), a frameless function kept at its SP
// (frameless), a frame found by its function's instructions (prologue), or
// the kernel's frame-pointer call chain. Such boxes are outlined in dashes
// (docs/GLOSSARY.md); a tail call's frame, found from DWARF call sites,
// is no fallback: its kind (violet) says what it is.
func isFallback(how resolve.How) bool {
	switch how {
	case "fp", "lr", "bad_call", "frameless", "prologue", "scan", "callchain":
		return true
	}
	return false
}

// stackFolder merges identical stacks: every frame is interned once by
// name and kind, and a stack is the string of its frame ids (each shifted
// left by idShift, the low bits its flags: idFallback for a
// fallback-recovered frame, idFPLost for one a frame-pointer walk would
// have lost). Adding a sample whose stack was seen before allocates
// nothing.
type stackFolder struct {
	names  *names
	group  string
	frames []flameFrame
	ids    map[flameFrame]uint32
	// seen maps a frame's symbol, module and kind straight to its id,
	// sparing the naming and a second lookup for frames seen before.
	seen    map[rawFrame]uint32
	groups  map[groupKey]uint32
	stacks  map[string]int
	list    []foldedStack
	key     []byte
	samples uint64
	// fpAudit marks the frames a frame-pointer walk would have lost
	// (Sample.FPLost, WriterOptions.FPAudit).
	fpAudit bool
}

// The flags in a folded stack's frame ids.
const (
	idFallback = 1 << iota
	idFPLost
	idShift = iota
	idFlags = 1<<idShift - 1
)

type flameFrame struct {
	name string
	kind frameKind
}

type rawFrame struct {
	symbol, module        string
	kernel, inlined, tail bool
}

type groupKey struct {
	comm     string
	pid, tid uint32
}

type foldedStack struct {
	ids   []uint32 // outermost first, group frame included
	count uint64
}

func newStackFolder(raw bool, group string) *stackFolder {
	return &stackFolder{names: newNames(raw), group: group, ids: map[flameFrame]uint32{},
		seen: map[rawFrame]uint32{}, groups: map[groupKey]uint32{}, stacks: map[string]int{}}
}

func (f *stackFolder) intern(fr flameFrame) uint32 {
	id, ok := f.ids[fr]
	if !ok {
		id = uint32(len(f.frames))
		f.frames = append(f.frames, fr)
		f.ids[fr] = id
	}
	return id
}

func (f *stackFolder) groupID(s *Sample) uint32 {
	k := groupKey{comm: s.Comm}
	switch f.group {
	case GroupProcess:
		k.pid = s.Pid
	case GroupThread:
		k.pid, k.tid = s.Pid, s.Tid
	}
	if id, ok := f.groups[k]; ok {
		return id
	}
	name := s.Comm
	switch f.group {
	case GroupProcess:
		name = fmt.Sprintf("%s-%d", s.Comm, printedID(s.Pid))
	case GroupThread:
		name = fmt.Sprintf("%s-%d/%d", s.Comm, printedID(s.Pid), printedID(s.Tid))
	}
	id := f.intern(flameFrame{name, kindGroup})
	f.groups[k] = id
	return id
}

func (f *stackFolder) add(s *Sample) {
	f.samples++
	f.key = f.key[:0]
	if f.group != GroupNone {
		f.key = binary.LittleEndian.AppendUint32(f.key, f.groupID(s)<<idShift)
	}
	for i := len(s.Frames) - 1; i >= 0; i-- {
		fr := &s.Frames[i]
		rf := rawFrame{fr.Symbol, fr.Module, fr.Kernel, fr.Inlined, fr.How == resolve.HowTailCall}
		id, ok := f.seen[rf]
		if !ok {
			id = f.intern(flameFrame{f.names.Frame(fr), kindOf(fr)})
			f.seen[rf] = id
		}
		id <<= idShift
		if isFallback(fr.How) {
			id |= idFallback
		}
		if f.fpAudit && i < len(s.FPLost) && s.FPLost[i] {
			id |= idFPLost
		}
		f.key = binary.LittleEndian.AppendUint32(f.key, id)
	}
	if i, ok := f.stacks[string(f.key)]; ok {
		f.list[i].count++
		return
	}
	ids := make([]uint32, len(f.key)/4)
	for i := range ids {
		ids[i] = binary.LittleEndian.Uint32(f.key[4*i:])
	}
	f.stacks[string(f.key)] = len(f.list)
	f.list = append(f.list, foldedStack{ids: ids, count: 1})
}

// sorted returns the folded stacks in the order their boxes are drawn,
// frame by frame in name order (as flamegraph.pl sorts its input): the
// stacks under any box are then contiguous, and a box's children follow
// one another. In the returned stacks each id is its frame's rank in that
// order (shifted left, the flags kept); order maps ranks back to
// frame ids.
func (f *stackFolder) sorted() (stacks []foldedStack, order []uint32) {
	order = make([]uint32, len(f.frames))
	for i := range order {
		order[i] = uint32(i)
	}
	sort.Slice(order, func(a, b int) bool {
		fa, fb := f.frames[order[a]], f.frames[order[b]]
		if fa.name != fb.name {
			return fa.name < fb.name
		}
		return fa.kind < fb.kind
	})
	rank := make([]uint32, len(order))
	for r, id := range order {
		rank[id] = uint32(r)
	}
	n := 0
	for _, st := range f.list {
		n += len(st.ids)
	}
	ids := make([]uint32, 0, n)
	stacks = make([]foldedStack, len(f.list))
	for i, st := range f.list {
		start := len(ids)
		for _, id := range st.ids {
			ids = append(ids, rank[id>>idShift]<<idShift|id&idFlags)
		}
		stacks[i] = foldedStack{ids: ids[start:len(ids):len(ids)], count: st.count}
	}
	sort.Slice(stacks, func(a, b int) bool {
		x, y := stacks[a].ids, stacks[b].ids
		for k := 0; k < len(x) && k < len(y); k++ {
			if x[k]>>idShift != y[k]>>idShift {
				return x[k]>>idShift < y[k]>>idShift
			}
		}
		return len(x) < len(y)
	})
	return stacks, order
}

// flameWriter is the "flamegraph" format.
type flameWriter struct {
	w      io.Writer
	o      WriterOptions
	folder *stackFolder
}

func newFlameWriter(w io.Writer, o WriterOptions) *flameWriter {
	f := newStackFolder(o.Raw, o.GroupBy)
	f.fpAudit = o.FPAudit
	return &flameWriter{w: w, o: o, folder: f}
}

func (fw *flameWriter) Write(s *Sample) error { fw.folder.add(s); return nil }

// Close lays the boxes out and writes the SVG.
func (fw *flameWriter) Close() error {
	bw := bufio.NewWriterSize(fw.w, 64<<10)
	l := newFlameLayout(fw.folder, fw.o)
	l.write(bw)
	return bw.Flush()
}

// flameLayout places the boxes: x in pixels from the sample offset, one
// level per stack depth.
type flameLayout struct {
	f        *stackFolder
	stacks   []foldedStack // sorted, ids are ranks
	order    []uint32      // rank -> frame id
	total    uint64
	o        WriterOptions
	width    float64
	scale    float64 // pixels per sample
	minCount uint64  // boxes with fewer samples are left out
	depth    int     // deepest level drawn
	height   int
	colours  []string // by frame id, made as boxes are drawn
	buf      []byte
}

func newFlameLayout(f *stackFolder, o WriterOptions) *flameLayout {
	if o.Width <= 0 {
		o.Width = flameWidth
	}
	if o.MinWidth <= 0 {
		o.MinWidth = flameMinWidth
	}
	if o.Title == "" {
		o.Title = "Flame Graph"
		if o.Inverted {
			o.Title = "Icicle Graph"
		}
	}
	l := &flameLayout{f: f, total: f.samples, o: o, width: float64(o.Width), colours: make([]string, len(f.frames))}
	l.stacks, l.order = f.sorted()
	if l.total > 0 {
		l.scale = (l.width - 2*flamePadX) / float64(l.total)
	}
	// A box is drawn when it is at least MinWidth pixels wide.
	if l.scale > 0 {
		l.minCount = uint64(o.MinWidth / l.scale)
		for float64(l.minCount)*l.scale < o.MinWidth {
			l.minCount++
		}
	}
	l.depth = l.maxDepth(0, len(l.stacks), 0)
	l.height = (l.depth+1)*flameBoxH + flamePadTop + flamePadBot
	return l
}

// run returns the end of the run of stacks from i (before hi) that share
// frame d, and their samples: all of them, those where the frame was
// recovered by a fallback rule, and those where a frame-pointer walk
// would have lost it.
func (l *flameLayout) run(i, hi, d int) (end int, count, fallback, lost uint64) {
	r := l.stacks[i].ids[d] >> idShift
	for end = i; end < hi; end++ {
		st := &l.stacks[end]
		if len(st.ids) <= d || st.ids[d]>>idShift != r {
			break
		}
		count += st.count
		if st.ids[d]&idFallback != 0 {
			fallback += st.count
		}
		if st.ids[d]&idFPLost != 0 {
			lost += st.count
		}
	}
	return end, count, fallback, lost
}

// maxDepth returns the deepest level drawn for stacks[lo:hi], which share
// their first d frames.
func (l *flameLayout) maxDepth(lo, hi, d int) int {
	m := d
	for i := lo; i < hi; {
		if len(l.stacks[i].ids) <= d {
			i++
			continue
		}
		end, count, _, _ := l.run(i, hi, d)
		if count >= l.minCount {
			m = max(m, l.maxDepth(i, end, d+1))
		}
		i = end
	}
	return m
}

// boxes draws the boxes standing on a box at level d whose stacks are
// stacks[lo:hi], from sample offset off: the samples ending at the box
// first, then each callee in name order.
func (l *flameLayout) boxes(w *bufio.Writer, lo, hi, d int, off uint64) {
	for i := lo; i < hi; {
		st := &l.stacks[i]
		if len(st.ids) <= d {
			off += st.count
			i++
			continue
		}
		end, count, fallback, lost := l.run(i, hi, d)
		if count >= l.minCount {
			l.box(w, l.order[st.ids[d]>>idShift], count, fallback, lost, off, d+1)
			l.boxes(w, i, end, d+1, off)
		}
		off += count
		i = end
	}
}

func (l *flameLayout) write(w *bufio.Writer) {
	total := l.total
	fmt.Fprintf(w, `<?xml version="1.0" standalone="no"?>
<svg version="1.1" width="%d" height="%d" viewBox="0 0 %d %d" xmlns="http://www.w3.org/2000/svg" data-samples="%d" data-inverted="%t" data-minwidth="%g">
<style type="text/css">
text { font-family: Verdana, "DejaVu Sans", sans-serif; font-size: %dpx; fill: rgb(0,0,0); }
#title { text-anchor: middle; font-size: 17px; }
#frames > g { cursor: pointer; }
#frames > g:hover > rect { stroke: rgb(0,0,0); stroke-width: 0.5; }
#frames > g.fb > rect { stroke: rgb(0,0,0); stroke-width: 1.5; stroke-dasharray: 4 2; }
#frames > g.fpl > rect { fill-opacity: 0.3; }
#frames > g.parent > rect { opacity: 0.5; }
#frames > g.hide { display: none; }
#frames > g > text { pointer-events: none; }
.button { cursor: pointer; text-decoration: underline; }
.button:hover { fill: rgb(0,0,255); }
#unzoom.hide, #unsearch.hide { display: none; }
</style>
<rect x="0" y="0" width="100%%" height="100%%" fill="rgb(245,245,238)"/>
<text id="title" x="%g" y="24">%s</text>
<text id="unzoom" class="button hide" x="%d" y="24">Reset Zoom</text>
<text id="search" class="button" x="%g" y="24" text-anchor="end">Search</text>
<text id="unsearch" class="button hide" x="%g" y="24" text-anchor="end">Reset Search</text>
<text id="details" x="%d" y="%d"> </text>
<text id="matched" x="%g" y="%d" text-anchor="end"> </text>
`, l.o.Width, l.height, l.o.Width, l.height, total, l.o.Inverted, l.o.MinWidth,
		flameFontSize, l.width/2, xmlEscape(l.o.Title), flamePadX, l.width-flamePadX, l.width-flamePadX-70,
		flamePadX, l.height-flamePadBot/2, l.width-flamePadX, l.height-flamePadBot/2)
	l.legend(w)
	w.WriteString("<g id=\"frames\">\n")
	l.box(w, ^uint32(0), l.total, 0, 0, 0, 0)
	l.boxes(w, 0, len(l.stacks), 0, 0)
	w.WriteString("</g>\n<script type=\"text/ecmascript\"><![CDATA[\n")
	w.WriteString(flameScript)
	w.WriteString("]]></script>\n</svg>\n")
}

// legend explains the colours, under the title.
func (l *flameLayout) legend(w *bufio.Writer) {
	type entry struct {
		label, fill, extra string
	}
	entries := []entry{
		{"user", flameColour(kindUser, "legend"), ""},
		{"kernel", flameColour(kindKernel, "legend"), ""},
		{"inlined", flameColour(kindInlined, "legend"), ""},
		{"JIT", flameColour(kindJIT, "legend"), ""},
		{"tail call", flameColour(kindTailCall, "legend"), ""},
		{"fallback (fp, lr, bad_call, frameless, prologue, scan, callchain)", "rgb(245,245,238)", ` stroke="rgb(0,0,0)" stroke-width="1.5" stroke-dasharray="4 2"`},
	}
	if l.o.FPAudit {
		entries = append(entries, entry{"lost by frame pointers", flameColour(kindUser, "legend"), ` fill-opacity="0.3"`})
	}
	x := float64(flamePadX)
	for _, e := range entries {
		fmt.Fprintf(w, "<rect x=\"%g\" y=\"30\" width=\"10\" height=\"10\" fill=\"%s\"%s/><text x=\"%g\" y=\"39\" font-size=\"10px\">%s</text>\n",
			x, e.fill, e.extra, x+13, e.label)
		x += 13 + float64(len(e.label))*6 + 12
	}
}

// box writes the box of frame id (^0 for "all") holding count samples,
// fallback of them recovered by a fallback rule and lost of them ones a
// frame-pointer walk would have lost (faded when most are), at sample
// offset off and level d.
func (l *flameLayout) box(w *bufio.Writer, id uint32, count, fallback, lost, off uint64, d int) {
	name, kind, colour := "all", kindGroup, flameColour(kindGroup, "all")
	if id != ^uint32(0) {
		fr := l.f.frames[id]
		name, kind = fr.name, fr.kind
		if colour = l.colours[id]; colour == "" {
			colour = flameColour(kind, name)
			l.colours[id] = colour
		}
	}
	x := flamePadX + float64(off)*l.scale
	wd := float64(count) * l.scale
	y := l.height - flamePadBot - (d+1)*flameBoxH
	if l.o.Inverted {
		y = flamePadTop + d*flameBoxH
	}
	b := l.buf[:0]
	b = append(b, `<g class="`...)
	b = append(b, kindClass[kind]...)
	if fallback > 0 {
		b = append(b, " fb"...)
	}
	if 2*lost > count {
		b = append(b, " fpl"...)
	}
	b = append(b, `"`...)
	if fallback > 0 {
		b = append(b, ` data-fallback="`...)
		b = strconv.AppendUint(b, fallback, 10)
		b = append(b, '"')
	}
	if lost > 0 {
		b = append(b, ` data-fplost="`...)
		b = strconv.AppendUint(b, lost, 10)
		b = append(b, '"')
	}
	b = append(b, "><title>"...)
	b = appendXMLEscaped(b, name)
	b = append(b, " ("...)
	b = appendThousands(b, count)
	b = append(b, " samples, "...)
	pct := 0.0
	if l.total > 0 {
		pct = 100 * float64(count) / float64(l.total)
	}
	b = strconv.AppendFloat(b, pct, 'f', 2, 64)
	b = append(b, "%)</title><rect x=\""...)
	b = strconv.AppendFloat(b, x, 'f', 3, 64)
	b = append(b, `" y="`...)
	b = strconv.AppendInt(b, int64(y), 10)
	b = append(b, `" width="`...)
	b = strconv.AppendFloat(b, wd, 'f', 3, 64)
	b = append(b, `" height="`...)
	b = strconv.AppendInt(b, flameBoxH-1, 10)
	b = append(b, `" fill="`...)
	b = append(b, colour...)
	b = append(b, `" rx="2" ry="2"/><text x="`...)
	b = strconv.AppendFloat(b, x+3, 'f', 2, 64)
	b = append(b, `" y="`...)
	b = strconv.AppendInt(b, int64(y+flameBoxH-4), 10)
	b = append(b, `">`...)
	b = appendXMLEscaped(b, flameLabel(name, wd))
	b = append(b, "</text></g>\n"...)
	w.Write(b)
	l.buf = b
}

// flameLabel is the part of name that fits a box wd pixels wide, cut with
// ".." as flamegraph.pl does; "" when not even three letters fit.
func flameLabel(name string, wd float64) string {
	fit := int(wd / (flameFontSize * flameFontW))
	if fit < 3 {
		return ""
	}
	if len(name) <= fit {
		return name
	}
	// Cut on a rune boundary.
	cut := fit - 2
	for cut > 0 && name[cut]&0xc0 == 0x80 {
		cut--
	}
	return name[:cut] + ".."
}

// flameColour picks a box's fill: a palette per kind (warm red for user
// code, orange for the kernel, aqua for inlined functions, green for JIT
// code, grey for "all" and the groups), the shade from a hash of the name
// so a function keeps its colour from graph to graph.
func flameColour(kind frameKind, name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	v := h.Sum32()
	a, b := float64(v&0xff)/255, float64(v>>8&0xff)/255
	var r, g, bl float64
	switch kind {
	case kindKernel:
		r, g, bl = 225+30*a, 150+50*a, 10+30*b
	case kindInlined:
		// Aqua: blue at least as strong as green, so that no shade
		// reads as JIT green (it reached (110,220,172) before).
		r, g, bl = 40+50*a, 160+40*a, 205+40*b
	case kindJIT:
		r, g, bl = 60+60*a, 190+60*a, 60+50*b
	case kindTailCall:
		r, g, bl = 160+40*a, 120+40*a, 210+40*b
	case kindGroup:
		r, g, bl = 190+20*a, 190+20*a, 200+20*a
	default:
		r, g, bl = 215+40*a, 50+60*b, 50+40*b
	}
	return fmt.Sprintf("rgb(%d,%d,%d)", int(r), int(g), int(bl))
}

// appendThousands appends n with commas between groups of three digits.
func appendThousands(b []byte, n uint64) []byte {
	var d [20]byte
	s := strconv.AppendUint(d[:0], n, 10)
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b = append(b, ',')
		}
		b = append(b, c)
	}
	return b
}

func appendXMLEscaped(b []byte, s string) []byte {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '&':
			b = append(b, "&amp;"...)
		case '<':
			b = append(b, "&lt;"...)
		case '>':
			b = append(b, "&gt;"...)
		case '"':
			b = append(b, "&quot;"...)
		default:
			if c < 0x20 && c != '\t' {
				b = append(b, '?') // not allowed in XML 1.0
				continue
			}
			b = append(b, c)
		}
	}
	return b
}

func xmlEscape(s string) string { return string(appendXMLEscaped(nil, s)) }
