package report

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/resolve"
	"github.com/ustack/ustack/unwinder"
)

// The frame-pointer audit: every stack the CFI walk unwinds is walked again
// by frame pointers, by the kernel's own rules for user stacks
// (unwinder.WalkFramePointers), on the same registers and snapshot. The
// frames the two walks share say what a frame-pointer profiler (perf record
// -g, the kernel's chain) would have shown of the stack, and where its chain
// broke.

// DefaultFPMaxStack is the kernel's default bound on a call chain
// (kernel.perf_event_max_stack), kernel frames included: the frame-pointer
// walk of a sample whose event asked for no other bound stops there, as the
// kernel's does.
const DefaultFPMaxStack = 127

// fpSearch bounds how far ahead in the frame-pointer chain a CFI frame is
// looked for: a break skips a frame per function without a frame record.
const fpSearch = 32

// fpSample is one sample's audit, filled by the worker, summed by the
// emitter.
type fpSample struct {
	done     bool
	fpFrames int
	stop     unwinder.FPStop
	// found is how many of the CFI frames the walk found; mods holds each
	// CFI frame's object and lost whether the walk missed it.
	found int
	mods  []string
	lost  []bool
	// frameLost is the buffer of the sample's FPLost.
	frameLost []bool
}

// auditFP walks the job's stack by frame pointers into w.fpFrames and
// compares the walk with the CFI walk's n frames in w.frames. It returns
// how the walk ended (a zero FPResult when there was no room for a frame).
func (w *worker) auditFP(j *job, mem unwinder.Memory, n int) unwinder.FPResult {
	if w.p.opts.NoFPAudit {
		j.fp.done = false
		return unwinder.FPResult{}
	}
	var insn []byte
	if j.uprobe {
		insn = w.probedInsn(j)
	}
	res, ok := j.fp.audit(w.p.unw, &j.regs, mem, insn, w.frames[:n], j.space, w.p.fpMaxStack(j), &w.fpFrames)
	if !ok {
		return unwinder.FPResult{}
	}
	j.out.FPFrames, j.out.FPStop = res.Frames, res.Stop.String()
	return res
}

// probedInsn returns the first bytes of the instruction at the PC of a
// sample a uprobe took (nil where no object holds them), kept in the
// worker's buffer.
func (w *worker) probedInsn(j *job) []byte {
	pc, ok := j.regs.Get(w.p.arch.PC())
	as := j.space.AddressSpace()
	mi := as.Find(pc)
	if !ok || mi < 0 {
		return nil
	}
	m := as.Mapping(mi)
	if m.Object == nil {
		return nil
	}
	return w.insn[:m.Object.ReadCode(pc-m.Bias, w.insn[:])]
}

// isUprobe reports whether an event is a uprobe's, by its name: ustack
// record's "uprobe:BIN:SYMBOL", perf probe -x's "probe_BIN:SYMBOL".
func isUprobe(event string) bool {
	return strings.HasPrefix(event, "uprobe:") || strings.HasPrefix(event, "probe_")
}

// audit walks the stack by frame pointers, into buf (grown to limit
// frames), and compares the walk with the CFI walk's frames cfi, whose
// mappings are space's. insn, when not nil, is the instruction a uprobe
// took the sample at (unwinder.WalkFramePointersAtProbe). It reports false,
// auditing nothing, when limit leaves no room for a frame.
func (a *fpSample) audit(u *unwinder.Unwinder, regs *arch.Regs, mem unwinder.Memory, insn []byte, cfi []unwinder.Frame, space *resolve.Space, limit int, buf *[]unwinder.FPFrame) (unwinder.FPResult, bool) {
	a.done = false
	if limit <= 0 {
		return unwinder.FPResult{}, false
	}
	if cap(*buf) < limit {
		*buf = make([]unwinder.FPFrame, limit)
	}
	fp := (*buf)[:limit]
	var res unwinder.FPResult
	if insn != nil {
		res = u.WalkFramePointersAtProbe(regs, mem, insn, fp)
	} else {
		res = u.WalkFramePointers(regs, mem, fp)
	}
	a.done, a.fpFrames, a.stop = true, res.Frames, res.Stop
	a.mods, a.lost = a.mods[:0], a.lost[:0]
	a.found = matchFP(cfi, fp[:res.Frames], &a.lost)
	// Neighbouring frames are mostly in one mapping: its file is looked
	// up once for the run (Space.Mapping builds a whole MappingInfo).
	prev, mod := -2, ""
	for i := range cfi {
		if mi := int(cfi[i].Mapping); mi != prev {
			prev, mod = mi, ""
			if m, ok := space.Mapping(mi); ok {
				mod = m.File
			}
		}
		a.mods = append(a.mods, mod)
	}
	return res, true
}

// fpMaxStack is the bound of the kernel's chain for the job's sample: the
// event's sample_max_stack, else the kernel's default, less the kernel
// frames the chain holds before the user ones.
func (p *processor) fpMaxStack(j *job) int {
	limit := DefaultFPMaxStack
	if j.maxStack > 0 {
		limit = j.maxStack
	}
	for _, ip := range j.kernel {
		if ip < perfdata.ContextMax {
			limit--
		}
	}
	return limit
}

// matchFP says which CFI frames the frame-pointer walk found, setting
// (*lost)[i] for those it missed, and returns how many it found. A walk's
// frame is CFI frame i when its PC is that frame's and it was read from a
// word inside the frame below (i-1: the callee, whose frame record holds
// the return address into i), in order: a chain that skipped a frame (a
// function without a frame record) goes on matching after it.
func matchFP(cfi []unwinder.Frame, fp []unwinder.FPFrame, lost *[]bool) int {
	found := 0
	k := 0
	for i := range cfi {
		hit := false
		if i == 0 {
			hit = len(fp) > 0 && fp[0].PC == cfi[0].PC
			if hit {
				k = 1
			}
		} else {
			callee := &cfi[i-1]
			for s := k; s < len(fp) && s < k+fpSearch; s++ {
				f := &fp[s]
				// The word the return address was read from
				// lies in the callee's frame.
				slot := f.Record + 8
				if f.PC == cfi[i].PC && slot >= callee.SP && (callee.CFA == 0 || slot < callee.CFA) {
					hit, k = true, s+1
					break
				}
			}
		}
		if hit {
			found++
		}
		*lost = append(*lost, !hit)
	}
	return found
}

// markLost records in out.FPLost, for the frames from index start of
// out.Frames (those of CFI frame i, its inlined and tail-call frames
// included), whether the audit found frame i lost. The slice is the
// sample's own buffer, kept in a.frameLost.
func (a *fpSample) markLost(out *Sample, start, i int) {
	if !a.done || i >= len(a.lost) {
		return
	}
	if out.FPLost == nil {
		out.FPLost = a.frameLost[:0]
	}
	for len(out.FPLost) < start {
		out.FPLost = append(out.FPLost, false)
	}
	for len(out.FPLost) < len(out.Frames) {
		out.FPLost = append(out.FPLost, a.lost[i])
	}
	a.frameLost = out.FPLost
}

// FPAudit is the report's frame-pointer audit: of the user frames the CFI
// walk found, how many a frame-pointer walk would have found, and where its
// chain broke.
type FPAudit struct {
	// Stacks counts the stacks audited (samples and core threads with
	// registers and stack); CFIFrames their user frames as the CFI walk
	// found them (physical frames: no inlined or tail-call frames);
	// Found those the frame-pointer walk found too.
	Stacks, CFIFrames, Found int
	// CutShort counts the stacks whose outermost CFI frame the
	// frame-pointer walk did not reach.
	CutShort int
	// Objects are the objects the CFI frames lie in, by path.
	Objects map[string]*FPObject
}

// FPObject is one object's line of the audit.
type FPObject struct {
	// Path is the object's path ("" for addresses in no mapping).
	Path string
	// Frames counts the CFI frames in the object.
	Frames int
	// Breaks counts the frames of the object whose caller the
	// frame-pointer walk missed: the chain broke in it (no frame record
	// there: a function built without frame pointers, or a leaf or
	// prologue that had not set one up yet); Lost counts the frames
	// missed above those breaks.
	Breaks, Lost int
}

// add sums one sample's audit.
func (s *Summary) addFP(a *fpSample) {
	if !a.done {
		return
	}
	f := &s.FP
	if f.Objects == nil {
		f.Objects = map[string]*FPObject{}
	}
	f.Stacks++
	f.CFIFrames += len(a.mods)
	f.Found += a.found
	if n := len(a.lost); n > 0 && a.lost[n-1] {
		f.CutShort++
	}
	var o *FPObject
	for i, mod := range a.mods {
		if o == nil || o.Path != mod { // a run of frames in one object: one map lookup
			o = f.Objects[mod]
			if o == nil {
				o = &FPObject{Path: mod}
				f.Objects[mod] = o
			}
		}
		o.Frames++
		if i > 0 && a.lost[i] && !a.lost[i-1] {
			// A run of missed frames: the chain broke in the frame
			// below it.
			run := 0
			for k := i; k < len(a.lost) && a.lost[k]; k++ {
				run++
			}
			b := f.Objects[a.mods[i-1]]
			b.Breaks++
			b.Lost += run
		}
	}
}

// SortedObjects returns the audit's objects, the most frames lost first.
func (f *FPAudit) SortedObjects() []*FPObject {
	out := make([]*FPObject, 0, len(f.Objects))
	for _, o := range f.Objects {
		out = append(out, o)
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Lost != out[b].Lost {
			return out[a].Lost > out[b].Lost
		}
		if out[a].Frames != out[b].Frames {
			return out[a].Frames > out[b].Frames
		}
		return out[a].Path < out[b].Path
	})
	return out
}

// WriteFPAuditLine prints the audit's one line (nothing when no stack was
// audited): how many of the user frames CFI found a frame-pointer walk
// would have found, and how many stacks it would have cut short.
func (s *Summary) WriteFPAuditLine(w io.Writer) {
	f := &s.FP
	if f.Stacks == 0 {
		return
	}
	fmt.Fprintf(w, "ustack: a frame-pointer walk would have found %d of the %d user frames CFI found (%s) and stopped %d of %d stacks short of their outermost frame\n",
		f.Found, f.CFIFrames, percent(f.Found, f.CFIFrames), f.CutShort, f.Stacks)
}

// WriteFPAuditTable prints the audit's table (ustack report --fp-audit):
// per object, the frames in it, how often the frame-pointer chain broke in
// it and the frames lost above those breaks.
func (s *Summary) WriteFPAuditTable(w io.Writer) {
	f := &s.FP
	if f.Stacks == 0 {
		fmt.Fprintln(w, "ustack: no stack to audit: the recording has no user registers and stacks")
		return
	}
	fmt.Fprintf(w, "ustack: frame-pointer audit of %d stacks, by object (frames: CFI frames in it; breaks: frames whose caller the chain missed; lost: frames missed above those breaks):\n", f.Stacks)
	fmt.Fprintf(w, "  %8s %8s %8s  %s\n", "frames", "breaks", "lost", "object")
	for _, o := range f.SortedObjects() {
		path := o.Path
		if path == "" {
			path = "[unknown]"
		}
		fmt.Fprintf(w, "  %8d %8d %8d  %s\n", o.Frames, o.Breaks, o.Lost, path)
	}
}

func percent(n, of int) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(of))
}

// jsonFPAudit is the audit in JSON's summary record.
type jsonFPAudit struct {
	Stacks    int            `json:"stacks"`
	CFIFrames int            `json:"cfi_frames"`
	Found     int            `json:"fp_found"`
	CutShort  int            `json:"cut_short"`
	Objects   []jsonFPObject `json:"objects"`
}

type jsonFPObject struct {
	Path   *string `json:"path"`
	Frames int     `json:"frames"`
	Breaks int     `json:"breaks"`
	Lost   int     `json:"lost"`
}

func fpAuditJSON(f *FPAudit) jsonFPAudit {
	out := jsonFPAudit{Stacks: f.Stacks, CFIFrames: f.CFIFrames, Found: f.Found, CutShort: f.CutShort, Objects: []jsonFPObject{}}
	for _, o := range f.SortedObjects() {
		out.Objects = append(out.Objects, jsonFPObject{Path: orNull(o.Path), Frames: o.Frames, Breaks: o.Breaks, Lost: o.Lost})
	}
	return out
}
